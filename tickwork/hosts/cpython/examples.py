"""The executors ``tickwork serve`` runs when no ``--executors`` is given.

``example_registry()`` picks an executor by the payload's ``kind`` field,
else by queue:

==========================  ===========================================================
Job                         Executor
==========================  ===========================================================
queue ``webhooks``, or      ``tickwork.executors.webhook`` over the CPython transport
``kind: "webhook"``         ``tickwork.hosts.cpython.http_client.guarded_http_post``: payload
                            ``{"url", "body", "headers"?}``; public destinations
                            only unless allowed, no credential headers unless
                            allowed (``--webhook-allow``, ``--webhook-credentials``)
``kind: "long"``            ``tickwork.executors.long_job``: ``{"steps", "step_ms"}``
``kind: "echo"``            completes at once, or, when ``payload["fail"]`` is given
                            (not null or false), fails with it as the reason if it
                            is a valid reason code (a string of 1 to 256
                            characters), else with ``echo_failed``; touches nothing
``kind: "sleep"``           sleeps ``payload["ms"]`` (default 1000, at most 3,600,000)
                            and completes; cancelled while asleep: ``Cancelled``
anything else               ``Failed("no_executor")``
==========================  ===========================================================

For your own, point ``--executors module:attr`` at an ``ExecutorRegistry``,
an executor, or a factory taking no arguments that returns either.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from tickwork.executors import ExecutorRegistry
from tickwork.executors.long_job import long_job
from tickwork.executors.webhook import HttpPost, webhook_executor
from tickwork.hosts.cpython.destinations import DestinationPolicy
from tickwork.hosts.cpython.http_client import guarded_http_post
from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import JobRecord, check_reason
from tickwork.model.outcomes import Cancelled, Completed, ExecutionResult, Failed

MAX_SLEEP_MS = 3_600_000
#: The reason ``echo`` fails with when ``payload["fail"]`` is no valid reason code.
ECHO_FAILED = "echo_failed"


async def echo(job: JobRecord, signal: Any) -> ExecutionResult:
    """Completes; fails when ``payload["fail"]`` is given (see the module doc)."""
    payload = job.payload
    fail = payload.get("fail") if isinstance(payload, Mapping) else None
    if fail is None or fail is False:
        return Completed()
    try:
        reason = check_reason("fail", fail)
    except InvalidArgument:
        # Failed() would raise inside the executor (settled execution_failed):
        # report the requested failure under a fixed reason instead.
        return Failed(ECHO_FAILED)
    return Failed(reason)


async def sleep(job: JobRecord, signal: Any) -> ExecutionResult:
    """Sleeps ``payload["ms"]`` milliseconds, stopping early when aborted."""
    payload = job.payload
    ms = payload.get("ms", 1000) if isinstance(payload, Mapping) else 1000
    if isinstance(ms, bool) or not isinstance(ms, int) or not 0 <= ms <= MAX_SLEEP_MS:
        return Failed("bad_payload")
    aborted = asyncio.ensure_future(signal.wait())
    try:
        await asyncio.wait({aborted}, timeout=ms / 1000)
    finally:
        aborted.cancel()
    return Cancelled() if signal.aborted else Completed()


def example_registry(post: HttpPost | None = None, *, timeout_s: float = 30.0,
                     allow: Sequence[str] = (), allow_credentials: bool = False,
                     ) -> ExecutorRegistry:
    """The default executors of ``tickwork serve`` (see the module doc).

    Webhooks go through ``post``, by default ``guarded_http_post`` with a
    ``DestinationPolicy(allow)``: public addresses, and ``allow``'s entries.
    """
    registry = ExecutorRegistry(field="kind")
    transport = post if post is not None else guarded_http_post(DestinationPolicy(allow))
    webhook = webhook_executor(transport, timeout_s=timeout_s,
                               allow_credentials=allow_credentials)
    registry.on_queue("webhooks", webhook)
    registry.on_field("webhook", webhook)
    registry.on_field("long", long_job)
    registry.on_field("echo", echo)
    registry.on_field("sleep", sleep)
    return registry
