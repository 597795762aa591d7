"""The loops that run a plan: one synchronous, one with ``await``.

A runtime hands a driver its answers as a table from request type to a
function of the request (``tickwork.lifecycle.answers.answer_table``). The
driver sends each answer into the plan, or throws the function's exception
into it at the ``yield`` that asked, so a plan's ``try``/``except`` around a
request works as it reads; what the plan does not catch propagates to the
runtime's caller.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tickwork.lifecycle.answers import AnswerTable
from tickwork.lifecycle.requests import Abort, Commit, Plan, Report, Request, Wake

T = TypeVar("T")


@dataclass(slots=True)
class Deferred:
    """What a synchronous change asked for once it commits: the executions to
    stop (``Abort``), whether to tell the wake (``Wake``) and the transitions
    to report (``Report``)."""

    aborts: list[Abort] = field(default_factory=list)
    wake: bool = False
    reports: list[Report] = field(default_factory=list)


def drive(plan: Plan[T], answers: AnswerTable, *,
          transaction: Callable[[Callable[[], None]], None],
          after_commit: Callable[[Deferred], None]) -> T:
    """Run ``plan`` synchronously.

    The requests up to each ``Commit``, and after the last one up to the end,
    are answered inside one call of ``transaction(step)``, which commits when
    it returns. ``Wake``, ``Abort`` and ``Report`` are not answered from ``answers``:
    they are collected and handed to ``after_commit`` once that call
    returned, so nothing outside the store hears of a change before it is
    durable (nor of one that rolled back).
    """
    send, throw = plan.send, plan.throw
    # What the plan is sent next: [answer, error]; the plan's result and
    # what its current transaction asked for once it commits.
    pending: list[Any] = [None, None]
    done: list[Any] = []
    deferred: Deferred | None = None

    def segment() -> None:
        nonlocal deferred
        answer, error = pending
        while True:
            try:
                request = send(answer) if error is None else throw(error)
            except StopIteration as stop:
                done.append(stop.value)
                return
            kind = type(request)
            answer = error = None
            if kind is Commit:
                pending[0] = pending[1] = None
                return
            if kind is Wake or kind is Abort or kind is Report:
                if deferred is None:
                    deferred = Deferred()
                if kind is Wake:
                    deferred.wake = True
                elif kind is Abort:
                    deferred.aborts.append(request)  # type: ignore[arg-type]
                else:
                    deferred.reports.append(request)  # type: ignore[arg-type]
            else:
                try:
                    answer = answers[kind](request)
                except BaseException as failure:  # the plan decides; see the module doc
                    error = failure

    while True:
        transaction(segment)
        if deferred is not None:
            committed, deferred = deferred, None
            after_commit(committed)
        if done:
            result: T = done[0]
            return result


async def drive_async(plan: Plan[T], answers: AnswerTable,
                      awaited: Collection[type[Request]] = (), *,
                      before_first: Callable[[], Awaitable[None]] | None = None) -> T:
    """Run ``plan``, awaiting the answers of the request types in ``awaited``
    (their functions return awaitables) and calling the others directly.

    ``before_first`` is awaited once the plan asked its first request (so
    after it validated its arguments) and before that request is answered.
    """
    send, throw = plan.send, plan.throw
    try:
        request = send(None)
    except StopIteration as stop:
        first: T = stop.value
        return first
    if before_first is not None:
        await before_first()
    while True:
        kind = type(request)
        try:
            answer = answers[kind](request)
            if kind in awaited:
                answer = await answer
        except BaseException as error:  # the plan decides; see the module doc
            try:
                request = throw(error)
            except StopIteration as stop:
                thrown: T = stop.value
                return thrown
            continue
        try:
            request = send(answer)
        except StopIteration as stop:
            result: T = stop.value
            return result
