"""What each of tickwork's owner-local indexes costs the raw enqueue + drain loop.

    python -m bench.index_costs            # 20,000 jobs, best of 3 rounds
    python -m bench.index_costs --quick    # 2,000 jobs, 1 round

The raw loop of ``bench.embedded_peers`` ("raw SQL on tickwork's table": one
INSERT per job, then one transaction per job settling the job held and
claiming the next, no engine) on tickwork's own table as it is, and again
with one thing taken away at a time: one index of ``tickwork_jobs``, or
AUTOINCREMENT (the sequence counter in ``sqlite_sequence`` that every insert
also writes). Then with all of them taken away but what tickwork's claim and
ingest need to keep their promises: the runnable index (the claim's order),
the running index (a queue with a running job is passed over: queues stay
serial, though this loop of one queue never asks) and the UNIQUE job id
(idempotent ingest), with the index of settlements not filed yet (the loop
files them every 100 settlements, as ``drain()`` does). That is the floor of
a single-table design.

For each variant it prints, beside the whole table, the WAL frames per
enqueue and per drained job (an untimed pass with automatic checkpoints
off): a count, the same in every run, of the b-trees each commit changes.
Only the whole table and the floor are timed, beside huey's SqliteHuey (the
peer of ``bench.embedded_peers``' target rows), at synchronous NORMAL and
FULL, the best of three rounds taken in turns. An index alone is not timed:
it is worth about a frame per commit that touches it, some 5% of the whole
table's time per job at NORMAL (the floor's saving spread over the ten
things it takes away), less than two runs of the same loop differ by (a run
that timed every variant read 105-128% of the whole table for the loop
without an index no job here touches). It sizes a redesign of the schema:
which indexes each phase writes, and how far taking indexes away from one
table can go. It is a diagnostic, not a target: the loop without an index is
not a store tickwork could ship (the operations that index serves would scan
the table).

Not part of ``python -m bench``'s table; every variant is checked to have
run every job exactly once.
"""

from __future__ import annotations

import argparse
import itertools
import sqlite3
import tempfile
from collections.abc import Callable
from pathlib import Path

from bench.embedded_peers import SYNCHRONOUS, FrameCount, Phases, huey_run, raw_table_run
from bench.owner_local import interleaved
from bench.report import Figures, Row, print_rows
from tickwork.stores import Sqlite3Database
from tickwork.stores.owner_schema import ensure_schema

SECTION = "owner-local"
TABLE = "tickwork_jobs"
#: What the raw loop itself reads or a guarantee needs: never taken away
#: (the claim's order, and the rows its filing step files).
KEPT = ("tickwork_jobs_runnable", "tickwork_jobs_unfiled")
WHOLE = "the whole table"
FLOOR = "only the claim's indexes and the unique job id"
#: Kept by the floor, though the raw loop does not read it: the busy-queue check.
FLOOR_KEEPS = ("tickwork_jobs_running",)
HUEY = "huey SqliteHuey"
AUTOINCREMENT = "AUTOINCREMENT"

Reshape = Callable[[sqlite3.Connection], None]


def _indexes(connection: sqlite3.Connection) -> list[tuple[str, str]]:
    """(name, CREATE statement) of each index the schema made on the job
    table, in its order (the UNIQUE job id is SQLite's own autoindex, with no
    statement, and is not among them)."""
    return connection.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND tbl_name = ?"
        " AND sql IS NOT NULL ORDER BY rowid", (TABLE,)).fetchall()


def job_indexes(connection: sqlite3.Connection) -> list[str]:
    """The indexes of tickwork's job table that can be taken away."""
    return [name for name, _ in _indexes(connection) if name not in KEPT]


def without_autoincrement(connection: sqlite3.Connection) -> None:
    """Make the (empty) job table again without AUTOINCREMENT, its indexes
    as they were."""
    (table,), = connection.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?", (TABLE,)).fetchall()
    plain = table.replace(" AUTOINCREMENT", "")
    if plain == table:
        raise AssertionError(f"{TABLE} has no AUTOINCREMENT to take away")
    indexes = [sql for _, sql in _indexes(connection)]
    (rows,), = connection.execute(f"SELECT count(*) FROM {TABLE}").fetchall()
    if rows:
        raise AssertionError(f"{TABLE} is rebuilt only while empty, it holds {rows} rows")
    connection.execute(f"DROP TABLE {TABLE}")
    connection.execute(plain)
    for sql in indexes:
        connection.execute(sql)


def dropping(*names: str) -> Reshape:
    def reshape(connection: sqlite3.Connection) -> None:
        if AUTOINCREMENT in names:
            without_autoincrement(connection)
        for name in names:
            if name != AUTOINCREMENT:
                connection.execute(f"DROP INDEX {name}")
    return reshape


def variants() -> dict[str, Reshape | None]:
    """The whole table, each thing taken away alone, then all of them."""
    schema = sqlite3.connect(":memory:", isolation_level=None)
    ensure_schema(Sqlite3Database(schema))
    removable = [*job_indexes(schema), AUTOINCREMENT]
    schema.close()
    return {WHOLE: None,
            **{f"without {name}": dropping(name) for name in removable},
            FLOOR: dropping(*(name for name in removable if name not in FLOOR_KEEPS))}


def collect(*, quick: bool) -> Figures:
    count, rounds, frames_count = (2_000, 1, 500) if quick else (20_000, 3, 2_000)
    figures = Figures()
    shapes = variants()
    with tempfile.TemporaryDirectory() as directory:
        folder = Path(directory)
        frames: dict[str, tuple[float, float]] = {}
        for number, (name, reshape) in enumerate(shapes.items()):
            meter = FrameCount()
            raw_table_run(folder / f"frames-{number}.sqlite3", frames_count, "NORMAL", meter,
                          reshape=reshape)
            frames[name] = meter.per_job(frames_count)
        timed: dict[str, Callable[[Path, str], Phases]] = {
            WHOLE: lambda path, setting: raw_table_run(path, count, setting),
            FLOOR: lambda path, setting: raw_table_run(path, count, setting,
                                                       reshape=shapes[FLOOR]),
            HUEY: lambda path, setting: huey_run(path, count, setting),
        }
        files = itertools.count()  # a fresh file for every timed run

        def rate(run: Callable[[Path, str], Phases], setting: str) -> Callable[[], float]:
            return lambda: count / sum(run(folder / f"timed-{next(files)}.sqlite3", setting))

        rates: dict[tuple[str, str], float] = {}
        for setting in SYNCHRONOUS:
            bests = interleaved(rounds, [rate(run, setting) for run in timed.values()])
            rates.update(((setting, name), best) for name, best in zip(timed, bests, strict=True))
    whole = f"raw SQL on {WHOLE}"
    for name in shapes:
        if name == WHOLE:
            continue
        for phase, what in enumerate(("enqueue", "drained job")):
            figures.rows.append(Row(SECTION, f"raw SQL, {name}: WAL frames per {what}",
                                    frames[name][phase], "frames", whole, frames[WHOLE][phase],
                                    lower_is_better=True))
    for setting in SYNCHRONOUS:
        measure = f"enqueue + drain, {count:,} jobs, WAL, synchronous {setting}"
        figures.rows.append(Row(SECTION, f"raw SQL, {FLOOR}: {measure}", rates[setting, FLOOR],
                                "jobs/s", whole, rates[setting, WHOLE]))
        for name in (WHOLE, FLOOR):
            figures.rows.append(Row(SECTION, f"raw SQL, {name}: {measure}",
                                    rates[setting, name], "jobs/s", HUEY, rates[setting, HUEY]))
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2,000 jobs, one round")
    args = parser.parse_args()
    print("what each index of tickwork's job table costs the raw loop (one run)")
    print_rows(collect(quick=args.quick).rows)


if __name__ == "__main__":
    main()
