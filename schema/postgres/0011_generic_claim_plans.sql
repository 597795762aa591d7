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
-- A generic plan is chosen without the argument values. That was unsafe up
-- to 0009, whose claim joined the locked queues' heads and got a plan that
-- hashed every runnable row; since 0010 every statement reaches its rows
-- through an index whatever the values: the settlement and the claim
-- through the primary key (unnest of the sequences, ANY of the heads), the
-- walk through tickwork_jobs_runnable in order, due jobs through
-- tickwork_jobs_due, leases through tickwork_jobs_lease. The plans still
-- follow the table's statistics, and each connection re-plans when they
-- change (ANALYZE invalidates its cached plans).
ALTER FUNCTION tickwork_settle_then_claim(
    bigint[], text[], text[], text[], text[], text[], bigint, integer, bigint)
    SET plan_cache_mode = force_generic_plan;

UPDATE tickwork_meta SET value = '11' WHERE key = 'schema_version';
