"""``drain_slots`` with scripted steps (what a runtime's steps would answer):
the shared budget, and what a failing slot does to the others."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tickwork import TickResult
from tickwork.lifecycle.operations import ClaimNext
from tickwork.runtimes.draining import Budget, drain_slots


class StorageFailed(RuntimeError):
    """What a scripted step raises: the store failed."""


class NoParking:
    """A runtime that knows no due time and announces nothing."""

    def due_in_ms(self) -> float | None:
        return None

    def listen(self, arrived: Callable[[], None]) -> Callable[[], None]:
        return lambda: None


class ScriptedSteps:
    """Each step settles one job (``name:n``) of its own ``jobs``, or raises
    on the step whose number is ``fail_on``; when ``claim_next`` allows, it
    carries the next claim, as a runtime's steps do. ``gate`` (when set)
    holds every step until it opens."""

    def __init__(self, name: str, *, jobs: int = 100, fail_on: int | None = None,
                 gate: asyncio.Event | None = None) -> None:
        self.name, self.jobs, self.fail_on, self.gate = name, jobs, fail_on, gate
        self.steps = 0
        self.claimed_ahead: list[bool] = []
        self._carrying = False

    @property
    def carrying(self) -> bool:
        return self._carrying

    @property
    def running(self) -> bool:
        return self._carrying

    async def step(self, *, claim_next: ClaimNext = False) -> TickResult:
        self.steps += 1
        if self.gate is not None:
            await self.gate.wait()
        await asyncio.sleep(0)
        if self.steps == self.fail_on:
            self._carrying = False
            raise StorageFailed(f"{self.name} lost its database")
        if self.steps > self.jobs:
            self._carrying = False
            return TickResult("idle")
        ahead = claim_next() if callable(claim_next) else bool(claim_next)
        self.claimed_ahead.append(ahead)
        self._carrying = ahead and self.steps < self.jobs
        return TickResult("settled", job_id=f"{self.name}:{self.steps}", outcome="completed")


async def test_max_ticks_counts_every_slots_jobs() -> None:
    slots = [ScriptedSteps("a"), ScriptedSteps("b"), ScriptedSteps("c", jobs=1)]
    results: list[TickResult] = []
    ended = await drain_slots(slots, Budget(max_ticks=7), parking=NoParking(),
                              on_result=results.append)
    assert len(results) == 7 and ended.stop == "budget"
    # c had one job, then found nothing while the others ran; no slot claimed
    # ahead past the seventh job (each claim ahead ran, and was counted).
    assert [r.job_id for r in results if (r.job_id or "").startswith("c")] == ["c:1"]
    assert not any(loop.carrying for loop in slots)


async def test_a_failing_slot_stops_the_others_claiming_and_then_propagates() -> None:
    """b fails on its second step while a is inside its first: a settles the
    job it holds, claims nothing ahead, and ends; then b's failure is raised."""
    gate = asyncio.Event()
    a = ScriptedSteps("a", gate=gate)
    b = ScriptedSteps("b", fail_on=2)
    results: list[TickResult] = []
    drained = asyncio.create_task(drain_slots([a, b], parking=NoParking(),
                                              on_result=results.append))
    while b.steps < 2:
        await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert not drained.done() and a.steps == 1
    gate.set()
    with pytest.raises(StorageFailed, match="b lost its database"):
        await asyncio.wait_for(drained, 5)
    assert a.steps == 1 and a.claimed_ahead == [False]
    assert sorted(r.job_id or "" for r in results) == ["a:1", "b:1"]


class ClaimsAheadFirst(ScriptedSteps):
    """Its first step took the next claim before any failure was known."""

    async def step(self, *, claim_next: ClaimNext = False) -> TickResult:
        first = self.steps == 0
        result = await super().step(claim_next=claim_next)
        if first:
            self._carrying = True
        return result


async def test_a_slot_carrying_a_claim_when_another_fails_runs_it_first() -> None:
    gate = asyncio.Event()
    a = ClaimsAheadFirst("a", gate=gate)
    b = ScriptedSteps("b", fail_on=1)
    drained = asyncio.create_task(drain_slots([a, b], parking=NoParking()))
    while b.steps < 1:
        await asyncio.sleep(0)
    gate.set()
    with pytest.raises(StorageFailed):
        await asyncio.wait_for(drained, 5)
    # The carried claim ran (step 2), and nothing was claimed after it.
    assert a.steps == 2 and a.claimed_ahead == [False, False]


async def test_the_earliest_failure_is_raised_whichever_slot_raised_it() -> None:
    gate = asyncio.Event()
    late = ScriptedSteps("late", fail_on=1, gate=gate)
    early = ScriptedSteps("early", fail_on=1)
    drained = asyncio.create_task(drain_slots([late, early], parking=NoParking()))
    while early.steps < 1:
        await asyncio.sleep(0)
    for _ in range(3):
        await asyncio.sleep(0)
    gate.set()
    with pytest.raises(StorageFailed, match="early lost"):
        await asyncio.wait_for(drained, 5)
