"""How a runtime answers the requests of a plan: one named method per request.

Each request of ``tickwork.lifecycle.requests`` is answered by the method
named after it (``ClaimOrProbe`` by ``claim_or_probe``), which takes the
request and returns its answer (an awaitable one for the requests a runtime
awaits). A runtime writes its answers as one class that subclasses the
protocol of its family, ``OwnerLocalAnswers`` or ``SharedAnswers``: a
missing answer is then a type error where the class is instantiated, not a
``KeyError`` in the middle of a plan, and "go to definition" on a protocol
method lists every runtime's answer.

``answer_table`` turns such an object into what the drivers
(``tickwork.lifecycle.drive``) look answers up in, once per runtime.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, Final, Protocol

from tickwork.lifecycle import requests
from tickwork.lifecycle.requests import (
    Abort,
    AskLiveness,
    Backlog,
    Claim,
    ClaimOrProbe,
    Commit,
    CreateSchedule,
    DeadLetterPage,
    DeleteRetention,
    DeleteSchedule,
    DueSchedules,
    Execute,
    Executing,
    FailLane,
    Find,
    FindCargo,
    FindSchedule,
    FireSlots,
    HasPendingWork,
    HistoryBuckets,
    Insert,
    InsertMany,
    JobsByIdPrefix,
    LaneHasPending,
    ListJobs,
    ListSchedules,
    NextWork,
    PauseQueue,
    PauseSchedule,
    PruneSettled,
    Purge,
    PutRetention,
    QueueCounts,
    QueueHead,
    QueuePaused,
    ReadClaim,
    RecordCancellation,
    RecordRedrive,
    RedriveApplied,
    ReplaceSchedule,
    Report,
    Request,
    Requeue,
    RequeueForRetry,
    ResumeQueue,
    ResumeSchedule,
    RetentionPolicies,
    Settle,
    SettledQueues,
    SettleNextCancelled,
    SettleRecovered,
    StatusGroups,
    StorageUsage,
    StoreNow,
    Wake,
)

#: Request type -> the function answering it (what the drivers look up).
AnswerTable = Mapping[type[Request], Callable[[Any], Any]]


class Answers(Protocol):
    """The requests every runtime answers. Each request's docstring says what
    its answer is; a shared runtime returns awaitables for the ones it awaits."""

    # reads
    def find(self, request: Find, /) -> Any: ...
    def find_cargo(self, request: FindCargo, /) -> Any: ...
    def queue_head(self, request: QueueHead, /) -> Any: ...
    def has_pending_work(self, request: HasPendingWork, /) -> Any: ...
    def next_work(self, request: NextWork, /) -> Any: ...
    def status_groups(self, request: StatusGroups, /) -> Any: ...
    def queue_counts(self, request: QueueCounts, /) -> Any: ...
    def backlog(self, request: Backlog, /) -> Any: ...
    def dead_letter_page(self, request: DeadLetterPage, /) -> Any: ...
    def history_buckets(self, request: HistoryBuckets, /) -> Any: ...
    def list_jobs(self, request: ListJobs, /) -> Any: ...
    def jobs_by_id_prefix(self, request: JobsByIdPrefix, /) -> Any: ...
    def redrive_applied(self, request: RedriveApplied, /) -> Any: ...
    def store_now(self, request: StoreNow, /) -> Any: ...
    def queue_paused(self, request: QueuePaused, /) -> Any: ...
    def executing(self, request: Executing, /) -> Any: ...
    # changes
    def insert(self, request: Insert, /) -> Any: ...
    def insert_many(self, request: InsertMany, /) -> Any: ...
    def record_cancellation(self, request: RecordCancellation, /) -> Any: ...
    def record_redrive(self, request: RecordRedrive, /) -> Any: ...
    def fail_lane(self, request: FailLane, /) -> Any: ...
    def purge(self, request: Purge, /) -> Any: ...
    def pause_queue(self, request: PauseQueue, /) -> Any: ...
    def resume_queue(self, request: ResumeQueue, /) -> Any: ...
    # retention
    def retention_policies(self, request: RetentionPolicies, /) -> Any: ...
    def put_retention(self, request: PutRetention, /) -> Any: ...
    def delete_retention(self, request: DeleteRetention, /) -> Any: ...
    def settled_queues(self, request: SettledQueues, /) -> Any: ...
    def prune_settled(self, request: PruneSettled, /) -> Any: ...
    def storage_usage(self, request: StorageUsage, /) -> Any: ...
    # schedules
    def find_schedule(self, request: FindSchedule, /) -> Any: ...
    def list_schedules(self, request: ListSchedules, /) -> Any: ...
    def create_schedule(self, request: CreateSchedule, /) -> Any: ...
    def replace_schedule(self, request: ReplaceSchedule, /) -> Any: ...
    def pause_schedule(self, request: PauseSchedule, /) -> Any: ...
    def resume_schedule(self, request: ResumeSchedule, /) -> Any: ...
    def delete_schedule(self, request: DeleteSchedule, /) -> Any: ...
    def due_schedules(self, request: DueSchedules, /) -> Any: ...
    def fire_slots(self, request: FireSlots, /) -> Any: ...
    # ticks
    def claim_or_probe(self, request: ClaimOrProbe, /) -> Any: ...
    def claim(self, request: Claim, /) -> Any: ...
    def requeue(self, request: Requeue, /) -> Any: ...
    def settle_recovered(self, request: SettleRecovered, /) -> Any: ...
    def settle_next_cancelled(self, request: SettleNextCancelled, /) -> Any: ...
    def execute(self, request: Execute, /) -> Any: ...
    def settle(self, request: Settle, /) -> Any: ...
    def requeue_for_retry(self, request: RequeueForRetry, /) -> Any: ...
    def read_claim(self, request: ReadClaim, /) -> Any: ...
    # effects
    def wake(self, request: Wake, /) -> Any: ...
    def report(self, request: Report, /) -> Any: ...


class OwnerLocalAnswers(Answers, Protocol):
    """The owner-local runtime's: it also asks the host whether a suspect
    claim's execution is alive, and reads whether a lane has work left (a
    shared store says so with the lane's failure). ``Commit`` and ``Abort``
    are its synchronous driver's own: they end and follow a transaction."""

    def ask_liveness(self, request: AskLiveness, /) -> Any: ...
    def lane_has_pending(self, request: LaneHasPending, /) -> Any: ...


class SharedAnswers(Answers, Protocol):
    """A shared runtime's: every write commits on its own (``Commit`` is a
    no-op) and its executions stop as a change asks (``Abort``); its suspects
    have expired leases, so nothing asks for liveness."""

    def commit(self, request: Commit, /) -> Any: ...
    def abort(self, request: Abort, /) -> Any: ...


def method_name(kind: type[Request]) -> str:
    """The name of the method answering ``kind``: ``ClaimOrProbe`` -> ``claim_or_probe``."""
    return _CAPITAL.sub("_", kind.__name__).lower()


_CAPITAL: Final = re.compile(r"(?<!^)(?=[A-Z])")

#: Every request type a plan may yield, with the name of its answer's method.
REQUEST_TYPES: Final = tuple(
    value for value in vars(requests).values()
    if isinstance(value, type) and issubclass(value, Request) and value is not Request)
_METHOD_NAMES: Final = {kind: method_name(kind) for kind in REQUEST_TYPES}


def answer_table(answers: Answers, family: type) -> dict[type[Request], Callable[[Any], Any]]:
    """Request type -> the bound method of ``answers`` answering it, for every
    request of ``family`` (the protocol ``answers`` implements)."""
    return {kind: getattr(answers, name) for kind, name in _METHOD_NAMES.items()
            if hasattr(family, name)}
