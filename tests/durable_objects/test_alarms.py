"""JobOwner's alarm: armed while work is pending, runs the ticks, survives
storage failures, duplicate deliveries and evictions. Every outcome is read
back from the object's SQLite file."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.durable_objects.conftest import OWNER, Host, job
from tests.support.fakes.alarms import MAX_RETRIES, RETRY_OFFSETS_MS


async def test_ingest_arms_the_alarm_for_now_and_an_idle_run_deletes_it(host: Host) -> None:
    assert await host.alarm() is None
    await host.stub().ingest(job("a"))
    assert await host.alarm() == host.clock()
    host.clock.advance(10)
    [delivery] = await host.scheduler.run_due()
    assert (delivery.outcome, delivery.retry_count) == ("ok", 0)
    assert host.rows()["a"][:2] == ("settled", "completed")
    assert await host.alarm() is None


async def test_an_already_armed_alarm_is_not_rewritten(host: Host) -> None:
    await host.stub().ingest(job("a"))
    armed = await host.alarm()
    host.clock.advance(500)
    await host.stub().ingest(job("b"))
    assert await host.alarm() == armed  # due already: no write
    storage = host.namespace.storage(OWNER)
    await storage.setAlarm(host.clock() + 60_000)
    await host.stub().ingest(job("c"))
    assert await host.alarm() == host.clock()  # later than now: brought forward


async def test_an_alarm_runs_every_job_to_its_outcome(host: Host) -> None:
    await host.stub().ingest([
        job("ok-1", "a"), job("declined", "a", payload={"do": "fail"}),
        job("boom", "b", payload={"do": "raise"}), job("ok-2", "c", priority=9),
    ])
    [delivery] = await host.scheduler.run_due()
    assert delivery.outcome == "ok" and delivery.error is None
    assert host.executor.started == ["ok-2", "ok-1", "declined", "boom"]
    assert {job_id: row[:3] for job_id, row in host.rows().items()} == {
        "ok-1": ("settled", "completed", None),
        "declined": ("settled", "failed", "declined"),
        "boom": ("settled", "failed", "execution_failed"),
        "ok-2": ("settled", "completed", None),
    }
    assert await host.alarm() is None


async def test_a_rate_limit_arms_the_alarm_for_the_next_allowed_start(host: Host) -> None:
    """One start per second: each delivery runs the job the bucket allows
    and arms the alarm for the next allowed start, never sooner (nothing
    polls while the bucket refills)."""
    stub = host.stub()
    reply = await stub.set_rate_limit(*map(json.dumps, ("queue", "q", 1, 1000, None)))
    assert reply["value"] is True
    await stub.ingest([job(f"j{n}") for n in range(3)])
    [first] = await host.scheduler.run_due()
    assert first.outcome == "ok" and host.executor.started == ["j0"]
    assert await host.alarm() == host.clock() + 1000
    assert await host.scheduler.run_due() == []  # not due yet
    host.clock.advance(1000)
    [second] = await host.scheduler.run_due()
    assert second.outcome == "ok" and host.executor.started == ["j0", "j1"]
    assert await host.alarm() == host.clock() + 1000
    host.clock.advance(1000)
    await host.scheduler.run_due()
    assert host.executor.started == ["j0", "j1", "j2"]
    assert await host.alarm() is None


async def test_a_rate_limited_job_arms_the_alarm_for_the_end_of_its_hold(host: Host) -> None:
    stub = host.stub()
    await stub.ingest([job("hook", lane="partner", payload={"do": "rate_limited", "ms": 5000}),
                       job("other", lane="elsewhere")])
    [delivery] = await host.scheduler.run_due()
    assert delivery.outcome == "ok"
    assert host.executor.started == ["hook", "other"]
    assert host.rows()["hook"][:2] == ("queued", None)
    assert await host.alarm() == host.clock() + 5000
    host.clock.advance(5000)
    await host.scheduler.run_due()
    assert host.rows()["hook"][:2] == ("settled", "completed")
    assert host.executor.started == ["hook", "other", "hook"]
    assert await host.alarm() is None


async def test_the_wall_clock_budget_leaves_the_rest_for_the_next_delivery(host: Host) -> None:
    host.owner_class.alarm_budget_ms = 1_000
    await host.stub().ingest([job(f"j{n}", payload={"do": "slow", "ms": 400})
                              for n in range(5)])
    [first] = await host.scheduler.run_due()
    assert first.outcome == "ok" and not first.over_time_limit
    states = [row[0] for row in host.rows().values()]
    assert states == ["settled"] * 3 + ["queued"] * 2  # 400, 800, 1200 ms: budget spent
    assert await host.alarm() == host.clock()  # re-armed for now
    [second] = await host.scheduler.run_due()
    assert second.outcome == "ok"
    assert {row[1] for row in host.rows().values()} == {"completed"}
    assert await host.alarm() is None


async def test_the_tick_count_budget(host: Host) -> None:
    host.owner_class.alarm_max_ticks = 2
    await host.stub().ingest([job(f"j{n}") for n in range(5)])
    deliveries = await host.scheduler.run_until_idle()
    assert [d.outcome for d in deliveries] == ["ok"] * 3
    assert {row[1] for row in host.rows().values()} == {"completed"}


async def test_a_storage_error_on_an_early_try_raises_and_the_retry_finishes(host: Host) -> None:
    await host.stub().ingest(job("a"))
    host.faults.sql = True
    [failed] = await host.scheduler.run_due()
    assert failed.outcome == "raised"
    assert "SQLITE_IOERR" in str(failed.error)
    assert failed.retry_at == host.clock() + RETRY_OFFSETS_MS[0]
    assert await host.alarm() == failed.retry_at
    host.faults.sql = False
    [retried] = await host.scheduler.run_due(failed.retry_at)
    assert (retried.outcome, retried.retry_count) == ("ok", 1)
    assert host.rows()["a"][:2] == ("settled", "completed")
    assert await host.alarm() is None


async def test_a_storage_error_on_a_late_retry_reschedules_instead_of_raising(host: Host) -> None:
    await host.stub().ingest(job("a"))
    host.faults.sql = True
    late = host.owner_class.alarm_raise_below_retry
    for count in range(late):
        [failed] = await host.scheduler.run_due(await host.alarm())
        assert (failed.outcome, failed.retry_count) == ("raised", count)
    [rescheduled] = await host.scheduler.run_due(await host.alarm())
    assert (rescheduled.outcome, rescheduled.retry_count) == ("ok", late)
    assert await host.alarm() == host.clock() + host.owner_class.alarm_late_retry_delay_ms
    assert host.rows()["a"][0] == "queued"
    # Storage keeps failing: it keeps coming back every minute, never given up.
    [again] = await host.scheduler.run_due(await host.alarm())
    assert (again.outcome, again.retry_count) == ("raised", 0)
    host.faults.sql = False
    deliveries = await host.scheduler.run_until_idle()
    assert deliveries[-1].outcome == "ok"
    assert host.rows()["a"][:2] == ("settled", "completed")
    assert late < MAX_RETRIES


async def test_when_even_the_reschedule_fails_the_alarm_raises(host: Host) -> None:
    await host.stub().ingest(job("a"))
    host.faults.sql = host.faults.alarms = True
    info = {"retryCount": 5, "isRetry": True}
    instance = host.instance()
    try:
        await instance.alarm(info)
    except Exception as error:
        assert "SQLITE_IOERR" in str(error)
    else:
        raise AssertionError("alarm() returned although it could not reschedule")


async def test_a_duplicate_delivery_is_harmless(host: Host) -> None:
    host.scheduler.deliver_twice = True
    await host.stub().ingest([job("a"), job("b", "other", payload={"do": "fail"})])
    deliveries = await host.scheduler.run_due()
    assert [(d.outcome, d.duplicate) for d in deliveries] == [("ok", False), ("ok", True)]
    assert sorted(host.executor.started) == ["a", "b"]  # each ran once
    assert {job_id: row[:2] for job_id, row in host.rows().items()} == {
        "a": ("settled", "completed"), "b": ("settled", "failed")}
    assert await host.alarm() is None


async def test_an_overlapping_duplicate_delivery_returns_busy_and_changes_nothing(
    host: Host,
) -> None:
    await host.stub().ingest(job("slow", payload={"do": "block"}))
    await host.namespace.storage(OWNER).deleteAlarm()  # delivered: consumed
    instance = host.instance()
    first = asyncio.create_task(instance.alarm(None))
    await host.executor.blocked.wait()
    await instance.alarm(None)  # the same alarm again, while the first runs
    assert await host.alarm() is None  # the running handler recomputes when it ends
    host.executor.release("slow")
    await first
    assert host.executor.started == ["slow"]
    assert host.rows()["slow"][:2] == ("settled", "completed")
    assert await host.alarm() is None


async def evict_while_running(host: Host, job_id: str) -> int:
    """Deliver the alarm, evict the object while ``job_id`` executes; the retry time."""
    delivering = asyncio.create_task(host.scheduler.run_due())
    await host.executor.blocked.wait()
    assert host.rows()[job_id][0] == "running"
    await host.scheduler.evict(OWNER)
    [delivery] = await delivering
    assert delivery.outcome == "evicted"
    assert delivery.retry_at is not None
    assert host.rows()[job_id][0] == "running"  # the dead incarnation wrote nothing
    return delivery.retry_at


async def test_eviction_mid_job_requeues_it_within_its_recovery_budget(host: Host) -> None:
    await host.stub().ingest(job("j", payload={"do": "block_first"},
                                 recovery={"max_recoveries": 1}))
    retry_at = await evict_while_running(host, "j")
    [retried] = await host.scheduler.run_due(retry_at)
    assert (retried.outcome, retried.retry_count) == ("ok", 1)
    assert host.namespace.incarnation(OWNER) == 2
    assert host.executor.attempts["j"] == 2
    assert host.rows()["j"] == ("settled", "completed", None, 1, None)
    assert await host.alarm() is None


async def test_eviction_mid_job_without_recovery_budget_settles_interrupted(host: Host) -> None:
    await host.stub().ingest(job("j", payload={"do": "block"}))
    retry_at = await evict_while_running(host, "j")
    [retried] = await host.scheduler.run_due(retry_at)
    assert retried.outcome == "ok"
    assert host.executor.attempts["j"] == 1
    assert host.rows()["j"] == ("settled", "interrupted", None, 0, None)


async def test_a_cancelled_job_evicted_mid_run_settles_cancelled(host: Host) -> None:
    await host.stub().ingest(job("j", payload={"do": "block"},
                                 recovery={"max_recoveries": 3}))
    delivering = asyncio.create_task(host.scheduler.run_due())
    await host.executor.blocked.wait()
    # The object dies right after the cancellation committed, before the
    # executor could react: the rebuilt object settles it from storage.
    host.executor.signals["j"].on_abort(lambda reason: host.namespace.evict(OWNER))
    reply = await host.stub().cancel("j", "c1", False)
    assert reply["value"]["status"] == "recorded"
    [delivery] = await delivering
    assert delivery.outcome == "evicted"
    await host.scheduler.run_until_idle()
    assert host.rows()["j"] == ("settled", "cancelled", None, 0, "c1")


async def test_cancelling_a_running_job_aborts_its_signal(host: Host) -> None:
    await host.stub().ingest(job("j", payload={"do": "block"}))
    delivering = asyncio.create_task(host.scheduler.run_due())
    await host.executor.blocked.wait()
    signal = host.executor.signals["j"]
    assert not signal.aborted
    reply = await host.stub().cancel("j", "c1", False)
    assert reply == {"ok": True, "value": {"job_id": "j", "status": "recorded"}}
    assert (signal.aborted, signal.reason) == (True, "cancelled")
    [delivery] = await delivering
    assert delivery.outcome == "ok"
    assert host.rows()["j"] == ("settled", "cancelled", None, 0, "c1")
    assert await host.alarm() is None


async def test_lane_refusal_aborts_a_running_job(host: Host) -> None:
    await host.stub().ingest([job("j", lane="bad", payload={"do": "block"}),
                              job("k", "other", lane="bad")])
    delivering = asyncio.create_task(host.scheduler.run_due())
    await host.executor.blocked.wait()
    reply = await host.stub().fail_lane("bad", "tenant_gone")
    assert reply["value"] == {"settled": 2, "more": False}
    assert host.executor.signals["j"].reason == "lane_failed"
    await delivering
    assert {job_id: row[:3] for job_id, row in host.rows().items()} == {
        "j": ("settled", "failed", "tenant_gone"), "k": ("settled", "failed", "tenant_gone")}
    assert host.executor.started == ["j"]


async def test_work_ingested_during_an_alarm_runs_in_the_same_delivery(host: Host) -> None:
    await host.stub().ingest(job("first", payload={"do": "block"}))
    delivering = asyncio.create_task(host.scheduler.run_due())
    await host.executor.blocked.wait()
    assert (await host.stub().ingest(job("second", "other")))["ok"] is True
    assert await host.alarm() is None  # held: the handler recomputes once, at its end
    host.executor.release("first")
    [delivery] = await delivering
    assert delivery.outcome == "ok"
    assert host.executor.started == ["first", "second"]
    assert await host.alarm() is None


async def test_a_wake_up_re_arms_an_alarm_lost_before_it_was_written(host: Host) -> None:
    await host.stub().ingest(job("a"))
    storage = host.namespace.storage(OWNER)
    await storage.deleteAlarm()  # the isolate died between the commit and setAlarm
    host.namespace.evict(OWNER)
    # The caller saw no reply and retries: a duplicate, but the new instance re-arms.
    assert (await host.stub().ingest(job("a")))["value"] == ["duplicate"]
    assert await host.alarm() == host.clock()
    await host.scheduler.run_due()
    assert host.rows()["a"][:2] == ("settled", "completed")


READS = [
    ("read", ("a",)),
    ("read_queue_head", ("q",)),
    ("status", ()),
    ("queue_status", ("q",)),
    ("read", ("",)),  # refused (an error envelope): still re-arms
]


@pytest.mark.parametrize(("method", "args"), READS, ids=[f"{m}{a}" for m, a in READS])
async def test_a_read_re_arms_an_alarm_that_was_dropped(
    host: Host, method: str, args: tuple[Any, ...]
) -> None:
    await host.stub().ingest(job("a"))
    await host.namespace.storage(OWNER).deleteAlarm()  # dropped: the runtime gave up on it
    assert await host.alarm() is None
    host.clock.advance(1_000)
    reply = await getattr(host.stub(), method)(*args)
    assert "ok" in reply
    assert await host.alarm() == host.clock()  # armed again before the reply
    await host.scheduler.run_due()
    assert host.rows()["a"][:2] == ("settled", "completed")


async def test_a_read_of_an_idle_owner_arms_nothing(host: Host) -> None:
    assert (await host.stub().status())["value"] == []
    assert await host.alarm() is None
    await host.stub().ingest(job("a"))
    await host.scheduler.run_due()
    storage = host.namespace.storage(OWNER)
    await storage.setAlarm(host.clock() + 60_000)  # a stray alarm with nothing pending
    assert (await host.stub().read("a"))["value"]["state"] == "settled"
    assert await host.alarm() is None  # brought in step: deleted


async def test_a_read_during_an_alarm_handler_leaves_the_alarm_to_the_handler(
    host: Host,
) -> None:
    await host.stub().ingest([job("first", payload={"do": "block"}), job("second", "other")])
    delivering = asyncio.create_task(host.scheduler.run_due())
    await host.executor.blocked.wait()
    await host.namespace.storage(OWNER).deleteAlarm()
    assert (await host.stub().status())["ok"] is True
    assert await host.alarm() is None  # held: the flush writes nothing
    host.executor.release("first")
    [delivery] = await delivering
    assert delivery.outcome == "ok"
    assert {row[1] for row in host.rows().values()} == {"completed"}
    assert await host.alarm() is None


async def test_an_unanswerable_liveness_probe_backs_off_instead_of_spinning(host: Host) -> None:
    await host.stub().ingest([job("stuck", payload={"do": "block"}), job("later", "q")])
    base = host.owner_class

    class Unsure(base):  # type: ignore[misc, valid-type]
        def _is_alive(self, job: Any) -> bool:
            raise RuntimeError("probe unavailable")

    retry_at = await evict_while_running(host, "stuck")
    host.namespace.cls = Unsure
    [unsure] = await host.scheduler.run_due(retry_at)
    assert unsure.outcome == "ok"
    assert await host.alarm() == host.clock() + base.alarm_liveness_retry_ms
    assert host.rows()["stuck"][0] == "running"
    assert host.rows()["later"][0] == "queued"  # same queue: behind the stuck claim
    host.namespace.cls = base
    host.namespace.evict(OWNER)
    await host.scheduler.run_until_idle()
    assert host.rows()["stuck"][:2] == ("settled", "interrupted")
    assert host.rows()["later"][:2] == ("settled", "completed")


async def test_a_settlement_lost_to_a_storage_error_is_recovered_on_the_retry(
    host: Host,
) -> None:
    await host.stub().ingest(job("j", payload={"do": "block_first"},
                                 recovery={"max_recoveries": 1}))
    delivering = asyncio.create_task(host.scheduler.run_due())
    await host.executor.blocked.wait()
    host.faults.sql = True  # storage fails while the job runs: its settlement cannot commit
    host.executor.release("j")
    [failed] = await delivering
    assert failed.outcome == "raised"
    assert host.rows()["j"][0] == "running"
    host.faults.sql = False
    [retried] = await host.scheduler.run_due(failed.retry_at)
    assert (retried.outcome, retried.retry_count) == ("ok", 1)
    assert host.namespace.incarnation(OWNER) == 1  # same instance: its claim was not executing
    assert host.executor.attempts["j"] == 2
    assert host.rows()["j"] == ("settled", "completed", None, 1, None)


async def test_rpc_calls_are_answered_between_the_ticks_of_an_alarm(host: Host) -> None:
    # "sync" jobs never await: without a yield between ticks, alarm() would hold
    # the event loop, and the status call below, for the whole backlog.
    for batch in range(3):
        reply = await host.stub().ingest([job(f"j{batch}-{n}", payload={"do": "sync"})
                                          for n in range(100)])
        assert reply["ok"]
    running = asyncio.create_task(host.instance().alarm(None))
    await asyncio.sleep(0)  # the alarm starts ticking
    status = await host.stub().queue_status("q")
    assert status["value"]["queued"] > 0, "the RPC waited for the whole backlog"
    await running
    assert [row[:2] for row in host.rows().values()] == [("settled", "completed")] * 300


DAY_MS = 86_400_000


async def test_an_owner_whose_only_job_is_due_in_three_days_has_one_alarm_then(
        host: Host) -> None:
    """Nothing polls: one alarm, set for the due time, survives an eviction
    and reads; it fires then, and the job runs."""
    due = host.clock() + 3 * DAY_MS
    await host.stub().ingest(job("reminder", delay_ms=3 * DAY_MS))
    assert await host.alarm() == due
    await host.stub().ingest(job("reminder", delay_ms=3 * DAY_MS))  # a replay
    await host.stub().queue_status("q")
    await host.scheduler.evict(OWNER)
    await host.stub().read("reminder")  # a new instance brings the alarm in step
    assert await host.alarm() == due
    host.clock.advance(DAY_MS)
    assert await host.scheduler.run_due() == []  # not yet
    deliveries = await host.scheduler.run_until_idle()
    assert [d.outcome for d in deliveries] == ["ok"]
    assert host.clock() == due
    assert host.rows()["reminder"][:2] == ("settled", "completed")
    assert await host.alarm() is None


async def test_a_job_due_sooner_brings_the_alarm_forward_and_the_later_one_is_rearmed(
        host: Host) -> None:
    start = host.clock()
    await host.stub().ingest(job("later", delay_ms=DAY_MS))
    await host.stub().ingest(job("sooner", "other", run_at=start + 60_000))
    assert await host.alarm() == start + 60_000
    await host.scheduler.run_due(start + 60_000)
    assert host.rows()["sooner"][:2] == ("settled", "completed")
    assert host.rows()["later"][0] == "queued"
    assert await host.alarm() == start + DAY_MS  # re-armed for what still waits
    await host.stub().ingest(job("now", "third"))
    assert await host.alarm() == host.clock()
    await host.scheduler.run_due()
    assert await host.alarm() == start + DAY_MS


async def test_an_alarm_for_the_largest_due_time_is_armed_exactly(host: Host) -> None:
    """2**53 - 1 crosses to setAlarm as a Number (a BigInt is refused there)."""
    from tickwork.model.jobs import MAX_SAFE_INTEGER

    await host.stub().ingest(job("last", run_at=MAX_SAFE_INTEGER))
    assert await host.alarm() == MAX_SAFE_INTEGER


async def test_an_owner_whose_only_work_is_a_schedule_has_one_alarm_per_slot(
        host: Host) -> None:
    """A schedule put over RPC arms the one alarm for its next slot; the alarm
    creates and runs the slot's job, then is armed for the next slot."""
    import json

    start = host.clock()
    every = 6 * 3_600_000
    first = (start // every + 1) * every
    schedule = {"name": "report", "every_ms": every, "catch_up": 1, "cron": None,
                "job": {"queue": "reports", "lane": "reports", "priority": 0,
                        "payload": None, "recovery": None, "retry": None}}
    reply = await host.stub().put_schedule(json.dumps(schedule))
    assert reply["value"] == "created"
    assert await host.alarm() == first
    await host.scheduler.evict(OWNER)
    assert (await host.stub().schedules())["value"][0]["next_at"] == first
    assert await host.alarm() == first
    deliveries = await host.scheduler.run_due(first)
    assert [d.outcome for d in deliveries] == ["ok"]
    slot = "report@" + datetime.fromtimestamp(first / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    assert host.rows()[slot][:2] == ("settled", "completed")
    assert await host.alarm() == first + every
