-- tickwork owner-local: the history of every queue over time, a row per
-- queue per minute. Applied by the runtime itself on first open, like 0002.
--
-- One row per queue per minute in which a runtime counted anything or
-- sampled the queue. The runtimes do not count here as each transition
-- commits: each keeps its counts in memory (the jobs table stays the
-- record) and adds them to these rows with one upsert, in (queue, minute)
-- order, once the minute has turned, after each host loop, before it
-- answers a history read, and on close. A process that dies before that
-- loses the counts of its last minute or so.
--
-- * minute: the bucket's start, epoch milliseconds, a multiple of 60,000,
--   by the clock of the runtime that counted the transition.
-- * enqueued: jobs stored, and dead letters redriven. started: attempts
--   begun (a claim taken ahead and put back unstarted is not one).
--   completed, failed (failed, outcome_unknown, interrupted), cancelled:
--   settlements. retried: failed attempts put back for another. Counts
--   only grow: a redrive adds to enqueued and leaves its failure counted.
-- * depth, oldest_age_ms: sampled at most once a minute per runtime with a
--   flush: the queue's waiting jobs counted up to 10,000 (a row holding
--   10,001 means "more"), and how long its head job (the next to run) has
--   been ready; NULL when nothing sampled the queue that minute.
-- Minutes older than 7 days are deleted with retention, a bounded batch at
-- a time, by tickwork_queue_history_minute.

CREATE TABLE tickwork_queue_history (
    queue TEXT NOT NULL,
    minute INTEGER NOT NULL,
    enqueued INTEGER NOT NULL DEFAULT 0,
    started INTEGER NOT NULL DEFAULT 0,
    completed INTEGER NOT NULL DEFAULT 0,
    failed INTEGER NOT NULL DEFAULT 0,
    cancelled INTEGER NOT NULL DEFAULT 0,
    retried INTEGER NOT NULL DEFAULT 0,
    depth INTEGER,
    oldest_age_ms INTEGER,
    PRIMARY KEY (queue, minute)
) WITHOUT ROWID;

CREATE INDEX tickwork_queue_history_minute ON tickwork_queue_history (minute);
