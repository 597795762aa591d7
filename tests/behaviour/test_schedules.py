"""Durable schedules, on every store.

A schedule's slot becomes exactly one job (its id: the schedule's name and
the slot), created by the first tick at or after the slot, however many
runtimes or firings reach it; missed slots are caught up to the schedule's
bound. Each test moves a manual clock (database time is overridden by it on
the shared stores); it starts at 2026-11-30T00:53:20Z.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tests.support.engine import Engine
from tickwork import InvalidArgument, Recovery, Retry, Schedule, ScheduledJob

MINUTE, HOUR, DAY = 60_000, 3_600_000, 86_400_000


def at(text: str) -> int:
    """Epoch ms of an ISO time (UTC)."""
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def nightly(**changes: object) -> Schedule:
    fields: dict[str, object] = {
        "name": "nightly-report", "cron": "0 2 * * *",
        "job": ScheduledJob("reports", "reports", 0, {"report": "sales"})}
    fields.update(changes)
    return Schedule(**fields)  # type: ignore[arg-type]


async def test_each_slot_becomes_one_job_when_it_comes(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    assert await jobs.put_schedule(nightly()) == "created"
    first = at("2026-11-30T02:00:00")
    [record] = await jobs.schedules()
    assert (record.schedule, record.next_at, record.paused) == (nightly(), first, False)
    assert await jobs.next_tick_at() == first
    assert await jobs.has_pending_work() is False
    assert (await jobs.tick()).status == "idle"
    assert await engine.job_states() == {}

    now.advance(first - now())
    assert await jobs.has_pending_work() is True
    result = await jobs.tick()
    assert (result.status, result.job_id, result.outcome) == (
        "settled", "nightly-report@2026-11-30T02:00:00Z", "completed")
    job = await jobs.read("nightly-report@2026-11-30T02:00:00Z")
    assert job is not None
    assert (job.queue, job.lane, job.payload, job.run_at, job.due_at) == (
        "reports", "reports", {"report": "sales"}, first, None)
    assert await jobs.next_tick_at() == first + DAY
    assert (await jobs.tick()).status == "idle"  # one job per slot
    assert [r.next_at for r in await jobs.schedules()] == [first + DAY]


async def test_a_slot_fired_by_many_runtimes_gets_one_job(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.put_schedule(nightly())
    now.advance(at("2026-11-30T02:00:00") - now())
    other = engine.another_process(clock=now) if engine.local else engine.another_process()
    assert await jobs.fire_schedules() == 1
    assert await other.fire_schedules() == 0
    assert await jobs.fire_schedules() == 0
    assert list(await engine.job_states()) == ["nightly-report@2026-11-30T02:00:00Z"]


async def test_missed_slots_are_caught_up_to_the_bound(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.put_schedule(nightly(catch_up=3))
    now.advance(at("2026-12-09T12:00:00") - now())  # ten slots went by
    assert await jobs.fire_schedules() == 3
    assert sorted(await engine.job_states()) == [
        "nightly-report@2026-12-07T02:00:00Z", "nightly-report@2026-12-08T02:00:00Z",
        "nightly-report@2026-12-09T02:00:00Z"]
    assert [r.next_at for r in await jobs.schedules()] == [at("2026-12-10T02:00:00")]
    results = await jobs.drain()
    assert [r.job_id for r in results] == sorted(await engine.job_states())  # oldest first


async def test_catch_up_is_bounded_per_tick_and_each_slot_still_gets_one_job(
    engine: Engine,
) -> None:
    """Found by an outage test on main: one firing made up to 100 schedules x
    1,000 slots of jobs in one transaction. Now a call makes at most
    MAX_SLOTS_PER_TICK, oldest first, and the next call goes on."""
    from tickwork.lifecycle.operations import MAX_SLOTS_PER_TICK

    jobs, now = engine.timed_runtime()
    for name in ("a", "b"):
        await jobs.put_schedule(Schedule(name, ScheduledJob("q", "q"), every_ms=MINUTE,
                                         catch_up=700))
    now.advance(2 * DAY)  # 2,880 slots of each went by; 700 each to catch up
    made = [await jobs.fire_schedules() for _ in range(3)]
    assert made == [MAX_SLOTS_PER_TICK, 1_400 - MAX_SLOTS_PER_TICK, 0]
    names = list(await engine.job_states())
    assert len(names) == len(set(names)) == 1_400
    for name in ("a", "b"):
        slots = sorted(job_id for job_id in names if job_id.startswith(f"{name}@"))
        assert len(slots) == 700  # the latest 700 slots, each once
    assert await jobs.fire_schedules() == 0
    now.advance(MINUTE)
    assert await jobs.fire_schedules() == 2  # then one slot each, as ever


async def test_an_interval_schedule_runs_on_whole_multiples(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    every = Schedule("sync", ScheduledJob("sync", "sync"), every_ms=15 * MINUTE)
    assert await jobs.put_schedule(every) == "created"
    assert await jobs.next_tick_at() == at("2026-11-30T01:00:00")
    now.advance(at("2026-11-30T01:31:00") - now())
    assert await jobs.fire_schedules() == 1  # catch_up 1: the 01:30 slot only
    assert list(await engine.job_states()) == ["sync@2026-11-30T01:30:00Z"]
    assert await jobs.next_tick_at() == now()  # its job is ready


async def test_put_again_is_unchanged_and_a_replace_starts_afresh(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.put_schedule(nightly())
    now.advance(3 * HOUR)  # the 02:00 slot has come, nothing ticked
    assert await jobs.put_schedule(nightly()) == "unchanged"
    assert [r.next_at for r in await jobs.schedules()] == [at("2026-11-30T02:00:00")]
    replaced = nightly(cron="30 6 * * *",
                       job=ScheduledJob("reports", "reports", 5, {"report": "stock"}))
    assert await jobs.put_schedule(replaced) == "replaced"
    [record] = await jobs.schedules()
    assert (record.schedule, record.next_at) == (replaced, at("2026-11-30T06:30:00"))
    assert await jobs.fire_schedules() == 0  # the missed 02:00 slot went with the old one
    now.advance(at("2026-11-30T06:30:00") - now())
    result = await jobs.tick()
    assert result.job_id == "nightly-report@2026-11-30T06:30:00Z"
    job = await jobs.read(result.job_id)
    assert job is not None and (job.priority, job.payload) == (5, {"report": "stock"})


async def test_a_paused_schedule_creates_nothing_and_resumes_from_now(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.put_schedule(nightly(catch_up=5))
    assert await jobs.pause_schedule("nightly-report") is True
    assert await jobs.pause_schedule("nightly-report") is False
    assert await jobs.next_tick_at() is None
    now.advance(3 * DAY)
    assert await jobs.has_pending_work() is False
    assert await jobs.fire_schedules() == 0
    assert (await jobs.schedules())[0].paused is True
    assert await jobs.resume_schedule("nightly-report") is True
    assert await jobs.resume_schedule("nightly-report") is False
    # The slots of the pause get no job: it goes on from the next one.
    assert await jobs.next_tick_at() == at("2026-12-03T02:00:00")
    assert await jobs.fire_schedules() == 0
    assert await engine.job_states() == {}


async def test_deleting_a_schedule_keeps_its_jobs(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.put_schedule(nightly())
    now.advance(at("2026-11-30T02:00:00") - now())
    assert await jobs.fire_schedules() == 1
    assert await jobs.delete_schedule("nightly-report") is True
    assert await jobs.delete_schedule("nightly-report") is False
    assert await jobs.schedules() == []
    now.advance(DAY)
    assert await jobs.fire_schedules() == 0
    assert list(await engine.job_states()) == ["nightly-report@2026-11-30T02:00:00Z"]
    assert await jobs.next_tick_at() == now()  # the created job is still due


async def test_slot_jobs_carry_the_template_policies(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    template = ScheduledJob("hooks", "acme", 1, {"do": "fail"}, Recovery(2),
                            Retry(2, base_delay_ms=0))
    await jobs.put_schedule(Schedule("ping", template, cron="*/5 * * * *"))
    now.advance(at("2026-11-30T00:55:00") - now())
    result = await jobs.tick()
    assert (result.status, result.job_id) == ("retried", "ping@2026-11-30T00:55:00Z")
    job = await jobs.read("ping@2026-11-30T00:55:00Z")
    assert job is not None and (job.recovery, job.retry, job.attempt) == (
        Recovery(2), Retry(2, 0, 2.0, 3_600_000, 0.0, False), 2)


async def test_month_ends_and_leap_days_have_their_slots(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.put_schedule(Schedule("leap", ScheduledJob("q", "q"), cron="0 0 29 2 *"))
    await jobs.put_schedule(Schedule("last", ScheduledJob("q", "q"), cron="0 0 31 * *"))
    slots = {r.schedule.name: r.next_at for r in await jobs.schedules()}
    assert slots == {"leap": at("2028-02-29T00:00:00"), "last": at("2026-12-31T00:00:00")}


@pytest.mark.parametrize(("schedule", "field"), [
    (nightly(cron="0 2 * *"), "cron"),
    (nightly(cron="61 * * * *"), "cron"),
    (nightly(cron="0 0 30 2 *"), "cron"),
    (nightly(cron=None), "cron"),
    (nightly(every_ms=60_000), "cron"),
    (nightly(cron=None, every_ms=1500), "every_ms"),
    (nightly(cron=None, every_ms=500), "every_ms"),
    (nightly(catch_up=0), "catch_up"),
    (nightly(catch_up=1001), "catch_up"),
    (nightly(name=""), "name"),
    (nightly(name="n" * 201), "name"),
    (nightly(job=ScheduledJob("q", "q", 0, float("nan"))), "job.payload"),
    (nightly(job=ScheduledJob("q", "q", True)), "job.priority"),
    (nightly(job=ScheduledJob("q", "q", retry=Retry(0))), "job.retry.attempts"),
    (nightly(job={"queue": "q"}), "job"),
    ("nightly", "schedule"),
])
async def test_a_bad_schedule_is_refused_by_name_and_nothing_changes(
        engine: Engine, schedule: object, field: str) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.put_schedule(nightly(name="kept"))
    before = await jobs.schedules()
    with pytest.raises(InvalidArgument) as raised:
        await jobs.put_schedule(schedule)  # type: ignore[arg-type]
    assert raised.value.field == field
    assert await jobs.schedules() == before


@pytest.mark.parametrize("call", ["pause_schedule", "resume_schedule", "delete_schedule"])
async def test_bad_schedule_names_are_refused(engine: Engine, call: str) -> None:
    jobs, _ = engine.timed_runtime()
    with pytest.raises(InvalidArgument) as raised:
        await getattr(jobs, call)("")
    assert raised.value.field == "name"
