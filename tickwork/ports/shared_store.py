"""The port every shared store (D1, PostgreSQL) implements.

The lifecycle makes every decision and the shared runtime
(``tickwork.runtimes.shared``) answers its requests; a store only runs
one statement (or one native batch) per method and decodes the rows. Each
method that takes ``now`` uses it instead of database time when it is not
None (deterministic tests); None means "ask the database clock".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol, TypeAlias

from tickwork.lifecycle import Settlement
from tickwork.lifecycle.requests import ClaimView, JobListing, Suspect
from tickwork.model.history import HistoryRow
from tickwork.model.jobs import JobRecord, ValidJob
from tickwork.model.limits import ConcurrencyLimit, LimitKind
from tickwork.model.rate_limits import RateLimit
from tickwork.model.retention import RetentionPolicy, StorageReport
from tickwork.model.schedules import StoredSchedule, ValidSchedule

RenewAnswer: TypeAlias = Literal["held", "cancelled", "lost"]
"""``held``: the lease was extended; ``cancelled``: extended, and a cancellation
is recorded; ``lost``: the claim expired or was replaced, nothing was written."""

CancelWrite: TypeAlias = Literal["any", "only_if_queued"]


class SharedStore(Protocol):
    #: The schema_version this package needs on the store's database.
    schema_version: int

    async def check_schema(self) -> None:
        """Raise SchemaError naming the migration to apply when the tables are missing or old."""

    async def insert(self, job: ValidJob, now: int | None) -> bool:
        """Insert a queued job; False when the job_id exists (nothing written)."""

    async def insert_many(self, jobs: list[ValidJob], now: int | None) -> list[bool] | None:
        """Insert the new jobs of ``jobs``, in list order, all or nothing (one
        transaction or one batch).

        Per job: True when inserted, False for an identical replay (of a
        stored job, or of an earlier job of the list with the same id).
        Raises IngestConflict, with nothing written, for the first job whose
        cargo differs (``tickwork.model.jobs.replay_flags`` decides). None, with
        nothing written, when a concurrent change kept it from deciding
        (the runtime calls again).
        """

    async def find(self, job_id: str) -> JobRecord | None: ...

    async def find_cargo(self, job_id: str) -> ValidJob | None: ...

    async def queue_head(self, queue: str) -> JobRecord | None:
        """The queue's running job, else its best job in the ready set."""

    async def has_pending_work(self, now: int | None) -> bool:
        """Whether a job is due (or cancelled) and queued, or running."""

    async def next_work(self, now: int | None) -> Sequence[Any]:
        """``(pending, next_due, now, next_slot)`` in one read:
        ``has_pending_work``, the earliest due time of a waiting job or next
        schedule slot (or None), the store's clock, and the next schedule
        slot alone (or None)."""

    async def backlog(self) -> Sequence[Sequence[Any]]:
        """``(queue, ready, delayed, running, ready_since)`` of every queue
        with unsettled jobs, from the indexes of unsettled jobs (one statement)."""

    async def status_groups(self) -> Sequence[Sequence[Any]]:
        """``(queue, state, outcome, count)`` of every group of jobs, a queued
        job still waiting for its time in state ``delayed`` (one statement)."""

    async def queue_counts(self, queue: str) -> Sequence[Any]:
        """One queue's ``(queued, running, delayed, paused, then settled per
        outcome in tickwork.model.outcomes.OUTCOMES order)`` (one statement;
        ``paused`` is 0/1 on D1, a bool on PostgreSQL)."""

    async def claim(
        self, token: str, lease_ms: int, now: int | None, *, guarded: bool
    ) -> JobRecord | None:
        """Claim the best ready queue head under ``token`` with a fresh lease,
        after moving the jobs whose time has come into the ready set (in the
        same transaction or batch).

        ``guarded``: claim only if no lease has expired and no cancelled job is
        waiting, so the common tick is one round trip (the tick probes otherwise).
        """

    async def probe(self, now: int | None) -> tuple[Suspect | None, bool]:
        """The oldest expired claim, and whether a cancelled job is still queued."""

    async def claim_or_probe(
        self, token: str, lease_ms: int, now: int | None
    ) -> tuple[JobRecord | None, tuple[Suspect | None, bool]]:
        """The tick's first step: the guarded claim, and the probe when it claimed
        nothing (a store may run both in one round trip)."""

    async def requeue_expired(self, sequence: int, token: str, now: int | None) -> bool:
        """Put an expired claim back in its queue (fenced on token and expiry)."""

    async def release_claim(self, sequence: int, token: str) -> bool:
        """Put back a claim taken ahead that never started (fenced on its
        token; no recovery counted); False when it is no longer that claim."""

    async def settle_expired(
        self, sequence: int, token: str, settlement: Settlement, now: int | None
    ) -> JobRecord | None:
        """Settle an expired claim (fenced on token and expiry)."""

    async def settle(
        self, sequence: int, token: str, settlement: Settlement, now: int | None,
        *, cancelled: bool,
    ) -> bool:
        """Settle a live claim. Fenced on token and an unexpired lease, and on
        the cancellation being absent (``cancelled=False``) or recorded (True)."""

    async def settle_and_claim(
        self, sequence: int, token: str, settlement: Settlement, now: int | None,
        *, next_token: str, lease_ms: int,
    ) -> tuple[bool, JobRecord | None]:
        """``settle(cancelled=False)`` and then the guarded claim under
        ``next_token``, in one transaction or batch (a worker loop's step)."""

    async def read_claim(self, sequence: int, now: int | None) -> ClaimView | None: ...

    async def renew(
        self, sequence: int, token: str, lease_ms: int, now: int | None
    ) -> RenewAnswer: ...

    async def settle_next_cancelled(self, now: int | None) -> JobRecord | None: ...

    async def record_cancellation(
        self, job_id: str, cancellation_id: str, mode: CancelWrite
    ) -> bool:
        """Write the job's first cancellation; False when it no longer applies."""

    async def fail_lane(
        self, lane: str, reason: str, limit: int, now: int | None
    ) -> tuple[list[JobRecord], bool]:
        """Settle up to ``limit`` unsettled jobs of ``lane`` as failed, the
        running ones chosen first; the failed jobs (in no particular order:
        the lifecycle orders its events), and whether any remain."""

    async def purge(self, queue: str) -> int: ...

    async def pause_queue(self, queue: str, now: int | None) -> bool:
        """Mark the queue paused; False when it is already (nothing written)."""

    async def resume_queue(self, queue: str) -> bool:
        """Unmark the queue; False when it was not paused."""

    async def queue_paused(self, queue: str) -> bool:
        """Whether the queue is paused (one key lookup)."""

    async def retry(
        self, sequence: int, token: str, settlement: Settlement, delay_ms: int,
        now: int | None,
    ) -> JobRecord | None:
        """Put a live claim's job back to queued as its next attempt, due
        ``delay_ms`` from now (database time), the ended attempt in its
        history; fenced like ``settle(cancelled=False)``."""

    async def dead_letters(
        self, queue: str, before: tuple[int, int], limit: int
    ) -> list[JobRecord]:
        """Up to ``limit`` dead letters of the queue settled before ``before``
        (``(settled_at, sequence)``), newest first (one statement)."""

    async def list_jobs(
        self, listing: JobListing, after: tuple[int, int], limit: int
    ) -> list[JobRecord]:
        """Up to ``limit`` jobs of ``listing`` past ``after``, in its order
        (one statement)."""

    async def jobs_by_id_prefix(
        self, prefix: str, after: str | None, limit: int
    ) -> list[JobRecord]:
        """Up to ``limit`` jobs whose id starts with ``prefix``, in id order
        (by code point), past the id ``after`` when given (one statement)."""

    async def redrive_applied(self, job_id: str, redrive_id: str) -> bool:
        """Whether ``redrive_id`` was applied to the job before."""

    async def redrive(self, job_id: str, redrive_id: str, now: int | None) -> JobRecord | None:
        """Queue a dead letter again as a new attempt chain and remember the
        redrive id, in one transaction or batch; None when it no longer applies."""

    async def store_now(self, now: int | None) -> int:
        """Database time (epoch ms), or ``now`` when given."""

    async def history(self, queue: str, since: int, until: int,
                      bucket_ms: int) -> list[tuple[Any, ...]] | None:
        """The queue's history rows whose minute is in [since, until), summed
        per ``bucket_ms``: (bucket start, enqueued, started, completed,
        failed, cancelled, retried, the highest depth sampled, the longest
        wait sampled), oldest first; None when the queue has no history row."""

    async def add_history(self, rows: Sequence[HistoryRow]) -> None:
        """Add a tally's rows (in (queue, minute) order) to the stored minute
        rows, in one statement."""

    async def sample_history(self, now: int | None, since: int,
                             queues: Sequence[str]) -> None:
        """Write the depth (counted up to DEPTH_CAP + 1) and the head job's
        wait of each queue with waiting jobs (at most MAX_SAMPLED_QUEUES), of
        ``queues`` and of those sampled non-empty since ``since`` into the
        row of the minute of database time (or ``now``), in one statement."""

    async def prune_history(self, now: int | None, keep_ms: int, limit: int) -> int:
        """Delete up to ``limit`` of the oldest history rows whose minute is
        more than ``keep_ms`` before database time (or ``now``); how many."""

    async def find_schedule(self, name: str) -> StoredSchedule | None: ...

    async def list_schedules(self) -> list[StoredSchedule]: ...

    async def create_schedule(self, schedule: ValidSchedule, next_at: int,
                              now: int | None) -> bool:
        """Store a new schedule; False (nothing written) when the name exists."""

    async def replace_schedule(self, schedule: ValidSchedule, old_spec_json: str,
                               next_at: int, now: int | None) -> bool:
        """Replace the schedule while it is still ``old_spec_json``."""

    async def pause_schedule(self, name: str, now: int | None) -> bool: ...

    async def resume_schedule(self, name: str, spec_json: str, next_at: int,
                              now: int | None) -> bool: ...

    async def delete_schedule(self, name: str) -> bool: ...

    async def due_schedules(self, now: int | None) -> tuple[list[StoredSchedule], int | None]:
        """The running schedules whose next slot has come, and the database
        time they were judged by (None when there are none)."""

    async def next_slot(self) -> int | None:
        """The earliest next slot of a running schedule."""

    async def fire_slots(self, schedule: ValidSchedule, slots: Sequence[int], next_at: int,
                         now: int | None) -> tuple[list[ValidJob], int | None]:
        """Create the slots' jobs (each fenced on the schedule as read, and
        created once) and advance the schedule, in one transaction or batch;
        the jobs created, in slot order, and the next slot of any running
        schedule after it (read in the same round trip)."""

    async def retention_policies(self) -> list[RetentionPolicy]:
        """Every stored retention policy, by queue (the scope's default, if
        stored, with ``queue`` None)."""

    async def put_retention(self, policy: RetentionPolicy, now: int | None) -> bool:
        """Store ``policy`` (replacing its queue's); False, nothing written,
        when the same times are stored already."""

    async def delete_retention(self, queue: str | None) -> bool:
        """Remove ``queue``'s policy (None: the scope's default); whether there was one."""

    async def limits(self) -> list[ConcurrencyLimit]:
        """Every stored concurrency limit: queues first, then lanes, each by
        key (``tickwork.model.limits.in_order``), with ``updated_at``."""

    async def put_limit(self, limit: ConcurrencyLimit, now: int | None) -> bool:
        """Store ``limit`` (replacing its kind and key's); False, nothing
        written, when the same ``max_running`` is stored already. Claims
        after it commits obey it."""

    async def delete_limit(self, kind: LimitKind, key: str) -> bool:
        """Remove the limit of ``kind`` on ``key`` (a queue goes back to one
        job at a time, a lane to no limit of its own); whether there was one."""

    async def running_jobs(self, kind: LimitKind, key: str, limit: int) -> list[str]:
        """The ids of up to ``limit`` running jobs of the queue or lane
        ``key``, oldest start first (what holds a job at that limit)."""

    async def ready_ahead(self, queue: str, priority: int, sequence: int,
                          limit: int) -> list[str]:
        """The ids of up to ``limit`` jobs of ``queue`` that a claim takes
        before the job at (``priority``, ``sequence``): queued, due, not
        cancelled, earlier in pick order (priority desc, then sequence), in
        that order; in a wide queue, earlier in the order its lanes take
        turns (a job's rank in its lane, then its lane's place in the
        line), in that order."""

    async def rate_limits(self, now: int | None) -> list[RateLimit]:
        """Every key with a rate limit or a hold in force at ``now``: queues
        first, then lanes, each by key (``rate_in_order``), each with its
        bucket's ``next_start_at`` (ms, rounded up), ``held_until`` (None
        when no hold is in force) and ``updated_at``."""

    async def put_rate_limit(self, limit: RateLimit, now: int | None) -> bool:
        """Store the bucket of ``limit`` (starts, period_ms, burst) on its
        kind and key, keeping the key's hold. A new bucket starts full; a
        changed one keeps the time of its next allowed start. False, nothing
        written, when the same three are stored already. Claims after it
        commits obey it."""

    async def delete_rate_limit(self, kind: LimitKind, key: str, now: int | None) -> bool:
        """Remove the bucket and the hold of ``kind`` on ``key``; whether
        either was there (a hold no longer in force at ``now`` does not count)."""

    async def put_back_rate_limited(
        self, sequence: int, token: str, kind: LimitKind, key: str, until: int,
        now: int | None,
    ) -> JobRecord | None:
        """An executor was rate-limited: hold ``kind`` on ``key`` until
        ``until`` (epoch ms; a later hold already there stays), and put the
        claim's job back to queued, due at once, without using an attempt
        (its ``attempt`` and history unchanged), in one transaction or
        batch. The put-back is fenced like ``retry`` (token, running, a live
        lease, no cancellation recorded); the hold is written either way.
        The job as put back, or None when the claim is no longer the job's
        or a cancellation is recorded."""

    async def settled_queues(self) -> list[str]:
        """Every queue that has settled jobs, by name (an index seek per queue)."""

    async def prune_settled(self, queue: str, completed_before: int | None,
                            failed_before: int | None, limit: int) -> int:
        """Delete up to ``limit`` of ``queue``'s settled jobs settled before
        their kind's cutoff (``completed_before`` for completed and
        cancelled, ``failed_before`` for the rest; None keeps that kind),
        with their redrive ids, in one transaction or batch; how many jobs
        were deleted. Never a queued or running job: the delete is fenced on
        the row being settled past its cutoff still."""

    async def storage_usage(self) -> StorageReport:
        """The database's size in bytes where the store can read it without
        reading rows (None on D1), and each tickwork table's row count."""
