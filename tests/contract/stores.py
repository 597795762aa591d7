"""The contract suite's support: the stores under test and the coverage registry.

Modelled on River's ``riverdrivertest``: each port's methods are exercised
directly, one store at a time, with no runtime or lifecycle plan in between.
Every contract test names the port methods it covers (``@covers``); each
contract module has a test that compares those names with the port's public
methods, so a method added to a port (or to one store only) fails the suite
until it has a contract test.

Nothing here imports sqlite3, psycopg or the D1 bridge at module level: the
owner-local contract also runs inside Pyodide (tests/pyodide/collect.py).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from tickwork import Job, JobRecord, Recovery, Retry, Schedule, ScheduledJob
from tickwork.lifecycle import Settlement
from tickwork.lifecycle.requests import JobListing
from tickwork.model.failures import ErrorSummary
from tickwork.model.jobs import ValidJob, validate_job
from tickwork.model.schedules import ValidSchedule, validate_schedule

#: The fixed start of the contract clock: 2026-11-30T00:00:00Z (as tests.support.shared).
T0 = 1_796_000_000_000

#: Settlements the contract tests record: a success, a failure, a failure
#: with the error summary of what its executor raised.
COMPLETED = Settlement("completed")
FAILED = Settlement("failed", "it broke")
RAISED = Settlement("failed", "it broke",
                    error=ErrorSummary("ValueError", "no ünïcode here", "Traceback ...\n"))

_Test = TypeVar("_Test", bound=Callable[..., Any])

#: The attribute ``covers`` sets on a test: the port methods it exercises.
COVERS = "contract_covers"


def covers(*methods: str) -> Callable[[_Test], _Test]:
    """Name the port methods a contract test exercises directly."""
    if not methods:
        raise ValueError("covers() needs at least one method name")

    def mark(test: _Test) -> _Test:
        setattr(test, COVERS, methods)
        return test

    return mark


def public_methods(cls: type) -> set[str]:
    """The public methods a class (or Protocol) defines, inherited ones included."""
    return {name for name, member in inspect.getmembers(cls)
            if not name.startswith("_") and inspect.isfunction(member)}


def covered_methods(namespace: Mapping[str, Any]) -> set[str]:
    """The methods the ``test_*`` functions of a module's namespace cover."""
    found: set[str] = set()
    for name, function in namespace.items():
        if name.startswith("test_") and callable(function):
            found.update(getattr(function, COVERS, ()))
    return found


def coverage_gaps(port: type, namespace: Mapping[str, Any],
                  stores: Iterable[type] = ()) -> list[str]:
    """Why a contract module does not cover ``port`` exactly: a port method
    no test covers, a covered name the port lacks, or a public method of one
    of ``stores`` that is not on the port (so never held to the contract)."""
    methods = public_methods(port)
    covered = covered_methods(namespace)
    gaps = [f"{port.__name__}.{name} has no contract test"
            for name in sorted(methods - covered)]
    gaps += [f"a test covers {name!r}, which {port.__name__} does not have"
             for name in sorted(covered - methods)]
    for store in stores:
        gaps += [f"{store.__name__}.{name} is not a {port.__name__} method"
                 for name in sorted(public_methods(store) - methods)]
    return gaps


def valid_job(job_id: str, queue: str = "q", *, lane: str | None = None, priority: int = 0,
              payload: Any = None, max_recoveries: int | None = None,
              run_at: int | None = None, delay_ms: int | None = None,
              retry: Retry | None = None) -> ValidJob:
    """A job as ingest hands it to a store (validated, payload as canonical JSON)."""
    recovery = None if max_recoveries is None else Recovery(max_recoveries)
    return validate_job(Job(job_id, queue, lane=lane, priority=priority,
                            payload={} if payload is None else payload, recovery=recovery,
                            run_at=run_at, delay_ms=delay_ms, retry=retry))


def valid_schedule(name: str = "nightly", *, every_ms: int = 60_000, queue: str = "sched",
                   payload: Any = None, catch_up: int = 1) -> ValidSchedule:
    """A schedule as the lifecycle hands it to a store."""
    return validate_schedule(Schedule(name, ScheduledJob(queue, queue, payload=payload),
                                      every_ms=every_ms, catch_up=catch_up))


def every_listing(queue: str, lane: str, outcome: str) -> list[JobListing]:
    """A listing of every shape (``JobListing.shape``): of ``queue`` or of
    ``lane``, in each state, settled ones also of ``outcome``, both orders."""
    return [JobListing(by, queue if by == "queue" else lane, state, chosen, newest)
            for by in ("queue", "lane") for state in ("queued", "running", "settled")
            for chosen in ((None, outcome) if state == "settled" else (None,))
            for newest in (False, True)]


def first_cursor(listing: JobListing) -> tuple[int, int]:
    """Where a listing's first page starts: before everything, in its order."""
    return (2**53 - 1, 2**53 - 1) if listing.newest else (0, 0)


def next_cursor(last: JobRecord) -> tuple[int, int]:
    """The cursor past ``last``, the last job of a page."""
    return (last.settled_at or 0, last.sequence)


def expected_listing(records: Iterable[JobRecord], listing: JobListing) -> list[str]:
    """The job ids ``listing`` lists, in its order, worked out from the jobs
    themselves: queued and running ones by sequence, settled ones by
    (settled_at, sequence); newest first or oldest first."""
    chosen = [record for record in records
              if getattr(record, listing.by) == listing.value and record.state == listing.state
              and (listing.outcome is None or record.outcome == listing.outcome)]
    chosen.sort(key=lambda record: (record.settled_at or 0, record.sequence)
                if listing.state == "settled" else (0, record.sequence),
                reverse=listing.newest)
    return [record.job_id for record in chosen]
