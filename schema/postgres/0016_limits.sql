-- tickwork: concurrency limits per queue and per lane, for PostgreSQL (13+).
-- Apply after 0015. It adds a table and two indexes, drops one, and
-- redefines both claim functions to obey the limits; no job row changes.
--
-- One row per queue or lane with a limit of its own (tickwork.model.limits):
-- at most max_running jobs of that queue, or of that lane across every
-- queue, run at once. A queue without a row runs one job at a time (the
-- serial queue head, as before this file); a lane without a row has no
-- limit of its own. updated_at: when the row was stored (epoch ms).
CREATE TABLE tickwork_limits (
    kind text NOT NULL CHECK (kind IN ('queue', 'lane')),
    key text NOT NULL,
    max_running integer NOT NULL CHECK (max_running BETWEEN 1 AND 10000),
    updated_at bigint NOT NULL,
    PRIMARY KEY (kind, key)
);

-- A queue may now run several jobs at once, so the unique index of 0001
-- (one running job per queue) goes. Claims still serialise per queue on
-- the queue's advisory lock and count what runs under it.
DROP INDEX tickwork_jobs_running;

-- A queue's running jobs, oldest start first: counting them stops after
-- the queue's limit (at most 10,000 entries), and running_jobs lists them.
-- Same name as the index it replaces, which plans and tests refer to.
CREATE INDEX tickwork_jobs_running
    ON tickwork_jobs (queue, started_at, sequence)
    WHERE state = 'running';

-- A lane's running jobs, oldest start first, for its limit and
-- running_jobs (tickwork_jobs_lane_pending holds the lane's queued jobs
-- too, so a count there is not bounded by the limit). Only jobs whose lane
-- is not their queue's name: a job that names no lane (most jobs) costs
-- its claim no entry here. A lane's running jobs are then two ranges,
-- each read up to the limit at most: this index's for the lane, and
-- tickwork_jobs_running's for the queue of the lane's name, filtered on
-- the lane (that queue's running jobs, as many as its own limit at most).
CREATE INDEX tickwork_jobs_lane_running
    ON tickwork_jobs (lane, started_at, sequence)
    WHERE state = 'running' AND lane <> queue;

-- Enforcement. Three kinds of transaction-scoped advisory lock, in the
-- two-key space (never meeting the one-key locks of tickwork.locks), each
-- its own first key:
--
-- * (1954048881, hashtext(queue)), as since 0010: every transaction that
--   makes a job of a queue running holds the queue's lock until it commits,
--   and counts the queue's running jobs only once the lock is granted, in
--   a fresh snapshot (a new statement of these VOLATILE functions). Two
--   claims never both take a queue's last place.
-- * (1954048882, hashtext(lane)): the same for a lane with a limit, whose
--   running jobs span queues. A claim of a job whose lane has no limit
--   takes no lane lock.
-- * (1954048883, 0), the limits' lock: every claim holds it shared from
--   before it reads tickwork_limits until it commits; put_limit and
--   delete_limit take it exclusively (tickwork.stores.sql.postgres). So a
--   change of limits waits for the claims in flight, and each claim sees
--   one set of limits throughout: one that read "no limit on lane L" and
--   took no lane lock has committed before any claim that obeys a new
--   limit on L counts L's running jobs. Shared holders never wait for one
--   another.
--
-- Deadlocks: a claim waits for a queue lock only while its transaction
-- holds no queue or lane lock (the exact claim's first choice; a group
-- commit that found nothing else to claim, see below), and for a lane lock
-- only while holding the one queue lock it waited for (the exact claim);
-- otherwise it only tries them, passing over held ones. So whoever holds
-- a queue lock never waits for another queue lock, and whoever holds a
-- lane lock waits for nothing: no cycle of waits can form. Nothing waits
-- for the limits' lock while holding a queue or lane lock.
--
-- Without any limit stored (the common case) the group commit's claim is
-- the one of 0012 (its walk and heads unchanged, its claim statement with
-- one term more that is then true), after one read of tickwork_limits; the
-- shared lock is its only other cost.

-- The group commit of 0012 (arguments, result, settlement step and plan
-- settings unchanged; see 0010 and 0012 for its comments), obeying limits.
-- With limits stored, a pass walks the runnable index in global order
-- (priority desc, oldest first; at most scan_limit entries) one entry at a
-- time and takes each entry whose queue and lane have room left:
--
-- * A queue without a row that runs a job is passed over in the walk's
--   own statement, as without limits (no lock, no count).
-- * At a queue's first entry: passed over if an earlier pass tried it, if
--   it is paused or if another claimer holds its lock; otherwise, with the
--   lock held, its room is read in a new statement: its limit (1 without
--   a row) less its running jobs, counted through tickwork_jobs_running
--   and never past the limit.
-- * At a lane's first entry: no room limit when it has no row; otherwise
--   its lock is tried (none: no room) and its room read the same way,
--   through tickwork_jobs_lane_running and tickwork_jobs_running.
-- * An entry is taken while both rooms are above zero, and takes one place
--   in each. So a wide queue gives up to its room of jobs, in its order, and
--   a job whose lane is full is passed over for the next one of its queue.
--
-- The entries come from the walk's snapshot, older than the locks: the
-- claim statement re-checks each row (FOR UPDATE SKIP LOCKED, still queued
-- and ready), and a job another claimer took in between is not claimed
-- (the room counted it already). Passes, tokens and guards are as in 0012,
-- but for one more way on: a pass that picked nothing, after passing over
-- a queue another claimer held, waits for that queue's lock and walks
-- again when its transaction holds no queue or lane lock. That claimer may
-- leave room in the queue (a wide one, or one whose jobs it passed over
-- for a full lane); answering "nothing" then would leave a drain's loops
-- waiting while a job could run.
-- New per-candidate conditions (a rate limit's tokens) belong beside the
-- room checks, another ordering term in the walk's ORDER BY.
CREATE OR REPLACE FUNCTION tickwork_settle_then_claim(
    settle_sequences bigint[], settle_tokens text[], settle_outcomes text[],
    settle_reasons text[], settle_errors text[], claim_tokens text[], lease_ms bigint,
    scan_limit integer, clock_override bigint)
RETURNS TABLE (
    job_id text, queue text, lane text, priority bigint, payload_json text,
    max_recoveries bigint, state text, outcome text, failure_reason text, sequence bigint,
    recoveries bigint, enqueued_at bigint, started_at bigint, settled_at bigint,
    cancellation_id text, run_at bigint, delay_ms bigint, due_at bigint,
    retry_json text, attempt integer, history_json text, error_json text,
    claim_index integer, settled_token text)
LANGUAGE plpgsql VOLATILE
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off
SET enable_bitmapscan = off
AS $$
#variable_conflict use_column
DECLARE
    now_ms bigint := coalesce(clock_override, tickwork_now_ms());
    any_paused boolean;
    any_limits boolean;
    any_lane_limits boolean;
    locked text[];
    heads bigint[];
    tried text[] := '{}';
    claimed integer := 0;
    got integer;
    entry record;
    picks bigint[];
    seen_queues text[];
    queue_rooms integer[];
    seen_lanes text[];
    lane_rooms integer[];
    found_at integer;
    room integer;
    most integer;
    awaited text;
BEGIN
    IF cardinality(settle_sequences) > 0 THEN
        RETURN QUERY
        UPDATE tickwork_jobs AS job
        SET state = 'settled', outcome = settle.outcome, failure_reason = settle.reason,
            error_json = settle.error, settled_at = now_ms
        FROM unnest(settle_sequences, settle_tokens, settle_outcomes, settle_reasons,
                    settle_errors)
             AS settle(sequence, token, outcome, reason, error)
        WHERE job.sequence = settle.sequence AND job.state = 'running'
          AND job.claim_token = settle.token AND job.lease_expires_at > now_ms
          AND job.cancellation_id IS NULL
        RETURNING NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::text, NULL::bigint,
                  NULL::text, NULL::text, NULL::text, job.sequence, NULL::bigint, NULL::bigint,
                  NULL::bigint, NULL::bigint, NULL::text, NULL::bigint, NULL::bigint,
                  NULL::bigint, NULL::text, NULL::integer, NULL::text, NULL::text,
                  NULL::integer, job.claim_token;
    END IF;
    IF cardinality(claim_tokens) > 0 THEN
        -- Jobs whose time has come join the ready set first (as in 0004).
        UPDATE tickwork_jobs SET due_at = NULL
        WHERE sequence IN (
            SELECT sequence FROM tickwork_jobs
            WHERE state = 'queued' AND due_at IS NOT NULL AND due_at <= now_ms
            ORDER BY due_at LIMIT 1000
            FOR UPDATE SKIP LOCKED);
        any_paused := EXISTS (SELECT 1 FROM tickwork_paused_queues);
        -- The limits hold still until this transaction ends (see above).
        PERFORM pg_advisory_xact_lock_shared(1954048883, 0);
        any_limits := EXISTS (SELECT 1 FROM tickwork_limits);
        any_lane_limits := any_limits
            AND EXISTS (SELECT 1 FROM tickwork_limits WHERE kind = 'lane');
        FOR pass IN 1..4 LOOP
            IF NOT any_limits THEN
                -- No limit stored: every queue serial, the claim of 0012.
                SELECT array_agg(walk.queue) INTO locked FROM (
                    SELECT entry.queue FROM (
                        SELECT sequence, queue, priority FROM tickwork_jobs
                        WHERE state = 'queued' AND cancellation_id IS NULL
                          AND due_at IS NULL
                        ORDER BY priority DESC, sequence
                        LIMIT scan_limit) AS entry
                    WHERE CASE
                        WHEN entry.queue = ANY (tried) THEN false
                        WHEN EXISTS (SELECT 1 FROM tickwork_jobs AS busy
                                     WHERE busy.queue = entry.queue
                                       AND busy.state = 'running')
                            THEN false
                        WHEN any_paused AND EXISTS (
                                SELECT 1 FROM tickwork_paused_queues AS paused
                                WHERE paused.queue = entry.queue)
                            THEN false
                        WHEN NOT pg_try_advisory_xact_lock(1954048881, hashtext(entry.queue))
                            THEN false
                        ELSE entry.sequence = (
                                SELECT head.sequence FROM tickwork_jobs AS head
                                WHERE head.queue = entry.queue AND head.state = 'queued'
                                  AND head.cancellation_id IS NULL AND head.due_at IS NULL
                                ORDER BY head.priority DESC, head.sequence LIMIT 1) END
                    LIMIT cardinality(claim_tokens) - claimed) AS walk;
                EXIT WHEN locked IS NULL;
                tried := tried || locked;
                SELECT array_agg((SELECT head.sequence FROM tickwork_jobs AS head
                                  WHERE head.queue = mine.queue AND head.state = 'queued'
                                    AND head.cancellation_id IS NULL AND head.due_at IS NULL
                                  ORDER BY head.priority DESC, head.sequence LIMIT 1))
                INTO heads FROM unnest(locked) AS mine(queue);
                picks := heads;
            ELSE
                -- Limits stored: the walk entry by entry (see above).
                picks := '{}';
                awaited := NULL;
                seen_queues := '{}';
                queue_rooms := '{}';
                seen_lanes := '{}';
                lane_rooms := '{}';
                -- A serial queue (no row) with a running job is passed over
                -- here, in the walk's statement, as without limits: most
                -- queues are serial, and that spares each of them a lock
                -- and a count.
                FOR entry IN
                    SELECT walked.sequence, walked.queue, walked.lane FROM (
                        SELECT sequence, queue, lane, priority FROM tickwork_jobs
                        WHERE state = 'queued' AND cancellation_id IS NULL
                          AND due_at IS NULL
                        ORDER BY priority DESC, sequence
                        LIMIT scan_limit) AS walked
                    WHERE NOT (EXISTS (SELECT 1 FROM tickwork_jobs AS busy
                                       WHERE busy.queue = walked.queue
                                         AND busy.state = 'running')
                               AND NOT EXISTS (SELECT 1 FROM tickwork_limits AS limited
                                               WHERE limited.kind = 'queue'
                                                 AND limited.key = walked.queue))
                    ORDER BY walked.priority DESC, walked.sequence
                LOOP
                    found_at := array_position(seen_queues, entry.queue);
                    IF found_at IS NULL THEN
                        room := 0;
                        IF entry.queue = ANY (tried)
                           OR (any_paused AND EXISTS (
                                   SELECT 1 FROM tickwork_paused_queues AS paused
                                   WHERE paused.queue = entry.queue)) THEN
                            room := 0;
                        ELSIF pg_try_advisory_xact_lock(1954048881, hashtext(entry.queue)) THEN
                            tried := tried || entry.queue;
                            most := coalesce((SELECT max_running FROM tickwork_limits
                                              WHERE kind = 'queue' AND key = entry.queue), 1);
                            room := most - (SELECT count(*) FROM (
                                SELECT 1 FROM tickwork_jobs AS running
                                WHERE running.queue = entry.queue AND running.state = 'running'
                                LIMIT most) AS counted);
                        ELSIF awaited IS NULL THEN
                            -- Another claimer holds this queue. It may have
                            -- room once that claim commits: the queue is
                            -- wide, or the claimer passed over its jobs (a
                            -- lane at its limit).
                            awaited := entry.queue;
                        END IF;
                        seen_queues := seen_queues || entry.queue;
                        queue_rooms := queue_rooms || room;
                        found_at := cardinality(seen_queues);
                    END IF;
                    CONTINUE WHEN queue_rooms[found_at] <= 0;
                    IF any_lane_limits THEN
                        found_at := array_position(seen_lanes, entry.lane);
                        IF found_at IS NULL THEN
                            most := (SELECT max_running FROM tickwork_limits
                                     WHERE kind = 'lane' AND key = entry.lane);
                            IF most IS NULL THEN
                                room := 2147483647;  -- no limit of its own
                            ELSIF pg_try_advisory_xact_lock(1954048882, hashtext(entry.lane))
                            THEN
                                -- Two index ranges (see the lane's index).
                                room := most - (SELECT count(*) FROM (
                                    (SELECT 1 FROM tickwork_jobs AS running
                                     WHERE running.lane = entry.lane
                                       AND running.lane <> running.queue
                                       AND running.state = 'running'
                                     LIMIT most)
                                    UNION ALL
                                    (SELECT 1 FROM tickwork_jobs AS running
                                     WHERE running.queue = entry.lane
                                       AND running.lane = entry.lane
                                       AND running.state = 'running'
                                     LIMIT most)) AS counted);
                            ELSE
                                room := 0;
                            END IF;
                            seen_lanes := seen_lanes || entry.lane;
                            lane_rooms := lane_rooms || room;
                            found_at := cardinality(seen_lanes);
                        END IF;
                        CONTINUE WHEN lane_rooms[found_at] <= 0;
                        lane_rooms[found_at] := lane_rooms[found_at] - 1;
                        found_at := array_position(seen_queues, entry.queue);
                    END IF;
                    queue_rooms[found_at] := queue_rooms[found_at] - 1;
                    picks := picks || entry.sequence;
                    EXIT WHEN cardinality(picks) = cardinality(claim_tokens) - claimed;
                END LOOP;
                IF cardinality(picks) = 0 THEN
                    -- Nothing to claim, but a queue was passed over because
                    -- another claimer held it: wait for that claim to
                    -- commit and walk again, rather than answer "nothing"
                    -- while that queue may have room. Only when this
                    -- transaction holds no queue or lane lock, so a claimer
                    -- waits while holding none and no cycle of waits forms.
                    EXIT WHEN awaited IS NULL OR pass = 4 OR EXISTS (
                        SELECT 1 FROM pg_locks
                        WHERE pid = pg_backend_pid() AND locktype = 'advisory'
                          AND objsubid = 2 AND classid IN (1954048881, 1954048882));
                    PERFORM pg_advisory_xact_lock(1954048881, hashtext(awaited));
                    CONTINUE;
                END IF;
            END IF;
            -- The claim, in a fresh snapshot, of the jobs picked (the heads
            -- of the queues locked, without limits), through the primary key.
            now_ms := coalesce(clock_override, tickwork_now_ms());
            RETURN QUERY
            WITH picked AS (
                SELECT candidate.sequence, candidate.priority FROM tickwork_jobs AS candidate
                WHERE candidate.sequence = ANY (picks)
                  AND candidate.state = 'queued' AND candidate.cancellation_id IS NULL
                  AND candidate.due_at IS NULL
                  AND (any_limits OR NOT EXISTS (
                           SELECT 1 FROM tickwork_jobs AS busy
                           WHERE busy.queue = candidate.queue AND busy.state = 'running'))
                  AND (NOT any_paused OR NOT EXISTS (
                           SELECT 1 FROM tickwork_paused_queues AS paused
                           WHERE paused.queue = candidate.queue))
                  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs AS expired
                                  WHERE expired.state = 'running'
                                    AND expired.lease_expires_at <= now_ms)
                  AND NOT EXISTS (SELECT 1 FROM tickwork_jobs AS cancelled
                                  WHERE cancelled.state = 'queued'
                                    AND cancelled.cancellation_id IS NOT NULL)
                ORDER BY candidate.priority DESC, candidate.sequence
                FOR UPDATE SKIP LOCKED),
            numbered AS (
                SELECT picked.sequence,
                       row_number() OVER (ORDER BY picked.priority DESC, picked.sequence) AS n
                FROM picked)
            UPDATE tickwork_jobs AS job
            SET state = 'running', claim_token = claim_tokens[claimed + numbered.n],
                started_at = now_ms, lease_expires_at = now_ms + lease_ms
            FROM numbered
            WHERE job.sequence = numbered.sequence
            RETURNING job.job_id, job.queue, job.lane, job.priority, job.payload_json,
                      job.max_recoveries, job.state, job.outcome, job.failure_reason,
                      job.sequence, job.recoveries, job.enqueued_at, job.started_at,
                      job.settled_at, job.cancellation_id, job.run_at, job.delay_ms, job.due_at,
                      job.retry_json, job.attempt, job.history_json, job.error_json,
                      (claimed + numbered.n)::integer, NULL::text;
            GET DIAGNOSTICS got = ROW_COUNT;
            claimed := claimed + got;
            EXIT WHEN claimed = cardinality(claim_tokens) OR got = cardinality(picks)
                OR EXISTS (SELECT 1 FROM tickwork_jobs
                           WHERE state = 'running' AND lease_expires_at <= now_ms)
                OR EXISTS (SELECT 1 FROM tickwork_jobs
                           WHERE state = 'queued' AND cancellation_id IS NOT NULL);
        END LOOP;
    END IF;
END
$$;

-- The exact claim of 0010 (arguments and result unchanged), obeying limits:
-- it picks the first ready job in global order whose queue and lane look
-- to have room (in its snapshot), waits for that queue's lock, then for
-- the job's lane's lock if the lane has a limit, and in a fresh snapshot
-- claims the best ready job of the queue if the queue still has room,
-- among jobs of that lane (if it still has room) and of lanes without a
-- limit; waiting (FOR UPDATE) rather than skipping the row. If nothing
-- fits it moves on to the next such queue, then only trying locks.
CREATE OR REPLACE FUNCTION tickwork_claim_one(
    claim_token text, lease_ms bigint, clock_override bigint)
RETURNS TABLE (
    job_id text, queue text, lane text, priority bigint, payload_json text,
    max_recoveries bigint, state text, outcome text, failure_reason text, sequence bigint,
    recoveries bigint, enqueued_at bigint, started_at bigint, settled_at bigint,
    cancellation_id text, run_at bigint, delay_ms bigint, due_at bigint,
    retry_json text, attempt integer, history_json text, error_json text)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    now_ms bigint := coalesce(clock_override, tickwork_now_ms());
    any_queue_limits boolean;
    any_lane_limits boolean;
    target text;
    target_lane text;
    lane_most integer;
    lane_room integer;
    queue_most integer;
    passed text[] := '{}';
BEGIN
    UPDATE tickwork_jobs SET due_at = NULL
    WHERE sequence IN (
        SELECT sequence FROM tickwork_jobs
        WHERE state = 'queued' AND due_at IS NOT NULL AND due_at <= now_ms
        ORDER BY due_at LIMIT 1000
        FOR UPDATE SKIP LOCKED);
    PERFORM pg_advisory_xact_lock_shared(1954048883, 0);
    any_queue_limits := EXISTS (SELECT 1 FROM tickwork_limits WHERE kind = 'queue');
    any_lane_limits := EXISTS (SELECT 1 FROM tickwork_limits WHERE kind = 'lane');
    FOR try_number IN 1..8 LOOP
        target := NULL;
        SELECT candidate.queue, candidate.lane INTO target, target_lane
        FROM tickwork_jobs AS candidate
        WHERE candidate.state = 'queued' AND candidate.cancellation_id IS NULL
          AND candidate.due_at IS NULL AND candidate.queue <> ALL (passed)
          AND NOT EXISTS (SELECT 1 FROM tickwork_paused_queues AS paused
                          WHERE paused.queue = candidate.queue)
          AND (NOT EXISTS (SELECT 1 FROM tickwork_jobs AS busy
                           WHERE busy.queue = candidate.queue AND busy.state = 'running')
               OR (any_queue_limits AND EXISTS (
                       SELECT 1 FROM tickwork_limits AS limited
                       WHERE limited.kind = 'queue' AND limited.key = candidate.queue
                         AND (SELECT count(*) FROM (
                                  SELECT 1 FROM tickwork_jobs AS running
                                  WHERE running.queue = candidate.queue
                                    AND running.state = 'running'
                                  LIMIT limited.max_running) AS counted)
                             < limited.max_running)))
          AND (NOT any_lane_limits OR NOT EXISTS (
                   SELECT 1 FROM tickwork_limits AS limited
                   WHERE limited.kind = 'lane' AND limited.key = candidate.lane
                     AND (SELECT count(*) FROM (
                              (SELECT 1 FROM tickwork_jobs AS running
                               WHERE running.lane = candidate.lane
                                 AND running.lane <> running.queue
                                 AND running.state = 'running'
                               LIMIT limited.max_running)
                              UNION ALL
                              (SELECT 1 FROM tickwork_jobs AS running
                               WHERE running.queue = candidate.lane
                                 AND running.lane = candidate.lane
                                 AND running.state = 'running'
                               LIMIT limited.max_running)) AS counted)
                         >= limited.max_running))
        ORDER BY candidate.priority DESC, candidate.sequence
        LIMIT 1;
        EXIT WHEN target IS NULL;
        passed := passed || target;
        IF try_number = 1 THEN
            PERFORM pg_advisory_xact_lock(1954048881, hashtext(target));
        ELSIF NOT pg_try_advisory_xact_lock(1954048881, hashtext(target)) THEN
            CONTINUE;
        END IF;
        lane_most := NULL;
        IF any_lane_limits THEN
            lane_most := (SELECT max_running FROM tickwork_limits
                          WHERE kind = 'lane' AND key = target_lane);
        END IF;
        IF lane_most IS NOT NULL THEN
            IF try_number = 1 THEN
                PERFORM pg_advisory_xact_lock(1954048882, hashtext(target_lane));
            ELSIF NOT pg_try_advisory_xact_lock(1954048882, hashtext(target_lane)) THEN
                CONTINUE;
            END IF;
        END IF;
        -- Fresh snapshots from here: every claim committed before the
        -- locks were granted is counted.
        queue_most := 1;
        IF any_queue_limits THEN
            queue_most := coalesce((SELECT max_running FROM tickwork_limits
                                    WHERE kind = 'queue' AND key = target), 1);
        END IF;
        CONTINUE WHEN (SELECT count(*) FROM (
                           SELECT 1 FROM tickwork_jobs AS running
                           WHERE running.queue = target AND running.state = 'running'
                           LIMIT queue_most) AS counted) >= queue_most;
        lane_room := 0;
        IF lane_most IS NOT NULL THEN
            lane_room := lane_most - (SELECT count(*) FROM (
                (SELECT 1 FROM tickwork_jobs AS running
                 WHERE running.lane = target_lane AND running.lane <> running.queue
                   AND running.state = 'running'
                 LIMIT lane_most)
                UNION ALL
                (SELECT 1 FROM tickwork_jobs AS running
                 WHERE running.queue = target_lane AND running.lane = target_lane
                   AND running.state = 'running'
                 LIMIT lane_most)) AS counted);
        END IF;
        now_ms := coalesce(clock_override, tickwork_now_ms());
        RETURN QUERY
        WITH picked AS (
            SELECT head.sequence FROM tickwork_jobs AS head
            WHERE head.queue = target AND head.state = 'queued'
              AND head.cancellation_id IS NULL AND head.due_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM tickwork_paused_queues AS paused
                              WHERE paused.queue = target)
              AND CASE
                  WHEN NOT any_lane_limits THEN true
                  WHEN head.lane = target_lane AND lane_most IS NOT NULL THEN lane_room > 0
                  ELSE NOT EXISTS (SELECT 1 FROM tickwork_limits AS limited
                                   WHERE limited.kind = 'lane' AND limited.key = head.lane)
                  END
            ORDER BY head.priority DESC, head.sequence
            LIMIT 1
            FOR UPDATE)
        UPDATE tickwork_jobs AS job
        SET state = 'running', claim_token = tickwork_claim_one.claim_token,
            started_at = now_ms, lease_expires_at = now_ms + lease_ms
        FROM picked
        WHERE job.sequence = picked.sequence AND job.state = 'queued'
          AND job.cancellation_id IS NULL AND job.due_at IS NULL
        RETURNING job.job_id, job.queue, job.lane, job.priority, job.payload_json,
                  job.max_recoveries, job.state, job.outcome, job.failure_reason,
                  job.sequence, job.recoveries, job.enqueued_at, job.started_at,
                  job.settled_at, job.cancellation_id, job.run_at, job.delay_ms, job.due_at,
                  job.retry_json, job.attempt, job.history_json, job.error_json;
        IF FOUND THEN
            RETURN;
        END IF;
    END LOOP;
END
$$;

UPDATE tickwork_meta SET value = '16' WHERE key = 'schema_version';
