-- tickwork shared job table for PostgreSQL (13+).
-- Apply with psql, or copy into your migration tool; the runtime never
-- migrates and refuses to open until this file has run.
--
-- Times are bigint milliseconds since the epoch from tickwork_now_ms(), the
-- database clock, so workers with skewed clocks agree on lease expiry.

CREATE TABLE tickwork_meta (
    key text PRIMARY KEY,
    value text NOT NULL
);

CREATE FUNCTION tickwork_now_ms() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

-- Column notes as in schema/d1/0001_tickwork_jobs.sql:
-- claim_token and lease_expires_at fence every transition out of 'running'.
CREATE TABLE tickwork_jobs (
    sequence bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id text NOT NULL UNIQUE CHECK (char_length(job_id) BETWEEN 1 AND 256),
    queue text NOT NULL CHECK (char_length(queue) BETWEEN 1 AND 256),
    lane text NOT NULL CHECK (char_length(lane) BETWEEN 1 AND 512),
    priority bigint NOT NULL
        CHECK (priority BETWEEN -9007199254740991 AND 9007199254740991),
    payload_json text NOT NULL CHECK (payload_json::jsonb IS NOT NULL),
    max_recoveries bigint CHECK (max_recoveries BETWEEN 0 AND 9007199254740991),
    state text NOT NULL CHECK (state IN ('queued', 'running', 'settled')),
    outcome text CHECK (outcome IN
        ('completed', 'failed', 'cancelled', 'outcome_unknown', 'interrupted')),
    failure_reason text,
    claim_token text,
    lease_expires_at bigint,
    recoveries bigint NOT NULL DEFAULT 0,
    cancellation_id text,
    enqueued_at bigint NOT NULL,
    started_at bigint,
    settled_at bigint,
    CHECK ((state = 'settled') = (outcome IS NOT NULL)),
    CHECK (state <> 'running' OR (claim_token IS NOT NULL AND lease_expires_at IS NOT NULL))
);

-- Claim scan: runnable jobs in global pick order (priority desc, oldest first).
CREATE INDEX tickwork_jobs_runnable
    ON tickwork_jobs (priority DESC, sequence)
    WHERE state = 'queued' AND cancellation_id IS NULL;

-- A queue's waiting jobs in head order: read_queue_head, purge.
CREATE INDEX tickwork_jobs_queue_waiting
    ON tickwork_jobs (queue, priority DESC, sequence)
    WHERE state = 'queued';

-- At most one running job per queue: the claim serialises on an advisory
-- lock so it never picks a busy queue; this index turns any violation into
-- an error instead of a second concurrent run.
CREATE UNIQUE INDEX tickwork_jobs_running
    ON tickwork_jobs (queue)
    WHERE state = 'running';

-- Expired leases, oldest first: the recovery probe.
CREATE INDEX tickwork_jobs_lease
    ON tickwork_jobs (lease_expires_at, sequence)
    WHERE state = 'running';

-- Cancelled jobs still queued: settled by the next tick without running.
CREATE INDEX tickwork_jobs_cancel_pending
    ON tickwork_jobs (sequence)
    WHERE state = 'queued' AND cancellation_id IS NOT NULL;

-- Failing a lane: a lane's unsettled jobs, oldest first.
CREATE INDEX tickwork_jobs_lane_pending
    ON tickwork_jobs (lane, sequence)
    WHERE state IN ('queued', 'running');

-- Group commit (tickwork/stores/postgres/batching.py): the settlements and claims of
-- concurrent ticks in one statement, hence one round trip and one commit.
--
-- 1. Settle every (sequence, token) pair whose claim is still current: state
--    running, same token, lease not expired, no cancellation recorded. Rows
--    are locked in sequence order (the caller sorts), like every multi-row
--    write of tickwork, so batches cannot deadlock one another. The pairs
--    that matched come back with settled_token set; the others were not
--    written and their ticks take the careful path.
-- 2. Take the claim lock, then claim up to cardinality(claim_tokens) ready
--    queue heads, one per free queue, in global order (priority desc, oldest
--    first), each under its own token and a fresh lease. The function is
--    VOLATILE, so this query takes a new snapshot after the lock is granted
--    and sees every claim committed before it: two claims can never both find
--    one queue free. Only heads of a bounded prefix of the runnable index are
--    candidates (the first job of a queue in that prefix is the queue's
--    head); FOR UPDATE SKIP LOCKED passes over a head another transaction is
--    changing and re-checks the rows it locks. Claims happen only when no
--    lease has expired and no cancelled job waits: those need a tick first.
--    Claimed rows come back with claim_index, the 1-based index of their token.
CREATE FUNCTION tickwork_settle_then_claim(
    settle_sequences bigint[], settle_tokens text[], settle_outcomes text[],
    settle_reasons text[], claim_tokens text[], lease_ms bigint, scan_limit integer,
    clock_override bigint)
RETURNS TABLE (
    job_id text, queue text, lane text, priority bigint, payload_json text,
    max_recoveries bigint, state text, outcome text, failure_reason text, sequence bigint,
    recoveries bigint, enqueued_at bigint, started_at bigint, settled_at bigint,
    cancellation_id text, claim_index integer, settled_token text)
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
                  NULL::bigint, NULL::bigint, NULL::text, NULL::integer, job.claim_token;
    END IF;
    IF cardinality(claim_tokens) > 0 THEN
        PERFORM pg_advisory_xact_lock(7361626972690001);
        now_ms := coalesce(clock_override, tickwork_now_ms());
        RETURN QUERY
        WITH scan AS (
            SELECT sequence, queue, priority FROM tickwork_jobs
            WHERE state = 'queued' AND cancellation_id IS NULL
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
                  job.settled_at, job.cancellation_id, numbered.n::integer, NULL::text;
    END IF;
END
$$;

-- A replayed enqueue with the same job_id but different cargo must fail the
-- caller's transaction: enqueue turns such a replay into an UPDATE of the
-- cargo columns, which this trigger refuses.
CREATE FUNCTION tickwork_refuse_cargo_change() RETURNS trigger
LANGUAGE plpgsql
AS $$
BEGIN
    RAISE EXCEPTION 'tickwork_ingest_conflict: job % exists with different cargo', OLD.job_id
        USING ERRCODE = 'unique_violation';
END
$$;

CREATE TRIGGER tickwork_jobs_cargo_is_immutable
BEFORE UPDATE OF queue, lane, priority, payload_json, max_recoveries ON tickwork_jobs
FOR EACH ROW
WHEN (OLD.queue IS DISTINCT FROM NEW.queue OR OLD.lane IS DISTINCT FROM NEW.lane
      OR OLD.priority IS DISTINCT FROM NEW.priority
      OR OLD.payload_json IS DISTINCT FROM NEW.payload_json
      OR OLD.max_recoveries IS DISTINCT FROM NEW.max_recoveries)
EXECUTE FUNCTION tickwork_refuse_cargo_change();

INSERT INTO tickwork_meta (key, value) VALUES ('schema_version', '1');
