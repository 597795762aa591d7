"""Durable schedules: a job template that falls due on every slot of a cron
expression (UTC) or a fixed interval.

A schedule is stored with the jobs. When a slot comes, the next tick turns
it into one job whose id is the schedule's name and the slot
(``nightly-report@2026-12-01T02:00:00Z``), due at the slot; that id is the
guarantee: however many nodes, alarms or cron firings reach the same slot,
the job is created once (the insert is idempotent, and fenced on the
schedule as it was read). Slots missed while nothing ticked (a host down, a
queue of work ahead) are caught up to ``catch_up`` of them, the latest
ones; older ones are skipped.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any, Literal, TypeAlias

from tickwork.model.cron import Cron, slot_text
from tickwork.model.errors import InvalidArgument
from tickwork.model.jobs import (
    MAX_DELAY_MS,
    Job,
    Recovery,
    Retry,
    ValidJob,
    check_safe_int,
    check_text,
    retry_from_value,
    validate_job,
)

#: Longest schedule name: its slot job ids (name, "@", 20 characters of
#: slot) stay within the 256 a job id may have.
MAX_SCHEDULE_NAME = 200
#: Most missed slots one firing catches up.
MAX_CATCH_UP = 1000
#: Shortest interval: a second (slots are named to the second).
MIN_EVERY_MS = 1000

ScheduleStatus: TypeAlias = Literal["created", "replaced", "unchanged"]


@dataclass(frozen=True, slots=True)
class ScheduledJob:
    """What each slot's job is: a ``Job`` without its id and due time (the
    schedule gives both)."""

    queue: str
    lane: str
    priority: int = 0
    payload: Any = None
    recovery: Recovery | None = None
    retry: Retry | None = None


@dataclass(frozen=True, slots=True)
class Schedule:
    """A job template on a cron expression (``cron``, UTC) or a fixed
    interval (``every_ms``, slots at whole multiples of it since the epoch),
    exactly one of the two. ``catch_up``: when ticks come late, how many of
    the missed slots (the latest) still get their job, 1 to 1000."""

    name: str
    job: ScheduledJob
    cron: str | None = None
    every_ms: int | None = None
    catch_up: int = 1


@dataclass(frozen=True, slots=True)
class ScheduleRecord:
    """A stored schedule: its definition, the next slot that has no job yet
    (epoch ms; while paused, the one it resumes from is computed then), and
    whether it is paused."""

    schedule: Schedule
    next_at: int
    paused: bool
    created_at: int
    updated_at: int


@dataclass(frozen=True, slots=True)
class StoredSchedule:
    """A schedule's row as a store returns it."""

    name: str
    spec_json: str
    next_at: int
    paused: bool
    created_at: int
    updated_at: int

    def record(self) -> ScheduleRecord:
        return ScheduleRecord(schedule_from_json(self.name, self.spec_json).schedule,
                              self.next_at, self.paused, self.created_at, self.updated_at)


@dataclass(frozen=True, slots=True)
class ValidSchedule:
    """A validated schedule: its canonical JSON (what is stored and compared)
    and the parsed timing."""

    name: str
    spec_json: str
    schedule: Schedule
    cron: Cron | None

    def next_after(self, epoch_ms: int) -> int:
        """The first slot strictly after ``epoch_ms``."""
        if self.cron is None:
            every = self.schedule.every_ms
            assert every is not None
            return (epoch_ms // every + 1) * every
        found = self.cron.next_after(epoch_ms)
        assert found is not None  # parse() refuses expressions without slots
        return found

    def due_slots(self, next_at: int, now: int) -> tuple[list[int], int]:
        """The slots to create a job for when the first slot without one is
        ``next_at`` and it is ``now``: the latest ``catch_up`` slots from
        ``next_at`` to ``now``, oldest first; and the next slot after ``now``."""
        slots: list[int] = []
        limit = self.schedule.catch_up
        if next_at <= now:
            latest = self._last_at_or_before(now)
            while latest is not None and latest >= next_at and len(slots) < limit:
                slots.append(latest)
                latest = self._last_at_or_before(latest - 1)
        slots.reverse()
        return slots, self.next_after(now)

    def _last_at_or_before(self, epoch_ms: int) -> int | None:
        if epoch_ms < 0:
            return None
        if self.cron is None:
            every = self.schedule.every_ms
            assert every is not None
            return epoch_ms // every * every
        return self.cron.last_at_or_before(epoch_ms)

    def slot_job(self, slot: int) -> ValidJob:
        """The job of ``slot``: the template, its id from the name and slot,
        due at the slot."""
        template = self.schedule.job
        job = validate_job(Job(f"{self.name}@{slot_text(slot)}", template.queue,
                               template.lane, template.priority, template.payload,
                               template.recovery, retry=template.retry))
        # The slot comes from the clock, not from a caller: set as it is (a
        # run_at a caller gives is refused before 2001, as likely seconds).
        return replace(job, run_at=slot)


def validate_schedule(schedule: object) -> ValidSchedule:
    """Check every field of ``schedule``; InvalidArgument naming the first bad one."""
    if not isinstance(schedule, Schedule):
        raise InvalidArgument("schedule", f"must be a tickwork.Schedule, got "
                                          f"{type(schedule).__name__}")
    name = check_text("name", schedule.name, MAX_SCHEDULE_NAME, InvalidArgument)
    template = schedule.job
    if not isinstance(template, ScheduledJob):
        raise InvalidArgument("job", f"must be a tickwork.ScheduledJob, got "
                                     f"{type(template).__name__}")
    if (schedule.cron is None) == (schedule.every_ms is None):
        raise InvalidArgument("cron", "give exactly one of cron and every_ms")
    cron = None
    if schedule.cron is not None:
        cron = Cron.parse(schedule.cron)
    else:
        every = check_safe_int("every_ms", schedule.every_ms, InvalidArgument, MIN_EVERY_MS)
        if every > MAX_DELAY_MS or every % 1000:
            raise InvalidArgument("every_ms", f"must be whole seconds from {MIN_EVERY_MS} to "
                                              f"{MAX_DELAY_MS}, got {every}")
    catch_up = check_safe_int("catch_up", schedule.catch_up, InvalidArgument, 1, MAX_CATCH_UP)
    # The template is a job in all but its id and time: validated as one
    # (errors name job.<field>), and stored in its canonical form.
    try:
        sample = validate_job(Job("template", template.queue, template.lane, template.priority,
                                  template.payload, template.recovery, retry=template.retry))
    except InvalidArgument as error:
        raise InvalidArgument(f"job.{error.field}", error.problem) from None
    spec = {
        "cron": schedule.cron, "every_ms": schedule.every_ms, "catch_up": catch_up,
        "job": {"queue": sample.queue, "lane": sample.lane, "priority": sample.priority,
                "payload": json.loads(sample.payload_json),
                "max_recoveries": sample.max_recoveries,
                "retry": None if sample.retry_json is None else json.loads(sample.retry_json)},
    }
    spec_json = json.dumps(spec, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return ValidSchedule(name, spec_json, schedule, cron)


def schedule_from_json(name: str, spec_json: str) -> ValidSchedule:
    """A stored schedule (its ``spec_json``) as validated, ready to fire."""
    spec = json.loads(spec_json)
    job = spec["job"]
    retry = job["retry"]
    schedule = Schedule(
        name, ScheduledJob(job["queue"], job["lane"], job["priority"], job["payload"],
                           None if job["max_recoveries"] is None
                           else Recovery(job["max_recoveries"]),
                           None if retry is None else retry_from_value(retry)),
        spec["cron"], spec["every_ms"], spec["catch_up"])
    return ValidSchedule(name, spec_json, schedule,
                         None if spec["cron"] is None else Cron.parse(spec["cron"]))
