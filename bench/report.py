"""What a benchmark module hands the comparison command (``python -m bench``).

Each module under ``bench/`` that takes part exposes

    def collect(*, quick: bool) -> Figures

which runs its measurements once and returns them as rows (one tickwork
figure beside the baseline or peer measured in the same run) and chart points.
The command runs every module's ``collect`` at least twice, prints the rows
with the min-max of each figure and ratio, checks each row's target, and
draws the points. A module's own ``main()`` prints the same rows with
``print_rows`` for a single run.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, TextIO


@dataclass(frozen=True)
class Row:
    """One tickwork figure beside its baseline, both measured in the same run.

    ``target`` is the ratio ``value / baseline_value`` the row must reach (at
    least, or when ``lower_is_better`` at most: a time, such as a mean tick
    against a deeper table); None when the row is context, not a target.
    """

    section: str  # "owner-local", "PostgreSQL", "D1", "HTTP host", "Durable Object"
    measure: str  # what is measured, e.g. "tick(), :memory:"
    value: float
    unit: str  # "jobs/s", "calls/s", "us/tick", "FFI calls/job", ...
    baseline: str  # what the figure stands beside, e.g. "raw claim+settle loop"
    baseline_value: float | None = None
    target: float | None = None
    lower_is_better: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return self.section, self.measure, self.baseline

    @property
    def ratio(self) -> float | None:
        if self.baseline_value is None or self.baseline_value == 0:
            return None
        return self.value / self.baseline_value

    def meets_target(self) -> bool | None:
        ratio = self.ratio
        if self.target is None or ratio is None:
            return None
        return ratio <= self.target if self.lower_is_better else ratio >= self.target


@dataclass(frozen=True)
class Point:
    """One point of a chart: ``chart`` is "workers" (PostgreSQL jobs/s against
    worker count) or "depth" (jobs/s against queue depth); ``series`` names the
    line (tickwork's shape or a peer)."""

    chart: str
    series: str
    x: float
    y: float


@dataclass
class Figures:
    rows: list[Row] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)

    def extend(self, other: Figures) -> None:
        self.rows.extend(other.rows)
        self.points.extend(other.points)

    def to_json(self) -> dict[str, list[dict[str, Any]]]:
        """Plain data, for a module measured in a child process (bench/isolated.py)."""
        return {"rows": [asdict(row) for row in self.rows],
                "points": [asdict(point) for point in self.points]}

    @classmethod
    def from_json(cls, data: dict[str, list[dict[str, Any]]]) -> Figures:
        return cls(rows=[Row(**row) for row in data["rows"]],
                   points=[Point(**point) for point in data["points"]])


def format_value(value: float, unit: str) -> str:
    if abs(value) >= 100 or unit == "jobs":  # a count of jobs is a whole number
        return f"{value:,.0f} {unit}"
    return f"{value:,.2f} {unit}"


def format_ratio(ratio: float, row: Row) -> str:
    # Rows that compare like with like read as a percentage of the baseline
    # when tickwork is below it and the target is a share, else as a factor
    # (two significant digits when it is below 0.01: a start in ms beside a
    # wait of a minute would read 0.00x).
    if row.lower_is_better or row.unit.startswith("us"):
        return f"{ratio:.2g}x" if 0 < abs(ratio) < 0.01 else f"{ratio:.2f}x"
    return f"{ratio:.0%}"


def print_rows(rows: Sequence[Row], file: TextIO | None = None) -> None:
    """The rows of one run, as a plain table."""
    for row in rows:
        baseline = ""
        if row.baseline_value is not None:
            baseline = f"{row.baseline}: {format_value(row.baseline_value, row.unit)}"
        elif row.baseline:
            baseline = row.baseline
        ratio = row.ratio
        verdict = ""
        met = row.meets_target()
        if met is not None and row.target is not None:
            sign = "<=" if row.lower_is_better else ">="
            shown = format_ratio(row.target, row)
            verdict = f"  (target {sign} {shown}: {'met' if met else 'MISSED'})"
        ratio_text = "" if ratio is None else f"  ratio {format_ratio(ratio, row)}"
        print(f"  [{row.section}] {row.measure}: {format_value(row.value, row.unit)}"
              f"   {baseline}{ratio_text}{verdict}", file=file)


def group(runs: Iterable[Figures]) -> dict[tuple[str, str, str], list[Row]]:
    """The rows of several runs of the same measurements, by key, in first-seen order."""
    grouped: dict[tuple[str, str, str], list[Row]] = {}
    for figures in runs:
        for row in figures.rows:
            grouped.setdefault(row.key, []).append(row)
    return grouped
