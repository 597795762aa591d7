"""The benchmarks keep running (their figures are read by people, not asserted)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sqlite3
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def quick_run(module: str, timeout: int = 300) -> str:
    """``python -m <module> --quick``'s output; it must exit 0."""
    result = subprocess.run(
        [sys.executable, "-m", module, "--quick"],
        capture_output=True, text=True, cwd=ROOT, timeout=timeout,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_owner_local_benchmark_runs_and_prints_every_figure() -> None:
    stdout = quick_run("bench.owner_local")
    for label in ("tick(), :memory:", "drain(), :memory:", "tick(), WAL file",
                  "drain(), WAL file", "raw claim+settle loop, tickwork's table",
                  "raw claim+settle loop, bare table", "single-job ingest()",
                  "raw INSERT into tickwork's table", "mean tick, depth", "ratio",
                  "1,000 due, none waiting", "waiting", "100 schedules not due",
                  "jobs/s against queue depth", "drain()                depth"):
        assert label in stdout, label


def test_interleaved_takes_the_measures_in_turns_and_keeps_each_ones_best() -> None:
    from bench.owner_local import interleaved

    calls: list[str] = []
    figures = {"a": iter([5.0, 3.0, 4.0]), "b": iter([1.0, 2.0, 0.5])}

    def measure(name: str) -> float:
        calls.append(name)
        return next(figures[name])

    measures = (lambda: measure("a"), lambda: measure("b"))
    assert interleaved(3, measures, lowest=True) == [3.0, 0.5]
    assert calls == ["a", "b"] * 3
    figures = {"a": iter([5.0, 3.0]), "b": iter([1.0, 2.0])}
    assert interleaved(2, measures) == [5.0, 2.0]


def test_embedded_peers_benchmark_runs_checks_every_job_and_prints_every_row() -> None:
    stdout = quick_run("bench.embedded_peers")
    for label in ("synchronous NORMAL", "synchronous FULL", "huey SqliteHuey",
                  "persist-queue SQLiteAckQueue", "enqueue + drain", "ratio",
                  "tickwork WAL frames per enqueue", "tickwork WAL frames per drained job",
                  "raw SQL on tickwork's table: WAL frames per drained job",
                  "tickwork user CPU per job", "tickwork system CPU per job",
                  "raw SQL on tickwork's table: system CPU per job",
                  "raw SQL, narrow schema, claim indexes only: enqueue + drain",
                  "raw SQL, narrow schema with tickwork's feature indexes: WAL frames per",
                  "history moved 100 at a time: WAL frames per drained job"):
        assert label in stdout, label


def test_best_runs_takes_the_contenders_in_turns_each_on_a_fresh_folder(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.embedded_peers as peers

    calls: list[tuple[str, Path]] = []
    phases = {"a": iter([(2.0, 1.0), (1.0, 1.0)]), "b": iter([(0.5, 0.5), (1.0, 1.0)])}

    def contender(name: str) -> object:
        def run(path: Path, count: int, setting: str, meter: object) -> tuple[float, float]:
            assert not path.exists() and path.parent.is_dir() and not any(path.parent.iterdir())
            path.write_text("stored")  # what a run leaves must not reach the next one
            calls.append((name, path))
            return next(phases[name])
        return run

    monkeypatch.setattr(peers, "CONTENDERS", {"a": contender("a"), "b": contender("b")})
    best = peers.best_runs(tmp_path, 10, "NORMAL", 2)
    assert [name for name, _ in calls] == ["a", "b", "a", "b"]
    assert len({path for _, path in calls}) == 4
    assert {name: phases for name, (phases, _) in best.items()} == {
        "a": (1.0, 1.0), "b": (0.5, 0.5)}
    assert list(tmp_path.iterdir()) == []


def test_best_runs_runs_every_real_contender_twice(tmp_path: Path) -> None:
    # persist-queue's path is a folder: a second run must not trip on the first's.
    from bench.embedded_peers import CONTENDERS, best_runs

    best = best_runs(tmp_path, 20, "NORMAL", 2)
    assert set(best) == set(CONTENDERS)
    assert all(min(phases) > 0 for phases, _ in best.values())
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("indexes", [0, 1, 2])
def test_a_wal_frame_count_sees_each_b_tree_a_commit_changes(tmp_path: Path,
                                                             indexes: int) -> None:
    # A lone-row insert changes one leaf of the table and one of each index:
    # that many frames per commit, and none while nothing is written.
    from bench.embedded_peers import FrameCount

    path = tmp_path / "frames.sqlite3"
    connection = sqlite3.connect(path, isolation_level=None)
    connection.execute("PRAGMA journal_mode = WAL")
    connection.execute("CREATE TABLE t (a INTEGER PRIMARY KEY, b INTEGER, c INTEGER)")
    for column in "bc"[:indexes]:
        connection.execute(f"CREATE INDEX t_{column} ON t ({column})")
    frames = FrameCount()
    frames.start(connection, path)
    for n in range(50):
        connection.execute("INSERT INTO t (b, c) VALUES (?, ?)", (n, -n))
    frames.mark()
    connection.execute("SELECT count(*) FROM t").fetchall()
    frames.mark()
    assert frames.per_job(50) == (1 + indexes, 0)


def test_serve_http_benchmark_runs_verifies_and_prints_every_figure() -> None:
    stdout = quick_run("bench.serve_http")
    for label in ("[HTTP host] enqueue, 1 job/request (keep-alive), jobs run meanwhile",
                  "in-process ingest_many([job]), just before",
                  "[HTTP host] enqueue, 100 jobs/request, tick loop held",
                  "in-process ingest_many(100 jobs), interleaved", "ratio",
                  "end to end, 1 owner", "end to end, 8 owners",
                  "verify: enqueue answered 'queued' 300 of 300 times",
                  "verify: status route: 8 owner(s), completed 300",
                  "verify: server's tick counter: 300 settlements"):
        assert label in stdout, label


def test_serve_http_prints_the_held_row_beside_its_late_and_interleaved_baselines() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.serve_http", "--quick", "--late-baseline"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stderr
    line = result.stdout.strip()
    assert line.startswith("round 1: serve "), line
    for label in ("interleaved baseline", "late baseline", "s after the serve window began"):
        assert label in line, label


def test_durable_object_benchmark_runs_under_real_pyodide_and_prints_every_figure() -> None:
    stdout = quick_run("bench.durable_object", timeout=600)
    for label in ("real Pyodide 0.28.2", "alarm loop, 1 owner, 200 no-op jobs",
                  "raw claim+settle statements, same sql.exec",
                  "FFI round trips per job, alarm loop", "FFI round trips per job, ingest()",
                  "one FFI round trip (no-op JS function)",
                  "engine's claim UPDATE through sql.exec", "time crossing the FFI", "ratio"):
        assert label in stdout, label


def test_durable_object_benchmark_fails_loudly_without_node(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.durable_object import collect

    monkeypatch.setenv("PATH", "")
    with pytest.raises(RuntimeError, match="needs node"):
        collect(quick=True)


def test_a_cpu_time_meter_sees_the_user_time_a_phase_spends() -> None:
    # The CPU rows come from this meter: a phase that burns user time must
    # show it, and per_job divides over the jobs.
    from bench.embedded_peers import CpuTime

    # A fixed amount of work, not a fixed time: on a loaded machine a timed
    # loop gets a fraction of a core. os.times() reads the same work's user
    # time through another system call, as the independent witness.
    meter = CpuTime()
    before = os.times()
    meter.start(None, Path("unused"))
    for _ in range(30):
        sum(range(200_000))
    meter.mark()
    meter.mark()
    after = os.times()
    user, system = meter.per_job(1_000)
    witnessed = (after.user - before.user) * 1e6 / 1_000  # us per job
    assert witnessed >= 20, "the work burned too little CPU to tell anything"
    assert abs(user - witnessed) <= 15 and system >= 0  # os.times ticks at 10 ms


def test_moving_history_in_batches_writes_fewer_frames_per_drained_job(tmp_path: Path) -> None:
    # The batched narrow variant is only what it claims if its settlements
    # leave the history indexes alone until a batch moves: fewer frames per
    # drained job than moving each job as it settles, the same per enqueue.
    from bench.embedded_peers import CONTENDERS, FrameCount

    counted: list[tuple[float, float]] = []
    for name in ("raw SQL, narrow schema with tickwork's feature indexes",
                 "raw SQL, narrow schema with the feature indexes, history moved 100 at a time"):
        frames = FrameCount()
        CONTENDERS[name](tmp_path / f"{len(counted)}.sqlite3", 500, "NORMAL", frames)
        counted.append(frames.per_job(500))
    (enqueue_each, drained_each), (enqueue_batched, drained_batched) = counted
    assert enqueue_batched == enqueue_each
    assert drained_batched < drained_each / 2


def test_index_costs_benchmark_runs_every_variant_and_prints_every_row() -> None:
    from bench.index_costs import variants

    stdout = quick_run("bench.index_costs")
    names = [name for name in variants() if name != "the whole table"]
    assert "without tickwork_jobs_queue_pending" in names and "without AUTOINCREMENT" in names
    for name in names:
        for what in ("enqueue", "drained job"):
            assert f"raw SQL, {name}: WAL frames per {what}: " in stdout, (name, what)
    drained = "enqueue + drain, 2,000 jobs, WAL, synchronous"
    floor = "raw SQL, only the claim's indexes and the unique job id"
    for setting in ("NORMAL", "FULL"):
        assert f"raw SQL, the whole table: {drained} {setting}: " in stdout
        assert f"{floor}: {drained} {setting}: " in stdout
    assert stdout.count("huey SqliteHuey: ") == 4  # the whole table and the floor, twice
    assert stdout.count("raw SQL on the whole table: ") == 2 * len(names) + 2


def test_index_costs_takes_away_exactly_what_each_variant_names() -> None:
    # Each variant is only what its row says if it removes that one index (or
    # AUTOINCREMENT) and keeps everything else; the floor keeps the claim's
    # indexes (ready jobs, busy queues), the job id's uniqueness and the index
    # the loop's filing step reads (settlements not filed yet), nothing else.
    from bench.index_costs import TABLE, variants
    from tickwork.stores import Sqlite3Database
    from tickwork.stores.owner_schema import ensure_schema

    def shape(reshape: object) -> tuple[set[str], str]:
        connection = sqlite3.connect(":memory:", isolation_level=None)
        ensure_schema(Sqlite3Database(connection))
        if reshape is not None:
            reshape(connection)  # type: ignore[operator]
        indexes = {name for (name,) in connection.execute(
            "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?", (TABLE,))}
        (table,), = connection.execute(
            "SELECT sql FROM sqlite_master WHERE name = ?", (TABLE,)).fetchall()
        return indexes, table

    shapes = variants()
    whole, table = shape(shapes.pop("the whole table"))
    assert "AUTOINCREMENT" in table and "tickwork_jobs_runnable" in whole
    floor, floor_table = shape(shapes.pop("only the claim's indexes and the unique job id"))
    assert "AUTOINCREMENT" not in floor_table and "UNIQUE" in floor_table
    assert {name for name in floor if not name.startswith("sqlite_autoindex")} == {
        "tickwork_jobs_runnable", "tickwork_jobs_running", "tickwork_jobs_unfiled"}
    # Each index alone (but the two the loop reads: the claim's order and the
    # unfiled settlements), and AUTOINCREMENT.
    assert set(shapes) == {f"without {name}" for name in whole
                           if name not in ("tickwork_jobs_runnable", "tickwork_jobs_unfiled")
                           and not name.startswith("sqlite_autoindex")} | {"without AUTOINCREMENT"}
    for name, reshape in shapes.items():
        indexes, variant_table = shape(reshape)
        taken = name.removeprefix("without ")
        if taken == "AUTOINCREMENT":
            assert indexes == whole and "AUTOINCREMENT" not in variant_table
        else:
            assert indexes == whole - {taken} and variant_table == table


def test_index_costs_rebuilds_the_table_only_while_it_is_empty() -> None:
    from bench.index_costs import without_autoincrement
    from tickwork.stores import Sqlite3Database
    from tickwork.stores.owner_schema import ensure_schema

    connection = sqlite3.connect(":memory:", isolation_level=None)
    ensure_schema(Sqlite3Database(connection))
    connection.execute("INSERT INTO tickwork_jobs (job_id, queue, lane, priority, payload_json,"
                       " state, enqueued_at) VALUES ('a', 'q', 'q', 0, '{}', 'queued', 0)")
    with pytest.raises(AssertionError, match="holds 1 rows"):
        without_autoincrement(connection)
    assert connection.execute("SELECT job_id FROM tickwork_jobs").fetchall() == [("a",)]


def test_an_index_taken_away_is_a_frame_fewer_in_each_commit_that_changed_it(
        tmp_path: Path) -> None:
    # The frame rows are what the docs read each index's cost from: the
    # queue's pending and queue order indexes are entered when the loop lists
    # a hundred inserted rows at once and left when it files a hundred
    # settlements at once (a hundredth of a commit's frames per job each),
    # the dead letters' is never entered by a completed job, AUTOINCREMENT is
    # a frame in every ingest's commit, and the floor leaves out of a drained
    # job's commits no more than the batches (schema 0010: a claim writes no
    # index of the queue's waiting jobs).
    from bench.embedded_peers import FrameCount, raw_table_run
    from bench.index_costs import variants

    counted = {}
    for name in ("the whole table", "without tickwork_jobs_queue_pending",
                 "without tickwork_jobs_queue_order", "without tickwork_jobs_dead",
                 "without AUTOINCREMENT", "only the claim's indexes and the unique job id"):
        frames = FrameCount()
        raw_table_run(tmp_path / f"{len(counted)}.sqlite3", 300, "NORMAL", frames,
                      reshape=variants()[name])
        counted[name] = frames.per_job(300)
    whole = counted["the whole table"]
    for batched in ("without tickwork_jobs_queue_pending", "without tickwork_jobs_queue_order"):
        fewer = counted[batched]
        assert 0 < whole[0] - fewer[0] <= 0.2 and 0 < whole[1] - fewer[1] <= 0.2, batched
    assert counted["without tickwork_jobs_dead"] == pytest.approx(whole, abs=0.02)  # a page split
    counter = counted["without AUTOINCREMENT"]
    assert whole[0] - counter[0] == pytest.approx(1.0, abs=0.1)
    assert whole[1] == pytest.approx(counter[1], abs=0.02)
    floor = counted["only the claim's indexes and the unique job id"]
    assert whole[0] - floor[0] >= 0.9 and 0 < whole[1] - floor[1] <= 0.4


def test_queue_gauges_benchmark_reads_the_backlog_it_made() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.queue_gauges", "--settled", "3000", "--pending", "300",
         "--queues", "10"], capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    # 300 pending twice, a third delayed, one running per queue each time.
    assert "(380 ready after doubling)" in result.stdout, result.stdout
    for label in ("status() (baseline)", "backlog()", "backlog(), 600 pending", "target"):
        assert label in result.stdout, label


def test_retention_benchmark_prunes_the_year_it_wrote_down_to_its_policy() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.retention", "--per-day", "20", "--jobs", "100",
         "--queues", "3", "--rounds", "2"], capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    # 7,300 settled over a year; the built-in policy keeps the last 7 days of
    # completed jobs and 30 of failed ones (1 in 20).
    assert "a year of history: 7300 settled jobs over 3 queues" in result.stdout, result.stdout
    kept = int(result.stdout.split(" rows kept")[0].rsplit("; ", 1)[1])
    assert 7 * 19 <= kept <= 7 * 20 + 30 + 2, result.stdout
    for label in ("none ", "a year ", "a year, pruned", "kept all along", "an idle prune pass",
                  "target"):
        assert label in result.stdout, label


def test_fair_turns_benchmark_claims_in_turns_and_prints_every_figure() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench.postgres_fair_turns", "--calls", "80", "--ahead", "500"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == 0, result.stderr
    for kind in ("group commit (settle + claim, one call)", "exact claim (tickwork_claim_one)"):
        for shape in ("500 jobs of one lane ahead", "no backlog"):
            assert f"{kind}, wide queue, {shape}:" in result.stdout, (kind, shape)
    # One turn in 21 is the big lane's: 160 claims take 7 or 8 of its jobs.
    assert "(500 jobs of one lane ahead: 8 of 160 claims took" in result.stdout, result.stdout
    assert "(no backlog: 0 of 160 claims took" in result.stdout, result.stdout
    for shape in ("serial", "wide, lane in line", "wide, a new lane each job"):
        assert f"ingest (store.insert, one job a statement), {shape}:" in result.stdout, shape


def test_concurrency_benchmark_runs_and_prints_every_row() -> None:
    stdout = quick_run("bench.concurrency")
    for level in (1, 10, 50):
        assert f"200 jobs awaiting 50 ms, concurrency {level}:" in stdout, level
        assert f"plain asyncio loop, semaphore of {level}:" in stdout, level
    assert "concurrency 50, synchronous FULL" in stdout
    assert "target >= 80%" in stdout


def test_shared_start_benchmark_runs_checks_every_job_and_prints_every_row() -> None:
    stdout = quick_run("bench.shared_start")
    assert "wait for the firing is computed from the firing schedule" in stdout
    for row in ("a. cron alone", "b. drain after enqueue", "c. pump, delayed jobs",
                "d. delayed jobs, default budgets"):
        for name in ("p50", "p99"):
            # Every row but the baseline stands beside the cron alone's figure.
            beside = "" if row.startswith("a.") else rf" +cron alone, {name}: [\d,.]+ ms +ratio"
            assert re.search(rf"{re.escape(row)}.*: start {name}( \(.*\))?: [\d,.]+ ms"
                             + beside, stdout), (row, name)
    for label in ("a. the firing's drain alone: start p50",
                  "b. D1 statements of the drain after a one-job write",
                  "b. D1 round trips of the drain after a one-job write"):
        assert label in stdout, label
    # Each row's jobs were started by the drains the row is about, every job
    # once. (Who wins a delayed job, the pump or a write drain that came
    # along when it was due, is the machine's timing: the bench says it.)
    assert "a. cron alone: 20 jobs, started by cron 20;" in stdout, stdout
    assert "b. drain after enqueue: 20 jobs, started by write 20;" in stdout, stdout
    for row in ("c. pump, delayed jobs", "d. delayed jobs, default budgets"):
        found = re.search(rf"{re.escape(row)} .*: 20 jobs, started by (.*);", stdout)
        assert found is not None, (row, stdout)
        starters = dict(part.split(" ") for part in found.group(1).split(", "))
        assert set(starters) <= {"pump", "write"}, starters
        assert sum(int(count) for count in starters.values()) == 20, starters
    for drains in (1, 4, 8):
        plural = "" if drains == 1 else "s"
        assert re.search(rf"{drains} drain{plural} at once, concurrency 1 each, 300 no-op jobs "
                         rf"in 16 queues: [\d,.]+ jobs/s", stdout), drains
        assert f"{drains} drain{plural} at once: D1 round trips per job" in stdout, drains
        assert re.search(rf"{drains} drain\(s\): jobs settled by each: \[[\d, ]+\]; .*every job "
                         "started exactly once", stdout), drains


def test_shared_start_says_a_duplicate_start_loudly_and_exits_non_zero(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import bench.shared_start as shared_start

    starts = shared_start.Starts()
    record = types.SimpleNamespace(job_id="j1", enqueued_at=0, delay_ms=None)
    asyncio.run(starts.execute(record, None))  # type: ignore[arg-type]
    starts.check_once(["j1"])
    asyncio.run(starts.execute(record, None))  # type: ignore[arg-type]
    with pytest.raises(shared_start.DuplicateStart, match="1 job\\(s\\) started more than "
                                                          "once: j1 x2"):
        starts.check_once(["j1"])
    with pytest.raises(AssertionError, match="1 job\\(s\\) never started"):
        shared_start.Starts().check_once(["j2"])

    async def duplicated(*args: object) -> object:
        starts.check_once(["j1"])
        raise AssertionError("check_once let a duplicate through")

    monkeypatch.setattr(shared_start, "D1Bridge", types.SimpleNamespace(
        start=contextlib.nullcontext))
    monkeypatch.setattr(shared_start, "measure", duplicated)
    assert shared_start.main(["--quick"]) == 1
    assert "DUPLICATE START: 1 job(s) started more than once: j1 x2" in capsys.readouterr().err


def test_shared_start_percentiles_are_nearest_rank() -> None:
    from bench.shared_start import percentile

    values = [float(n) for n in range(100, 0, -1)]  # 1..100, unordered
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([7.0, 1.0], 0.5) == 1.0
    assert percentile([7.0, 1.0], 0.99) == 7.0
    with pytest.raises(ValueError, match="no values"):
        percentile([], 0.5)
