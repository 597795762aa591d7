-- tickwork owner-local: browsing jobs a page at a time (list_jobs). Applied
-- by the runtime itself on first open, like 0002. Only indexes: no row
-- changes. Every page of list_jobs is one range scan of one of them (or of
-- an index it already had), O(log n + page) however many jobs are stored.
--
-- A queue's queued and running jobs in enqueue order. state is not in the
-- key, so a claim (queued -> running) does not touch this index; ingest adds
-- an entry and settlement removes it (like tickwork_jobs_lane_pending).
CREATE INDEX tickwork_jobs_queue_pending
    ON tickwork_jobs (queue, sequence)
    WHERE state IN ('queued', 'running');

-- A queue's settled jobs of one outcome in settlement order (the failures
-- among a long completed history). It also covers queue_status's counts per
-- outcome, which no longer read a row each.
CREATE INDEX tickwork_jobs_queue_outcomes
    ON tickwork_jobs (queue, outcome, settled_at, sequence)
    WHERE state = 'settled';

-- A lane's settled jobs in settlement order (its queued and running ones
-- go through tickwork_jobs_lane_pending).
CREATE INDEX tickwork_jobs_lane_settled
    ON tickwork_jobs (lane, settled_at, sequence)
    WHERE state = 'settled';
