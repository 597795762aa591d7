"""``Default.scheduled``: a cron firing fills schedule slots and prunes once
per firing under the cron lock, then drains the shared D1 queues without it."""

from __future__ import annotations

import asyncio
import contextlib
import re
import types
from collections import Counter
from typing import Any

import pytest

from tests.support.worker import job, send, use_deployment_hook
from tickwork import Completed, JobRecord
from tickwork.executors import ExecutorRegistry

pytestmark = pytest.mark.usefixtures("js_module")

CRON = "* * * * *"
FIRST_FIRING = 1_796_000_040_000.0  # a JS number, as controller.scheduledTime is


def controller(scheduled_time: float | None = FIRST_FIRING, cron: str = CRON) -> Any:
    return types.SimpleNamespace(scheduledTime=scheduled_time, cron=cron)


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch, worker: Any) -> Counter[str]:
    """Replace the deployment's registry with one that counts every execution."""
    counts: Counter[str] = Counter()

    async def count(job_record: JobRecord, signal: Any) -> Completed:
        counts[job_record.job_id] += 1
        await asyncio.sleep(0.01)  # long enough for the firings to overlap
        return Completed()

    def build_registry(env: Any) -> ExecutorRegistry:
        return ExecutorRegistry(fallback=count)

    use_deployment_hook(monkeypatch, "build_registry", build_registry)
    return counts


async def enqueue(worker: Any, shape: str, *ids: str, queue_count: int = 3) -> None:
    jobs = [job(job_id, queue=f"q{index % queue_count}") for index, job_id in enumerate(ids)]
    status, _ = await send(worker, shape, "POST", "/v1/shared/jobs", {"jobs": jobs})
    assert status == 200


async def states(query: Any) -> dict[str, tuple[str, str | None]]:
    rows = await query("SELECT job_id, state, outcome FROM tickwork_jobs")
    return {row[0]: (row[1], row[2]) for row in rows}


async def test_overlapping_firings_run_every_job_once(
        worker: Any, env: Any, shape: str, executed: Counter[str], query: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    # Both firings drain at once (no lock around a drain: every claim is
    # fenced); the once-per-firing work runs under the lock, once.
    ids = [f"j{i}" for i in range(8)]
    await enqueue(worker, shape, *ids)
    ctx = types.SimpleNamespace()
    await asyncio.gather(worker.scheduled(controller(), env, ctx),
                         worker.scheduled(controller(), env, ctx))
    assert executed == Counter(dict.fromkeys(ids, 1))
    assert await states(query) == dict.fromkeys(ids, ("settled", "completed"))
    logged = capsys.readouterr()
    # Informational lines go to stdout: wrangler shows every stderr line as an [ERROR].
    summaries = re.findall(r"cron: (\d+) tick\(s\), (\d+) job\(s\) settled", logged.out)
    assert len(summaries) == 2
    assert sum(int(settled) for _, settled in summaries) == 8
    assert "cron:" not in logged.err
    assert logged.out.count("cron: slot work skipped (") == 1
    assert await query("SELECT name, slot FROM tickwork_job_locks_slots") == [
        ("tickwork-cron-drain", f"{CRON}@{int(FIRST_FIRING)}")]


async def test_scheduled_takes_the_controller_alone_or_with_env_and_ctx(
        worker: Any, env: Any, shape: str, executed: Counter[str], query: Any) -> None:
    # Cloudflare's current examples declare scheduled(self, controller); older
    # runtimes pass (controller, env, ctx). Both must drain (self.env is the env).
    await enqueue(worker, shape, "alone")
    await worker.scheduled(controller())
    await enqueue(worker, shape, "with-env")
    await worker.scheduled(controller(FIRST_FIRING + 60_000), env, types.SimpleNamespace())
    assert executed == Counter({"alone": 1, "with-env": 1})
    assert await states(query) == dict.fromkeys(["alone", "with-env"], ("settled", "completed"))


async def test_a_repeated_firing_of_the_same_slot_skips_its_slot_work_but_drains(
        worker: Any, env: Any, shape: str, executed: Counter[str], query: Any) -> None:
    from tickwork.cloudflare.app import run_cron
    from worker.executors import build_registry

    await enqueue(worker, shape, "a")
    first = await run_cron(env, controller(), executors=build_registry)
    assert first is not None and first.lock.ran and first.drain is not None
    assert [t.job_id for t in first.drain.ticks] == ["a"]
    await enqueue(worker, shape, "b")
    again = await run_cron(env, controller(), executors=build_registry)
    assert again is not None and (again.lock.ran, again.lock.reason) == (False, "slot_done")
    assert again.drain is not None and [t.job_id for t in again.drain.ticks] == ["b"]
    assert executed == Counter({"a": 1, "b": 1})
    later = await run_cron(env, controller(FIRST_FIRING + 60_000), executors=build_registry)
    assert later is not None and later.lock.ran
    assert executed == Counter({"a": 1, "b": 1})


async def test_each_firing_prunes_settled_jobs_past_their_retention(
        worker: Any, env: Any, shape: str, executed: Counter[str], query: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    await enqueue(worker, shape, "old-1", "old-2", "new", queue_count=1)
    await worker.scheduled(controller())
    # Two of them settled eight days ago (the built-in default keeps a week).
    await query("UPDATE tickwork_jobs SET settled_at = settled_at - 8 * 86400000 "
                "WHERE job_id IN ('old-1', 'old-2')")
    await enqueue(worker, shape, "waiting", queue_count=1)
    capsys.readouterr()
    await worker.scheduled(controller(FIRST_FIRING + 60_000))
    assert "cron: 1 tick(s), 1 job(s) settled, 2 settled job(s) pruned" in capsys.readouterr().out
    assert await states(query) == dict.fromkeys(["new", "waiting"], ("settled", "completed"))


async def test_the_drain_is_bounded_by_max_ticks(
        worker: Any, env: Any, shape: str, executed: Counter[str], query: Any) -> None:
    from tickwork.cloudflare.app import run_cron
    from worker.executors import build_registry

    env.TICKWORK_CRON_MAX_TICKS = "3"
    await enqueue(worker, shape, *[f"j{i}" for i in range(5)], queue_count=5)
    run = await run_cron(env, controller(), executors=build_registry)
    assert run is not None and run.drain is not None and len(run.drain.ticks) == 3
    assert run.drain.stopped_early
    assert sum(executed.values()) == 3
    assert Counter(state for state, _ in (await states(query)).values()) == Counter(
        {"settled": 3, "queued": 2})


async def test_a_firing_without_a_usable_time_still_runs_under_the_lock(
        worker: Any, env: Any, shape: str, executed: Counter[str], query: Any) -> None:
    from tickwork.cloudflare.app import cron_slot, run_cron
    from worker.executors import build_registry

    assert cron_slot(controller(None)) is None
    assert cron_slot(controller(float("nan"))) is None
    assert cron_slot(types.SimpleNamespace()) is None
    assert cron_slot(controller(12.5)) is None
    assert cron_slot(controller(1.0, cron="*/5 * * * *")) == "*/5 * * * *@1"
    await enqueue(worker, shape, "a")
    run = await run_cron(env, controller(None), executors=build_registry)
    assert run is not None and run.lock.ran
    assert executed == Counter({"a": 1})
    assert await query("SELECT count(*) FROM tickwork_job_locks_slots") == [(0,)]


async def test_without_a_database_the_cron_does_nothing(workers_module: Any) -> None:
    from tickwork.cloudflare.app import run_cron
    from worker.executors import build_registry

    assert await run_cron(types.SimpleNamespace(), controller(), executors=build_registry) is None


async def test_the_shipped_registry_routes_by_queue_and_kind(worker: Any) -> None:
    from tickwork.model.jobs import JobRecord as Record
    from worker.executors import build_registry

    registry = build_registry(types.SimpleNamespace())

    def record(queue: str, payload: Any) -> Record:
        return Record("id", queue, "lane", 0, payload, None, "running", None, None, 1, 0, 0,
                      None, None)

    webhook = registry.executor_for(record("webhooks", {}))
    assert webhook is not None and webhook.__name__ == "deliver_webhook"
    by_kind = registry.executor_for(record("other", {"kind": "webhook"}))
    assert by_kind is not None and by_kind.__name__ == "deliver_webhook"
    long_one = registry.executor_for(record("other", {"kind": "long"}))
    assert long_one is not None and long_one.__name__ == "long_job"
    assert registry.executor_for(record("other", {"kind": "nope"})) is None


@pytest.fixture
def overlap(monkeypatch: pytest.MonkeyPatch, worker: Any) -> dict[str, int]:
    """A registry whose executions wait (up to 5 s) until ``want`` of them
    run at once, and note the most that ever ran together."""
    seen = {"running": 0, "peak": 0, "want": 1}
    together = asyncio.Event()

    async def wait_for_company(job_record: JobRecord, signal: Any) -> Completed:
        seen["running"] += 1
        seen["peak"] = max(seen["peak"], seen["running"])
        if seen["running"] >= seen["want"]:
            together.set()
        with contextlib.suppress(TimeoutError):  # the peak then says it ran alone
            await asyncio.wait_for(together.wait(), 5)
        seen["running"] -= 1
        return Completed()

    use_deployment_hook(monkeypatch, "build_registry",
                        lambda env: ExecutorRegistry(fallback=wait_for_company))
    return seen


async def test_a_firing_runs_jobs_of_different_queues_at_once(
        worker: Any, env: Any, shape: str, overlap: dict[str, int], query: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tickwork.cloudflare.app import CRON_CONCURRENCY

    overlap["want"] = CRON_CONCURRENCY
    await enqueue(worker, shape, *[f"j{i}" for i in range(8)], queue_count=4)
    await worker.scheduled(controller())
    assert overlap["peak"] == CRON_CONCURRENCY == 4
    assert await states(query) == {f"j{i}": ("settled", "completed") for i in range(8)}
    assert "cron: 8 tick(s), 8 job(s) settled" in capsys.readouterr().out


@pytest.mark.parametrize("setting", ["1", 1])
async def test_cron_concurrency_one_runs_one_job_at_a_time(
        worker: Any, env: Any, shape: str, overlap: dict[str, int], query: Any,
        setting: Any) -> None:
    env.TICKWORK_CRON_CONCURRENCY = setting
    overlap["want"] = 1
    await enqueue(worker, shape, "a", "b", "c", queue_count=3)
    await worker.scheduled(controller())
    assert overlap["peak"] == 1
    assert await states(query) == dict.fromkeys("abc", ("settled", "completed"))


@pytest.mark.parametrize("setting", ["0", "65", "four", "2.5", -3, True])
async def test_a_bad_cron_concurrency_is_logged_and_the_default_drains(
        worker: Any, env: Any, shape: str, overlap: dict[str, int], query: Any,
        capsys: pytest.CaptureFixture[str], setting: Any) -> None:
    env.TICKWORK_CRON_CONCURRENCY = setting
    overlap["want"] = 4
    await enqueue(worker, shape, *[f"j{i}" for i in range(4)], queue_count=4)
    await worker.scheduled(controller())
    logged = capsys.readouterr()
    assert ("TICKWORK_CRON_CONCURRENCY must be a whole number from 1 to 64, "
            f"not {setting!r}; using 4") in logged.err
    assert overlap["peak"] == 4
    assert await states(query) == {f"j{i}": ("settled", "completed") for i in range(4)}
