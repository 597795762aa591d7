-- tickwork: rate limits per queue and per lane, for PostgreSQL (13+).
-- Apply after 0016. It adds a table and its two indexes, and redefines both
-- claim functions to check and spend the buckets; no job row changes.
--
-- One row per queue or lane with a rate limit or a hold
-- (tickwork.model.rate_limits, which says why the bucket is stored so):
--
-- * The bucket: starts per period_ms, burst at once (all three NULL for a
--   key that only has a hold). next_start is the GCRA's earliest next
--   start in units of 1/starts ms (0: full): a claim at now is allowed when
--   next_start <= now * starts and moves it to
--   greatest(next_start, now * starts - (burst - 1) * period_ms) + period_ms.
--   All bigint: now * starts reaches about 4e17.
-- * held_until: an executor's RateLimited, no start before it (epoch ms;
--   0: none). A hold no longer in force is left in place (the next one
--   overwrites it); nothing reads it as a hold.
-- * updated_at: when the bucket (or, for a row that only has a hold, the
--   row) was stored (epoch ms).
CREATE TABLE tickwork_rate_limits (
    kind text NOT NULL CHECK (kind IN ('queue', 'lane')),
    key text NOT NULL,
    starts bigint CHECK (starts BETWEEN 1 AND 100000),
    period_ms bigint CHECK (period_ms BETWEEN 1 AND 2678400000),
    burst bigint CHECK (burst BETWEEN 1 AND 100000),
    next_start bigint NOT NULL DEFAULT 0 CHECK (next_start >= 0),
    held_until bigint NOT NULL DEFAULT 0,
    updated_at bigint NOT NULL,
    PRIMARY KEY (kind, key),
    CHECK ((starts IS NULL) = (period_ms IS NULL) AND (starts IS NULL) = (burst IS NULL))
);

-- Every bucket, by key: whether any is stored is one probe, with the table
-- empty or not (a key whose only hold is over is no bucket).
CREATE INDEX tickwork_rate_limits_buckets
    ON tickwork_rate_limits (kind, key)
    WHERE starts IS NOT NULL;

-- Every row by when it next lets a start through: the later of its hold
-- and its bucket's next start in ms, rounded up (greatest() passes over the
-- NULL of a row without a bucket). A key is rate-held at now exactly when
-- this is above now (next_start > now * starts, for an integer now, is
-- ceil(next_start / starts) > now), so the held keys are this index's range
-- above now: whether any is held is one probe, and the wake reads the held
-- keys in release order. Queries write the expression exactly so, to use it.
CREATE INDEX tickwork_rate_limits_release
    ON tickwork_rate_limits ((greatest(held_until, (next_start + starts - 1) / starts)));

-- Enforcement. A claim takes a job only while neither its queue's row nor
-- its lane's row holds it (a hold in force, or a bucket whose next start is
-- ahead), and spends one start of each bucket there in the transaction
-- that claims the job, in the statement right after the claim's (a
-- statement the common case, with nothing stored, never runs). No new lock:
-- a bucket is guarded by the advisory lock that already serialises the
-- claims its spends come from, held until the claim and its spend commit.
--
-- * A queue's bucket: every claim of a job of the queue holds the queue's
--   lock (1954048881, hashtext(queue)) until it commits (0010, 0016), and
--   reads the bucket only once that lock is granted, in a new statement.
--   Two claims of the queue are then one after the other, the second
--   reading what the first spent: never both the last start.
-- * A lane's bucket: its jobs span queues, so a claim of a job whose lane
--   has a bucket takes the lane's lock (1954048882, hashtext(lane)) as it
--   does for a lane with a limit (0016), and reads the bucket under it. A
--   claim takes no job of a lane with a bucket whose lock it does not hold
--   (the exact claim's other lanes are lanes without one).
-- * The limits' lock (1954048883, 0): put_rate_limit takes it exclusively,
--   as put_limit does, so a bucket is stored between claims, never during
--   one: a claim that read "no bucket on this lane" (and took no lane
--   lock, spent nothing) has committed before any claim obeys the bucket,
--   and each claim checks and spends one version of each bucket. A hold
--   (put_back_rate_limited) and delete_rate_limit take no lock: a claim
--   they race is before them (it started its job first), and its spend,
--   an UPDATE by key, applies to the row as it then is (or to none).
--
-- Deadlocks: no claim waits for a lock it did not wait for before this
-- file. The lane locks it now takes for buckets are taken as 0016 takes a
-- limited lane's (the group commit only tries them; the exact claim waits
-- for its first choice's lane while holding only that queue's lock). The
-- rows of tickwork_rate_limits a claim's spend locks are locked only
-- under their queue's or lane's lock, so the only other holders are
-- put_rate_limit, delete_rate_limit and put_back_rate_limited, each one
-- statement that holds no lock a claim waits for (put_rate_limit waits
-- for the limits' lock before it touches a row). A group commit that holds
-- rows it spent holds their queues' locks, so it never waits for a queue
-- (0016's empty-handed wait asks for no queue or lane lock held).
--
-- The wake (tickwork.stores.sql.postgres HAS_PENDING_WORK and NEXT_WORK):
-- a ready job whose queue or lane is rate-held is not work for now, and the
-- time its key is released is a next due time; no lost wake, since a key
-- is held only until that time, and a claim that finds it free spends it.
-- A start spent for a claim put back unstarted (release_claim) or
-- recovered is not refunded.
--
-- Without a bucket or a hold in force (the common case) both functions run
-- as in 0016 after two index probes of tickwork_rate_limits (in the
-- statement that already asks for limits): the group commit's claim of
-- 0012, the exact claim's candidate with its terms off, and no spend.

-- The group commit of 0016 (arguments, result, settlement step, plan
-- settings and the limits' walk unchanged), obeying rate limits as well.
-- With a bucket or a hold in force stored, it takes the walk of 0016 (a
-- queue without a row there still runs one job at a time) with two terms
-- more:
--
-- * The walk's statement says of each entry whether its queue and its
--   lane have a row with a bucket or a hold in force (a primary-key probe
--   each); only such a key's row is read below.
-- * At a queue's first entry, once its lock is held and it has room, its
--   row is read: a hold in force leaves it no room; its bucket, if any, is
--   kept beside its room, and an entry of the queue is taken while the
--   bucket allows a start (allows_start), each one moving the kept next
--   start on (next_start_after), as the spend will.
-- * At a lane's first entry, its row is read: a hold in force leaves it no
--   room (no lock needed); a lane with a bucket (or a limit) has its lock
--   tried (none: no room) and its row read again under it; its bucket is
--   then kept and spent as the queue's is.
-- * After the claim statement, one UPDATE spends, for each key, as many
--   starts as the pass claimed jobs of it. A picked job another claimer
--   took meanwhile is not claimed and spends nothing.
--
-- A rate-held queue or lane is passed over exactly as one at its limit:
-- the walk goes on to the next entry, and a queue held does not hold back
-- the queues after it. Another per-candidate term (fair turns) goes beside
-- these, another ordering term in the walk's ORDER BY.

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
    any_rates boolean;
    any_queue_rates boolean;
    any_lane_rates boolean;
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
    lane_at integer;
    room integer;
    most integer;
    awaited text;
    bucket_starts bigint;
    bucket_period bigint;
    bucket_burst bigint;
    bucket_next bigint;
    bucket_held bigint;
    queue_buckets bigint[];
    queue_next bigint[];
    lane_buckets bigint[];
    lane_next bigint[];
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
        -- Any limit; any bucket (tickwork_rate_limits_buckets) or hold in
        -- force (tickwork_rate_limits_release): a probe of each index, in
        -- one statement. A hold that is over counts as no row.
        SELECT EXISTS (SELECT 1 FROM tickwork_limits),
               EXISTS (SELECT 1 FROM tickwork_rate_limits WHERE starts IS NOT NULL)
               OR EXISTS (SELECT 1 FROM tickwork_rate_limits
                          WHERE greatest(held_until, (next_start + starts - 1) / starts)
                                > now_ms)
        INTO any_limits, any_rates;
        any_lane_limits := false;
        IF any_limits THEN
            any_lane_limits := EXISTS (SELECT 1 FROM tickwork_limits WHERE kind = 'lane');
        END IF;
        any_queue_rates := false;
        any_lane_rates := false;
        IF any_rates THEN
            SELECT EXISTS (SELECT 1 FROM tickwork_rate_limits
                           WHERE kind = 'queue' AND starts IS NOT NULL)
                   OR EXISTS (SELECT 1 FROM tickwork_rate_limits
                              WHERE greatest(held_until, (next_start + starts - 1) / starts)
                                    > now_ms
                                AND kind = 'queue' AND held_until > now_ms),
                   EXISTS (SELECT 1 FROM tickwork_rate_limits
                           WHERE kind = 'lane' AND starts IS NOT NULL)
                   OR EXISTS (SELECT 1 FROM tickwork_rate_limits
                              WHERE greatest(held_until, (next_start + starts - 1) / starts)
                                    > now_ms
                                AND kind = 'lane' AND held_until > now_ms)
            INTO any_queue_rates, any_lane_rates;
        END IF;
        FOR pass IN 1..4 LOOP
            IF NOT any_limits AND NOT any_rates THEN
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
                -- Limits or rate limits stored: the walk entry by entry
                -- (see 0016 and above).
                picks := '{}';
                awaited := NULL;
                seen_queues := '{}';
                queue_rooms := '{}';
                queue_buckets := '{}';
                queue_next := '{}';
                seen_lanes := '{}';
                lane_rooms := '{}';
                lane_buckets := '{}';
                lane_next := '{}';
                -- A serial queue (no row) with a running job is passed over
                -- here, in the walk's statement, as without limits: most
                -- queues are serial, and that spares each of them a lock
                -- and a count.
                -- Whether the entry's queue and lane have a bucket or a hold
                -- in force: a primary-key probe each in the walk's own
                -- statement (only once some key of that kind has one), so
                -- a key without either is not read again below. (No bucket
                -- can be stored meanwhile, see the limits' lock; a hold
                -- written meanwhile comes after this claim.)
                FOR entry IN
                    SELECT walked.sequence, walked.queue, walked.lane,
                           any_queue_rates AND EXISTS (
                               SELECT 1 FROM tickwork_rate_limits AS rate
                               WHERE rate.kind = 'queue' AND rate.key = walked.queue
                                 AND (rate.starts IS NOT NULL OR rate.held_until > now_ms))
                               AS queue_rated,
                           any_lane_rates AND EXISTS (
                               SELECT 1 FROM tickwork_rate_limits AS rate
                               WHERE rate.kind = 'lane' AND rate.key = walked.lane
                                 AND (rate.starts IS NOT NULL OR rate.held_until > now_ms))
                               AS lane_rated
                    FROM (
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
                        bucket_starts := NULL;
                        bucket_period := NULL;
                        bucket_burst := NULL;
                        bucket_next := NULL;
                        bucket_held := NULL;
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
                            IF entry.queue_rated AND room > 0 THEN
                                -- Under the queue's lock, read afresh: no
                                -- other claim spends this bucket until commit.
                                SELECT starts, period_ms, burst, next_start, held_until
                                INTO bucket_starts, bucket_period, bucket_burst, bucket_next,
                                     bucket_held
                                FROM tickwork_rate_limits
                                WHERE kind = 'queue' AND key = entry.queue;
                                IF bucket_held > now_ms THEN
                                    room := 0;
                                END IF;
                            END IF;
                        ELSIF awaited IS NULL THEN
                            -- Another claimer holds this queue. It may have
                            -- room once that claim commits: the queue is
                            -- wide, or the claimer passed over its jobs (a
                            -- lane at its limit).
                            awaited := entry.queue;
                        END IF;
                        seen_queues := seen_queues || entry.queue;
                        queue_rooms := queue_rooms || room;
                        -- Without a bucket (or not read): starts NULL.
                        queue_buckets := queue_buckets
                            || ARRAY[bucket_starts, bucket_period, bucket_burst];
                        queue_next := queue_next || bucket_next;
                        found_at := cardinality(seen_queues);
                    END IF;
                    CONTINUE WHEN queue_rooms[found_at] <= 0;
                    -- The queue's bucket allows this start (a start at a
                    -- time: the spends below move its next start on).
                    CONTINUE WHEN queue_buckets[3 * found_at - 2] IS NOT NULL
                        AND queue_next[found_at] > now_ms * queue_buckets[3 * found_at - 2];
                    IF any_lane_limits OR any_lane_rates THEN
                        lane_at := array_position(seen_lanes, entry.lane);
                        IF lane_at IS NULL THEN
                            most := NULL;
                            IF any_lane_limits THEN
                                most := (SELECT max_running FROM tickwork_limits
                                         WHERE kind = 'lane' AND key = entry.lane);
                            END IF;
                            bucket_starts := NULL;
                            bucket_period := NULL;
                            bucket_burst := NULL;
                            bucket_next := NULL;
                            bucket_held := NULL;
                            IF entry.lane_rated THEN
                                SELECT starts, period_ms, burst, next_start, held_until
                                INTO bucket_starts, bucket_period, bucket_burst, bucket_next,
                                     bucket_held
                                FROM tickwork_rate_limits
                                WHERE kind = 'lane' AND key = entry.lane;
                            END IF;
                            IF bucket_held > now_ms THEN
                                room := 0;  -- held: no lock needed to know
                            ELSIF most IS NULL AND bucket_starts IS NULL THEN
                                room := 2147483647;  -- no limit of its own
                            ELSIF NOT pg_try_advisory_xact_lock(1954048882,
                                                                hashtext(entry.lane)) THEN
                                room := 0;
                            ELSE
                                IF bucket_starts IS NOT NULL THEN
                                    -- The lock is granted: read the bucket
                                    -- again, in this fresh statement.
                                    SELECT starts, period_ms, burst, next_start, held_until
                                    INTO bucket_starts, bucket_period, bucket_burst, bucket_next,
                                         bucket_held
                                    FROM tickwork_rate_limits
                                    WHERE kind = 'lane' AND key = entry.lane;
                                END IF;
                                room := CASE WHEN bucket_held > now_ms THEN 0
                                             ELSE 2147483647 END;
                            END IF;
                            IF most IS NOT NULL AND room > 0 THEN
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
                            END IF;
                            seen_lanes := seen_lanes || entry.lane;
                            lane_rooms := lane_rooms || room;
                            lane_buckets := lane_buckets
                                || ARRAY[bucket_starts, bucket_period, bucket_burst];
                            lane_next := lane_next || bucket_next;
                            lane_at := cardinality(seen_lanes);
                        END IF;
                        CONTINUE WHEN lane_rooms[lane_at] <= 0;
                        CONTINUE WHEN lane_buckets[3 * lane_at - 2] IS NOT NULL
                            AND lane_next[lane_at] > now_ms * lane_buckets[3 * lane_at - 2];
                        lane_rooms[lane_at] := lane_rooms[lane_at] - 1;
                        IF lane_buckets[3 * lane_at - 2] IS NOT NULL THEN
                            -- tickwork.model.rate_limits.next_start_after
                            lane_next[lane_at] := greatest(
                                lane_next[lane_at],
                                now_ms * lane_buckets[3 * lane_at - 2]
                                    - (lane_buckets[3 * lane_at] - 1)
                                      * lane_buckets[3 * lane_at - 1])
                                + lane_buckets[3 * lane_at - 1];
                        END IF;
                    END IF;
                    queue_rooms[found_at] := queue_rooms[found_at] - 1;
                    IF queue_buckets[3 * found_at - 2] IS NOT NULL THEN
                        queue_next[found_at] := greatest(
                            queue_next[found_at],
                            now_ms * queue_buckets[3 * found_at - 2]
                                - (queue_buckets[3 * found_at] - 1)
                                  * queue_buckets[3 * found_at - 1])
                            + queue_buckets[3 * found_at - 1];
                    END IF;
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
            IF any_rates AND got > 0 THEN
                -- In the same transaction, under the same locks: each job
                -- this pass claimed (its picks, now running under one of
                -- this call's tokens) spends one start of its queue's
                -- bucket and of its lane's; n claims of a key at once
                -- (next_start_after n times over is one greatest() and n
                -- periods). A pick another claimer took spends nothing.
                UPDATE tickwork_rate_limits AS rate
                SET next_start = greatest(rate.next_start,
                                          now_ms * rate.starts
                                              - (rate.burst - 1) * rate.period_ms)
                                 + claims.n * rate.period_ms
                FROM (SELECT keyed.kind, keyed.key, count(*) AS n
                      FROM tickwork_jobs AS job CROSS JOIN LATERAL (
                          VALUES ('queue', job.queue), ('lane', job.lane)) AS keyed(kind, key)
                      WHERE job.sequence = ANY (picks) AND job.state = 'running'
                        AND job.claim_token = ANY (claim_tokens)
                      GROUP BY keyed.kind, keyed.key) AS claims
                WHERE rate.kind = claims.kind AND rate.key = claims.key
                  AND rate.starts IS NOT NULL;
            END IF;
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

-- The exact claim of 0016 (arguments and result unchanged), obeying rate
-- limits as well: its candidate is the first ready job whose queue and
-- lane look to have room and are not rate-held (in its snapshot); under the
-- queue's lock (and the lane's, when the lane has a limit or a bucket) it
-- checks the queue's hold and bucket afresh and takes the queue's best job
-- of that lane (if free) or of a lane with no limit, no bucket and no hold;
-- the next statement spends the starts. See 0016 for the rest.
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
    any_rates boolean;
    any_lane_rates boolean;
    any_held boolean;
    target_lane_bucket boolean;
    target_lane_free boolean;
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
    -- As in the group commit: a probe of each index of tickwork_rate_limits.
    SELECT EXISTS (SELECT 1 FROM tickwork_rate_limits
                   WHERE greatest(held_until, (next_start + starts - 1) / starts) > now_ms),
           EXISTS (SELECT 1 FROM tickwork_rate_limits WHERE starts IS NOT NULL)
    INTO any_held, any_rates;
    any_rates := any_rates OR any_held;
    any_lane_rates := false;
    IF any_rates THEN
        any_lane_rates :=
            EXISTS (SELECT 1 FROM tickwork_rate_limits WHERE kind = 'lane' AND starts IS NOT NULL)
            OR EXISTS (SELECT 1 FROM tickwork_rate_limits
                       WHERE greatest(held_until, (next_start + starts - 1) / starts) > now_ms
                         AND kind = 'lane' AND held_until > now_ms);
    END IF;
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
          -- Neither its queue nor its lane rate-held (a primary-key probe
          -- each, only while some key is held).
          AND (NOT any_held OR NOT EXISTS (
                   SELECT 1 FROM tickwork_rate_limits AS rate
                   WHERE rate.kind = 'queue' AND rate.key = candidate.queue
                     AND greatest(rate.held_until,
                                  (rate.next_start + rate.starts - 1) / rate.starts) > now_ms))
          AND (NOT any_held OR NOT EXISTS (
                   SELECT 1 FROM tickwork_rate_limits AS rate
                   WHERE rate.kind = 'lane' AND rate.key = candidate.lane
                     AND greatest(rate.held_until,
                                  (rate.next_start + rate.starts - 1) / rate.starts) > now_ms))
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
        target_lane_bucket := any_lane_rates AND EXISTS (
            SELECT 1 FROM tickwork_rate_limits
            WHERE kind = 'lane' AND key = target_lane AND starts IS NOT NULL);
        -- The lane's lock guards its running count and its bucket alike.
        IF lane_most IS NOT NULL OR target_lane_bucket THEN
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
        -- The queue's bucket and hold, read under its lock.
        CONTINUE WHEN any_rates AND EXISTS (
            SELECT 1 FROM tickwork_rate_limits AS rate
            WHERE rate.kind = 'queue' AND rate.key = target
              AND greatest(rate.held_until,
                           (rate.next_start + rate.starts - 1) / rate.starts) > now_ms);
        target_lane_free := NOT any_lane_rates OR NOT EXISTS (
            SELECT 1 FROM tickwork_rate_limits AS rate
            WHERE rate.kind = 'lane' AND rate.key = target_lane
              AND greatest(rate.held_until,
                           (rate.next_start + rate.starts - 1) / rate.starts) > now_ms);
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
                  WHEN NOT any_lane_limits AND NOT any_lane_rates THEN true
                  WHEN head.lane = target_lane
                      THEN (lane_most IS NULL OR lane_room > 0) AND target_lane_free
                  -- Another lane: only one whose lock this claim need not
                  -- hold (no limit, no bucket) and that is not held.
                  ELSE NOT EXISTS (SELECT 1 FROM tickwork_limits AS limited
                                   WHERE limited.kind = 'lane' AND limited.key = head.lane)
                       AND NOT EXISTS (SELECT 1 FROM tickwork_rate_limits AS rate
                                       WHERE rate.kind = 'lane' AND rate.key = head.lane
                                         AND (rate.starts IS NOT NULL
                                              OR rate.held_until > now_ms))
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
            IF any_rates THEN
                -- The claim spends a start of its queue's bucket and of its
                -- job's lane's (target_lane's, the only lane with a bucket
                -- it may take a job of, under that lane's lock), in the
                -- same transaction. The job is among the queue's running
                -- ones (tickwork_jobs_running, at most its limit).
                UPDATE tickwork_rate_limits AS rate
                SET next_start = greatest(rate.next_start,
                                          now_ms * rate.starts
                                              - (rate.burst - 1) * rate.period_ms)
                                 + rate.period_ms
                WHERE rate.starts IS NOT NULL
                  AND ((rate.kind = 'queue' AND rate.key = target)
                       OR (rate.kind = 'lane' AND rate.key IN (
                               SELECT job.lane FROM tickwork_jobs AS job
                               WHERE job.queue = target AND job.state = 'running'
                                 AND job.claim_token = tickwork_claim_one.claim_token)));
            END IF;
            RETURN;
        END IF;
    END LOOP;
END
$$;

UPDATE tickwork_meta SET value = '17' WHERE key = 'schema_version';
