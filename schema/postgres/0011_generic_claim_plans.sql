-- tickwork: the group commit's statements keep their generic plans, for
-- PostgreSQL (13+). Apply after 0010. No table, row or result changes.
--
-- PL/pgSQL prepares each statement of tickwork_settle_then_claim once per
-- connection and by default re-plans it for the argument values of every
-- call (custom plans). The call is one commit of the worker loop, so that
-- planning was paid once per commit: about 0.5 ms of a 1.6 ms call for ten
-- settlements and ten claims in one measurement, more than either the
-- settlement or the claim statement took to run.
--
-- A generic plan is chosen once, without the argument values. Every
-- statement of the function has an index that reaches its rows whatever
-- the values: the settlement and the claim go through the primary key
-- (unnest of the sequences, ANY of the heads, since 0010), the walk through
-- tickwork_jobs_runnable in order, due jobs through tickwork_jobs_due,
-- leases through tickwork_jobs_lease. But a generic plan does not know how
-- many entries the walk's LIMIT scan_limit takes and guesses a tenth of the
-- runnable rows; with a large backlog it then prefers reading the whole
-- table and sorting it (seen once autovacuum had analysed 60,000 queued
-- jobs: 15 ms a call instead of 1). Sequential and bitmap scans are
-- therefore off inside the function: each statement keeps an index path,
-- the walk reads the runnable index in order and stops at its LIMIT. The
-- plans still follow the table's statistics, and a connection re-plans
-- when they change (ANALYZE invalidates its cached plans).
ALTER FUNCTION tickwork_settle_then_claim(
    bigint[], text[], text[], text[], text[], text[], bigint, integer, bigint)
    SET plan_cache_mode = force_generic_plan
    SET enable_seqscan = off
    SET enable_bitmapscan = off;

UPDATE tickwork_meta SET value = '11' WHERE key = 'schema_version';
