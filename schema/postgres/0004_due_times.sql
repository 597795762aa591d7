-- tickwork: jobs with a due time (run_at / delay_ms), for PostgreSQL (13+).
-- Apply after 0003. Existing rows keep every value: their new columns are
-- NULL, which means "due at once", exactly what they were. The index builds
-- block writes to tickwork_jobs while they run; on a large live table you
-- may build them CONCURRENTLY first (outside a transaction block).
--
-- * run_at, delay_ms: when the job was asked to run (epoch ms, or a delay
--   from ingest by database time); part of the job's cargo, compared as
--   asked on replay.
-- * due_at: while the job waits for its time, when it becomes due; cleared
--   when it does (the claim moves due jobs into the ready set).
ALTER TABLE tickwork_jobs
    ADD COLUMN run_at bigint CHECK (run_at BETWEEN 0 AND 9007199254740991),
    ADD COLUMN delay_ms bigint CHECK (delay_ms BETWEEN 0 AND 9007199254740),
    ADD COLUMN due_at bigint,
    ADD CHECK (run_at IS NULL OR delay_ms IS NULL);

-- The claim scan holds only jobs that are due: a claim never steps over a
-- job waiting for its time, however many wait.
DROP INDEX tickwork_jobs_runnable;
CREATE INDEX tickwork_jobs_runnable
    ON tickwork_jobs (priority DESC, sequence)
    WHERE state = 'queued' AND cancellation_id IS NULL AND due_at IS NULL;

-- Jobs waiting for their time, earliest first: moving due jobs into the
-- ready set, and the next due time drain() sleeps until.
CREATE INDEX tickwork_jobs_due
    ON tickwork_jobs (due_at)
    WHERE state = 'queued' AND due_at IS NOT NULL;

-- The cargo now includes run_at and delay_ms.
DROP TRIGGER tickwork_jobs_cargo_is_immutable ON tickwork_jobs;
CREATE TRIGGER tickwork_jobs_cargo_is_immutable
BEFORE UPDATE OF queue, lane, priority, payload_json, max_recoveries, run_at, delay_ms
ON tickwork_jobs
FOR EACH ROW
WHEN (OLD.queue IS DISTINCT FROM NEW.queue OR OLD.lane IS DISTINCT FROM NEW.lane
      OR OLD.priority IS DISTINCT FROM NEW.priority
      OR OLD.payload_json IS DISTINCT FROM NEW.payload_json
      OR OLD.max_recoveries IS DISTINCT FROM NEW.max_recoveries
      OR OLD.run_at IS DISTINCT FROM NEW.run_at
      OR OLD.delay_ms IS DISTINCT FROM NEW.delay_ms)
EXECUTE FUNCTION tickwork_refuse_cargo_change();

-- The group commit of 0001, now returning the new columns and moving due
-- jobs into the ready set before it claims (its other steps unchanged; see
-- 0001 for their comments).
DROP FUNCTION tickwork_settle_then_claim(bigint[], text[], text[], text[], text[], bigint,
                                         integer, bigint);
CREATE FUNCTION tickwork_settle_then_claim(
    settle_sequences bigint[], settle_tokens text[], settle_outcomes text[],
    settle_reasons text[], claim_tokens text[], lease_ms bigint, scan_limit integer,
    clock_override bigint)
RETURNS TABLE (
    job_id text, queue text, lane text, priority bigint, payload_json text,
    max_recoveries bigint, state text, outcome text, failure_reason text, sequence bigint,
    recoveries bigint, enqueued_at bigint, started_at bigint, settled_at bigint,
    cancellation_id text, run_at bigint, delay_ms bigint, due_at bigint,
    claim_index integer, settled_token text)
LANGUAGE plpgsql VOLATILE
AS $$
#variable_conflict use_column
DECLARE
    now_ms bigint := coalesce(clock_override, tickwork_now_ms());
BEGIN
    IF cardinality(settle_sequences) > 0 THEN
        RETURN QUERY
        UPDATE tickwork_jobs AS job
        SET state = 'settled', outcome = settle.outcome, failure_reason = settle.reason,
            settled_at = now_ms
        FROM unnest(settle_sequences, settle_tokens, settle_outcomes, settle_reasons)
             AS settle(sequence, token, outcome, reason)
        WHERE job.sequence = settle.sequence AND job.state = 'running'
          AND job.claim_token = settle.token AND job.lease_expires_at > now_ms
          AND job.cancellation_id IS NULL
        RETURNING NULL::text, NULL::text, NULL::text, NULL::bigint, NULL::text, NULL::bigint,
                  NULL::text, NULL::text, NULL::text, job.sequence, NULL::bigint, NULL::bigint,
                  NULL::bigint, NULL::bigint, NULL::text, NULL::bigint, NULL::bigint,
                  NULL::bigint, NULL::integer, job.claim_token;
    END IF;
    IF cardinality(claim_tokens) > 0 THEN
        PERFORM pg_advisory_xact_lock(7361626972690001);
        now_ms := coalesce(clock_override, tickwork_now_ms());
        -- Jobs whose time has come join the ready set first (under the claim
        -- lock, so one claimer at a time does it); up to 1000 per call.
        UPDATE tickwork_jobs SET due_at = NULL
        WHERE sequence IN (
            SELECT sequence FROM tickwork_jobs
            WHERE state = 'queued' AND due_at IS NOT NULL AND due_at <= now_ms
            ORDER BY due_at LIMIT 1000);
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
                  numbered.n::integer, NULL::text;
    END IF;
END
$$;

UPDATE tickwork_meta SET value = '4' WHERE key = 'schema_version';
