"""The whole comparison table: every benchmark module's rows over several runs.

    python -m bench                       # every module, 2 runs, the chart in docs/images/
    python -m bench --quick --runs 1      # small sizes, for a smoke run
    python -m bench --only shared_d1,serve_http --runs 3
    python -m bench --markdown table.md --chart /tmp/chart.png
    python -m bench --update-docs         # the table into docs/explanation/benchmarks.md

Runs each module's ``collect(quick=...)`` (see ``bench/report.py``) ``--runs``
times, each time in a fresh child process (``bench/isolated.py``; ``--in-process``
runs them all in this one), printing the load average before and after each, then
ONE table:
for every row the min-max of tickwork's figure, of its baseline and of the
ratio over the runs, and whether the row's target was met in every run.
The chart (matplotlib, the ``bench`` extra) plots the modules' points:
jobs/s against workers (PostgreSQL) and against queue depth (owner-local).
A module of the list that is missing (or has no ``collect``) is reported
loudly and makes the command exit non-zero unless ``--allow-missing``; a
module whose ``collect`` raises always does.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import os
import platform
import re
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from bench.isolated import ModuleFailed, collect_in_child, failure_reason
from bench.report import Figures, Point, Row, format_ratio, format_value, group

ROOT = Path(__file__).resolve().parents[1]
#: Every module that takes part, in the table's order.
MODULES = ("owner_local", "embedded_peers", "shared_d1", "shared_start", "shared_postgres",
           "serve_http", "durable_object")
DEFAULT_CHART = ROOT / "docs" / "images" / "benchmarks.png"
DOCS = ROOT / "docs" / "explanation" / "benchmarks.md"
#: The markers around the table in DOCS; the first names the command that
#: writes it, for a reader of the page's source.
TABLE_START = "<!-- bench: table, written by python -m bench --update-docs -->"
TABLE_END = "<!-- end of bench table -->"
CHARTS = {"workers": "PostgreSQL: jobs/s against workers",
          "depth": "owner-local: jobs/s against queue depth"}
Collect = Callable[..., Figures]


class BenchError(Exception):
    """A clear reason the command cannot go on (bad option, no matplotlib)."""


# ------------------------------------------------------------ aggregation


@dataclass(frozen=True)
class Span:
    low: float
    high: float

    @classmethod
    def of(cls, values: Sequence[float]) -> Span:
        return cls(min(values), max(values))

    def text(self, show: Callable[[float], str]) -> str:
        low, high = show(self.low), show(self.high)
        return low if low == high else f"{low}-{high}"


@dataclass(frozen=True)
class Summary:
    """One row of the table: a row's figures over every run it appeared in."""

    first: Row  # the first run's row: section, measure, unit, baseline, target
    runs: int
    value: Span
    baseline: Span | None
    ratio: Span | None
    met: int  # runs whose ratio met the target
    judged: int  # runs with a target and a ratio

    @property
    def verdict(self) -> str:
        if not self.judged or self.first.target is None:
            return ""
        sign = "<=" if self.first.lower_is_better else ">="
        word = "met" if self.met == self.judged else "MISSED"
        return (f"{sign} {format_ratio(self.first.target, self.first)}: "
                f"{word} ({self.met}/{self.judged})")


def summarise(runs: Sequence[Figures]) -> list[Summary]:
    """The rows of several runs, by key (section, measure, baseline), first-seen order."""
    summaries = []
    for rows in group(runs).values():
        first = rows[0]
        baselines = [row.baseline_value for row in rows if row.baseline_value is not None]
        ratios = [ratio for row in rows if (ratio := row.ratio) is not None]
        verdicts = [met for row in rows if (met := row.meets_target()) is not None]
        summaries.append(Summary(
            first, len(rows), Span.of([row.value for row in rows]),
            Span.of(baselines) if baselines else None, Span.of(ratios) if ratios else None,
            sum(verdicts), len(verdicts)))
    return summaries


def cells(summary: Summary, runs: int) -> list[str]:
    """section, measure, tickwork, baseline, ratio, target."""
    row = summary.first
    unit = row.unit
    value = summary.value.text(lambda v: format_value(v, unit).removesuffix(f" {unit}"))
    value = f"{value} {unit}"
    baseline = row.baseline
    if summary.baseline is not None:
        shown = summary.baseline.text(lambda v: format_value(v, unit).removesuffix(f" {unit}"))
        baseline = f"{row.baseline}: {shown}"
    ratio = "" if summary.ratio is None else summary.ratio.text(lambda v: format_ratio(v, row))
    measure = row.measure
    if summary.runs < runs:
        measure += f" ({summary.runs} of {runs} runs)"
    return [row.section, measure, value, baseline, ratio, summary.verdict]


HEADER = ["section", "measure", "tickwork (min-max)", "baseline, same run (min-max)",
          "ratio (min-max)", "target"]


def text_table(summaries: Sequence[Summary], runs: int) -> str:
    body = [cells(summary, runs) for summary in summaries]
    widths = [max(len(line[column]) for line in [HEADER, *body]) for column in range(6)]
    lines = ["  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True))
             .rstrip() for line in [HEADER, *body]]
    lines.insert(1, "  ".join("-" * width for width in widths))
    return "\n".join(lines)


def markdown_table(summaries: Sequence[Summary], runs: int) -> str:
    def line(items: Sequence[str]) -> str:
        return "| " + " | ".join(item.replace("|", "\\|") for item in items) + " |"

    out = [line(HEADER), "| " + " | ".join("---" for _ in HEADER) + " |"]
    out += [line(cells(summary, runs)) for summary in summaries]
    return "\n".join(out)


# ------------------------------------------------------------------ chart


def _pyplot() -> Any:  # matplotlib.pyplot, imported only when a chart is drawn
    try:
        import matplotlib
    except ImportError as error:
        raise BenchError("the chart needs matplotlib, which the 'bench' extra installs: "
                         "pip install -e '.[bench]' (or pass --no-chart)") from error
    matplotlib.use("Agg")  # a file, never a window
    import matplotlib.pyplot as pyplot
    return pyplot


def write_chart(points: Sequence[Point], path: Path, title: str) -> None:
    """A PNG of two panels (workers, depth): each series' median over the runs,
    with its min-max as error bars."""
    pyplot = _pyplot()
    figure, axes = pyplot.subplots(1, 2, figsize=(12, 4.8))
    for axis, (chart, label) in zip(axes, CHARTS.items(), strict=True):
        series: dict[str, dict[float, list[float]]] = {}
        for point in points:
            if point.chart == chart:
                series.setdefault(point.series, {}).setdefault(point.x, []).append(point.y)
        axis.set_title(label, fontsize=10)
        axis.set_xlabel("workers" if chart == "workers" else "jobs queued")
        axis.set_ylabel("jobs/s")
        axis.grid(True, alpha=0.3)
        if not series:
            axis.text(0.5, 0.5, "not measured in this run", ha="center", va="center",
                      transform=axis.transAxes)
            continue
        for name, by_x in series.items():
            xs = sorted(by_x)
            ys = [statistics.median(by_x[x]) for x in xs]
            low = [y - min(by_x[x]) for x, y in zip(xs, ys, strict=True)]
            high = [max(by_x[x]) - y for x, y in zip(xs, ys, strict=True)]
            axis.errorbar(xs, ys, yerr=[low, high], marker="o", capsize=3, label=name)
        if chart == "depth":
            axis.set_xscale("log")
        else:
            axis.set_xticks(sorted({x for by_x in series.values() for x in by_x}))
        axis.set_ylim(bottom=0)
        axis.legend(fontsize=8)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=110)
    pyplot.close(figure)


# ---------------------------------------------------------------- machine


def load_average() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())


def _command_output(args: Sequence[str]) -> str | None:
    try:
        result = subprocess.run(args, capture_output=True, text=True, timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() or None


def machine(modules: Sequence[str]) -> list[str]:
    """What the figures were measured on; the servers only when measured."""
    facts = [f"{os.cpu_count()} cores ({platform.machine()}, {platform.system()})",
             f"Python {platform.python_version()}", f"SQLite {sqlite3.sqlite_version}"]
    if "shared_postgres" in modules:
        version = None
        try:
            from tests.support.pg.server import find_bindir
            version = _command_output([str(find_bindir() / "postgres"), "--version"])
        except Exception as error:  # a missing server is shared_postgres's own failure
            version = f"unknown ({error})"
        facts.append(f"PostgreSQL server: {version}")
    if {"shared_d1", "shared_start", "durable_object"} & set(modules):
        try:
            package = json.loads((ROOT / "node_modules" / "miniflare" / "package.json")
                                 .read_text())
            facts.append(f"Miniflare {package['version']}")
        except (OSError, ValueError, KeyError):
            facts.append("Miniflare: not installed (npm ci)")
        node = shutil.which("node")
        facts.append(f"Node {_command_output([node, '--version']) if node else 'not found'}")
    return facts


# -------------------------------------------------------------------- run


def load_modules(names: Sequence[str], *, in_process: bool = False,
                 ) -> tuple[dict[str, Collect], dict[str, str]]:
    """How to run every named module's ``collect`` (in a child process of its
    own unless ``in_process``), and why each missing one is missing."""
    found: dict[str, Collect] = {}
    missing: dict[str, str] = {}
    for name in names:
        try:
            module = importlib.import_module(f"bench.{name}")
        except ModuleNotFoundError as error:
            missing[name] = (f"bench/{name}.py does not exist" if error.name == f"bench.{name}"
                             else f"cannot import it: {error}")
            continue
        except Exception as error:
            missing[name] = f"cannot import it: {type(error).__name__}: {error}"
            continue
        collect = getattr(module, "collect", None)
        if not callable(collect):
            missing[name] = f"bench/{name}.py has no collect(*, quick) -> Figures"
            continue
        found[name] = (collect if in_process
                       else functools.partial(collect_in_child, f"bench.{name}"))
    return found, missing


def shout(lines: Sequence[str], out: TextIO) -> None:
    width = max(len(line) for line in lines)
    print("!" * (width + 4), file=out)
    for line in lines:
        print(f"! {line.ljust(width)} !", file=out)
    print("!" * (width + 4), file=out)


@dataclass
class Outcome:
    runs: list[Figures]
    failures: list[str]
    loads: list[str]


def run_all(collectors: dict[str, Collect], runs: int, quick: bool, out: TextIO) -> Outcome:
    """Each module's collect, ``runs`` times; its own output goes to stderr so
    that stdout holds the table."""
    outcome = Outcome([], [], [])
    for number in range(1, runs + 1):
        figures = Figures()
        before = load_average()
        print(f"run {number} of {runs}: load average before {before}", file=out, flush=True)
        for name, collect in collectors.items():
            started = time.perf_counter()
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    found = collect(quick=quick)
            except ModuleFailed as error:  # its child printed the traceback
                failed: str | None = str(error)
            except Exception:
                traceback.print_exc(file=sys.stderr)
                failed = failure_reason()
            else:
                failed = None
            if failed is not None:
                outcome.failures.append(f"bench.{name}, run {number}: {failed}")
                print(f"  bench.{name}: FAILED (traceback on stderr)", file=out, flush=True)
                continue
            figures.extend(found)
            print(f"  bench.{name}: {len(found.rows)} rows, {len(found.points)} points in "
                  f"{time.perf_counter() - started:.0f} s; load average {load_average()}",
                  file=out, flush=True)
        after = load_average()
        outcome.loads.append(f"run {number}: {before} before, {after} after")
        print(f"run {number} of {runs}: load average after {after}", file=out, flush=True)
        outcome.runs.append(figures)
    return outcome


def update_docs(path: Path, table: str) -> None:
    """Replace what lies between the table markers of ``path`` with ``table``."""
    text = path.read_text()
    pattern = re.compile(re.escape(TABLE_START) + r".*?" + re.escape(TABLE_END), re.S)
    if not pattern.search(text):
        raise BenchError(f"{path} has no {TABLE_START} ... {TABLE_END} markers")
    path.write_text(pattern.sub(lambda _: f"{TABLE_START}\n{table}\n{TABLE_END}", text, 1))


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench",
                                     description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=2,
                        help="runs of every module (default 2; at least 2 unless --quick)")
    parser.add_argument("--quick", action="store_true", help="small sizes, for a smoke run")
    parser.add_argument("--only", help=f"comma-separated modules (of {', '.join(MODULES)})")
    parser.add_argument("--chart", type=Path, default=DEFAULT_CHART,
                        help="the PNG to write (default docs/images/benchmarks.png)")
    parser.add_argument("--no-chart", action="store_true", help="write no chart")
    parser.add_argument("--markdown", type=Path, help="also write the table as markdown here")
    parser.add_argument("--update-docs", action="store_true",
                        help=f"rewrite the table in {DOCS.relative_to(ROOT)} (and the chart)")
    parser.add_argument("--in-process", action="store_true",
                        help="run every module in this process (default: each module and "
                             "run in a fresh child process, so none measures in a process "
                             "another has used)")
    parser.add_argument("--allow-missing", action="store_true",
                        help="exit 0 even when a module is missing")
    args = parser.parse_args(argv)
    if args.runs < 1 or (args.runs < 2 and not args.quick):
        parser.error("--runs must be at least 2 for the full table (min-max over runs); "
                     "--quick allows 1")
    names = list(MODULES)
    if args.only:
        names = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = [name for name in names if name not in MODULES]
        if unknown or not names:
            parser.error(f"--only: unknown module(s) {', '.join(unknown) or '(none given)'}; "
                         f"choose from {', '.join(MODULES)}")
    if args.update_docs and args.no_chart:
        parser.error("--update-docs writes the chart the docs show; drop --no-chart")
    args.names = names
    return args


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    args = parse(argv)
    out = out or sys.stdout
    try:
        if not args.no_chart:
            _pyplot()  # fail before minutes of measuring, not after
        collectors, missing = load_modules(args.names, in_process=args.in_process)
        started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        kind = "quick" if args.quick else "full"
        print(f"python -m bench: {kind} sizes, {args.runs} run(s), {started}", file=out)
        facts = ", ".join(machine(list(collectors)))
        print(f"machine: {facts}", file=out)
        if missing:
            shout([f"MISSING bench.{name}: {why}" for name, why in missing.items()], out)
        outcome = run_all(collectors, args.runs, args.quick, out)
        summaries = summarise(outcome.runs)
        print(file=out)
        print(text_table(summaries, args.runs), file=out)
        judged = [summary for summary in summaries if summary.judged]
        met = sum(summary.met == summary.judged for summary in judged)
        print(f"\ntargets met in every run: {met} of {len(judged)}; ratio = tickwork / "
              "baseline (a time: lower is better); load averages: "
              + "; ".join(outcome.loads), file=out)
        title = (f"python -m bench, {kind} sizes, {args.runs} run(s), {started}; "
                 f"{os.cpu_count()} cores, load average {outcome.loads[0]}")
        if not args.no_chart:
            points = [point for figures in outcome.runs for point in figures.points]
            write_chart(points, args.chart, title)
            print(f"chart: {args.chart}", file=out)
        table = markdown_table(summaries, args.runs)
        measured = ", ".join(f"`bench.{name}`" for name in collectors) or "no module"
        note = (f"`python -m bench`, {kind} sizes, {args.runs} run(s) of {measured}, "
                f"{started}; {facts}; load average "
                + "; ".join(outcome.loads) + ".")
        if args.only:
            note += " Partial: only the modules named by `--only`."
        if missing:
            note += " Not measured: " + ", ".join(f"`bench.{name}`" for name in missing) + "."
        if args.markdown:
            args.markdown.write_text(f"{note}\n\n{table}\n")
            print(f"markdown: {args.markdown}", file=out)
        if args.update_docs:
            update_docs(DOCS, f"{note}\n\n{table}")
            print(f"updated: {DOCS.relative_to(ROOT)}", file=out)
    except BenchError as error:
        print(f"python -m bench: {error}", file=sys.stderr)
        return 2
    problems = [f"FAILED {failure}" for failure in outcome.failures]
    if missing:
        problems += [f"MISSING bench.{name}: {why}" for name, why in missing.items()]
    if problems:
        shout(problems, out)
    if outcome.failures or (missing and not args.allow_missing):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
