"""bench.shared_postgres runs every contender and hands report.py its rows.

Figures are not asserted (they are read by people); which rows and points
exist, and that each carries its baseline from the same run, is.
"""

from __future__ import annotations

import os

import pytest

from bench.postgres_baselines import Result, asyncpg_available
from bench.shared_postgres import DEFAULT_TICKS, measure_all, worker_rows


def test_one_small_run_yields_every_row_and_chart_point() -> None:
    found = measure_all(200, (1, 2), settled_rows=2_000, history_ticks=41)
    rows = {(row.measure, row.baseline): row for row in found.rows}
    peer = "PgQueuer/asyncpg" if asyncpg_available() else "PgQueuer/psycopg"
    for workers in ("1 worker", "2 workers"):
        for shape in ("one pool", "pool per worker"):
            row = rows[(f"tickwork {shape}, {workers}", peer)]
            assert row.target == 1.0 and row.baseline_value and row.value > 0
        for context in ("SKIP LOCKED loop", "PgQueuer/psycopg",
                        "its group-commit function called alone",
                        "raw SQL on tickwork's table, 20 jobs/commit"):
            if context != peer:
                row = rows[(f"tickwork pool per worker, {workers}", context)]
                assert row.target is None and row.baseline_value
        # The loops with no engine, each beside the peer.
        for loop in ("tickwork's group-commit function, no engine",
                     "raw SQL on tickwork's table", "raw SQL, narrow schema"):
            row = rows[(f"{loop}, {workers}", peer)]
            assert row.target is None and row.baseline_value and row.value > 0
    # CPU per job at the most workers (2 here), beside the peer's from the
    # same run: the client's for tickwork and its function alone, the
    # server's for tickwork (on Linux, where /proc/stat says it).
    cpu = [row for row in found.rows if "CPU per job" in row.measure]
    assert {row.measure for row in cpu} >= {
        "tickwork pool per worker, 2 workers: client CPU per job",
        "tickwork's group-commit function, no engine, 2 workers: client CPU per job"}
    for row in cpu:
        assert row.baseline == peer and row.unit == "us/job" and row.lower_is_better
        assert row.target is None and row.baseline_value is not None
        if "client" in row.measure:  # process time is exact; /proc/stat counts 10 ms ticks
            assert row.value > 0 and row.baseline_value > 0
    if os.path.exists("/proc/stat"):
        assert ("tickwork pool per worker, 2 workers: server CPU per job (rest of the machine)"
                in {row.measure for row in cpu})
    assert not any("1 worker:" in row.measure for row in cpu)
    # What the shapes are matched on: the most jobs one worker held at once,
    # counted for both. A tickwork worker holds one claim per tick at most; a
    # PgQueuer worker's count is whatever it did (two batches of 10 at most).
    held = rows[("tickwork pool per worker, 2 workers: most jobs one worker held at once", peer)]
    assert held.unit == "jobs" and held.target is None
    assert 1 <= held.value <= DEFAULT_TICKS and held.baseline_value is not None
    assert 1 <= held.baseline_value <= 20
    tick = rows[("mean tick, 2,000 settled rows", "same, no settled rows")]
    assert tick.lower_is_better and tick.target == 1.2 and tick.unit == "us/tick"
    series = {point.series for point in found.points}
    # PgQueuer over each driver, the SKIP LOCKED loop, tickwork's two
    # shapes and the three loops with no engine.
    assert len(series) == (8 if asyncpg_available() else 7)
    assert {point.chart for point in found.points} == {"workers"}
    assert sorted({point.x for point in found.points}) == [1, 2]


def test_worker_rows_split_each_job_between_client_and_server_at_the_most_workers() -> None:
    def result(system: str, workers: int, client_s: float, machine_s: float | None) -> Result:
        return Result(system, workers, 1_000, 1.0, 1_000, 1_000, client_cpu_s=client_s,
                      machine_cpu_s=machine_s)

    labels = {"pool per worker": "tw", "raw function": "fn"}
    results = [result("peer", 1, 9.0, 9.0), result("tw", 1, 9.0, 9.0),
               result("peer", 8, 0.075, 0.225), result("tw", 8, 0.085, 0.245),
               result("fn", 8, 0.030, 0.150)]
    rows = {row.measure: row for row in worker_rows(results, labels, "peer", "PgQueuer")}
    assert set(rows) == {"tickwork pool per worker, 8 workers: client CPU per job",
                         "tickwork pool per worker, 8 workers: server CPU per job"
                         " (rest of the machine)",
                         "tickwork's group-commit function, no engine, 8 workers:"
                         " client CPU per job"}
    client = rows["tickwork pool per worker, 8 workers: client CPU per job"]
    assert client.value == pytest.approx(85.0) and client.baseline_value == pytest.approx(75.0)
    # The machine's time minus the client's: 245 - 85 and 225 - 75 us per job.
    server = rows["tickwork pool per worker, 8 workers: server CPU per job (rest of the machine)"]
    assert server.value == pytest.approx(160.0) and server.baseline_value == pytest.approx(150.0)
    function = rows["tickwork's group-commit function, no engine, 8 workers: client CPU per job"]
    assert function.value == pytest.approx(30.0)
    assert function.baseline_value == pytest.approx(75.0)
    # No machine time (off Linux): no server row; no peer at that count: no rows.
    off_linux = [result("peer", 8, 0.075, None), result("tw", 8, 0.085, None)]
    assert [row.measure for row in worker_rows(off_linux, labels, "peer", "PgQueuer")] == [
        "tickwork pool per worker, 8 workers: client CPU per job"]
    assert worker_rows(results[1:2], labels, "peer", "PgQueuer") == []
    # Held jobs counted on both sides: a row, placed before the CPU rows.
    counted = [Result("peer", 8, 1_000, 1.0, 1_000, 1_000, most_held=20),
               Result("tw", 8, 1_000, 1.0, 1_000, 1_000, most_held=17)]
    held, *_ = worker_rows(counted, labels, "peer", "PgQueuer")
    assert held.measure == "tickwork pool per worker, 8 workers: most jobs one worker held at once"
    assert (held.value, held.baseline_value, held.unit) == (17, 20, "jobs")
