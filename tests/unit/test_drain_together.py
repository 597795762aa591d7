"""``drain_together``: several drain loops at once over one budget, with
steps the test scripts (what a runtime's steps would answer)."""

from __future__ import annotations

import asyncio

import pytest

from tickwork import TickResult
from tickwork.lifecycle.operations import ClaimNext
from tickwork.runtimes.draining import Budget, drain_together


class StorageFailed(RuntimeError):
    """What a scripted step raises: the store failed."""


class ScriptedSteps:
    """Each step settles one job (``name:n``), or raises on the step whose
    number is in ``fail_on``; when ``claim_next`` allows, it carries the
    next claim, as a runtime's steps do. ``gate`` (when set) holds every
    step until it opens."""

    def __init__(self, name: str, *, jobs: int = 100, fail_on: int | None = None,
                 gate: asyncio.Event | None = None) -> None:
        self.name, self.jobs, self.fail_on, self.gate = name, jobs, fail_on, gate
        self.steps = 0
        self.claimed_ahead: list[bool] = []
        self._carrying = False

    @property
    def carrying(self) -> bool:
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


async def test_max_ticks_is_shared_out_and_every_loop_runs_until_idle_or_spent() -> None:
    loops = [ScriptedSteps("a"), ScriptedSteps("b"), ScriptedSteps("c", jobs=1)]
    results: list[TickResult] = []
    ended = await drain_together(loops, Budget(max_ticks=7), on_result=results.append)
    # 7 ticks in shares of 3, 2 and 2; c had one job, then found nothing.
    assert [loop.steps for loop in loops] == [3, 2, 2]
    assert [e.stop for e in ended] == ["budget", "budget", "idle"]
    assert len(results) == 6
    # No loop claimed ahead on its share's last tick.
    assert loops[0].claimed_ahead == [True, True, False]
    assert loops[1].claimed_ahead == [True, False]


async def test_loops_with_no_share_of_the_ticks_are_not_run() -> None:
    loops = [ScriptedSteps(name) for name in "abcd"]
    ended = await drain_together(loops, Budget(max_ticks=2))
    assert [loop.steps for loop in loops] == [1, 1, 0, 0]
    assert len(ended) == 2


async def test_a_failing_loop_stops_the_others_claiming_and_then_propagates() -> None:
    """b fails on its second step while a is inside its first: a settles the
    job it holds, claims nothing ahead, and ends; then b's failure is raised."""
    gate = asyncio.Event()
    a = ScriptedSteps("a", gate=gate)
    b = ScriptedSteps("b", fail_on=2)
    results: list[TickResult] = []
    drained = asyncio.create_task(drain_together([a, b], on_result=results.append))
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


async def test_a_loop_carrying_a_claim_when_another_fails_runs_it_first() -> None:
    gate = asyncio.Event()
    a = ClaimsAheadFirst("a", gate=gate)
    b = ScriptedSteps("b", fail_on=1)
    drained = asyncio.create_task(drain_together([a, b]))
    while b.steps < 1:
        await asyncio.sleep(0)
    gate.set()
    with pytest.raises(StorageFailed):
        await asyncio.wait_for(drained, 5)
    # The carried claim ran (step 2), and nothing was claimed after it.
    assert a.steps == 2 and a.claimed_ahead == [False, False]


async def test_it_needs_at_least_one_loop() -> None:
    with pytest.raises(ValueError, match="at least one"):
        await drain_together([])
