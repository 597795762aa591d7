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

-- Lane refusal: a lane's unsettled jobs, oldest first.
CREATE INDEX tickwork_jobs_lane_pending
    ON tickwork_jobs (lane, sequence)
    WHERE state IN ('queued', 'running');

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
