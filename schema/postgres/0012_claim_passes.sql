-- tickwork: a group-commit claim that comes up short walks again, for
-- PostgreSQL (13+). Apply after 0011. No table or row changes: one
-- function, with the same arguments, result and plan settings.
--
-- The walk (step 1 of 0010) reads the runnable index in its statement's
-- snapshot. A queue whose head another claimer claimed and committed after
-- that snapshot was taken has had its lock released, so it still looks
-- free: the walk locks it and counts its head, and step 2, in a fresh
-- snapshot, finds the head gone. The claim then returned fewer jobs than it
-- was asked for, or none, while other queues had free heads; and a drain()
-- whose claim came back empty ended as if nothing were left. In one
-- measurement (8 pools of 20 ticks draining 20,000 jobs, one per queue),
-- 28 of the 160 drains ended before a third of the run was over.
--
-- Now the claim takes up to four passes. A pass is steps 1 and 2 for the
-- claims still missing, in new statements (fresh snapshots, which see what
-- was committed meanwhile and this call's own claims), passing over every
-- queue an earlier pass locked: a queue whose head was gone, or whose head
-- row another transaction held (FOR UPDATE SKIP LOCKED), is not tried again
-- in this call. The claim stops after a pass in which every locked queue
-- gave its job, after a pass that locked nothing, once every claim is
-- filled, and when a guard holds (an expired lease or a cancelled job
-- waiting stops every claim; another pass could not claim either).
-- Claims keep their order: the tokens of pass 2 follow those of pass 1,
-- and claim_index numbers every row claimed by the call.
--
-- CREATE OR REPLACE assigns a function every property its command gives,
-- so the settings of 0011 are given again here.

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
    locked text[];
    heads bigint[];
    tried text[] := '{}';
    claimed integer := 0;
    got integer;
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
        FOR pass IN 1..4 LOOP
            -- Step 1: lock the queues to claim from.
            SELECT array_agg(walk.queue) INTO locked FROM (
                SELECT entry.queue FROM (
                    SELECT sequence, queue, priority FROM tickwork_jobs
                    WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL
                    ORDER BY priority DESC, sequence
                    LIMIT scan_limit) AS entry
                WHERE CASE
                    WHEN entry.queue = ANY (tried) THEN false
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
                LIMIT cardinality(claim_tokens) - claimed) AS walk;
            EXIT WHEN locked IS NULL;
            tried := tried || locked;
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
            EXIT WHEN claimed = cardinality(claim_tokens) OR got = cardinality(locked)
                OR EXISTS (SELECT 1 FROM tickwork_jobs
                           WHERE state = 'running' AND lease_expires_at <= now_ms)
                OR EXISTS (SELECT 1 FROM tickwork_jobs
                           WHERE state = 'queued' AND cancellation_id IS NOT NULL);
        END LOOP;
    END IF;
END
$$;

UPDATE tickwork_meta SET value = '12' WHERE key = 'schema_version';
