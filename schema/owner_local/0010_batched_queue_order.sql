-- tickwork owner-local: a queue's jobs in pick order,
-- indexed in the batches of 0009. Applied by the runtime itself on first
-- open, like 0002.
--
-- Why: tickwork_jobs_queue_waiting held the queued jobs by (queue,
-- priority, sequence), so every ingest added an entry and every claim took
-- one away: a page more in each of the two commits a drained job makes.
-- Its successor holds the same keys for the rows 0009 keeps in the indexes
-- of unsettled jobs (listed, not filed), so a row enters it when it is
-- listed and leaves it when it is filed, in the batches of 0009, and
-- neither a claim nor a settlement writes it.
--
-- What it costs: a read of a queue's waiting jobs (its head, its counts, a
-- purge, the concurrent lane's head check) reads each row's state from the
-- table, steps over the queue's running jobs and the settlements not filed
-- yet (a few dozen at most), and reads the unlisted rows by the primary key.

DROP INDEX tickwork_jobs_queue_waiting;
CREATE INDEX tickwork_jobs_queue_order
    ON tickwork_jobs (queue, priority DESC, sequence, due_at)
    WHERE listed = 1 AND filed = 0;
