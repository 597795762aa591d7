"""Retries with backoff, on every store.

A job that opts in with ``Retry`` goes back to its queue after a failed
attempt, due after the policy's backoff (or the executor's own
``retry_after_ms``), as its next attempt; the attempt that ended is kept in
its history. Once its attempts are used up it settles ``failed`` for good:
still exactly one terminal outcome per job. Each test moves a manual clock
(database time is overridden by it on the shared stores).
"""

from __future__ import annotations

import pytest

from tests.support import job, unchecked_job
from tests.support.engine import Engine
from tickwork import Attempt, Cancelled, Failed, IngestConflict, InvalidJob, Recovery, Retry

SECOND = 1_000


def failing(succeed_on: int = 1_000_000, **extra: object) -> dict[str, object]:
    """A payload whose scripted executor fails until attempt ``succeed_on``."""
    return {"do": "fail_until", "succeed_on": succeed_on, **extra}


async def test_a_failed_attempt_waits_its_backoff_then_runs_again(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    policy = Retry(attempts=5, base_delay_ms=SECOND, factor=3.0, max_delay_ms=60 * SECOND)
    await jobs.ingest(job("hook", payload=failing(succeed_on=3), retry=policy))
    first_start = now()

    result = await jobs.tick()
    assert (result.status, result.job_id, result.outcome, result.failure_reason,
            result.retry_at) == ("retried", "hook", "failed", "attempt-1", now() + SECOND)
    record = await jobs.read("hook")
    assert record is not None
    assert (record.state, record.outcome, record.attempt, record.due_at, record.started_at) == (
        "queued", None, 2, now() + SECOND, None)
    assert record.history == (Attempt(1, "failed", "attempt-1", first_start, first_start),)
    # Times stay integers in the stored JSON too (a Durable Object binds every
    # number as a REAL: measured in workerd, it once wrote 1796523995185.0).
    assert type(record.history[0].ended_at) is int
    assert type(record.history[0].started_at) is int
    # It waits like any delayed job: no claim, counted as delayed, and the
    # host is told when to come back.
    assert await jobs.has_pending_work() is False
    assert await jobs.next_tick_at() == now() + SECOND
    status = await jobs.queue_status("q")
    assert (status.queued, status.delayed, status.running, status.settled) == (0, 1, 0, 0)
    now.advance(SECOND - 1)
    assert (await jobs.tick()).status == "idle"

    now.advance(1)
    second_start = now()
    result = await jobs.tick()
    # Attempt 2 failed too: the backoff grew by the factor.
    assert (result.status, result.retry_at) == ("retried", now() + 3 * SECOND)
    now.advance(3 * SECOND)
    result = await jobs.tick()
    assert (result.status, result.job_id, result.outcome) == ("settled", "hook", "completed")
    record = await jobs.read("hook")
    assert record is not None
    assert (record.state, record.outcome, record.attempt) == ("settled", "completed", 3)
    assert record.history == (
        Attempt(1, "failed", "attempt-1", first_start, first_start),
        Attempt(2, "failed", "attempt-2", second_start, second_start))
    assert engine.executor.started == ["hook"] * 3


async def test_when_attempts_are_used_up_the_job_settles_failed_for_good(
        engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("doomed", payload=failing(), retry=Retry(3, base_delay_ms=10)))
    statuses = []
    for _ in range(3):
        result = await jobs.tick()
        statuses.append((result.status, result.failure_reason))
        now.advance(1_000)
    assert statuses == [("retried", "attempt-1"), ("retried", "attempt-2"),
                        ("settled", "attempt-3")]
    record = await jobs.read("doomed")
    assert record is not None
    assert (record.state, record.outcome, record.failure_reason, record.attempt) == (
        "settled", "failed", "attempt-3", 3)
    assert [entry.attempt for entry in record.history] == [1, 2]
    assert (await jobs.tick()).status == "idle"
    status = await jobs.queue_status("q")
    assert (status.delayed, status.settled, status.outcomes["failed"]) == (0, 1, 1)


async def test_an_executor_that_raises_is_retried(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("raises", payload=failing(succeed_on=2, **{"raise": True}),
                          retry=Retry(2, base_delay_ms=0)))
    result = await jobs.tick()
    assert (result.status, result.failure_reason) == ("retried", "execution_failed")
    result = await jobs.tick()  # due at once (base delay 0)
    assert (result.status, result.outcome) == ("settled", "completed")


async def test_the_executor_may_ask_for_its_own_delay(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("limited", payload=failing(succeed_on=2, retry_after_ms=42_000),
                          retry=Retry(2, base_delay_ms=SECOND)))
    result = await jobs.tick()
    assert (result.status, result.retry_at) == ("retried", now() + 42_000)
    # Without a policy the same result settles failed: no retry is ever implied.
    await jobs.ingest(job("no-policy", queue="other", payload=failing(retry_after_ms=5)))
    result = await jobs.tick()
    assert (result.status, result.job_id, result.outcome) == ("settled", "no-policy", "failed")


async def test_backoff_is_capped(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    policy = Retry(6, base_delay_ms=100, factor=10.0, max_delay_ms=5_000)
    await jobs.ingest(job("capped", payload=failing(), retry=policy))
    delays = []
    for _ in range(5):
        before = now()
        result = await jobs.tick()
        assert result.status == "retried" and result.retry_at is not None
        delays.append(result.retry_at - before)
        now.advance(result.retry_at - before)
    assert delays == [100, 1_000, 5_000, 5_000, 5_000]


async def test_jitter_draws_each_delay_within_its_bound(engine: Engine) -> None:
    jobs, now = engine.timed_runtime()
    await jobs.ingest(job("jittery", payload=failing(),
                          retry=Retry(4, base_delay_ms=10_000, factor=1.0, jitter=0.5)))
    delays = []
    for _ in range(3):
        before = now()
        result = await jobs.tick()
        assert result.retry_at is not None
        delays.append(result.retry_at - before)
        now.advance(10_000)
    assert all(5_000 <= delay <= 10_000 for delay in delays), delays
    # Drawn, not the full delay each time (three draws of exactly 0 never happen).
    assert min(delays) < 10_000, delays


async def test_outcome_unknown_is_retried_only_when_the_policy_says_so(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("careful", queue="a", payload={"do": "unknown"},
                          retry=Retry(3, base_delay_ms=0)))
    await jobs.ingest(job("bold", queue="b", payload={"do": "unknown"},
                          retry=Retry(2, base_delay_ms=0, retry_unknown=True)))
    results = await jobs.drain()
    assert [(r.job_id, r.status, r.outcome) for r in results] == [
        ("careful", "settled", "outcome_unknown"),
        ("bold", "retried", "outcome_unknown"),
        ("bold", "settled", "outcome_unknown")]


async def test_cancelled_results_and_recorded_cancellations_are_never_retried(
        engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("gives-up", queue="a", payload={"do": "cancel"},
                          retry=Retry(5, base_delay_ms=0)))
    result = await jobs.tick()
    assert (result.status, result.outcome) == ("settled", "cancelled")

    # Cancelled while it runs: the executor's failure does not retry it.
    await jobs.ingest(job("stopped", queue="b", payload={"do": "block"},
                          retry=Retry(5, base_delay_ms=0)))
    task = await engine.start(jobs, "stopped")
    assert (await jobs.cancel("stopped", "c-1")).status == "recorded"
    engine.executor.release("stopped", Failed("gave up"))
    result = await task
    assert (result.status, result.outcome) == ("settled", "cancelled")

    # Cancelled while it waits for its next attempt: settled without running.
    await jobs.ingest(job("waiting", queue="c", payload=failing(),
                          retry=Retry(5, base_delay_ms=60_000)))
    assert (await jobs.tick()).status == "retried"
    assert (await jobs.cancel("waiting", "c-2")).status == "recorded"
    result = await jobs.tick()
    assert (result.status, result.job_id, result.outcome) == ("settled", "waiting", "cancelled")
    assert engine.executor.started.count("waiting") == 1


async def test_a_cancelled_result_under_a_policy_is_cancelled(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("x", payload={"do": "block"}, retry=Retry(3)))
    task = await engine.start(jobs, "x")
    engine.executor.release("x", Cancelled())
    assert (await task).outcome == "cancelled"


async def test_a_lane_failure_is_final_whatever_the_policy(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("in-lane", lane="doomed", payload=failing(),
                          retry=Retry(5, base_delay_ms=60_000)))
    assert (await jobs.tick()).status == "retried"
    assert (await jobs.fail_lane("doomed", "lane_gone")).settled == 1
    record = await jobs.read("in-lane")
    assert record is not None
    assert (record.state, record.outcome, record.failure_reason) == (
        "settled", "failed", "lane_gone")
    assert (await jobs.tick()).status == "idle"


@pytest.mark.parametrize(("recovery", "status", "outcome"), [
    (Recovery(1), "requeued", None), (None, "settled", "interrupted")])
async def test_crash_recovery_is_separate_from_retries(
        engine: Engine, recovery: Recovery | None, status: str, outcome: str | None) -> None:
    """A claim whose process died is recovered by ``Recovery``, not retried:
    the attempt count stays; without a recovery budget the job settles
    ``interrupted`` (never retried, since its effect may have happened)."""
    dying = engine.runtime()
    await dying.ingest(job("crashy", payload={"do": "block"}, recovery=recovery,
                           retry=Retry(5, base_delay_ms=0)))
    await engine.lose(dying, await engine.start(dying, "crashy"))
    engine.make_recoverable()
    survivor = engine.runtime()
    result = await survivor.tick()
    assert (result.status, result.job_id, result.outcome) == (status, "crashy", outcome)
    record = await survivor.read("crashy")
    assert record is not None and (record.attempt, record.history) == (1, ())


async def test_a_stale_claim_cannot_retry_an_attempt_it_lost(engine: Engine) -> None:
    """The claim fence covers every attempt: a process whose claim was
    recovered meanwhile reports claim_replaced (or lease_expired), and its
    failure neither retries nor settles the job."""
    slow = engine.runtime()
    await slow.ingest(job("raced", payload={"do": "block"}, recovery=Recovery(3),
                          retry=Retry(5, base_delay_ms=0)))
    task = await engine.start(slow, "raced")
    engine.make_recoverable()
    survivor = engine.another_process()
    assert (await survivor.tick()).status == "requeued"
    engine.executor.release("raced", Failed("late"))
    result = await task
    assert result.status == "idle" and result.reason in ("claim_replaced", "lease_expired")
    record = await survivor.read("raced")
    assert record is not None
    assert (record.state, record.attempt, record.history) == ("queued", 1, ())


async def test_history_keeps_the_latest_twenty_attempts(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("long", payload=failing(), retry=Retry(25, base_delay_ms=0)))
    results = await jobs.drain()
    assert [r.status for r in results] == ["retried"] * 24 + ["settled"]
    record = await jobs.read("long")
    assert record is not None and record.attempt == 25
    assert [entry.attempt for entry in record.history] == list(range(5, 25))


async def test_the_retry_policy_is_part_of_the_cargo(engine: Engine) -> None:
    jobs, _ = engine.timed_runtime()
    policy = Retry(3, base_delay_ms=500)
    assert await jobs.ingest(job("p", retry=policy)) == "queued"
    # The same policy, written with an int factor: the same cargo.
    assert await jobs.ingest(job("p", retry=Retry(3, base_delay_ms=500, factor=2))) == \
        "duplicate"
    with pytest.raises(IngestConflict) as raised:
        await jobs.ingest(job("p", retry=Retry(4, base_delay_ms=500)))
    assert raised.value.fields == ("retry",)
    with pytest.raises(IngestConflict):
        await jobs.ingest(job("p"))
    # ingest_many compares the same way (a batch, on the shared stores).
    assert await jobs.ingest_many([job("p", retry=policy)]) == ["duplicate"]
    with pytest.raises(IngestConflict) as in_batch:
        await jobs.ingest_many([job("other"), job("p", retry=Retry(3, base_delay_ms=501))])
    assert in_batch.value.fields == ("retry",)
    assert await jobs.read("other") is None
    record = await jobs.read("p")
    assert record is not None and record.retry == Retry(3, 500, 2.0, 3_600_000, 0.0, False)


@pytest.mark.parametrize(("policy", "field", "problem"), [
    (Retry(0), "retry.attempts", "within 1"),
    (Retry(1001), "retry.attempts", "within 1 and 1000"),
    (Retry(3, base_delay_ms=-1), "retry.base_delay_ms", "within 0"),
    (Retry(3, base_delay_ms=10, max_delay_ms=5), "retry.max_delay_ms", "at least"),
    (Retry(3, factor=0.5), "retry.factor", "within 1.0"),
    (Retry(3, factor=float("nan")), "retry.factor", "within"),
    (Retry(3, jitter=1.5), "retry.jitter", "within 0.0"),
    (Retry(3, retry_unknown=1), "retry.retry_unknown", "bool"),  # type: ignore[arg-type]
    (Retry("3"), "retry.attempts", "integer"),  # type: ignore[arg-type]
    ({"attempts": 3}, "retry", "tickwork.Retry"),
])
async def test_a_bad_policy_is_refused_by_name_and_nothing_changes(
        engine: Engine, policy: object, field: str, problem: str) -> None:
    # Job() refuses it where it is built; a job that got around the
    # constructor is refused by ingest with the same error.
    with pytest.raises(InvalidJob) as built:
        job("bad", retry=policy)  # type: ignore[arg-type]
    jobs, _ = engine.timed_runtime()
    await jobs.ingest(job("kept"))
    before = await engine.table()
    with pytest.raises(InvalidJob, match=problem) as raised:
        await jobs.ingest(unchecked_job("bad", retry=policy))
    assert raised.value.field == field
    assert (built.value.field, str(built.value)) == (field, str(raised.value))
    assert await engine.table() == before
