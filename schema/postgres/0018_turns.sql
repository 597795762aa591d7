-- tickwork: fair turns in a wide queue, for PostgreSQL (13+). Apply after
-- 0017. It adds a table, its sequence, two indexes and four functions, and
-- redefines both claim functions to take turns; no job row changes.
--
-- The rule (the same on every store): in a wide queue, one whose limit row
-- (tickwork_limits, kind 'queue') lets more than one job run at once, the
-- lanes of the queue take turns. The queue keeps a line of its lanes with
-- a ready job (queued, due, not cancelled); a claim whose pick in global
-- order (priority desc, then age: unchanged) is a job of a wide queue takes
-- instead the best job (priority desc, then age) of the first lane in the
-- line that may start one now (lane room, lane rate), and that lane goes to
-- the back of the line, or leaves it with no ready job left. So a tenant
-- with 10,000 queued jobs does not hold back a tenant with one. A serial
-- queue (no row, or max_running 1) keeps its head order. While no queue is
-- wide, no claim or producer runs a statement of this file (a probe of
-- tickwork_limits each tells them so).
--
-- One row per lane in a wide queue's line: turn orders the line, lowest
-- first (ties, which one sequence cannot give, by lane). A lane joins at
-- the back, with the next turn of the sequence, when a job of it becomes
-- ready and it is not in the line; a claim sends it to the back the same
-- way. A row whose lane has no ready job left (cancelled, failed with its
-- lane, purged) is stale: claims step over it and remove it when they pass.
CREATE SEQUENCE tickwork_turns_turn AS bigint;

CREATE TABLE tickwork_turns (
    queue text NOT NULL,
    lane text NOT NULL,
    turn bigint NOT NULL DEFAULT nextval('tickwork_turns_turn'),
    PRIMARY KEY (queue, lane)
);

ALTER SEQUENCE tickwork_turns_turn OWNED BY tickwork_turns.turn;

-- A queue's line, front first: a claim reads it from the front up to the
-- first lane that may start a job, O(log n + lanes passed over).
CREATE INDEX tickwork_turns_line ON tickwork_turns (queue, turn, lane);

-- A lane's ready jobs in a queue, best first: a claim's pick in the lane it
-- takes, one probe however many jobs the lane or the queue holds (the
-- queue's other indexes would walk the jobs of the lanes before it).
-- Every ready job has an entry, in serial queues too: an insert writes one
-- (a claim, queued -> running, writes none; the entry goes at VACUUM).
CREATE INDEX tickwork_jobs_lane_ready
    ON tickwork_jobs (queue, lane, priority DESC, sequence)
    WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL;

-- Joining, and the race it closes. A claim of a wide queue holds the
-- queue's advisory lock (0010, 0016), so the claims' changes to one line
-- are one after the other. Producers (ingest, promotion of due jobs,
-- recovery's requeue, release, redrive, a rate-limited put-back) take no
-- such lock. The danger: a claim sees no ready job left in a lane and
-- removes it from the line while a producer's transaction, not yet
-- committed, adds a ready job to that lane and saw the lane's row there
-- (so it did not insert one): after both commit the lane has a ready job
-- and no place in the line. The protocol that excludes it:
--
-- * A producer, for each lane it makes a job ready in, locks the lane's row
--   FOR KEY SHARE until it commits, or inserts the row when there is none
--   (tickwork_join_line, below).
-- * A claim moves a lane to the back with an UPDATE of turn, a lock mode
--   (FOR NO KEY UPDATE) that a KEY SHARE does not block: a claim never
--   waits for a producer. It removes a lane in two statements: it locks
--   the row FOR UPDATE SKIP LOCKED (a row a producer holds is passed over
--   and stays in the line, at the back if its lane just started: that
--   producer is adding a ready job, or it rolls back and the row is
--   stale), then, in a new statement (a fresh snapshot), deletes it only
--   if the lane still has no ready job (tickwork_take_turns).
--
-- So a producer that locked the row first keeps it; one that committed
-- before the claim's lock was granted is seen by the re-check; one that
-- comes after the lock waits for the claim's commit, finds the row gone and
-- inserts it again, at the back. (tests/shared/test_postgres_fair_turns.py
-- drives both orders on two connections.)
--
-- A queue becoming wide (put_limit) lines up its lanes under the limits'
-- lock (LINE_AFTER_LIMIT in tickwork.stores.sql.postgres), which claims
-- hold shared from before their promotion, so a promoted job's lane is
-- never missed; a producer outside a claim takes no lock a change of
-- limits waits for, and one whose statement read the queue as serial just
-- before it became wide, committing just after it was lined up, leaves its
-- lane out of the line (that statement's comment says what follows).

-- The lanes of jobs that became ready in wide queues join their queue's
-- line, each at most once, at the back: queues[i], lanes[i] in the order
-- the jobs became ready (sequence order); the first job of a lane sets its
-- turn. Callers pass only wide queues' ready jobs (and call nothing when
-- there are none: STRICT, so NULL arrays cost no call). Rows are locked and
-- inserted in (queue, lane) order, so that two producers never wait for
-- each other in a cycle within one statement; their turns follow the jobs'
-- order, drawn before that sort.
--
-- A row in this statement's snapshot is locked FOR KEY SHARE (waiting only
-- for a claim, or a change of limits, that is removing it: then it is gone
-- and is inserted again).
-- A row not in the snapshot is inserted; ON CONFLICT DO NOTHING waits for
-- a concurrent insert of the same row and then leaves it, and the loop
-- locks it in its next statement, whose snapshot has it. Rarely more than
-- one turn of the loop. The number of lanes that joined.
CREATE FUNCTION tickwork_join_line(queues text[], lanes text[]) RETURNS integer
LANGUAGE plpgsql VOLATILE STRICT
AS $$
DECLARE
    joined integer := 0;
    inserted integer;
BEGIN
    LOOP
        WITH wanted AS (
            SELECT DISTINCT ON (came.queue, came.lane) came.queue, came.lane, came.n
            FROM unnest(queues, lanes) WITH ORDINALITY AS came(queue, lane, n)
            ORDER BY came.queue, came.lane, came.n),
        held AS (
            SELECT line.queue, line.lane FROM tickwork_turns AS line
            WHERE (line.queue, line.lane) IN (SELECT wanted.queue, wanted.lane FROM wanted)
            ORDER BY line.queue, line.lane
            FOR KEY SHARE),
        absent AS (
            SELECT wanted.queue, wanted.lane, wanted.n FROM wanted
            WHERE NOT EXISTS (SELECT 1 FROM held
                              WHERE held.queue = wanted.queue AND held.lane = wanted.lane)),
        added AS (
            INSERT INTO tickwork_turns (queue, lane, turn)
            SELECT numbered.queue, numbered.lane, numbered.turn FROM (
                SELECT ordered.queue, ordered.lane, nextval('tickwork_turns_turn') AS turn
                FROM (SELECT absent.queue, absent.lane FROM absent
                      ORDER BY absent.n) AS ordered) AS numbered
            ORDER BY numbered.queue, numbered.lane
            ON CONFLICT (queue, lane) DO NOTHING
            RETURNING tickwork_turns.queue, tickwork_turns.lane)
        SELECT (SELECT count(*) FROM added),
               array_agg(absent.queue ORDER BY absent.n),
               array_agg(absent.lane ORDER BY absent.n)
        INTO inserted, queues, lanes
        FROM absent
        WHERE NOT EXISTS (SELECT 1 FROM added
                          WHERE added.queue = absent.queue AND added.lane = absent.lane);
        joined := joined + inserted;
        -- Left: rows another transaction inserted after this snapshot.
        EXIT WHEN queues IS NULL;
    END LOOP;
    RETURN joined;
END
$$;

-- Due jobs join the ready set (as in 0004), and the lanes of those in wide
-- queues join their lines: the claims' first step while a wide queue
-- exists (without one, the claims run 0004's statement).
CREATE FUNCTION tickwork_promote_due(now_ms bigint) RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    joining_queues text[];
    joining_lanes text[];
BEGIN
    WITH promoted AS (
        UPDATE tickwork_jobs SET due_at = NULL
        WHERE sequence IN (
            SELECT sequence FROM tickwork_jobs
            WHERE state = 'queued' AND due_at IS NOT NULL AND due_at <= now_ms
            ORDER BY due_at LIMIT 1000
            FOR UPDATE SKIP LOCKED)
        RETURNING tickwork_jobs.sequence, tickwork_jobs.queue, tickwork_jobs.lane,
                  tickwork_jobs.cancellation_id)
    SELECT array_agg(promoted.queue ORDER BY promoted.sequence),
           array_agg(promoted.lane ORDER BY promoted.sequence)
    INTO joining_queues, joining_lanes
    FROM promoted
    WHERE promoted.cancellation_id IS NULL
      AND EXISTS (SELECT 1 FROM tickwork_limits AS limited
                  WHERE limited.kind = 'queue' AND limited.key = promoted.queue
                    AND limited.max_running > 1);
    PERFORM tickwork_join_line(joining_queues, joining_lanes);
END
$$;

-- Whether a claim may start a job of lane lane_key now, for the claims'
-- walks (0017's lane step, written once): lane_room, how many more jobs
-- of the lane may start (2147483647: no limit of its own), and its bucket
-- (lane_starts NULL: none), which the caller checks and spends as it
-- takes jobs. limited / rated: whether the lane may have a limit / a rate
-- row (the claim's probes; false skips the read). A hold in force leaves
-- no room, known without the lock; a lane with a limit or a bucket has its
-- lock (1954048882, hashtext(lane)) tried (another claimer holds it: no
-- room), and is read again under it, in new statements.
CREATE FUNCTION tickwork_lane_room(
    lane_key text, now_ms bigint, limited boolean, rated boolean,
    OUT lane_room integer, OUT lane_starts bigint, OUT lane_period bigint,
    OUT lane_burst bigint, OUT lane_next bigint)
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    most integer;
    held bigint;
BEGIN
    IF limited THEN
        most := (SELECT lane_limit.max_running FROM tickwork_limits AS lane_limit
                 WHERE lane_limit.kind = 'lane' AND lane_limit.key = lane_key);
    END IF;
    IF rated THEN
        SELECT rate.starts, rate.period_ms, rate.burst, rate.next_start, rate.held_until
        INTO lane_starts, lane_period, lane_burst, lane_next, held
        FROM tickwork_rate_limits AS rate
        WHERE rate.kind = 'lane' AND rate.key = lane_key;
    END IF;
    IF held > now_ms THEN
        lane_room := 0;  -- held: no lock needed to know
    ELSIF most IS NULL AND lane_starts IS NULL THEN
        lane_room := 2147483647;  -- no limit of its own
    ELSIF NOT pg_try_advisory_xact_lock(1954048882, hashtext(lane_key)) THEN
        lane_room := 0;
    ELSE
        IF lane_starts IS NOT NULL THEN
            -- The lock is granted: read the bucket again, in this fresh
            -- statement.
            SELECT rate.starts, rate.period_ms, rate.burst, rate.next_start, rate.held_until
            INTO lane_starts, lane_period, lane_burst, lane_next, held
            FROM tickwork_rate_limits AS rate
            WHERE rate.kind = 'lane' AND rate.key = lane_key;
        END IF;
        lane_room := CASE WHEN held > now_ms THEN 0 ELSE 2147483647 END;
        IF most IS NOT NULL AND lane_room > 0 THEN
            -- Two index ranges (see 0016's lane index).
            lane_room := most - (SELECT count(*) FROM (
                (SELECT 1 FROM tickwork_jobs AS running
                 WHERE running.lane = lane_key AND running.lane <> running.queue
                   AND running.state = 'running'
                 LIMIT most)
                UNION ALL
                (SELECT 1 FROM tickwork_jobs AS running
                 WHERE running.queue = lane_key AND running.lane = lane_key
                   AND running.state = 'running'
                 LIMIT most)) AS counted);
        END IF;
    END IF;
END
$$;

-- After a claim in wide queues, in its transaction and under the queues'
-- locks the claim holds: started, the sequences it picked in wide queues
-- in the order it picked them (tokens: the claim's tokens; a pick another
-- claimer took meanwhile did not start and changes nothing); passed_*,
-- lanes its walk of a line found without a ready job (stale).
--
-- 1. Each lane that started a job and has a ready job left goes to the
--    back of its queue's line, in the order of its last start (new turns
--    from the sequence; the UPDATE waits for no producer, see above). The
--    others, started lanes with no ready job left and stale lanes, are
--    locked FOR UPDATE SKIP LOCKED.
-- 2. Only when there are such lanes, in a new statement (a fresh
--    snapshot): a locked lane with still no ready job leaves the line. A
--    started lane that has a ready job now (a producer committed one before
--    the lock was granted), or whose row a producer holds (it is adding
--    one), goes to the back, after those of step 1. A stale lane a producer
--    holds, or that has a ready job now, keeps its place.
--
-- A started lane with no row (the line lost it, see LINE_AFTER_LIMIT in
-- tickwork.stores.sql.postgres) is not inserted here: a claim inserts no
-- row, so it never waits for a producer's uncommitted one.
CREATE FUNCTION tickwork_take_turns(
    started bigint[], tokens text[], passed_queues text[], passed_lanes text[])
RETURNS void
LANGUAGE plpgsql VOLATILE
AS $$
DECLARE
    leaving_queues text[];
    leaving_lanes text[];
    leaving_order bigint[];
    locked_queues text[];
    locked_lanes text[];
BEGIN
    WITH began AS (
        SELECT job.queue, job.lane, max(pick.n) AS n
        FROM unnest(started) WITH ORDINALITY AS pick(sequence, n)
        JOIN tickwork_jobs AS job ON job.sequence = pick.sequence
        WHERE job.state = 'running' AND job.claim_token = ANY (tokens)
        GROUP BY job.queue, job.lane),
    checked AS (
        SELECT began.queue, began.lane, began.n, EXISTS (
                   SELECT 1 FROM tickwork_jobs AS ready
                   WHERE ready.queue = began.queue AND ready.lane = began.lane
                     AND ready.state = 'queued' AND ready.cancellation_id IS NULL
                     AND ready.due_at IS NULL) AS has_ready
        FROM began),
    back AS (
        SELECT ordered.queue, ordered.lane, nextval('tickwork_turns_turn') AS turn
        FROM (SELECT checked.queue, checked.lane FROM checked WHERE checked.has_ready
              ORDER BY checked.n) AS ordered),
    moved AS (
        UPDATE tickwork_turns AS line SET turn = back.turn
        FROM back
        WHERE line.queue = back.queue AND line.lane = back.lane),
    leaving AS (
        SELECT candidate.queue, candidate.lane, max(candidate.n) AS n FROM (
            SELECT checked.queue, checked.lane, checked.n FROM checked
            WHERE NOT checked.has_ready
            UNION ALL
            SELECT stale.queue, stale.lane, NULL
            FROM unnest(passed_queues, passed_lanes) AS stale(queue, lane)
            WHERE NOT EXISTS (SELECT 1 FROM tickwork_jobs AS ready
                              WHERE ready.queue = stale.queue AND ready.lane = stale.lane
                                AND ready.state = 'queued' AND ready.cancellation_id IS NULL
                                AND ready.due_at IS NULL)) AS candidate
        GROUP BY candidate.queue, candidate.lane),
    locked AS (
        SELECT line.queue, line.lane FROM tickwork_turns AS line
        WHERE (line.queue, line.lane) IN (SELECT leaving.queue, leaving.lane FROM leaving)
        ORDER BY line.queue, line.lane
        FOR UPDATE SKIP LOCKED)
    SELECT (SELECT array_agg(leaving.queue ORDER BY leaving.n) FROM leaving),
           (SELECT array_agg(leaving.lane ORDER BY leaving.n) FROM leaving),
           (SELECT array_agg(leaving.n ORDER BY leaving.n) FROM leaving),
           (SELECT array_agg(locked.queue) FROM locked),
           (SELECT array_agg(locked.lane) FROM locked)
    INTO leaving_queues, leaving_lanes, leaving_order, locked_queues, locked_lanes;
    IF leaving_queues IS NULL THEN
        RETURN;
    END IF;
    WITH candidate AS (
        SELECT leaving.queue, leaving.lane, leaving.n,
               EXISTS (SELECT 1 FROM unnest(locked_queues, locked_lanes) AS locked(queue, lane)
                       WHERE locked.queue = leaving.queue
                         AND locked.lane = leaving.lane) AS locked,
               EXISTS (SELECT 1 FROM tickwork_jobs AS ready
                       WHERE ready.queue = leaving.queue AND ready.lane = leaving.lane
                         AND ready.state = 'queued' AND ready.cancellation_id IS NULL
                         AND ready.due_at IS NULL) AS has_ready
        FROM unnest(leaving_queues, leaving_lanes, leaving_order) AS leaving(queue, lane, n)),
    gone AS (
        DELETE FROM tickwork_turns AS line
        USING candidate
        WHERE line.queue = candidate.queue AND line.lane = candidate.lane
          AND candidate.locked AND NOT candidate.has_ready)
    UPDATE tickwork_turns AS line SET turn = back.turn
    FROM (SELECT ordered.queue, ordered.lane, nextval('tickwork_turns_turn') AS turn
          FROM (SELECT candidate.queue, candidate.lane FROM candidate
                WHERE candidate.n IS NOT NULL
                  AND (candidate.has_ready OR NOT candidate.locked)
                ORDER BY candidate.n) AS ordered) AS back
    WHERE line.queue = back.queue AND line.lane = back.lane;
END
$$;

-- The claims. Both keep their global pick (0016, 0017): the first job in
-- global order whose queue and lane may start one. When that job's queue
-- is wide, they take the fair pick instead and, after the claim statement,
-- in the same transaction, update the line (tickwork_take_turns). Due
-- jobs are promoted after the limits' lock is granted, and while a wide
-- queue exists through tickwork_promote_due, which joins their lanes. With
-- no wide queue (no queue limit above 1) neither claim runs a statement of
-- this file: the serial path is 0017's.
--
-- Deadlocks: 0016's argument holds. A claim still waits for a queue lock
-- only while its transaction holds no queue or lane lock, and for a lane
-- lock only while holding the one queue lock it waited for; otherwise it
-- only tries them (tickwork_lane_room tries). The row locks this file adds
-- do not make a claim wait once it holds a queue or lane lock: a line's
-- rows are changed only by claims of its queue (one at a time, under the
-- queue's lock: FOR UPDATE SKIP LOCKED, and UPDATEs of turn, which a
-- producer's KEY SHARE does not block) and by put_limit and delete_limit
-- (under the limits' lock held exclusively, so with no claim in flight);
-- a claim inserts no row of tickwork_turns once it holds a queue lock. The
-- waits it can make are in its promotion (tickwork_join_line), its first
-- step, holding no queue or lane lock (the limits' lock shared, which only
-- a change of limits, holding nothing else, waits for): for a claim
-- removing a lane (which waits for nothing more, and commits) and for a
-- producer inserting the same lane's row (which takes no advisory lock).
-- Producers wait for claims only there too, and for each other as
-- inserting the same job_id always did. One cycle remains possible, and
-- PostgreSQL breaks it by failing one side (deadlock_detected): a
-- producer's open transaction that inserted a lane's row, then replays
-- (enqueue) a due job of that lane that a claim is promoting, while that
-- claim's promotion waits for the row.

-- The group commit of 0017 (arguments, result, settlement step, plan
-- settings and the walk unchanged; see 0010, 0012, 0016 and 0017 for their
-- comments), taking turns in wide queues. In the walk, an entry of a wide
-- queue that may start (its queue's room, bucket and lane as in 0017) is
-- the queue's turn: the pass takes the best job (not taken yet) of the
-- first lane of the queue's line that may start one, checking each lane it
-- passes (tickwork_lane_room, cached per lane as 0017 caches its lanes); a
-- lane that starts a job moves to the tail the pass keeps, behind the
-- stored line. A job a turn took is passed over when the walk reaches it.
-- After the claim statement (and the spend), the lines are stored.
--
-- And it compiles no JIT code: with limits stored and some tens of
-- thousands of ready jobs, the walk's generic plan is estimated above
-- jit_above_cost, and compiling it cost about 19 ms of a 20 ms call
-- (measured on 0017 with 50,000 ready jobs in a queue with a limit:
-- 19.9 ms per call, 0.94 ms with jit off).
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
SET jit = off
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
    any_wide boolean := false;
    wide boolean;
    queue_wide boolean[];
    line_turns bigint[];
    line_lanes text[];
    tail_ats integer[];
    line_turn bigint;
    lane_name text;
    lane_free boolean;
    lane_check record;
    walking boolean;
    entry_lane_at integer;
    pick bigint;
    turn_picks bigint[];
    turn_queues text[];
    turn_lanes text[];
    stale_queues text[];
    stale_lanes text[];
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
        -- The limits hold still until this transaction ends (see 0016),
        -- from before the promotion below: whether a promoted job's queue
        -- is wide is read after the lock is granted, so a put_limit that
        -- widens a queue either committed before that read or waits for
        -- this claim's commit (and then finds the promoted job ready).
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
            SELECT EXISTS (SELECT 1 FROM tickwork_limits WHERE kind = 'lane'),
                   EXISTS (SELECT 1 FROM tickwork_limits
                           WHERE kind = 'queue' AND max_running > 1)
            INTO any_lane_limits, any_wide;
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
        -- Jobs whose time has come join the ready set first (as in 0004),
        -- and while a queue is wide, their lanes join its line.
        IF any_wide THEN
            PERFORM tickwork_promote_due(now_ms);
        ELSE
            UPDATE tickwork_jobs SET due_at = NULL
            WHERE sequence IN (
                SELECT sequence FROM tickwork_jobs
                WHERE state = 'queued' AND due_at IS NOT NULL AND due_at <= now_ms
                ORDER BY due_at LIMIT 1000
                FOR UPDATE SKIP LOCKED);
        END IF;
        any_paused := EXISTS (SELECT 1 FROM tickwork_paused_queues);
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
                queue_wide := '{}';
                line_turns := '{}';
                line_lanes := '{}';
                tail_ats := '{}';
                turn_picks := '{}';
                turn_queues := '{}';
                turn_lanes := '{}';
                stale_queues := '{}';
                stale_lanes := '{}';
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
                <<walk>>
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
                    -- A job a turn of its lane took earlier in this pass is
                    -- taken (see below).
                    CONTINUE walk WHEN any_wide AND entry.sequence = ANY (picks);
                    found_at := array_position(seen_queues, entry.queue);
                    IF found_at IS NULL THEN
                        room := 0;
                        wide := false;
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
                            wide := most > 1;
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
                        -- A wide queue's line is walked from its front; the
                        -- walk goes on from where it stopped at the queue's
                        -- next turn in this pass (what it passed could not
                        -- start a job, and cannot later in the pass).
                        queue_wide := queue_wide || wide;
                        line_turns := line_turns || (-9223372036854775808)::bigint;
                        line_lanes := line_lanes || ''::text;
                        tail_ats := tail_ats || 0;
                        found_at := cardinality(seen_queues);
                    END IF;
                    -- While it is not taken, the entry stays the global pick:
                    -- its queue's turns go on until one takes it, or the
                    -- queue has no room left (or the claim is full).
                    LOOP
                        CONTINUE walk WHEN queue_rooms[found_at] <= 0;
                        -- The queue's bucket allows this start (a start at a
                        -- time: the spends below move its next start on).
                        CONTINUE walk WHEN queue_buckets[3 * found_at - 2] IS NOT NULL
                            AND queue_next[found_at] > now_ms * queue_buckets[3 * found_at - 2];
                        -- The entry is the global pick if its lane may start a
                        -- job too. In a serial queue it is taken. In a wide one
                        -- it is the queue's turn: the claim takes the best job
                        -- of the first lane in the queue's line that may start
                        -- one (room and rate, tickwork_lane_room), a lane that
                        -- may not keeping its place; failing every lane, the
                        -- entry itself (a fallback an exact line never needs).
                        -- The line is the stored one (turn order) with the lanes
                        -- this pass started in the queue after it, in the order
                        -- they started: turn_lanes, the line's tail until the
                        -- claim stores the new turns (tickwork_take_turns).
                        pick := NULL;
                        lane_name := entry.lane;
                        walking := false;
                        LOOP
                            lane_free := true;
                            IF any_lane_limits OR any_lane_rates THEN
                                lane_at := array_position(seen_lanes, lane_name);
                                IF lane_at IS NULL THEN
                                    SELECT * INTO lane_check
                                    FROM tickwork_lane_room(lane_name, now_ms, any_lane_limits,
                                                            CASE WHEN walking THEN any_lane_rates
                                                                 ELSE entry.lane_rated END);
                                    seen_lanes := seen_lanes || lane_name;
                                    lane_rooms := lane_rooms || lane_check.lane_room;
                                    lane_buckets := lane_buckets
                                        || ARRAY[lane_check.lane_starts, lane_check.lane_period,
                                                 lane_check.lane_burst];
                                    lane_next := lane_next || lane_check.lane_next;
                                    lane_at := cardinality(seen_lanes);
                                END IF;
                                lane_free := lane_rooms[lane_at] > 0
                                    AND (lane_buckets[3 * lane_at - 2] IS NULL
                                         OR lane_next[lane_at]
                                            <= now_ms * lane_buckets[3 * lane_at - 2]);
                            END IF;
                            IF NOT walking THEN
                                EXIT WHEN NOT lane_free;  -- no pick: the walk goes on
                                pick := entry.sequence;
                                EXIT WHEN NOT queue_wide[found_at];
                                pick := NULL;
                                entry_lane_at := lane_at;
                                walking := true;
                            ELSIF lane_free THEN
                                -- The lane's best ready job (tickwork_jobs_lane_ready).
                                SELECT ready.sequence INTO pick FROM tickwork_jobs AS ready
                                WHERE ready.queue = entry.queue AND ready.lane = lane_name
                                  AND ready.state = 'queued' AND ready.cancellation_id IS NULL
                                  AND ready.due_at IS NULL AND ready.sequence <> ALL (picks)
                                ORDER BY ready.priority DESC, ready.sequence
                                LIMIT 1;
                                EXIT WHEN pick IS NOT NULL;
                                IF tail_ats[found_at] = 0 THEN
                                    -- A stored lane with no ready job: stale.
                                    stale_queues := stale_queues || entry.queue;
                                    stale_lanes := stale_lanes || lane_name;
                                END IF;
                            END IF;
                            -- The next lane of the line.
                            lane_name := NULL;
                            IF tail_ats[found_at] = 0 THEN
                                SELECT line.turn, line.lane INTO line_turn, lane_name
                                FROM tickwork_turns AS line
                                WHERE line.queue = entry.queue
                                  AND (line.turn, line.lane)
                                      > (line_turns[found_at], line_lanes[found_at])
                                ORDER BY line.turn, line.lane
                                LIMIT 1;
                                IF lane_name IS NULL THEN
                                    tail_ats[found_at] := 1;
                                ELSE
                                    line_turns[found_at] := line_turn;
                                    line_lanes[found_at] := lane_name;
                                END IF;
                            END IF;
                            WHILE lane_name IS NULL
                                  AND tail_ats[found_at] <= cardinality(turn_queues) LOOP
                                IF turn_queues[tail_ats[found_at]] = entry.queue THEN
                                    lane_name := turn_lanes[tail_ats[found_at]];
                                END IF;
                                tail_ats[found_at] := tail_ats[found_at] + 1;
                            END LOOP;
                            IF lane_name IS NULL THEN
                                -- No lane of the line may start a job: the entry.
                                pick := entry.sequence;
                                lane_name := entry.lane;
                                lane_at := entry_lane_at;
                                EXIT;
                            END IF;
                        END LOOP;
                        CONTINUE walk WHEN pick IS NULL;
                        IF any_lane_limits OR any_lane_rates THEN
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
                        picks := picks || pick;
                        IF queue_wide[found_at] THEN
                            turn_picks := turn_picks || pick;
                            turn_queues := turn_queues || entry.queue;
                            turn_lanes := turn_lanes || lane_name;
                        END IF;
                        EXIT walk WHEN cardinality(picks) = cardinality(claim_tokens) - claimed;
                        EXIT WHEN pick = entry.sequence;
                    END LOOP;
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
            IF any_wide AND (cardinality(turn_picks) > 0 OR cardinality(stale_queues) > 0) THEN
                -- The lanes that started go to the back of their lines, or
                -- leave them; stale lanes the walk passed leave (see
                -- tickwork_take_turns): same transaction, same locks.
                PERFORM tickwork_take_turns(turn_picks, claim_tokens, stale_queues, stale_lanes);
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


-- The exact claim of 0017 (arguments and result unchanged; see 0010, 0016
-- and 0017), taking turns in a wide queue: once its queue's lock is held
-- and the queue's room, hold and bucket are read afresh, it walks the
-- queue's line from the front for the first lane that may start a job
-- (another lane's lock only tried), claims that lane's best ready job
-- (waiting for its row, as its pick always did), and stores the line.
--
-- And it compiles no JIT code: with some thousands of ready jobs its
-- candidate query's estimate (a custom plan's) passed jit_above_cost, and
-- compiling it cost about 18 ms of a 20 ms call (measured on 0017 with
-- 10,000 ready jobs: 20.7 ms per exact claim, 2.6 ms with jit off).
CREATE OR REPLACE FUNCTION tickwork_claim_one(
    claim_token text, lease_ms bigint, clock_override bigint)
RETURNS TABLE (
    job_id text, queue text, lane text, priority bigint, payload_json text,
    max_recoveries bigint, state text, outcome text, failure_reason text, sequence bigint,
    recoveries bigint, enqueued_at bigint, started_at bigint, settled_at bigint,
    cancellation_id text, run_at bigint, delay_ms bigint, due_at bigint,
    retry_json text, attempt integer, history_json text, error_json text)
LANGUAGE plpgsql VOLATILE
SET jit = off
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
    any_wide boolean;
    line_lane text;
    lane_free boolean;
    fair_pick bigint;
    stale_lanes text[];
BEGIN
    -- The limits' lock first, then the promotion (see the group commit).
    PERFORM pg_advisory_xact_lock_shared(1954048883, 0);
    any_queue_limits := EXISTS (SELECT 1 FROM tickwork_limits WHERE kind = 'queue');
    any_lane_limits := EXISTS (SELECT 1 FROM tickwork_limits WHERE kind = 'lane');
    any_wide := any_queue_limits AND EXISTS (
        SELECT 1 FROM tickwork_limits WHERE kind = 'queue' AND max_running > 1);
    IF any_wide THEN
        PERFORM tickwork_promote_due(now_ms);
    ELSE
        UPDATE tickwork_jobs SET due_at = NULL
        WHERE sequence IN (
            SELECT sequence FROM tickwork_jobs
            WHERE state = 'queued' AND due_at IS NOT NULL AND due_at <= now_ms
            ORDER BY due_at LIMIT 1000
            FOR UPDATE SKIP LOCKED);
    END IF;
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
        -- In a wide queue, the lanes take turns: the best ready job of the
        -- first lane in the queue's line that may start one (target_lane
        -- as just read; another lane through tickwork_lane_room, which
        -- only tries its lock), a lane that may not keeping its place, a
        -- lane without a ready job (stale) leaving; failing every lane, the
        -- pick below, as in a serial queue.
        fair_pick := NULL;
        stale_lanes := '{}';
        IF any_wide AND queue_most > 1 THEN
            FOR line_lane IN
                SELECT line.lane FROM tickwork_turns AS line
                WHERE line.queue = target
                ORDER BY line.turn, line.lane
            LOOP
                IF line_lane = target_lane THEN
                    lane_free := (lane_most IS NULL OR lane_room > 0) AND target_lane_free;
                ELSIF NOT any_lane_limits AND NOT any_lane_rates THEN
                    lane_free := true;
                ELSE
                    SELECT checked.lane_room > 0
                           AND (checked.lane_starts IS NULL
                                OR checked.lane_next <= now_ms * checked.lane_starts)
                    INTO lane_free
                    FROM tickwork_lane_room(line_lane, now_ms, any_lane_limits,
                                            any_lane_rates) AS checked;
                END IF;
                CONTINUE WHEN NOT lane_free;
                SELECT ready.sequence INTO fair_pick FROM tickwork_jobs AS ready
                WHERE ready.queue = target AND ready.lane = line_lane
                  AND ready.state = 'queued' AND ready.cancellation_id IS NULL
                  AND ready.due_at IS NULL
                ORDER BY ready.priority DESC, ready.sequence
                LIMIT 1;
                EXIT WHEN fair_pick IS NOT NULL;
                stale_lanes := stale_lanes || line_lane;
            END LOOP;
        END IF;
        now_ms := coalesce(clock_override, tickwork_now_ms());
        IF fair_pick IS NOT NULL THEN
            -- The lane's job, waiting for its row as the pick below does.
            RETURN QUERY
            UPDATE tickwork_jobs AS job
            SET state = 'running', claim_token = tickwork_claim_one.claim_token,
                started_at = now_ms, lease_expires_at = now_ms + lease_ms
            WHERE job.sequence = fair_pick AND job.state = 'queued'
              AND job.cancellation_id IS NULL AND job.due_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM tickwork_paused_queues AS paused
                              WHERE paused.queue = target)
            RETURNING job.job_id, job.queue, job.lane, job.priority, job.payload_json,
                      job.max_recoveries, job.state, job.outcome, job.failure_reason,
                      job.sequence, job.recoveries, job.enqueued_at, job.started_at,
                      job.settled_at, job.cancellation_id, job.run_at, job.delay_ms,
                      job.due_at, job.retry_json, job.attempt, job.history_json,
                      job.error_json;
        ELSE
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
        END IF;
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
            IF any_wide AND queue_most > 1 THEN
                -- Its lane to the back of the line, or out of it; stale
                -- lanes passed out of it (tickwork_take_turns).
                PERFORM tickwork_take_turns(
                    ARRAY(SELECT job.sequence FROM tickwork_jobs AS job
                          WHERE job.queue = target AND job.state = 'running'
                            AND job.claim_token = tickwork_claim_one.claim_token),
                    ARRAY[tickwork_claim_one.claim_token],
                    array_fill(target, ARRAY[cardinality(stale_lanes)]), stale_lanes);
            END IF;
            RETURN;
        END IF;
    END LOOP;
END
$$;


UPDATE tickwork_meta SET value = '18' WHERE key = 'schema_version';
