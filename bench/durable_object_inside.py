"""The Durable Object benchmark's measurements, run inside Pyodide.

Started by ``bench/durable_object.mjs`` (which ``bench.durable_object``
spawns); imports ``tickwork_tier`` (registered by that script: the JS
``ctx.storage`` stand-in of ``tests/pyodide/js/do_storage.mjs``) and
returns one JSON object. Every figure is taken on Pyodide's own clock
(``time.perf_counter``, i.e. ``performance.now()``) and on the FFI workerd
runs, so a JS call costs what it costs a real object's Python; the SQLite
behind it is sql.js (WebAssembly), slower than workerd's native SQLite.

What it measures:

* ``alarm``: N no-op jobs ingested (one ``runtime.ingest`` each), then the
  object's ``alarm()`` delivered, as the runtime does, until no alarm is
  armed; jobs/s over the deliveries (best of the rounds, each on a fresh
  object, alternating with the baseline's).
* ``raw``: the baseline, on a fresh storage: N rows in a bare table, then
  one claim UPDATE ... RETURNING and one settle UPDATE per job through the
  same ``sql.exec``, no engine.
* ``ffi``: the same two paths again on a smaller owner, with ``ctx.storage``
  seen through ``Tally`` (every property read, method call, iteration step
  and ``to_py`` of a JS object counts one FFI round trip, timed): round
  trips per ingested job and per job of the alarm loop, time spent inside
  them, and what each statement costs.
* ``crossing``: the price of one round trip alone: a no-op JS function, a
  trivial ``SELECT 1`` through ``sql.exec``; and of one event-loop yield.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from types import SimpleNamespace
from typing import Any

import js  # type: ignore[import-not-found]
import tickwork_tier  # type: ignore[import-not-found]  # registered by durable_object.mjs
from pyodide.ffi import JsProxy, jsnull, to_js  # type: ignore[import-not-found]

from tickwork import Completed, Job
from tickwork.cloudflare import job_owner_class

QUEUES = 50
RAW_SCHEMA = (
    "CREATE TABLE raw_jobs (id INTEGER PRIMARY KEY, payload TEXT NOT NULL,"
    " state TEXT NOT NULL, token TEXT, lease INTEGER)",
    "CREATE INDEX raw_jobs_queued ON raw_jobs (id) WHERE state = 'queued'",
)
RAW_INSERT = "INSERT INTO raw_jobs (payload, state) VALUES (?, 'queued')"
RAW_CLAIM = (
    "UPDATE raw_jobs SET state = 'running', token = ?1, lease = ?2"
    " WHERE id = (SELECT id FROM raw_jobs WHERE state = 'queued' ORDER BY id LIMIT 1)"
    " RETURNING id, payload"
)
RAW_SETTLE = "UPDATE raw_jobs SET state = 'settled' WHERE id = ?1 AND token = ?2"


# ------------------------------------------------------------------ counting


class Tally:
    """FFI round trips made through ``Counted`` objects: how many of each kind,
    the time spent inside them, and per statement text its ``exec`` count and time."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self.seconds = 0.0
        self.kind_seconds: Counter[str] = Counter()
        self.statements: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
        # Calls made from inside a call (the statements a transactionSync
        # callback runs): counted, but their time is already in the outer one's.
        self._depth = 0

    def total(self) -> int:
        return sum(self.calls.values())

    def timed(self, kind: str, run: Callable[[], Any]) -> Any:
        started = time.perf_counter()
        self._depth += 1
        try:
            return run()
        finally:
            self._depth -= 1
            spent = time.perf_counter() - started
            self.calls[kind] += 1
            if self._depth == 0:
                self.seconds += spent
            self.kind_seconds[kind] += spent

    def snapshot(self) -> tuple[int, float, Counter[str], Counter[str]]:
        return self.total(), self.seconds, Counter(self.calls), Counter(self.kind_seconds)


def _wrap(value: Any, tally: Tally) -> Any:
    # Promises stay as they are (awaited by the caller), as do jsnull and
    # every plain Python value Pyodide converted on the way.
    if not isinstance(value, JsProxy) or value is jsnull or hasattr(value, "then"):
        return value
    return Counted(value, tally)


class Counted:
    """A JS object whose every use from Python counts in ``tally`` (see the module doc)."""

    def __init__(self, target: Any, tally: Tally) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_tally", tally)

    def __getattr__(self, name: str) -> Any:
        target, tally = self._target, self._tally
        if name == "to_py":
            return lambda *a, **k: tally.timed("to_py()", lambda: target.to_py(*a, **k))
        member = getattr(target, name)
        if isinstance(member, JsProxy) and member.typeof == "function":
            def call(*args: Any) -> Any:
                plain = [arg._target if isinstance(arg, Counted) else arg for arg in args]
                started = time.perf_counter()
                result = tally.timed(f"{name}()", lambda: member(*plain))
                if name == "exec":
                    entry = tally.statements[" ".join(str(args[0]).split())[:72]]
                    entry[0] += 1
                    entry[1] += time.perf_counter() - started
                return _wrap(result, tally)
            return call
        tally.calls[name] += 1  # a property read: one round trip, already made
        return _wrap(member, tally)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._target, name, value)

    def __iter__(self) -> Iterator[Any]:
        iterator = iter(self._target)
        while True:
            try:
                item = self._tally.timed("iteration", lambda: next(iterator))
            except StopIteration:
                return
            yield _wrap(item, self._tally)

    def __len__(self) -> int:
        length: int = self._tally.timed("len()", lambda: len(self._target))
        return length

    def __getitem__(self, key: Any) -> Any:
        return _wrap(self._tally.timed("[]", lambda: self._target[key]), self._tally)


# ------------------------------------------------------------------ the owner


async def _complete(job: Any, signal: Any) -> Completed:
    return Completed()


def _owner(storage: Any) -> Any:
    cls = job_owner_class(lambda env: _complete, name="BenchJobOwner")
    # Logs off: a JSON line per transition measures the console, not the engine.
    env = SimpleNamespace(TICKWORK_LOG_LEVEL="off")
    return cls(SimpleNamespace(storage=storage, id="bench"), env)


def _alarm_info() -> Any:
    return to_js({"retryCount": 0, "isRetry": False}, dict_converter=js.Object.fromEntries)


def _ingest(owner: Any, jobs: int, prefix: str) -> None:
    for index in range(jobs):
        owner.runtime.ingest(Job(f"{prefix}{index}", f"q{index % QUEUES}", "lane", 0, {}))


async def _deliver_until_done(owner: Any, storage: Any) -> int:
    """Deliver the alarm (the ingests armed it), then again while it is re-armed;
    the runtime clears it before each delivery."""
    deliveries = 0
    while True:
        await storage.deleteAlarm()
        await owner.alarm(_alarm_info())
        deliveries += 1
        if (await storage.getAlarm()) in (None, jsnull):
            return deliveries


def _settled(storage: Any) -> int:
    cursor = storage.sql.exec("SELECT count(*) AS n FROM tickwork_jobs WHERE state = 'settled'")
    return int(cursor.one().n)


async def alarm_loop(jobs: int) -> dict[str, Any]:
    storage = tickwork_tier.newStorage()
    owner = _owner(storage)
    started = time.perf_counter()
    _ingest(owner, jobs, "j")
    ingest_s = time.perf_counter() - started
    started = time.perf_counter()
    deliveries = await _deliver_until_done(owner, storage)
    seconds = time.perf_counter() - started
    settled = _settled(storage)
    if settled != jobs:
        raise AssertionError(f"alarm loop settled {settled} of {jobs} jobs")
    return {"jobs": jobs, "seconds": seconds, "jobs_per_s": jobs / seconds,
            "deliveries": deliveries, "ingest_seconds": ingest_s,
            "ingest_per_s": jobs / ingest_s}


# ------------------------------------------------------------------ the baseline


def _raw_setup(sql: Any, jobs: int) -> None:
    for statement in RAW_SCHEMA:
        sql.exec(statement)
    for _ in range(jobs):
        sql.exec(RAW_INSERT, "{}")


def _raw_drain(sql: Any) -> int:
    settled = 0
    while True:
        rows = sql.exec(RAW_CLAIM, "token", 0).toArray()
        if len(rows) == 0:
            return settled
        sql.exec(RAW_SETTLE, rows[0].id, "token")
        settled += 1


def raw_loop(jobs: int) -> dict[str, Any]:
    sql = tickwork_tier.newStorage().sql
    started = time.perf_counter()
    _raw_setup(sql, jobs)
    insert_s = time.perf_counter() - started
    started = time.perf_counter()
    settled = _raw_drain(sql)
    seconds = time.perf_counter() - started
    if settled != jobs:
        raise AssertionError(f"raw loop settled {settled} of {jobs} jobs")
    return {"jobs": jobs, "seconds": seconds, "jobs_per_s": jobs / seconds,
            "insert_per_s": jobs / insert_s}


# ------------------------------------------------------------------ FFI counts


Snapshot = tuple[int, float, Counter[str], Counter[str]]


def _per_job(before: Snapshot, after: Snapshot, jobs: int) -> dict[str, Any]:
    kinds = after[2] - before[2]
    seconds = after[3] - before[3]
    return {"calls_per_job": (after[0] - before[0]) / jobs,
            "seconds_inside_per_job": (after[1] - before[1]) / jobs,
            "by_kind_per_job": {kind: n / jobs for kind, n in sorted(kinds.items())},
            "us_per_job_by_kind": {kind: 1e6 * seconds[kind] / jobs for kind in sorted(kinds)}}


async def ffi_counts(jobs: int, noop_us: float) -> dict[str, Any]:
    tally = Tally()
    storage = tickwork_tier.newStorage()
    owner = _owner(Counted(storage, tally))
    _ingest(owner, 1, "warm")  # the schema and first statements, not counted
    await _deliver_until_done(owner, storage)
    tally.statements.clear()
    before = tally.snapshot()
    _ingest(owner, jobs, "c")
    ingest = _per_job(before, tally.snapshot(), jobs)
    ingest["statements"] = _statements(tally, jobs)
    tally.statements.clear()
    before = tally.snapshot()
    started = time.perf_counter()
    await _deliver_until_done(owner, storage)
    seconds = time.perf_counter() - started
    tick = _per_job(before, tally.snapshot(), jobs)
    tick["statements"] = _statements(tally, jobs)
    tick["seconds_per_job_counted"] = seconds / jobs
    tick["crossing_us_per_job"] = _crossing_us(tick, noop_us)

    raw_tally = Tally()
    sql = Counted(tickwork_tier.newStorage().sql, raw_tally)
    before = raw_tally.snapshot()
    _raw_setup(sql, jobs)
    raw_insert = _per_job(before, raw_tally.snapshot(), jobs)
    before = raw_tally.snapshot()
    raw_tally.statements.clear()
    _raw_drain(sql)
    raw = _per_job(before, raw_tally.snapshot(), jobs)
    raw["statements"] = _statements(raw_tally, jobs)
    return {"jobs": jobs, "ingest": ingest, "tick": tick, "raw": raw, "raw_insert": raw_insert}


#: Round trips that only move values across (no SQLite work behind them).
_CONVERSIONS = ("to_py()", "iteration", "columnNames", "len()", "[]", "id")


def _crossing_us(counts: dict[str, Any], noop_us: float) -> float:
    """us per job spent crossing the FFI: the conversions' measured time, plus
    the price of a no-op call for each call that does storage work behind it
    (exec, toArray, transactionSync, the alarm calls)."""
    spent = 0.0
    for kind, per_job in counts["by_kind_per_job"].items():
        if kind in _CONVERSIONS:
            spent += counts["us_per_job_by_kind"][kind]
        else:
            spent += per_job * noop_us
    return spent


def _statements(tally: Tally, jobs: int) -> list[dict[str, Any]]:
    return [{"sql": sql, "per_job": n / jobs, "us_each": 1e6 * seconds / n}
            for sql, (n, seconds) in sorted(tally.statements.items(), key=lambda kv: -kv[1][0])]


# ------------------------------------------------------------------ one crossing


def _mean_us(run: Callable[[], Any], times: int, batches: int = 5) -> float:
    """Mean us per call of the fastest of ``batches`` batches: the price of
    the call itself, with as little of the other work on the machine as can be."""
    best = float("inf")
    for _ in range(batches):
        started = time.perf_counter()
        for _ in range(times):
            run()
        best = min(best, time.perf_counter() - started)
    return 1e6 * best / times


def crossing(times: int) -> dict[str, float]:
    sql = tickwork_tier.newStorage().sql
    noop = tickwork_tier.noop
    cursor = sql.exec("SELECT 1 AS one")
    for _ in range(times):  # warm the JIT of both sides first
        sql.exec("SELECT 1 AS one").toArray()
    return {
        "noop_call_us": _mean_us(noop, times),
        "property_read_us": _mean_us(lambda: cursor.rowsWritten, times),
        "select1_exec_us": _mean_us(lambda: sql.exec("SELECT 1 AS one"), times),
        "select1_exec_toarray_us": _mean_us(lambda: sql.exec("SELECT 1 AS one").toArray(),
                                            times),
    }


#: A row as wide as a claim's RETURNING: integers, text and NULLs.
_WIDE_COLUMNS = 16
_WIDE_SELECT = "SELECT " + ", ".join(f"c{i}" for i in range(_WIDE_COLUMNS)) + " FROM wide"


def adapter_prices(times: int) -> dict[str, float]:
    """us per statement through ``DurableObjectDatabase`` beside the bare
    ``sql.exec(...).toArray()`` of the same statement (fastest batch): what
    the adapter's reading of the cursor costs, the statement's own work aside."""
    from tickwork.stores import DurableObjectDatabase

    storage = tickwork_tier.newStorage()
    sql = storage.sql
    sql.exec("CREATE TABLE wide (" + ", ".join(f"c{i}" for i in range(_WIDE_COLUMNS)) + ")")
    values = [i if i % 3 == 0 else None if i % 3 == 1 else f"text {i}"
              for i in range(_WIDE_COLUMNS)]
    sql.exec("INSERT INTO wide VALUES (" + ", ".join("?" * _WIDE_COLUMNS) + ")",
             *[jsnull if value is None else value for value in values])
    db = DurableObjectDatabase(storage)
    update = "UPDATE wide SET c0 = c0 WHERE c0 < 0"
    return {
        "wide_row_adapter_us": _mean_us(lambda: db.query(_WIDE_SELECT), times),
        "wide_row_exec_toarray_us": _mean_us(lambda: sql.exec(_WIDE_SELECT).toArray(), times),
        "no_row_adapter_us": _mean_us(lambda: db.query(update), times),
        "no_row_exec_toarray_us": _mean_us(lambda: sql.exec(update).toArray(), times),
    }


async def event_loop_yield_us(times: int) -> float:
    """Mean us of ``await asyncio.sleep(0)`` on Pyodide's WebLoop (the alarm
    loop yields once between ticks)."""
    started = time.perf_counter()
    for _ in range(times):
        await asyncio.sleep(0)
    return 1e6 * (time.perf_counter() - started) / times


def _best(runs: list[dict[str, Any]]) -> dict[str, Any]:
    return max(runs, key=lambda run: float(run["jobs_per_s"]))


async def main(jobs: int, counted_jobs: int, rounds: int) -> str:
    prices = crossing(1_000)
    prices["yield_us"] = await event_loop_yield_us(1_000)
    prices.update(adapter_prices(300))
    # Rounds alternate the baseline and the engine; each keeps its best, the
    # figure least disturbed by other work on the machine.
    raws: list[dict[str, Any]] = []
    alarms: list[dict[str, Any]] = []
    for _ in range(rounds):
        raws.append(raw_loop(jobs))
        alarms.append(await alarm_loop(jobs))
    result = {
        "pyodide": str(tickwork_tier.pyodideVersion),
        "rounds": rounds,
        "crossing": prices,
        "raw": _best(raws),
        "alarm": _best(alarms),
        "ffi": await ffi_counts(counted_jobs, prices["noop_call_us"]),
    }
    return json.dumps(result)
