"""Property test of ``drain_together``: random loops (how many jobs each
finds, where one fails, how long each step takes to come back) over random
budgets, checked against what the module promises.

* the loops tick at most ``max_ticks`` times in all, the runs of claims
  taken ahead included;
* a claim taken ahead is always run next by the same loop, unless that
  loop's own step failed;
* once a loop has failed, no loop claims ahead or starts a fresh tick, and
  the earliest failure is the one raised, after every loop has ended;
* without a failure every result reaches ``on_result`` and each loop ends
  idle (it ran out of jobs) or on its spent share.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.models import model_examples
from tickwork import TickResult
from tickwork.lifecycle.operations import ClaimNext
from tickwork.runtimes.draining import Budget, drain_together


class LoopFailed(RuntimeError):
    """A scripted store failure, naming its loop."""


@dataclass
class Journal:
    """Everything the loops did, in order: (loop, what, detail)."""

    entries: list[tuple[int, str, object]] = field(default_factory=list)
    failed_at: int | None = None  # the index of the first failure's entry

    def note(self, loop: int, what: str, detail: object = None) -> None:
        if what == "failed" and self.failed_at is None:
            self.failed_at = len(self.entries)
        self.entries.append((loop, what, detail))


class ScriptedLoop:
    """A loop's steps: ``jobs`` jobs, a failure on step ``fail_on`` (if any),
    and ``yields[n]`` event-loop passes before step n comes back."""

    def __init__(self, number: int, jobs: int, fail_on: int | None, yields: list[int],
                 journal: Journal) -> None:
        self.number, self.jobs, self.fail_on = number, jobs, fail_on
        self.yields, self.journal = yields, journal
        self.steps = 0
        self.carrying_claim = False

    @property
    def carrying(self) -> bool:
        return self.carrying_claim

    async def step(self, *, claim_next: ClaimNext = False) -> TickResult:
        journal, number = self.journal, self.number
        ran_carried = self.carrying_claim
        self.carrying_claim = False
        journal.note(number, "runs carried" if ran_carried else "ticks")
        for _ in range(self.yields[self.steps % len(self.yields)]):
            await asyncio.sleep(0)
        self.steps += 1
        if self.steps == self.fail_on:
            journal.note(number, "failed")
            raise LoopFailed(f"loop {number}")
        if self.steps > self.jobs:
            return TickResult("idle")
        ahead = claim_next() if callable(claim_next) else bool(claim_next)
        self.carrying_claim = ahead and self.steps < self.jobs
        journal.note(number, "settled", self.carrying_claim)
        return TickResult("settled", job_id=f"{number}:{self.steps}", outcome="completed")


loops_strategy = st.lists(
    st.tuples(st.integers(0, 6),                                  # jobs
              st.one_of(st.none(), st.integers(1, 7)),             # fail_on
              st.lists(st.integers(0, 3), min_size=1, max_size=4)),  # yields per step
    min_size=1, max_size=4)


@settings(max_examples=model_examples(300), deadline=None)
@given(loops=loops_strategy, max_ticks=st.one_of(st.none(), st.integers(1, 12)))
def test_drain_together_keeps_its_promises(
        loops: list[tuple[int, int | None, list[int]]], max_ticks: int | None) -> None:
    journal = Journal()
    scripted = [ScriptedLoop(number, jobs, fail_on, yields, journal)
                for number, (jobs, fail_on, yields) in enumerate(loops)]
    results: list[TickResult] = []

    async def run() -> BaseException | None:
        try:
            await drain_together(scripted, Budget(max_ticks=max_ticks),
                                 on_result=results.append)
        except LoopFailed as failure:
            return failure
        return None

    raised = asyncio.run(run())
    entries = journal.entries
    ticks = sum(1 for _, what, _ in entries if what in ("ticks", "runs carried"))
    if max_ticks is not None:
        assert ticks <= max_ticks
    # A claim carried is the same loop's next step, unless that loop failed.
    for index, (loop, what, carried) in enumerate(entries):
        if what == "settled" and carried:
            following = [w for n, w, _ in entries[index + 1:] if n == loop]
            assert following[:1] == ["runs carried"], (loop, entries)
    if journal.failed_at is None:
        assert raised is None
        settled = [entry for entry in entries if entry[1] == "settled"]
        assert len(results) == len(settled)
        return
    first = entries[journal.failed_at]
    assert isinstance(raised, LoopFailed) and str(raised) == f"loop {first[0]}"
    after = entries[journal.failed_at + 1:]
    assert not any(what == "ticks" for _, what, _ in after), entries
    assert not any(what == "settled" and carried for _, what, carried in after), entries
