-- tickwork: claims serialised per queue, not behind one lock, for PostgreSQL
-- (13+). Apply after 0009. No table or row changes: two functions.
--
-- Until 0009 every claim took one transaction-scoped advisory lock
-- (pg_advisory_xact_lock(7361626972690001)) and held it until its commit,
-- fsync included, so the claims of separate pools ran one commit at a time.
-- From here a claim locks only the queues it claims, each with the
-- transaction-scoped advisory lock (1954048881, hashtext(queue)) (the
-- two-key space, which never meets the one-key locks of tickwork.locks):
--
-- * Every transaction that makes a job of queue Q running holds Q's lock
--   until it commits. A claim takes Q's lock first and only then, in a new
--   statement (a fresh snapshot: these functions are VOLATILE, read
--   committed), reads Q's head and whether Q has a running job. So it sees
--   every claim of Q committed before it: two claims never both find Q
--   free, and the job they claim is Q's head as of then. This is the
--   argument the single lock made, per queue.
-- * The group commit's claims take the locks with pg_try_advisory_xact_lock
--   and pass over a queue another claimer holds (it is being claimed), so
--   claimers never wait on one another and cannot deadlock. The exact claim
--   (tickwork_claim_one) waits for its first choice's lock, then only tries.
-- * tickwork_jobs_running (unique per queue while running) stays the last
--   word: a violation is an error, never a second concurrent run.

-- The group commit of 0008 (arguments, result and settlement step
-- unchanged; see 0001, 0004, 0005 and 0008 for their comments), with the
-- claim in two statements:
--
-- 1. Walk the runnable index in global order (priority desc, oldest first),
--    at most scan_limit entries, and lock the queue of each entry whose
--    queue has no running job and is not paused, counting the entries that
--    are their queue's head, until cardinality(claim_tokens) are counted.
--    CASE fixes the order of the checks (the planner may reorder plain AND
--    terms): busy and paused queues are never locked, and the head probe
--    runs only for a queue this claim holds, since under contention most
--    entries at the front belong to queues other claimers hold. An entry
--    that is not its queue's head comes after the head (same order), so
--    its queue was tried already: the lock is then one this claim holds or
--    one it took as another claimer released it, unused until commit. The
--    walk stops at the last entry it needs.
-- 2. In fresh snapshots, the head of each locked queue is claimed if that
--    queue still has no running job, is not paused, no lease has expired
--    and no cancelled job waits; FOR UPDATE SKIP LOCKED passes over a head
--    another transaction is changing (a cancellation, a promotion) and
--    re-checks the rows it locks.
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
-- Custom plans (PostgreSQL's choice): generic ones would save re-planning
-- (about 40% of a call's server time in one measurement), but the generic
-- plan of step 2 joins the locked queues' heads by hashing every runnable
-- row, a cost that grows with the backlog.
AS $$
#variable_conflict use_column
DECLARE
    now_ms bigint := coalesce(clock_override, tickwork_now_ms());
    any_paused boolean;
    locked text[];
    heads bigint[];
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
        -- Step 1: lock the queues to claim from.
        SELECT array_agg(walk.queue) INTO locked FROM (
            SELECT entry.queue FROM (
                SELECT sequence, queue, priority FROM tickwork_jobs
                WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL
                ORDER BY priority DESC, sequence
                LIMIT scan_limit) AS entry
            WHERE CASE
                WHEN EXISTS (SELECT 1 FROM tickwork_jobs AS busy
                             WHERE busy.queue = entry.queue AND busy.state = 'running')
                    THEN false
                WHEN any_paused AND EXISTS (SELECT 1 FROM tickwork_paused_queues AS paused
                                            WHERE paused.queue = entry.queue)
                    THEN false
                WHEN NOT pg_try_advisory_xact_lock(1954048881, hashtext(entry.queue))
                    THEN false
                ELSE entry.sequence = (
                        SELECT head.sequence FROM tickwork_jobs AS head
                        WHERE head.queue = entry.queue AND head.state = 'queued'
                          AND head.cancellation_id IS NULL AND head.due_at IS NULL
                        ORDER BY head.priority DESC, head.sequence LIMIT 1) END
            LIMIT cardinality(claim_tokens)) AS walk;
        IF locked IS NULL THEN
            RETURN;
        END IF;
        -- Step 2, fresh snapshots: every claim of these queues committed
        -- before their locks were granted is visible. The heads first, as
        -- an array, so the claim reaches them through the primary key
        -- whatever the planner guesses of their number.
        SELECT array_agg((SELECT head.sequence FROM tickwork_jobs AS head
                          WHERE head.queue = mine.queue AND head.state = 'queued'
                            AND head.cancellation_id IS NULL AND head.due_at IS NULL
                          ORDER BY head.priority DESC, head.sequence LIMIT 1))
        INTO heads FROM unnest(locked) AS mine(queue);
        now_ms := coalesce(clock_override, tickwork_now_ms());
        RETURN QUERY
        WITH picked AS (
            SELECT candidate.sequence, candidate.priority FROM tickwork_jobs AS candidate
            WHERE candidate.sequence = ANY (heads)
              AND candidate.state = 'queued' AND candidate.cancellation_id IS NULL
              AND candidate.due_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM tickwork_jobs AS busy
                              WHERE busy.queue = candidate.queue AND busy.state = 'running')
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
        SET state = 'running', claim_token = claim_tokens[numbered.n],
            started_at = now_ms, lease_expires_at = now_ms + lease_ms
        FROM numbered
        WHERE job.sequence = numbered.sequence
        RETURNING job.job_id, job.queue, job.lane, job.priority, job.payload_json,
                  job.max_recoveries, job.state, job.outcome, job.failure_reason,
                  job.sequence, job.recoveries, job.enqueued_at, job.started_at,
                  job.settled_at, job.cancellation_id, job.run_at, job.delay_ms, job.due_at,
                  job.retry_json, job.attempt, job.history_json, job.error_json,
                  numbered.n::integer, NULL::text;
    END IF;
END
$$;

-- The exact claim of one job, for a tick that probed first (recovered an
-- expired claim or settled a cancelled job): no guards, and no entry limit.
-- It moves due jobs into the ready set, then picks the first free, unpaused
-- queue head in global order, waits for that queue's lock (a claim of it
-- in flight ends first), and in a fresh snapshot claims the queue's head if
-- the queue is still free, waiting (FOR UPDATE) rather than skipping the
-- head. If the queue was taken meanwhile it moves on to the next free
-- queue, then only trying locks: holding one queue's lock it never waits
-- for another's, so exact claims cannot deadlock one another.
CREATE FUNCTION tickwork_claim_one(
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
    target text;
    passed text[] := '{}';
BEGIN
    UPDATE tickwork_jobs SET due_at = NULL
    WHERE sequence IN (
        SELECT sequence FROM tickwork_jobs
        WHERE state = 'queued' AND due_at IS NOT NULL AND due_at <= now_ms
        ORDER BY due_at LIMIT 1000
        FOR UPDATE SKIP LOCKED);
    FOR try_number IN 1..8 LOOP
        target := NULL;
        SELECT candidate.queue INTO target FROM tickwork_jobs AS candidate
        WHERE candidate.state = 'queued' AND candidate.cancellation_id IS NULL
          AND candidate.due_at IS NULL AND candidate.queue <> ALL (passed)
          AND NOT EXISTS (SELECT 1 FROM tickwork_paused_queues AS paused
                          WHERE paused.queue = candidate.queue)
          AND NOT EXISTS (SELECT 1 FROM tickwork_jobs AS busy
                          WHERE busy.queue = candidate.queue AND busy.state = 'running')
        ORDER BY candidate.priority DESC, candidate.sequence
        LIMIT 1;
        EXIT WHEN target IS NULL;
        passed := passed || target;
        IF try_number = 1 THEN
            PERFORM pg_advisory_xact_lock(1954048881, hashtext(target));
        ELSIF NOT pg_try_advisory_xact_lock(1954048881, hashtext(target)) THEN
            CONTINUE;
        END IF;
        now_ms := coalesce(clock_override, tickwork_now_ms());
        RETURN QUERY
        WITH picked AS (
            SELECT head.sequence FROM tickwork_jobs AS head
            WHERE head.queue = target AND head.state = 'queued'
              AND head.cancellation_id IS NULL AND head.due_at IS NULL
              AND NOT EXISTS (SELECT 1 FROM tickwork_paused_queues AS paused
                              WHERE paused.queue = target)
              AND NOT EXISTS (SELECT 1 FROM tickwork_jobs AS busy
                              WHERE busy.queue = target AND busy.state = 'running')
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

UPDATE tickwork_meta SET value = '10' WHERE key = 'schema_version';
