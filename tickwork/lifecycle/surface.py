"""The operations every job surface offers, each declared once.

A surface is anything a user calls jobs through: the owner-local runtime
(synchronous), the shared runtimes, the API's ``JobService``, the async and
sync clients. An operation whose plan says all there is to it is one line in
``JobOperations`` (served by every surface, over HTTP and RPC too) or
``RuntimeOperations`` (the runtimes only)::

    redrive = Declared(operations.redrive, writes=True)

Every surface then has ``redrive`` with the plan's parameters, typed from the
plan itself (``ParamSpec``): a runtime performs the plan, a service or a
client sends the operation of that name (``tickwork.api.operations``). A
surface says how once, in ``_perform_declared``, and whether it answers at
once (``SyncSurface``) or with an awaitable (``AsyncSurface``); mypy types
each call from that, and checks any method a surface writes by hand in place
of a declared one against the declaration (the client's ``ingest`` checks
the job before it sends it, with the same signature).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Coroutine, Mapping
from types import MethodType
from typing import Any, Generic, ParamSpec, TypeVar, overload

from tickwork.lifecycle import operations
from tickwork.lifecycle.requests import Plan

P = ParamSpec("P")
R = TypeVar("R")


class Declared(Generic[P, R]):
    """One operation: its plan, and whether the plan changes what is stored
    (a runtime then performs it as one change: one transaction, and the
    wake and the aborts after it commits) or only reads."""

    def __init__(self, plan: Callable[P, Plan[R]], *, writes: bool) -> None:
        self.plan = plan
        self.writes = writes
        self.name = plan.__name__
        self.signature = inspect.signature(plan)
        self.__doc__ = plan.__doc__
        self._method = self._make_method()

    def _make_method(self) -> Callable[..., Any]:
        """The method every surface binds, made once: it hands the call to
        the surface's ``_perform_declared``, under the plan's name, docstring
        and signature (``self`` first, as a bound method drops it)."""
        declared = self

        def method(surface: Any, *args: Any, **kwargs: Any) -> Any:
            return surface._perform_declared(declared, args, kwargs)

        method.__name__ = method.__qualname__ = self.name
        method.__doc__ = self.__doc__
        method.__signature__ = self.signature.replace(  # type: ignore[attr-defined]
            parameters=[inspect.Parameter("self", inspect.Parameter.POSITIONAL_ONLY),
                        *self.signature.parameters.values()])
        return method

    def __set_name__(self, owner: type[Any], name: str) -> None:
        if name != self.name:
            raise TypeError(f"{owner.__name__}.{name} declares the plan {self.name!r}: "
                            "an operation is named after its plan")

    def arguments(self, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
        """Every argument of a call, defaults filled in, in the plan's order:
        what a service or a client sends (``tickwork.api.operations``)."""
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError as error:
            raise TypeError(f"{self.name}(): {error}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def call_with(self, method: Callable[..., Any], arguments: tuple[Any, ...]) -> Any:
        """``method`` called with ``arguments`` (as ``arguments`` made them),
        each by name, so keyword-only parameters take theirs."""
        return method(**dict(zip(self.signature.parameters, arguments, strict=True)))

    @overload
    def __get__(self, surface: None, owner: type[Any]) -> Declared[P, R]: ...

    @overload
    def __get__(self, surface: SyncSurface, owner: type[Any]) -> Callable[P, R]: ...

    @overload
    def __get__(self, surface: AsyncSurface,
                owner: type[Any]) -> Callable[P, Coroutine[Any, Any, R]]: ...

    def __get__(self, surface: object, owner: type[Any]) -> Any:
        # A bound method, as for any function on a class: as cheap to make per
        # access, and nothing per surface to keep.
        return self if surface is None else MethodType(self._method, surface)

    def __repr__(self) -> str:
        return f"<declared operation {self.name}>"


class SyncSurface:
    """A surface whose declared operations answer at once."""

    def _perform_declared(self, declared: Declared[Any, Any], args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError


class AsyncSurface:
    """A surface whose declared operations answer with a coroutine."""

    def _perform_declared(self, declared: Declared[Any, Any], args: tuple[Any, ...],
                          kwargs: dict[str, Any]) -> Coroutine[Any, Any, Any]:
        raise NotImplementedError


class JobOperations:
    """The operations every surface offers: the runtimes, ``JobService``
    (and so HTTP and the Durable Object's RPC) and the clients. Each one also
    has its entry in ``tickwork.api.operations.OPERATIONS`` (its route and
    how it crosses HTTP and RPC); a test holds the two together."""

    # reads
    read = Declared(operations.read, writes=False)
    read_queue_head = Declared(operations.read_queue_head, writes=False)
    status = Declared(operations.status, writes=False)
    queue_status = Declared(operations.queue_status, writes=False)
    backlog = Declared(operations.backlog, writes=False)
    dead_letters = Declared(operations.dead_letters, writes=False)
    history = Declared(operations.history, writes=False)
    list_jobs = Declared(operations.list_jobs, writes=False)
    explain = Declared(operations.explain, writes=False)
    find_jobs = Declared(operations.find_jobs, writes=False)
    schedules = Declared(operations.schedules, writes=False)
    retention = Declared(operations.retention, writes=False)
    limits = Declared(operations.limits, writes=False)
    rate_limits = Declared(operations.rate_limits, writes=False)
    storage = Declared(operations.storage, writes=False)
    # changes
    cancel = Declared(operations.cancel, writes=True)
    fail_lane = Declared(operations.fail_lane, writes=True)
    cancel_lane = Declared(operations.cancel_lane, writes=True)
    purge = Declared(operations.purge, writes=True)
    pause = Declared(operations.pause, writes=True)
    resume = Declared(operations.resume, writes=True)
    redrive = Declared(operations.redrive, writes=True)
    redrive_dead_letters = Declared(operations.redrive_dead_letters, writes=True)
    put_schedule = Declared(operations.put_schedule, writes=True)
    pause_schedule = Declared(operations.pause_schedule, writes=True)
    resume_schedule = Declared(operations.resume_schedule, writes=True)
    delete_schedule = Declared(operations.delete_schedule, writes=True)
    set_retention = Declared(operations.set_retention, writes=True)
    clear_retention = Declared(operations.clear_retention, writes=True)
    set_limit = Declared(operations.set_limit, writes=True)
    clear_limit = Declared(operations.clear_limit, writes=True)
    set_rate_limit = Declared(operations.set_rate_limit, writes=True)
    clear_rate_limit = Declared(operations.clear_rate_limit, writes=True)


class RuntimeOperations(JobOperations):
    """What a runtime offers besides: the reads a host's wake uses, ingest
    by job (the API's ``ingest`` takes a list), and the prune batch its host
    runs between ticks."""

    has_pending_work = Declared(operations.has_pending_work, writes=False)
    next_tick_at = Declared(operations.next_tick_at, writes=False)
    ingest = Declared(operations.ingest, writes=True)
    ingest_many = Declared(operations.ingest_many, writes=True)
    prune = Declared(operations.prune, writes=True)


def declared_operations(surface: type[Any]) -> dict[str, Declared[Any, Any]]:
    """Every operation ``surface`` has from a declaration, by name."""
    found: dict[str, Declared[Any, Any]] = {}
    for klass in reversed(surface.__mro__):
        for name, value in vars(klass).items():
            if isinstance(value, Declared):
                found[name] = value
            else:
                found.pop(name, None)  # written by hand below the declaration
    return found
