"""``python -m bench``: the aggregation over runs, the markdown, the chart, end to end.

No timing is asserted: the figures below are given, and the end-to-end run
checks that a real module's rows reach the table, not what they read.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from bench import __main__ as command
from bench.report import Figures, Point, Row

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run_of(tick: float, raw: float, mean_tick: float) -> Figures:
    return Figures(rows=[
        Row("owner-local", "tick(), :memory:", tick, "jobs/s", "raw loop", raw, target=0.6),
        Row("owner-local", "mean tick, deep", mean_tick, "us/tick", "empty", 10.0,
            target=1.2, lower_is_better=True),
        Row("D1", "idle tick", 1, "round trips", "one batch"),
    ], points=[Point("depth", "tickwork tick()", 1_000, tick),
               Point("depth", "tickwork tick()", 100_000, tick * 0.9),
               Point("workers", "PgQueuer", 1, raw), Point("workers", "PgQueuer", 4, raw * 2)])


def test_summaries_give_min_max_and_a_target_verdict_over_every_run() -> None:
    runs = [run_of(700, 1000, 11.0), run_of(500, 1000, 13.0)]
    tick, mean, trips = command.summarise(runs)
    assert (tick.value.low, tick.value.high) == (500, 700)
    assert tick.baseline is not None and (tick.baseline.low, tick.baseline.high) == (1000, 1000)
    assert tick.ratio is not None and (tick.ratio.low, tick.ratio.high) == (0.5, 0.7)
    # Met in one run of two: the row is MISSED, and says so.
    assert (tick.met, tick.judged) == (1, 2) and tick.verdict == ">= 60%: MISSED (1/2)"
    assert (mean.met, mean.judged) == (1, 2) and mean.verdict == "<= 1.20x: MISSED (1/2)"
    met = command.summarise([run_of(700, 1000, 11.0), run_of(650, 1000, 11.5)])[0]
    assert met.verdict == ">= 60%: met (2/2)"
    assert trips.ratio is None and trips.verdict == "" and trips.judged == 0


def test_the_markdown_table_has_a_line_per_row_with_its_ranges() -> None:
    runs = [run_of(700, 1000, 11.0), run_of(500, 1000, 13.0)]
    runs[1].rows.append(Row("D1", "only once", 3, "jobs/s", "raw | bare", 6))
    lines = command.markdown_table(command.summarise(runs), 2).splitlines()
    assert lines[0].startswith("| section | measure | tickwork (min-max) |")
    assert lines[1] == "| --- | --- | --- | --- | --- | --- |"
    assert lines[2] == ("| owner-local | tick(), :memory: | 500-700 jobs/s | raw loop: 1,000 "
                        "| 50%-70% | >= 60%: MISSED (1/2) |")
    assert lines[3] == ("| owner-local | mean tick, deep | 11.00-13.00 us/tick | empty: 10.00 "
                        "| 1.10x-1.30x | <= 1.20x: MISSED (1/2) |")
    assert lines[4] == "| D1 | idle tick | 1.00 round trips | one batch |  |  |"
    # A row of fewer runs than the table's says so; a "|" in a cell is escaped.
    assert lines[5] == ("| D1 | only once (1 of 2 runs) | 3.00 jobs/s | raw \\| bare: 6.00 "
                        "| 50% |  |")
    assert len(lines) == 6


def test_update_docs_replaces_only_what_lies_between_the_markers(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text(f"# B\n\nbefore\n{command.TABLE_START}\nold table\n{command.TABLE_END}\n"
                    "after\n")
    command.update_docs(page, "| new |")
    assert page.read_text() == (f"# B\n\nbefore\n{command.TABLE_START}\n| new |\n"
                                f"{command.TABLE_END}\nafter\n")
    bare = tmp_path / "bare.md"
    bare.write_text("no markers\n")
    reason = f"has no {command.TABLE_START} ... {command.TABLE_END} markers"
    with pytest.raises(command.BenchError, match=re.escape(reason)):
        command.update_docs(bare, "| new |")
    assert bare.read_text() == "no markers\n"


def test_the_docs_page_holds_the_table_the_command_writes() -> None:
    # The page's table is the command's output, not prose: both markers once
    # and in order (or --update-docs has nowhere to write), the command the
    # first marker names is one the parser takes, and the table's first line
    # says it is a full run of modules the command has.
    text = command.DOCS.read_text()
    assert text.count(command.TABLE_START) == 1, command.TABLE_START
    assert text.count(command.TABLE_END) == 1, command.TABLE_END
    assert text.index(command.TABLE_START) < text.index(command.TABLE_END)
    named = re.fullmatch(r"<!-- bench: table, written by python -m bench (.+) -->",
                         command.TABLE_START)
    assert named is not None
    assert command.parse(named.group(1).split()).update_docs
    table = text.split(command.TABLE_START, 1)[1].split(command.TABLE_END, 1)[0]
    note, _, rows = table.strip().partition("\n\n")
    assert note.startswith("`python -m bench`, full sizes, "), note[:80]
    assert "Partial" not in note and "Not measured" not in note
    measured = re.findall(r"`bench\.(\w+)`", note.split(";", 1)[0])
    assert measured and set(measured) <= set(command.MODULES), measured
    lines = rows.splitlines()
    assert lines[0] == "| " + " | ".join(command.HEADER) + " |"
    assert len(lines) > 2 and all(line.startswith("| ") for line in lines)


def test_the_chart_is_a_png_matplotlib_drew_from_the_points(tmp_path: Path) -> None:
    points = [point for figures in (run_of(700, 1000, 11.0), run_of(500, 900, 13.0))
              for point in figures.points]
    chart = tmp_path / "sub" / "chart.png"
    command.write_chart(points, chart, "test chart")
    data = chart.read_bytes()
    assert data.startswith(PNG_SIGNATURE)
    assert b"Software\x00Matplotlib version" in data  # the tEXt chunk savefig writes
    empty = tmp_path / "empty.png"
    command.write_chart([], empty, "nothing measured")  # panels say so, still a PNG
    assert empty.read_bytes().startswith(PNG_SIGNATURE)


def test_without_matplotlib_the_command_stops_before_measuring_and_names_the_extra(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now fails
    out = io.StringIO()
    assert command.main(["--quick", "--runs", "1", "--only", "shared_d1"], out=out) == 2
    assert out.getvalue() == ""  # nothing was run
    assert ("the chart needs matplotlib, which the 'bench' extra installs: "
            "pip install -e '.[bench]' (or pass --no-chart)") in capsys.readouterr().err


def test_a_module_without_collect_or_file_is_reported_missing() -> None:
    found, missing = command.load_modules(["shared_d1", "report", "not_a_module"])
    assert list(found) == ["shared_d1"]
    assert missing == {"report": "bench/report.py has no collect(*, quick) -> Figures",
                       "not_a_module": "bench/not_a_module.py does not exist"}


def test_bad_options_are_refused_with_the_reason() -> None:
    for argv, reason in ((["--runs", "1"], "--runs must be at least 2 for the full table"),
                         (["--only", "nope"], "--only: unknown module(s) nope"),
                         (["--update-docs", "--no-chart"], "drop --no-chart")):
        stderr = io.StringIO()
        with pytest.raises(SystemExit) as exit_, contextlib.redirect_stderr(stderr):
            command.parse(argv)
        assert exit_.value.code == 2
        assert reason in stderr.getvalue()


def test_a_missing_module_is_said_loudly_and_fails_the_command_unless_allowed(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(command, "MODULES", (*command.MODULES, "not_a_module"))
    for extra, code in (([], 1), (["--allow-missing"], 0)):
        out = io.StringIO()
        argv = ["--quick", "--runs", "1", "--only", "not_a_module", "--no-chart", *extra]
        assert command.main(argv, out=out) == code
        shouted = "! MISSING bench.not_a_module: bench/not_a_module.py does not exist !"
        assert out.getvalue().count(shouted) == 2  # before the runs and after the table


def test_the_command_runs_a_real_module_end_to_end(tmp_path: Path) -> None:
    chart, table = tmp_path / "chart.png", tmp_path / "table.md"
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--runs", "1", "--only", "shared_d1",
         "--chart", str(chart), "--markdown", str(table)],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)})
    out = result.stdout
    for label in ("python -m bench: quick sizes, 1 run(s)", "Miniflare ", "Node v",
                  "run 1 of 1: load average before", "run 1 of 1: load average after",
                  "tickwork (min-max)", "baseline, same run (min-max)", "ratio (min-max)",
                  "ticks, 1 worker", "raw claim+settle loop, bare table",
                  "enqueue(), batches of 50", "raw INSERT, batches of 50"):
        assert label in out, label
    assert result.returncode == 0, result.stderr
    assert "MISSING" not in out
    assert chart.read_bytes().startswith(PNG_SIGNATURE)
    assert "| D1 | drain(), 1 worker | " in table.read_text()


FAKE_MODULE = '''
import os
from bench.report import Figures, Point, Row

CALLS = 0


def collect(*, quick):
    global CALLS
    CALLS += 1  # a module global: a second collect in the same process would read 2
    print("printed by the module")
    if os.environ.get("FAKE_BENCH") == "raise":
        raise ValueError("the module gave up")
    if os.environ.get("FAKE_BENCH") == "die":
        os._exit(3)
    return Figures(rows=[
        Row("owner-local", "collects in this process", CALLS, "calls", "one", 1.0, target=1.0),
        Row("owner-local", "quick", float(quick), "flag", "", None, 0.5, lower_is_better=True),
    ], points=[Point("depth", "fake", 1_000, 2.5)])
'''


@pytest.fixture
def fake_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "fake_bench_module.py").write_text(FAKE_MODULE)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    monkeypatch.delenv("FAKE_BENCH", raising=False)
    return "fake_bench_module"


def test_figures_survive_the_trip_from_a_child_process() -> None:
    figures = run_of(700, 1000, 11.0)
    assert command.Figures.from_json(figures.to_json()) == figures


def test_each_module_and_run_measures_in_a_fresh_child_process(
        fake_module: str, capfd: pytest.CaptureFixture[str]) -> None:
    collect = functools.partial(command.collect_in_child, fake_module)
    out = io.StringIO()
    outcome = command.run_all({"fake": collect}, runs=2, quick=True, out=out)
    assert outcome.failures == []
    for figures in outcome.runs:
        calls, quick = figures.rows
        assert calls.value == 1  # not 2: the second run's process is not the first's
        assert calls.meets_target() is True
        assert (quick.value, quick.target, quick.lower_is_better) == (1.0, 0.5, True)
        assert figures.points == [Point("depth", "fake", 1_000, 2.5)]
    captured = capfd.readouterr()
    # What the module prints is not the table's: it goes to stderr.
    assert captured.err.count("printed by the module") == 2
    assert "printed by the module" not in captured.out + out.getvalue()


@pytest.mark.parametrize(("how", "reason"), [
    ("raise", "ValueError: the module gave up"),
    ("die", "its process exited with status 3 and wrote no figures")])
def test_a_module_that_fails_in_its_child_process_is_a_failure_with_the_reason(
        fake_module: str, monkeypatch: pytest.MonkeyPatch, how: str, reason: str) -> None:
    monkeypatch.setenv("FAKE_BENCH", how)
    with pytest.raises(command.ModuleFailed, match=f"^{re.escape(reason)}$"):
        command.collect_in_child(fake_module, quick=False)
    out = io.StringIO()
    collect = functools.partial(command.collect_in_child, fake_module)
    outcome = command.run_all({"fake": collect}, runs=1, quick=False, out=out)
    assert outcome.failures == [f"bench.fake, run 1: {reason}"]
    assert "bench.fake: FAILED" in out.getvalue()


def test_modules_run_in_child_processes_unless_in_process_is_asked() -> None:
    found, _ = command.load_modules(["shared_d1"])
    assert isinstance(found["shared_d1"], functools.partial)
    assert found["shared_d1"].func is command.collect_in_child
    assert found["shared_d1"].args == ("bench.shared_d1",)
    import bench.shared_d1
    found, _ = command.load_modules(["shared_d1"], in_process=True)
    assert found["shared_d1"] is bench.shared_d1.collect
