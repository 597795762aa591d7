"""Raw SQL in tickwork's commit shape on PostgreSQL: what a schema can reach with no engine.

Three contenders for ``bench.shared_postgres``, each worker on its own
autocommit connection (the pool-per-worker shape) with up to 20 jobs in
flight, as many as a tickwork worker (20 ticks) or a PgQueuer worker (two
batches of its default 10) holds. One statement per commit settles the
worker's previous batch, each job fenced on its own claim token and
unexpired lease (the count is checked), and claims the next batch, each
job under a fresh token and a 2-minute lease (the two raw loops pick with
``FOR UPDATE SKIP LOCKED``); a queue never has two jobs running. The engine
is left out, so the figures split tickwork's cost between its schema, its
claim statement and its Python:

* **tickwork's table**: the claim and the settlement are the UPDATEs
  tickwork's own statements make, on the table and indexes of its
  migrations. Neither update can be HOT (the job's state is in most partial
  indexes' conditions), so each writes a new row version with an entry in
  every index whose condition it meets: 11 in all for a completed job.
* **tickwork's group-commit function, no engine**: the same loop calling
  ``tickwork_settle_then_claim`` (the statement tickwork's worker loop
  commits through, with its due-time promotion, paused-queue, expired-lease
  and cancellation guards and its per-queue locks) with the arguments the
  store passes: the function's cost without the engine's Python.
* **narrow schema**: live jobs, a busy-queue table and a history table.
  The claim inserts the queue's busy row (its token and lease: one index
  entry) and marks the live row with a column no index reads, a HOT update
  (no index entry) whenever the row's page has room; the table's
  fillfactor of 80 leaves some, and 1,528 of 2,000 claims were HOT in one
  run. The settlement deletes both and files the job in the history table,
  with the indexes tickwork's reads of settled jobs need (a queue's and a
  lane's history, outcomes, dead letters): five index entries for a
  completed job whose claim was HOT.

Queue-serial in the raw loops: a unique key on a queue's running claim (the
busy row's primary key, or on tickwork's table the unique running index its
migrations had before concurrency limits) means two
claims of one queue (two workers, or two jobs of one queue in one batch)
cannot both commit; the loser's statement fails on it (or, when two workers wait on
each other's queue keys, on the deadlock PostgreSQL detects) and is run
again with a batch of one, which cannot collide with itself. The function
locks each queue it claims from and never collides. The narrow claim
cannot see a settlement made by its own statement, so a queue's next job
waits for the worker's next statement (every job here has its own queue, as
in the tickwork rows). Ingest is not measured (jobs are loaded before the
clock starts); an idempotent ingest on the narrow schema would also check
the history's primary key, which is the job id.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import psycopg

from bench.postgres_baselines import BenchmarkError, ConnectionPerWorker
from tickwork.lifecycle import Settlement
from tickwork.schemas import migrations
from tickwork.stores.postgres.store import settle_then_claim_params
from tickwork.stores.sql.postgres import SETTLE_THEN_CLAIM, SETTLE_THEN_CLAIM_COLUMNS

#: Jobs per statement, the most one worker holds: as many as tickwork's
#: workers (20 ticks) and PgQueuer's (two batches of 10) hold.
BATCH = 20
LEASE_MS = 120_000
_COMPLETED = Settlement("completed")

# The settlement of the previous batch and the next claim, in one statement
# on tickwork's table. The first row carries the settled count, the rest
# the claims (sequence, queue, token, payload).
TICKWORK_TABLE_STEP = f"""
WITH done AS (
    UPDATE tickwork_jobs AS j
       SET state = 'settled', outcome = 'completed', settled_at = tickwork_now_ms()
      FROM unnest(%(sequences)s::bigint[], %(tokens)s::text[]) AS d(sequence, token)
     WHERE j.sequence = d.sequence AND j.state = 'running' AND j.claim_token = d.token
       AND j.lease_expires_at > tickwork_now_ms()
    RETURNING 1),
picked AS (
    SELECT j.sequence FROM tickwork_jobs AS j
     WHERE j.state = 'queued' AND j.cancellation_id IS NULL AND j.due_at IS NULL
       AND NOT EXISTS (SELECT 1 FROM tickwork_jobs AS busy
                        WHERE busy.queue = j.queue AND busy.state = 'running')
     ORDER BY j.priority DESC, j.sequence
     LIMIT %(limit)s
       FOR UPDATE OF j SKIP LOCKED),
claimed AS (
    UPDATE tickwork_jobs AS j
       SET state = 'running', claim_token = gen_random_uuid()::text,
           started_at = tickwork_now_ms(), lease_expires_at = tickwork_now_ms() + {LEASE_MS}
      FROM picked WHERE j.sequence = picked.sequence
    RETURNING j.sequence, j.queue, j.claim_token, j.payload_json)
SELECT (SELECT count(*) FROM done), NULL::bigint, NULL::text, NULL::text, NULL::text
UNION ALL
SELECT NULL, sequence, queue, claim_token, payload_json FROM claimed
"""

NARROW_SCHEMA = """
CREATE FUNCTION tickwork_now_ms() RETURNS bigint
LANGUAGE sql VOLATILE
AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

-- Queued and claimed jobs. claim_token is read by no index, so marking a
-- claim is a HOT update (fillfactor leaves each page room for it).
CREATE TABLE narrow_live (
    sequence bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    job_id text NOT NULL UNIQUE,
    queue text NOT NULL,
    lane text NOT NULL,
    priority bigint NOT NULL,
    payload_json text NOT NULL,
    due_at bigint,
    cancellation_id text,
    enqueued_at bigint NOT NULL,
    claim_token text,
    started_at bigint
) WITH (fillfactor = 80);
CREATE INDEX narrow_live_runnable ON narrow_live (priority DESC, sequence)
    WHERE cancellation_id IS NULL AND due_at IS NULL;
CREATE INDEX narrow_live_queue ON narrow_live (queue, priority DESC, sequence);
CREATE INDEX narrow_live_lane ON narrow_live (lane, sequence);
CREATE INDEX narrow_live_due ON narrow_live (due_at) WHERE due_at IS NOT NULL;

-- A queue's running claim: its fence (token, lease) and the queue-serial key.
CREATE TABLE narrow_busy (
    queue text PRIMARY KEY,
    sequence bigint NOT NULL,
    token text NOT NULL,
    lease_expires_at bigint NOT NULL
);

-- Settled jobs, keyed by job id; the indexes of tickwork's history reads.
CREATE TABLE narrow_settled (
    job_id text PRIMARY KEY,
    sequence bigint NOT NULL,
    queue text NOT NULL,
    lane text NOT NULL,
    priority bigint NOT NULL,
    payload_json text NOT NULL,
    outcome text NOT NULL,
    enqueued_at bigint NOT NULL,
    started_at bigint,
    settled_at bigint NOT NULL
);
CREATE INDEX narrow_settled_queue ON narrow_settled (queue, settled_at, sequence);
CREATE INDEX narrow_settled_outcomes ON narrow_settled (queue, outcome, settled_at, sequence);
CREATE INDEX narrow_settled_lane ON narrow_settled (lane, settled_at, sequence);
CREATE INDEX narrow_settled_dead ON narrow_settled (queue, settled_at, sequence)
    WHERE outcome = 'failed' OR outcome = 'outcome_unknown' OR outcome = 'interrupted';
"""

# The same step on the narrow schema: a settlement deletes the busy row
# (fenced on token and lease) and the live row, and files the job; a claim
# marks the live row (HOT) and inserts the busy row.
NARROW_STEP = f"""
WITH done AS (
    DELETE FROM narrow_busy AS b
     USING unnest(%(queues)s::text[], %(sequences)s::bigint[], %(tokens)s::text[])
           AS d(queue, sequence, token)
     WHERE b.queue = d.queue AND b.sequence = d.sequence AND b.token = d.token
       AND b.lease_expires_at > tickwork_now_ms()
    RETURNING b.sequence),
moved AS (
    DELETE FROM narrow_live AS j USING done WHERE j.sequence = done.sequence
    RETURNING j.job_id, j.sequence, j.queue, j.lane, j.priority, j.payload_json,
              j.enqueued_at, j.started_at),
filed AS (
    INSERT INTO narrow_settled (job_id, sequence, queue, lane, priority, payload_json,
                                outcome, enqueued_at, started_at, settled_at)
    SELECT job_id, sequence, queue, lane, priority, payload_json, 'completed',
           enqueued_at, started_at, tickwork_now_ms() FROM moved
    RETURNING 1),
picked AS (
    SELECT j.sequence FROM narrow_live AS j
     WHERE j.cancellation_id IS NULL AND j.due_at IS NULL AND j.claim_token IS NULL
       AND NOT EXISTS (SELECT 1 FROM narrow_busy AS b WHERE b.queue = j.queue)
     ORDER BY j.priority DESC, j.sequence
     LIMIT %(limit)s
       FOR UPDATE OF j SKIP LOCKED),
marked AS (
    UPDATE narrow_live AS j
       SET claim_token = gen_random_uuid()::text, started_at = tickwork_now_ms()
      FROM picked WHERE j.sequence = picked.sequence
    RETURNING j.sequence, j.queue, j.claim_token, j.payload_json),
leased AS (
    INSERT INTO narrow_busy (queue, sequence, token, lease_expires_at)
    SELECT queue, sequence, claim_token, tickwork_now_ms() + {LEASE_MS} FROM marked
    RETURNING 1)
SELECT (SELECT count(*) FROM filed), NULL::bigint, NULL::text, NULL::text, NULL::text
UNION ALL
SELECT NULL, sequence, queue, claim_token, payload_json FROM marked
"""


LABELS = {
    "tickwork": f"raw SQL, tickwork's table, {BATCH} jobs/commit",
    "function": f"tickwork's group-commit function, no engine, {BATCH} jobs/call",
    "narrow": f"raw SQL, narrow schema, {BATCH} jobs/commit",
}


async def load_tickwork_jobs(connection: psycopg.AsyncConnection[Any], jobs: int,
                             queues: int | None = None) -> None:
    """tickwork's migrations, then ``jobs`` queued no-op jobs numbered
    0..jobs-1, in ``queues`` queues round-robin (default: a queue each)."""
    for migration in migrations("postgres"):
        await connection.execute(migration.sql.encode())
    await _insert_jobs(connection, "tickwork_jobs", jobs, queues)


async def _insert_jobs(connection: psycopg.AsyncConnection[Any], table: str, jobs: int,
                       queues: int | None) -> None:
    """Queued jobs into tickwork_jobs or narrow_live (one INSERT ... SELECT)."""
    # narrow_live has no state column: a live row is queued until claimed.
    state_column, state = ("state, ", "'queued', ") if table == "tickwork_jobs" else ("", "")
    queue = "n" if queues is None else f"mod(n, {queues})"
    await connection.execute(
        f"INSERT INTO {table} (job_id, queue, lane, priority, payload_json, {state_column}"
        "enqueued_at)"
        f" SELECT 'job-' || n, 'queue-' || ({queue}), 'bench', 0, '{{\"n\":' || n || '}}',"
        f" {state}tickwork_now_ms() FROM generate_series(0, %s - 1) AS n",
        (jobs,))


class BatchedRawLoop(ConnectionPerWorker):
    """Workers on their own connections, each settling its batch and
    claiming the next in one statement (see the module docstring)."""

    def __init__(self, schema: str, *, queues: int | None = None) -> None:
        """``queues``: the jobs go round-robin into this many queues (default:
        a queue per job, as in the tickwork rows)."""
        super().__init__()
        if schema not in LABELS:
            raise ValueError(f"schema must be one of {', '.join(LABELS)}, not {schema!r}")
        if queues is not None and queues < 1:
            raise ValueError(f"queues must be at least 1, not {queues}")
        self.schema = schema
        self.queues = queues
        self.label = LABELS[schema]
        self.collisions = 0  # statements run again after a queue-serial collision

    async def prepare(self, dsn: str, jobs: int) -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            if self.schema == "narrow":
                await connection.execute(NARROW_SCHEMA.encode())
                await _insert_jobs(connection, "narrow_live", jobs, self.queues)
            else:
                await load_tickwork_jobs(connection, jobs, self.queues)
            if self.schema == "tickwork":
                # tickwork's claims count a queue's running jobs against its
                # limit under the queue's lock (0016); this raw loop has no
                # lock, so its queue-serial key is the unique running index
                # tickwork had before limits, in place of today's (the same
                # number of index entries per claim).
                await connection.execute(
                    "DROP INDEX tickwork_jobs_running; "
                    "CREATE UNIQUE INDEX tickwork_jobs_running "
                    "ON tickwork_jobs (queue) WHERE state = 'running'")

    async def _worker(self, connection: psycopg.AsyncConnection[Any]) -> None:
        held: list[tuple[int, str, str]] = []  # (sequence, queue, token) of this worker's claims
        limit = BATCH
        while True:
            try:
                settled, claimed = await self._step(connection, held, limit)
            except (psycopg.errors.UniqueViolation, psycopg.errors.DeadlockDetected):
                # Two claims of one queue (in one batch, or two workers'
                # claims waiting on each other's queue keys): the statement,
                # and the settlement in it, rolled back; run it again,
                # claiming one job.
                self.collisions += 1
                limit = 1
                continue
            if settled != len(held):
                raise BenchmarkError(f"{self.label}: {settled} of {len(held)} settlements"
                                     " matched their claims")
            if held:
                self.settled(len(held))
            if not claimed and not held:
                return
            limit = BATCH
            for _, _, _, payload in claimed:
                await self.execute(int(json.loads(payload)["n"]))
            held = [(sequence, queue, token) for sequence, queue, token, _ in claimed]

    async def _step(self, connection: psycopg.AsyncConnection[Any],
                    held: list[tuple[int, str, str]], limit: int,
                    ) -> tuple[int, list[tuple[int, str, str, str]]]:
        """One statement: (how many of ``held`` it settled, the claims it made
        as (sequence, queue, token, payload))."""
        if self.schema == "function":
            claim_tokens = [uuid.uuid4().hex for _ in range(limit)]
            cursor = await connection.execute(SETTLE_THEN_CLAIM, settle_then_claim_params(
                [(sequence, token, _COMPLETED) for sequence, _, token in held], claim_tokens,
                lease_ms=LEASE_MS, now=None))
            rows = await cursor.fetchall()
            columns = SETTLE_THEN_CLAIM_COLUMNS
            claim_index = columns.index["claim_index"]
            settled = sum(1 for row in rows if row[columns.index["settled_token"]] is not None)
            return settled, [(columns.value(row, "sequence"), columns.value(row, "queue"),
                              claim_tokens[row[claim_index] - 1],
                              columns.value(row, "payload_json"))
                             for row in rows if row[claim_index] is not None]
        cursor = await connection.execute(
            TICKWORK_TABLE_STEP if self.schema == "tickwork" else NARROW_STEP, {
                "sequences": [sequence for sequence, _, _ in held],
                "queues": [queue for _, queue, _ in held],
                "tokens": [token for _, _, token in held],
                "limit": limit})
        rows = await cursor.fetchall()
        return (next(row[0] for row in rows if row[1] is None),
                [row[1:] for row in rows if row[1] is not None])

    async def drain(self) -> None:
        await asyncio.gather(*(self._worker(connection) for connection in self._connections))

    async def verify(self, dsn: str, jobs: int) -> None:
        """Every job settled as completed and stored once; on the narrow schema
        also no queue left busy."""
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as connection:
            if self.schema != "narrow":
                cursor = await connection.execute(
                    "SELECT count(*) FILTER (WHERE state = 'settled' AND outcome = 'completed'),"
                    " count(*), 0 FROM tickwork_jobs")
            else:
                cursor = await connection.execute(
                    "SELECT (SELECT count(*) FROM narrow_settled WHERE outcome = 'completed'),"
                    " (SELECT count(*) FROM narrow_settled) + (SELECT count(*) FROM narrow_live),"
                    " (SELECT count(*) FROM narrow_busy)")
            counts = await cursor.fetchone()
        print(f"    {self.label}: {jobs:,} jobs, {self.collisions} statements run again"
              " after a queue-serial collision", flush=True)
        if counts != (jobs, jobs, 0):
            raise BenchmarkError(f"{self.label}: (completed, stored, busy queues) = {counts},"
                                 f" expected ({jobs}, {jobs}, 0)")
