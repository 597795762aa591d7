"""run_executor's on_suspend hook: called once, just before the executor
first waits, never for one that finishes without waiting; everything else
passes through as a plain ``await`` would."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from tickwork import Completed, Failed, lifecycle
from tickwork.model.signals import AbortSignal
from tickwork.runtimes.execution import run_executor


async def _run(execute: Any, hook_log: list[str]) -> Any:
    return await run_executor(execute, _record(), AbortSignal(),
                              on_suspend=lambda: hook_log.append("suspended"))


def _record() -> Any:
    # The executor here never reads the job; run_executor reads job_id,
    # queue and attempt only when it logs a raise.
    class Record:
        job_id, queue, attempt = "a", "q", 1
    return Record()


async def test_an_executor_that_never_waits_calls_no_hook() -> None:
    log: list[str] = []

    async def at_once(job: Any, signal: Any) -> Completed:
        log.append("ran")
        return Completed()

    settlement, interruption = await _run(at_once, log)
    assert (settlement.outcome, interruption, log) == ("completed", None, ["ran"])


async def test_the_hook_runs_once_just_before_the_first_wait() -> None:
    log: list[str] = []
    loop = asyncio.get_running_loop()

    async def waits_twice(job: Any, signal: Any) -> Failed:
        log.append("before")
        first = loop.create_future()
        loop.call_soon(first.set_result, "sent in")
        log.append(await first)  # the value the loop sends in reaches the executor
        await asyncio.sleep(0)
        log.append("after")
        return Failed("nope")

    settlement, _ = await _run(waits_twice, log)
    assert log == ["before", "suspended", "sent in", "after"]
    assert (settlement.outcome, settlement.failure_reason) == ("failed", "nope")


async def test_a_raise_after_waiting_is_the_executors_raise() -> None:
    log: list[str] = []

    async def raises(job: Any, signal: Any) -> None:
        await asyncio.sleep(0)
        raise ValueError("broken")

    settlement, interruption = await _run(raises, log)
    assert log == ["suspended"]
    assert interruption is None and settlement.error is not None
    assert (settlement.error.type, settlement.error.message) == ("ValueError", "broken")


async def test_a_cancellation_is_thrown_into_the_waiting_executor() -> None:
    log: list[str] = []
    signal = AbortSignal()
    gate = asyncio.Event()

    async def honours_cancellation(job: Any, signal: Any) -> None:
        try:
            await gate.wait()
        except asyncio.CancelledError:
            log.append("cancelled inside")
            raise

    task = asyncio.create_task(run_executor(honours_cancellation, _record(), signal,
                                            on_suspend=lambda: log.append("suspended")))
    await asyncio.sleep(0)
    task.cancel()
    settlement, interruption = await task
    assert log == ["suspended", "cancelled inside"]
    assert isinstance(interruption, asyncio.CancelledError)
    expected = lifecycle.settlement_for_exception(asyncio.CancelledError())
    assert (settlement.outcome, settlement.failure_reason) == (
        expected.outcome, expected.failure_reason)
    assert signal.aborted


async def test_an_executor_that_swallows_the_cancellation_returns_its_own_result() -> None:
    gate = asyncio.Event()

    async def swallows(job: Any, signal: Any) -> Completed:
        with contextlib.suppress(asyncio.CancelledError):
            await gate.wait()
        return Completed()

    task = asyncio.create_task(run_executor(swallows, _record(), AbortSignal(),
                                            on_suspend=lambda: None))
    await asyncio.sleep(0)
    task.cancel()
    settlement, interruption = await task
    assert (settlement.outcome, interruption) == ("completed", None)


async def test_a_hook_that_raises_closes_the_executor_and_is_raised_as_itself() -> None:
    # Not the executor's raise: no settlement is earned, the caller's tick fails.
    log: list[str] = []

    async def waits(job: Any, signal: Any) -> None:
        try:
            await asyncio.sleep(0)
        finally:
            log.append("closed")

    def broken() -> None:
        raise RuntimeError("hook failed")

    with pytest.raises(RuntimeError, match="hook failed"):
        await run_executor(waits, _record(), AbortSignal(), on_suspend=broken)
    assert log == ["closed"]


async def test_an_awaitable_that_is_no_coroutine_is_hooked_too() -> None:
    log: list[str] = []
    loop = asyncio.get_running_loop()

    def returns_a_future(job: Any, signal: Any) -> asyncio.Future[Completed]:
        future: asyncio.Future[Completed] = loop.create_future()
        loop.call_soon(future.set_result, Completed())
        return future

    settlement, _ = await _run(returns_a_future, log)
    assert (settlement.outcome, log) == ("completed", ["suspended"])
