"""AbortSignal: a one-way latch with a reason, awaitable and observable."""

from __future__ import annotations

import asyncio

import pytest

from tickwork import AbortSignal


def test_a_new_signal_is_not_aborted() -> None:
    signal = AbortSignal()
    assert signal.aborted is False
    assert signal.reason is None
    assert "aborted=False" in repr(signal)


def test_abort_sets_aborted_and_reason() -> None:
    signal = AbortSignal()
    assert signal._abort("cancelled") is True
    assert signal.aborted is True
    assert signal.reason == "cancelled"
    assert repr(signal) == "AbortSignal(aborted=True, reason='cancelled')"


def test_the_first_reason_wins() -> None:
    signal = AbortSignal()
    assert signal._abort("lane_failed") is True
    assert signal._abort("cancelled") is False
    assert signal._abort("interrupted") is False
    assert signal.reason == "lane_failed"
    assert signal.aborted is True


async def test_wait_after_abort_returns_the_reason_at_once() -> None:
    signal = AbortSignal()
    signal._abort("cancelled")
    assert await asyncio.wait_for(signal.wait(), timeout=1) == "cancelled"


async def test_wait_before_abort_blocks_until_aborted() -> None:
    signal = AbortSignal()
    waiter = asyncio.create_task(signal.wait())
    for _ in range(5):
        await asyncio.sleep(0)
    assert not waiter.done()
    signal._abort("interrupted")
    signal._abort("cancelled")  # ignored: the first reason stands
    assert await asyncio.wait_for(waiter, timeout=1) == "interrupted"


async def test_several_waiters_all_wake_with_the_same_reason() -> None:
    signal = AbortSignal()
    waiters = [asyncio.create_task(signal.wait()) for _ in range(3)]
    await asyncio.sleep(0)
    assert not any(waiter.done() for waiter in waiters)
    signal._abort("lane_failed")
    assert await asyncio.wait_for(asyncio.gather(*waiters), timeout=1) == ["lane_failed"] * 3


async def test_wait_can_be_raced_and_cancelled_without_aborting() -> None:
    signal = AbortSignal()
    waiter = asyncio.create_task(signal.wait())
    await asyncio.sleep(0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert signal.aborted is False
    # A later wait still works.
    signal._abort("cancelled")
    assert await signal.wait() == "cancelled"


def test_on_abort_listener_is_called_once_with_the_reason() -> None:
    signal = AbortSignal()
    calls: list[str] = []
    signal.on_abort(calls.append)
    assert calls == []
    signal._abort("cancelled")
    assert calls == ["cancelled"]
    signal._abort("lane_failed")
    assert calls == ["cancelled"]


def test_listeners_run_in_registration_order() -> None:
    signal = AbortSignal()
    calls: list[tuple[str, str]] = []
    signal.on_abort(lambda reason: calls.append(("first", reason)))
    signal.on_abort(lambda reason: calls.append(("second", reason)))
    signal._abort("interrupted")
    assert calls == [("first", "interrupted"), ("second", "interrupted")]


def test_on_abort_when_already_aborted_is_called_immediately() -> None:
    signal = AbortSignal()
    signal._abort("lane_failed")
    calls: list[str] = []
    signal.on_abort(calls.append)
    assert calls == ["lane_failed"]
    signal._abort("cancelled")
    assert calls == ["lane_failed"]


def test_a_raising_listener_does_not_stop_the_others_or_the_abort() -> None:
    signal = AbortSignal()
    calls: list[str] = []

    def explode(reason: str) -> None:
        calls.append("explode")
        raise RuntimeError("listener bug")

    signal.on_abort(explode)
    signal.on_abort(calls.append)
    assert signal._abort("cancelled") is True
    assert calls == ["explode", "cancelled"]
    assert signal.aborted and signal.reason == "cancelled"


async def test_a_raising_listener_does_not_stop_waiters() -> None:
    signal = AbortSignal()

    def explode(reason: str) -> None:
        raise ValueError(reason)

    waiter = asyncio.create_task(signal.wait())
    await asyncio.sleep(0)
    signal.on_abort(explode)
    signal._abort("interrupted")
    assert await asyncio.wait_for(waiter, timeout=1) == "interrupted"
