"""Cloudflare Queues (optional binding ``TICKWORK_QUEUE``), on Miniflare's real
Queues: a shared write sends one message, Miniflare delivers it to
``Default.queue``, whose drain settles the jobs; a drain that raised has the
batch retried, and Miniflare redelivers it (its own attempt count).

The write drain is off (``make_env``'s default), so only the queue's drain
can start a job here.
"""

from __future__ import annotations

import types
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.d1.miniflare import BridgeQueue, D1Bridge, D1Error, QueueDelivery
from tests.support.worker import job, make_env, send, use_deployment_hook
from tickwork import Completed, JobRecord
from tickwork.executors import ExecutorRegistry

pytestmark = pytest.mark.usefixtures("js_module")

#: ``shared_drains.QUEUE_MESSAGE`` (tickwork.cloudflare imports the ``workers``
#: module, which exists only once a test has installed its stand-in).
QUEUE_MESSAGE = {"tickwork": "drain"}


@pytest.fixture
def queue(d1_bridge: D1Bridge, shape: str, env: types.SimpleNamespace) -> Iterator[BridgeQueue]:
    """One of Miniflare's queues, its producer bound as ``env.TICKWORK_QUEUE``."""
    with d1_bridge.new_queue(shape) as bridge_queue:  # type: ignore[arg-type]
        env.TICKWORK_QUEUE = bridge_queue.producer
        yield bridge_queue


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch, worker: Any) -> Counter[str]:
    """The deployment's registry replaced by one that counts every execution."""
    counts: Counter[str] = Counter()

    async def count(job_record: JobRecord, signal: Any) -> Completed:
        counts[job_record.job_id] += 1
        return Completed()

    use_deployment_hook(monkeypatch, "build_registry",
                        lambda env: ExecutorRegistry(fallback=count))
    return counts


async def enqueue(worker: Any, shape: str, *ids: str) -> None:
    """One ``POST /v1/shared/jobs`` of ``ids``, then what it left in ``waitUntil``."""
    status, _ = await send(worker, shape, "POST", "/v1/shared/jobs",
                           {"jobs": [job(job_id, queue=f"q{index % 3}")
                                     for index, job_id in enumerate(ids)]})
    assert status == 200
    await worker.ctx.settle()


async def states(query: Any) -> Counter[tuple[str, str | None]]:
    return Counter((row[0], row[1]) for row in
                   await query("SELECT state, outcome FROM tickwork_jobs"))


async def deliveries_until_marker(queue: BridgeQueue) -> list[QueueDelivery]:
    """Every delivery up to one carrying a marker sent now: Miniflare's broker
    keeps one backlog per queue, so a redelivery of anything delivered
    before would come no later than the marker's batch."""
    marker = f"marker-{len(queue.deliveries)}"
    await queue.producer.send(marker)
    while True:
        delivered = await queue.wait_for_deliveries(len(queue.deliveries) + 1)
        if any(message.body == marker for message in delivered[-1].messages):
            return delivered


def bodies(deliveries: list[QueueDelivery]) -> list[Any]:
    return [message.body for delivery in deliveries for message in delivery.messages]


async def test_a_shared_enqueue_sends_one_message_per_request_and_the_queue_drain_settles_it(
        worker: Any, shape: str, queue: BridgeQueue, executed: Counter[str],
        query: Any) -> None:
    queue.consume(worker.queue)
    ids = [f"j{i}" for i in range(20)]
    await enqueue(worker, shape, *ids)
    from tickwork.cloudflare.shared_drains import QUEUE_MESSAGE as sent

    assert sent == QUEUE_MESSAGE
    first = (await queue.wait_for_deliveries(1))[0]
    assert [(m.body, m.attempts) for m in first.messages] == [(QUEUE_MESSAGE, 1)]
    assert (first.calls, first.raised) == ((("ackAll", None),), None)
    assert executed == Counter(dict.fromkeys(ids, 1))
    assert await states(query) == Counter({("settled", "completed"): 20})

    await enqueue(worker, shape, "later")
    delivered = await deliveries_until_marker(queue)
    # One message per request, each delivered once (acked: never redelivered).
    assert bodies(delivered) == [QUEUE_MESSAGE, QUEUE_MESSAGE, "marker-1"]
    assert len({m.id for d in delivered for m in d.messages}) == 3
    assert executed == Counter(dict.fromkeys([*ids, "later"], 1))


async def test_a_batch_whose_drain_raised_is_retried_and_its_redelivery_settles_the_jobs(
        worker: Any, shape: str, queue: BridgeQueue, executed: Counter[str],
        monkeypatch: pytest.MonkeyPatch, query: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    from worker.executors import build_registry as counting

    broken = [False]

    def build_registry(env: Any) -> ExecutorRegistry:
        if broken[0]:
            raise RuntimeError("executors unavailable")
        return counting(env)

    use_deployment_hook(monkeypatch, "build_registry", build_registry)

    async def consume(batch: Any) -> None:
        broken[0] = not queue.deliveries  # the first delivery's drain fails, the next one's works
        try:
            await worker.queue(batch)
        finally:
            broken[0] = False

    queue.consume(consume)
    await enqueue(worker, shape, "a", "b", "c")
    failed, redelivered = await queue.wait_for_deliveries(2)
    assert (failed.calls, failed.raised) == ((("retryAll", None),), None)
    assert [m.id for m in redelivered.messages] == [m.id for m in failed.messages]
    assert (failed.attempts, redelivered.attempts) == ([1], [2])
    assert redelivered.calls == (("ackAll", None),)
    assert executed == Counter(dict.fromkeys("abc", 1))
    assert await states(query) == Counter({("settled", "completed"): 3})
    assert "queue: the drain failed; the batch will be redelivered" in capsys.readouterr().err


async def test_without_the_binding_nothing_is_sent(
        worker: Any, env: types.SimpleNamespace, shape: str, queue: BridgeQueue,
        executed: Counter[str], query: Any) -> None:
    del env.TICKWORK_QUEUE
    queue.consume(worker.queue)
    await enqueue(worker, shape, "a", "b")
    assert await states(query) == Counter({("queued", None): 2})
    assert bodies(await deliveries_until_marker(queue)) == ["marker-0"]


async def test_a_send_that_fails_is_logged_and_the_write_drain_still_runs(
        db: Any, shape: str, workers_module: types.ModuleType, query: Any,
        capsys: pytest.CaptureFixture[str]) -> None:
    from tests.support.worker import ExecutionContext
    from worker.entry import Default

    async def refuse(body: Any) -> None:
        raise D1Error("Error", "Queue send failed: the queue is over its limit")

    env = make_env(db, shape, write_drain=True)
    env.TICKWORK_QUEUE = types.SimpleNamespace(send=refuse)
    worker = Default(ExecutionContext(), env)
    try:
        await enqueue(worker, shape, "a", "b")
    finally:
        env.JOB_OWNERS.close()
    logged = capsys.readouterr().err
    assert "could not send the shared queue's message (D1Error: Error: Queue send failed" in logged
    assert await states(query) == Counter({("settled", "failed"): 2})
