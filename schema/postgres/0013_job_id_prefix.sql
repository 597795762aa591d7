-- tickwork: finding jobs by the start of their id (jobs_by_id_prefix), for
-- PostgreSQL (13+). Apply after 0012. Only an index: no row changes.
-- CREATE INDEX blocks writes to tickwork_jobs while it builds; on a large
-- live table you may instead run it as CREATE INDEX CONCURRENTLY (outside a
-- transaction block), then the UPDATE.
--
-- job_id's UNIQUE index sorts by the database's collation, under which the
-- ids that start with a prefix need not be neighbours (a language's
-- collation may pass over punctuation, or fold case, at its first level).
-- Byte order ("C") keeps them together, as SQLite's does, so a prefix is one
-- range of this index: a page costs O(log n + page) however many jobs are
-- stored.
CREATE INDEX tickwork_jobs_id_bytes
    ON tickwork_jobs (job_id COLLATE "C");

UPDATE tickwork_meta SET value = '13' WHERE key = 'schema_version';
