-- tickwork: error summaries, for PostgreSQL (13+). Apply after 0007.
-- Existing rows keep every value: their error_json is NULL, "no error kept".
--
-- * error_json: what the latest ended attempt's executor raised, as JSON
--   {type, message, traceback} (at most 200, 2,000 and 8,000 characters),
--   or NULL when it did not raise. History entries keep its short line
--   ("Type: message", at most 300 characters) as their "error".
ALTER TABLE tickwork_jobs
    ADD COLUMN error_json text CHECK (error_json IS NULL OR error_json::jsonb IS NOT NULL);

-- The group commit of 0006, now also writing each settlement's error
-- summary (settle_errors, one per settlement, NULL when its executor did not
-- raise) and returning the new column (its steps unchanged; see 0001, 0004
-- and 0005 for their comments). Its arguments and result type change, so it
-- is dropped and created again.
DROP FUNCTION tickwork_settle_then_claim(bigint[], text[], text[], text[], text[], bigint,
                                         integer, bigint);
CREATE FUNCTION tickwork_settle_then_claim(
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
AS $$
#variable_conflict use_column
DECLARE
    now_ms bigint := coalesce(clock_override, tickwork_now_ms());
    any_paused boolean;
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
        -- Jobs whose time has come join the ready set first, up to 1000 per
        -- call, before the claim lock: everything under that lock runs one
        -- claimer at a time. SKIP LOCKED leaves rows another claimer is
        -- moving to it (they are claimed once it commits), so promoters never
        -- wait on or deadlock with one another.
        UPDATE tickwork_jobs SET due_at = NULL
        WHERE sequence IN (
            SELECT sequence FROM tickwork_jobs
            WHERE state = 'queued' AND due_at IS NOT NULL AND due_at <= now_ms
            ORDER BY due_at LIMIT 1000
            FOR UPDATE SKIP LOCKED);
        PERFORM pg_advisory_xact_lock(7361626972690001);
        now_ms := coalesce(clock_override, tickwork_now_ms());
        -- Read after the lock, like the claim itself: when no queue is paused
        -- (the common case) the claim skips the per-candidate check.
        any_paused := EXISTS (SELECT 1 FROM tickwork_paused_queues);
        RETURN QUERY
        WITH scan AS (
            SELECT sequence, queue, priority FROM tickwork_jobs
            WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL
            ORDER BY priority DESC, sequence
            LIMIT scan_limit),
        heads AS (
            SELECT DISTINCT ON (queue) sequence, queue FROM scan
            ORDER BY queue, priority DESC, sequence),
        picked AS (
            SELECT candidate.sequence, candidate.priority FROM tickwork_jobs AS candidate
            WHERE candidate.sequence IN (
                    SELECT heads.sequence FROM heads
                    WHERE NOT EXISTS (SELECT 1 FROM tickwork_jobs AS busy
                                      WHERE busy.queue = heads.queue
                                        AND busy.state = 'running'))
              AND candidate.state = 'queued' AND candidate.cancellation_id IS NULL
              AND candidate.due_at IS NULL
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
            LIMIT cardinality(claim_tokens)
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

UPDATE tickwork_meta SET value = '8' WHERE key = 'schema_version';
