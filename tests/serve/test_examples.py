"""The default executors of ``tickwork serve`` (``tickwork.hosts.cpython.examples``) in process."""

from __future__ import annotations

from typing import Any

import pytest

from tickwork import AbortSignal, Completed, Failed, JobRecord
from tickwork.hosts.cpython.examples import ECHO_FAILED, echo, example_registry


def record(payload: Any) -> JobRecord:
    return JobRecord("e-1", "q", "q", 0, payload, None, "running", None, None,
                     1, 0, 1_000, 1_000, None)


@pytest.mark.parametrize("payload", [
    None, "text", [1], {}, {"kind": "echo"}, {"kind": "echo", "fail": None},
    {"kind": "echo", "fail": False},
])
async def test_echo_completes_unless_asked_to_fail(payload: Any) -> None:
    assert await echo(record(payload), AbortSignal()) == Completed()


async def test_echo_fails_with_a_valid_reason() -> None:
    result = await echo(record({"kind": "echo", "fail": "tenant_gone"}), AbortSignal())
    assert result == Failed("tenant_gone")
    longest = "r" * 256
    assert await echo(record({"fail": longest}), AbortSignal()) == Failed(longest)


@pytest.mark.parametrize("fail", [
    "", "r" * 257, "\ud800", True, 1, 2.5, ["x"], {"reason": "x"},
], ids=["empty", "too-long", "lone-surrogate", "true", "int", "float", "list", "object"])
async def test_echo_falls_back_to_a_fixed_reason(fail: Any) -> None:
    # Failed(fail) itself would raise inside the executor (execution_failed).
    result = await echo(record({"kind": "echo", "fail": fail}), AbortSignal())
    assert result == Failed(ECHO_FAILED)


async def test_the_registry_routes_echo_by_kind() -> None:
    registry = example_registry()
    job = record({"kind": "echo", "fail": "x" * 300})
    assert registry.executor_for(job) is echo
    assert await registry(job, AbortSignal()) == Failed(ECHO_FAILED)
