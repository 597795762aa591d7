"""Property test of ``drain_slots``: random slots (how many jobs each
finds, where one fails, how long each step takes to come back) over random
budgets, checked against what the module promises.

* the slots settle at most ``max_ticks`` jobs in all, the runs of claims
  taken ahead included;
* a claim taken ahead is always run next by the same slot, unless that
  slot's own step failed;
* once a slot has failed, no slot claims ahead or starts a fresh tick, and
  the earliest failure is the one raised, after every slot has ended;
* without a failure every result reaches ``on_result``, and with no budget
  every job of every slot is settled.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.support.models import model_examples
from tickwork import TickResult
from tickwork.lifecycle.operations import ClaimNext
from tickwork.runtimes.draining import Budget, drain_slots


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
    """A slot's steps over the ``pool`` of jobs all slots share (as they
    share one table): a fresh tick takes a job as it starts, or finds
    nothing; it fails on its step ``fail_on`` (if any); ``yields[n]``
    event-loop passes run before step n comes back; as the job settles it
    takes the next one ahead when ``claim_next`` allows and one is left."""

    def __init__(self, number: int, pool: list[int], fail_on: int | None, yields: list[int],
                 journal: Journal) -> None:
        self.number, self.pool, self.fail_on = number, pool, fail_on
        self.yields, self.journal = yields, journal
        self.steps = 0
        self.carrying_claim = False
        self.holding = False

    @property
    def carrying(self) -> bool:
        return self.carrying_claim

    @property
    def running(self) -> bool:
        return self.holding or self.carrying_claim

    async def step(self, *, claim_next: ClaimNext = False) -> TickResult:
        journal, number, pool = self.journal, self.number, self.pool
        ran_carried = self.carrying_claim
        self.carrying_claim = False
        journal.note(number, "runs carried" if ran_carried else "ticks")
        if not ran_carried and pool[0] > 0:
            pool[0] -= 1
            self.holding = True
        found = ran_carried or self.holding
        for _ in range(self.yields[self.steps % len(self.yields)]):
            await asyncio.sleep(0)
        self.steps += 1
        self.holding = False
        if self.steps == self.fail_on:
            journal.note(number, "failed")
            raise LoopFailed(f"loop {number}")
        if not found:
            return TickResult("idle")
        ahead = claim_next() if callable(claim_next) else bool(claim_next)
        if ahead and pool[0] > 0:
            pool[0] -= 1
            self.carrying_claim = True
        journal.note(number, "settled", self.carrying_claim)
        return TickResult("settled", job_id=f"{number}:{self.steps}", outcome="completed")


class NoParking:
    """A runtime that knows no due time and announces nothing."""

    def due_in_ms(self) -> float | None:
        return None

    def listen(self, arrived: Callable[[], None]) -> Callable[[], None]:
        return lambda: None


loops_strategy = st.lists(
    st.tuples(st.one_of(st.none(), st.integers(1, 7)),             # fail_on
              st.lists(st.integers(0, 3), min_size=1, max_size=4)),  # yields per step
    min_size=1, max_size=4)


@settings(max_examples=model_examples(300), deadline=None)
@given(loops=loops_strategy, jobs=st.integers(0, 12),
       max_ticks=st.one_of(st.none(), st.integers(1, 12)))
def test_drain_slots_keeps_its_promises(
        loops: list[tuple[int | None, list[int]]], jobs: int, max_ticks: int | None) -> None:
    journal = Journal()
    pool = [jobs]
    scripted = [ScriptedLoop(number, pool, fail_on, yields, journal)
                for number, (fail_on, yields) in enumerate(loops)]
    results: list[TickResult] = []

    async def run() -> BaseException | None:
        try:
            await drain_slots(scripted, Budget(max_ticks=max_ticks), parking=NoParking(),
                              on_result=results.append)
        except LoopFailed as failure:
            return failure
        return None

    raised = asyncio.run(run())
    entries = journal.entries
    settled = [entry for entry in entries if entry[1] == "settled"]
    if max_ticks is not None:
        assert len(settled) <= max_ticks
    # A claim carried is the same loop's next step, unless that loop failed.
    for index, (loop, what, carried) in enumerate(entries):
        if what == "settled" and carried:
            following = [w for n, w, _ in entries[index + 1:] if n == loop]
            assert following[:1] == ["runs carried"], (loop, entries)
    if journal.failed_at is None:
        assert raised is None
        assert len(results) == len(settled)
        # Every job taken was settled, and with no budget none was left.
        assert len(settled) == jobs - pool[0]
        if max_ticks is None:
            assert pool[0] == 0
        return
    first = entries[journal.failed_at]
    assert isinstance(raised, LoopFailed) and str(raised) == f"loop {first[0]}"
    after = entries[journal.failed_at + 1:]
    assert not any(what == "ticks" for _, what, _ in after), entries
    assert not any(what == "settled" and carried for _, what, carried in after), entries
