"""Shared (D1) jobs start without waiting for the cron: the drain after a
write (in ``waitUntil``), the ``SharedPump``'s alarm at the next due time,
and drains that overlap without a lock, on Miniflare's real D1, both SDK shapes."""

from __future__ import annotations

import asyncio
import contextvars
import time
import types
from collections import Counter, defaultdict
from typing import Any

import pytest

from tests.support.fakes.alarms import AlarmScheduler, SimClock
from tests.support.worker import ExecutionContext, job, make_env, send, use_deployment_hook
from tickwork import Completed, Failed, JobRecord
from tickwork.executors import ExecutorRegistry

pytestmark = pytest.mark.usefixtures("js_module")


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, float]]:
    """The deployment's registry replaced by one that notes every start:
    (job id, attempt, wall-clock ms)."""
    starts: list[tuple[str, int, float]] = []

    async def note(job_record: JobRecord, signal: Any) -> Completed:
        starts.append((job_record.job_id, job_record.attempt, time.time() * 1000))
        return Completed()

    use_deployment_hook(monkeypatch, "build_registry",
                        lambda env: ExecutorRegistry(fallback=note))
    return starts


@pytest.fixture
def drain_env(db: Any, shape: str, workers_module: types.ModuleType) -> Any:
    built = make_env(db, shape, write_drain=True, pump=True)
    yield built
    built.JOB_OWNERS.close()
    built.TICKWORK_PUMP.close()


@pytest.fixture
def drain_worker(drain_env: Any) -> Any:
    from worker.entry import Default

    return Default(ExecutionContext(), drain_env)


async def states(query: Any) -> dict[str, str]:
    return {row[0]: row[1] for row in await query("SELECT job_id, state FROM tickwork_jobs")}


async def pump_alarm(env: Any) -> int | None:
    alarm = await env.TICKWORK_PUMP.storage("DB").getAlarm()
    return None if alarm is None or not isinstance(alarm, (int, float)) else int(alarm)


async def deliver_pump_alarm(env: Any) -> None:
    """Deliver the pump's stored alarm as the runtime does, through the
    test suite's alarm scheduler: it clears the alarm, then calls ``alarm()``
    on the live instance, or on one the alarm wakes."""
    due = await pump_alarm(env)
    assert due is not None, "the pump has no alarm to deliver"
    deliveries = await AlarmScheduler(env.TICKWORK_PUMP, SimClock(due)).run_due()
    assert [delivery.outcome for delivery in deliveries] == ["ok"], deliveries


# ------------------------------------------------------------ after a write


async def test_an_accepted_job_starts_in_wait_until_after_the_answer(
        drain_worker: Any, shape: str, started: list[Any], query: Any) -> None:
    status, body = await send(drain_worker, shape, "POST", "/v1/shared/jobs",
                              {"jobs": [job("a"), job("b", queue="other")]})
    assert status == 200, body
    # The answer never waits for the drain: nothing has started yet.
    assert started == []
    assert len(drain_worker.ctx.kept) == 1
    await drain_worker.ctx.settle()
    assert sorted(job_id for job_id, _, _ in started) == ["a", "b"]
    assert await states(query) == {"a": "settled", "b": "settled"}


@pytest.mark.parametrize("method, path, body", [
    ("GET", "/v1/shared/jobs/nope", None),
    ("GET", "/v1/shared/queues", None),
    ("POST", "/v1/shared/jobs", {"jobs": [{"job_id": "", "queue": "q"}]}),
])
async def test_reads_and_refused_writes_keep_nothing_running(
        drain_worker: Any, shape: str, method: str, path: str, body: Any) -> None:
    await send(drain_worker, shape, method, path, body)
    assert drain_worker.ctx.kept == []


async def test_concurrent_requests_each_know_whether_they_wrote(
        drain_worker: Any, shape: str, started: list[Any]) -> None:
    # One isolate, one cached API runtime, requests interleaved: the wake of
    # one request's write marks that request alone (its own context).
    await send(drain_worker, shape, "POST", "/v1/shared/jobs", {"jobs": [job("seed")]})
    await drain_worker.ctx.settle()
    requests = []
    for i in range(8):  # reads and writes interleaved
        requests.append(send(drain_worker, shape, "GET", "/v1/shared/jobs/seed"))
        requests.append(send(drain_worker, shape, "POST", "/v1/shared/jobs",
                             {"jobs": [job(f"w{i}")]}))
    answers = await asyncio.gather(*requests)
    assert all(status in (200, 201) for status, _ in answers), answers
    assert len(drain_worker.ctx.kept) == 8
    await drain_worker.ctx.settle()
    assert sorted(job_id for job_id, _, _ in started) == ["seed", *(f"w{i}" for i in range(8))]


async def test_a_resume_drains_too(
        drain_worker: Any, drain_env: Any, shape: str, started: list[Any], query: Any) -> None:
    status, _ = await send(drain_worker, shape, "POST", "/v1/shared/queues/q/pause", {})
    assert status == 200
    await drain_worker.ctx.settle()
    await send(drain_worker, shape, "POST", "/v1/shared/jobs", {"jobs": [job("held")]})
    await drain_worker.ctx.settle()
    assert started == [] and await states(query) == {"held": "queued"}
    status, _ = await send(drain_worker, shape, "POST", "/v1/shared/queues/q/resume", {})
    assert status == 200
    assert len(drain_worker.ctx.kept) == 1
    await drain_worker.ctx.settle()
    assert [job_id for job_id, _, _ in started] == ["held"]


async def test_a_redrive_drains_and_a_new_schedule_arms_the_pump_for_its_slot(
        drain_worker: Any, drain_env: Any, shape: str, monkeypatch: pytest.MonkeyPatch,
        query: Any) -> None:
    outcomes = iter([Failed(reason="first"), Completed()])
    starts: list[str] = []

    async def once_failing(job_record: JobRecord, signal: Any) -> Completed | Failed:
        starts.append(job_record.job_id)
        return next(outcomes)

    use_deployment_hook(monkeypatch, "build_registry",
                        lambda env: ExecutorRegistry(fallback=once_failing))
    await send(drain_worker, shape, "POST", "/v1/shared/jobs", {"jobs": [job("a")]})
    await drain_worker.ctx.settle()
    assert starts == ["a"]
    status, _ = await send(drain_worker, shape, "POST", "/v1/shared/jobs/a/redrive",
                           {"redrive_id": "again"})
    assert status == 200
    assert len(drain_worker.ctx.kept) == 1
    await drain_worker.ctx.settle()
    assert starts == ["a", "a"]
    status, body = await send(drain_worker, shape, "POST", "/v1/shared/schedules",
                              {"name": "hourly", "every_ms": 3_600_000,
                               "job": {"queue": "clock"}})
    assert status in (200, 201), body
    await drain_worker.ctx.settle()
    (next_at,) = [row[0] for row in await query("SELECT next_at FROM tickwork_schedules")]
    assert await pump_alarm(drain_env) == next_at


async def test_the_drain_after_a_write_stops_at_its_budget_and_arms_the_pump_now(
        drain_worker: Any, drain_env: Any, shape: str, started: list[Any],
        query: Any) -> None:
    drain_env.TICKWORK_WRITE_DRAIN_MAX_TICKS = "3"
    ids = [f"j{i}" for i in range(5)]
    await send(drain_worker, shape, "POST", "/v1/shared/jobs",
               {"jobs": [job(job_id, queue=job_id) for job_id in ids]})
    before = int(time.time() * 1000)
    await drain_worker.ctx.settle()
    assert len(started) == 3
    assert Counter((await states(query)).values()) == Counter({"settled": 3, "queued": 2})
    # It stopped on its budget with work left: the pump drains the rest at once.
    alarm = await pump_alarm(drain_env)
    assert alarm is not None and before - 5_000 <= alarm <= int(time.time() * 1000) + 5_000
    await deliver_pump_alarm(drain_env)
    assert sorted(job_id for job_id, _, _ in started) == ids
    assert await pump_alarm(drain_env) is None  # nothing left waits


async def test_max_ticks_zero_leaves_the_drain_to_the_pump(
        drain_worker: Any, drain_env: Any, shape: str, started: list[Any], query: Any) -> None:
    drain_env.TICKWORK_WRITE_DRAIN_MAX_TICKS = "0"
    await send(drain_worker, shape, "POST", "/v1/shared/jobs",
               {"jobs": [job("later", delay_ms=60_000)]})
    await drain_worker.ctx.settle()
    (due,) = [row[0] for row in await query("SELECT due_at FROM tickwork_jobs")]
    assert await pump_alarm(drain_env) == due  # still armed, though nothing drained
    before = int(time.time() * 1000)
    await send(drain_worker, shape, "POST", "/v1/shared/jobs", {"jobs": [job("a")]})
    await drain_worker.ctx.settle()
    assert started == [] and (await states(query))["a"] == "queued"
    alarm = await pump_alarm(drain_env)  # work due now: the pump drains it at once
    assert alarm is not None and before - 5_000 <= alarm <= int(time.time() * 1000) + 5_000


async def test_a_failing_drain_after_a_write_is_logged_and_the_answer_stands(
        drain_worker: Any, drain_env: Any, shape: str,
        capsys: pytest.CaptureFixture[str], query: Any) -> None:
    class Unavailable:
        def prepare(self, sql: str) -> Any:
            raise RuntimeError("D1 unavailable")

    status, _ = await send(drain_worker, shape, "POST", "/v1/shared/jobs", {"jobs": [job("a")]})
    assert status == 200
    database, drain_env.DB = drain_env.DB, Unavailable()  # between the answer and the drain
    await drain_worker.ctx.settle()
    drain_env.DB = database
    err = capsys.readouterr().err
    assert "the drain after a shared write failed" in err and "D1 unavailable" in err
    assert await states(query) == {"a": "queued"}


# ------------------------------------------------------------ the pump


async def test_a_delayed_job_arms_the_pump_for_its_due_time_and_starts_then(
        drain_worker: Any, drain_env: Any, shape: str, started: list[Any],
        query: Any) -> None:
    # A drain with a budget waits for a job due within it: this one's is too
    # short, so the job is left to the pump.
    drain_env.TICKWORK_WRITE_DRAIN_BUDGET_MS = "50"
    await send(drain_worker, shape, "POST", "/v1/shared/jobs",
               {"jobs": [job("later", delay_ms=300), job("much-later", queue="o",
                                                           delay_ms=3_600_000)]})
    await drain_worker.ctx.settle()
    assert started == []
    due = dict(await query("SELECT job_id, due_at FROM tickwork_jobs"))
    # Armed for the earliest due job, to the millisecond.
    assert await pump_alarm(drain_env) == due["later"]
    # Evicted meanwhile: the alarm lives in storage and wakes a new instance.
    drain_env.TICKWORK_PUMP.instance("DB")
    drain_env.TICKWORK_PUMP.evict("DB")
    await asyncio.sleep(max(0.0, (due["later"] - time.time() * 1000) / 1000) + 0.05)
    await deliver_pump_alarm(drain_env)
    assert [job_id for job_id, _, _ in started] == ["later"]
    assert drain_env.TICKWORK_PUMP.incarnation("DB") == 2
    # Re-armed for what still waits.
    assert await pump_alarm(drain_env) == due["much-later"]


async def test_the_pump_keeps_the_earliest_time_it_was_asked_for(
        drain_env: Any) -> None:
    from tickwork.model.errors import InvalidArgument

    pump = drain_env.TICKWORK_PUMP.getByName("DB")
    assert await pump.arm(2_000_000_000_000) == 2_000_000_000_000
    assert await pump.arm(1_900_000_000_000) == 1_900_000_000_000
    assert await pump.arm(1_950_000_000_000) == 1_900_000_000_000
    assert await pump_alarm(drain_env) == 1_900_000_000_000
    instance = drain_env.TICKWORK_PUMP.instance("DB")
    for bad in ("soon", -1, True, 2**53, None):
        with pytest.raises(InvalidArgument, match="at_ms"):
            await instance.arm(bad)
    assert await pump_alarm(drain_env) == 1_900_000_000_000


async def test_an_idle_pump_never_polls(drain_env: Any, shape: str) -> None:
    from tickwork.cloudflare.pump import PUMP_IDLE_GAP_MS
    from tickwork.cloudflare.shared_drains import SharedDrain

    pump = drain_env.TICKWORK_PUMP.instance("DB")
    now = 1_900_000_000_000
    # A drain that stopped on its budget having settled nothing asks for
    # "now"; the pump's own alarm waits at least its idle gap instead.
    await pump._arm_after_own_drain(SharedDrain([], True, None, now), now)
    assert await pump_alarm(drain_env) == now + PUMP_IDLE_GAP_MS


async def test_a_pump_turned_off_drains_nothing_and_does_not_re_arm(
        drain_worker: Any, drain_env: Any, shape: str, started: list[Any],
        capsys: pytest.CaptureFixture[str]) -> None:
    drain_env.TICKWORK_WRITE_DRAIN_MAX_TICKS = "0"
    await send(drain_worker, shape, "POST", "/v1/shared/jobs", {"jobs": [job("a")]})
    await drain_worker.ctx.settle()
    assert await pump_alarm(drain_env) is not None  # armed for now
    drain_env.TICKWORK_PUMP_MAX_TICKS = "0"
    await deliver_pump_alarm(drain_env)
    assert started == [] and await pump_alarm(drain_env) is None
    assert "pump: off" in capsys.readouterr().out


async def test_a_pump_whose_drain_fails_logs_it_and_tries_again_later(
        drain_env: Any, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tickwork.cloudflare.pump import PUMP_RETRY_MS

    def broken(env: Any) -> ExecutorRegistry:
        raise RuntimeError("executors unavailable")

    use_deployment_hook(monkeypatch, "build_registry", broken)
    before = int(time.time() * 1000)
    await drain_env.TICKWORK_PUMP.instance("DB", by_alarm=True).alarm()
    assert "pump: the drain failed" in capsys.readouterr().err
    alarm = await pump_alarm(drain_env)
    assert alarm is not None and before + PUMP_RETRY_MS <= alarm <= before + PUMP_RETRY_MS + 5_000


async def test_without_the_pump_binding_nothing_is_armed(
        db: Any, shape: str, workers_module: types.ModuleType, started: list[Any],
        query: Any) -> None:
    from worker.entry import Default

    env = make_env(db, shape, write_drain=True)
    worker = Default(ExecutionContext(), env)
    try:
        await send(worker, shape, "POST", "/v1/shared/jobs",
                   {"jobs": [job("now"), job("later", queue="o", delay_ms=60_000)]})
        await worker.ctx.settle()
        assert [job_id for job_id, _, _ in started] == ["now"]
        assert await states(query) == {"now": "settled", "later": "queued"}
    finally:
        env.JOB_OWNERS.close()


# ------------------------------------------------------------ drains at once


async def test_overlapping_drains_settle_every_job_once_per_attempt(
        drain_worker: Any, drain_env: Any, shape: str, monkeypatch: pytest.MonkeyPatch,
        query: Any) -> None:
    """Cron firings, the pump and drains after writes, all at once on one
    database: every attempt of every job runs exactly once, and each job's
    attempts are 1, 2, ... in order (a retried job's chain included)."""
    from tickwork.cloudflare.app import run_cron
    from tickwork.cloudflare.shared_drains import WRITE_DRAIN, drain_shared

    runs: defaultdict[str, list[int]] = defaultdict(list)
    drainer: contextvars.ContextVar[str] = contextvars.ContextVar("drainer", default="?")
    ran_by: Counter[str] = Counter()

    async def flaky(job_record: JobRecord, signal: Any) -> Completed | Failed:
        runs[job_record.job_id].append(job_record.attempt)
        ran_by[drainer.get()] += 1
        await asyncio.sleep(0.002)
        if job_record.job_id.endswith("-retried") and job_record.attempt == 1:
            return Failed(reason="first_try")
        return Completed()

    def build_registry(env: Any) -> ExecutorRegistry:
        return ExecutorRegistry(fallback=flaky)

    use_deployment_hook(monkeypatch, "build_registry", build_registry)
    drain_env.TICKWORK_WRITE_DRAIN_MAX_TICKS = "0"  # the drains below run them
    jobs = [job(f"j{i}" + ("-retried" if i % 3 == 0 else ""), queue=f"q{i % 6}",
                retry={"attempts": 2, "base_delay_ms": 50}) for i in range(36)]
    status, _ = await send(drain_worker, shape, "POST", "/v1/shared/jobs", {"jobs": jobs})
    assert status == 200
    firing = types.SimpleNamespace(scheduledTime=1_796_000_040_000.0, cron="* * * * *")

    async def pump() -> None:
        drainer.set("pump")
        await drain_env.TICKWORK_PUMP.instance("DB", by_alarm=True).alarm()

    async def write_drain(name: str) -> None:
        drainer.set(name)
        await drain_shared(drain_env, build_registry(drain_env),
                           WRITE_DRAIN.from_env(types.SimpleNamespace()))

    async def cron(name: str) -> None:
        drainer.set(name)
        await run_cron(drain_env, firing, executors=build_registry)

    await asyncio.gather(cron("cron-1"), cron("cron-2"), pump(),
                         write_drain("write-1"), write_drain("write-2"), write_drain("write-3"))
    # A retry due after the drains ended: the last drain armed the pump for it.
    for _ in range(100):
        if all(state == "settled" for state in (await states(query)).values()):
            break
        await asyncio.sleep(0.06)
        await pump()
    expected = {str(spec["job_id"]): [1, 2] if str(spec["job_id"]).endswith("-retried") else [1]
                for spec in jobs}
    assert dict(runs) == expected
    assert len(ran_by) >= 3, ran_by  # the drains really overlapped
    outcomes = Counter(row[0] for row in await query("SELECT outcome FROM tickwork_jobs"))
    assert outcomes == Counter({"completed": 36})


async def test_the_drain_after_a_write_stays_inside_its_documented_query_bound(
        drain_worker: Any, drain_env: Any, shape: str, started: list[Any], db: Any) -> None:
    # docs/how-to/deploy-on-cloudflare.md: after a one-job write 9 round
    # trips carrying 15 statements; with all 10 ticks used at most 16
    # carrying 36 (a schema check, a batch a claim, the history, next-work).
    await send(drain_worker, shape, "POST", "/v1/shared/jobs", {"jobs": [job("one")]})
    before = db.stats.snapshot()
    await drain_worker.ctx.settle()
    spent = db.stats.since(before)
    assert len(started) == 1
    assert spent.round_trips <= 9 and spent.statements <= 15, spent
    await send(drain_worker, shape, "POST", "/v1/shared/jobs",
               {"jobs": [job(f"j{i}", queue=f"q{i}") for i in range(30)]})
    before = db.stats.snapshot()
    await drain_worker.ctx.settle()
    spent = db.stats.since(before)
    assert len(started) == 11
    assert spent.round_trips <= 16 and spent.statements <= 36, spent
