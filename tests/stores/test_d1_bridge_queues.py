"""The bridge's queues are Miniflare's real Cloudflare Queues: what a producer
sends arrives as Queues delivers it, and what a consumer does with a batch
(ack, retry, per message or all, or raise) is what the broker acts on:
its redeliveries and attempt counts are the ones these tests see.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.d1.miniflare import (
    SHAPES,
    BridgeQueue,
    D1Bridge,
    D1Error,
    StaleQueueBinding,
)
from tests.support.fakes.do_storage import JsDict
from tests.support.fakes.pyodide_ffi import JsProxy, fake_pyodide, object_from_entries, to_js


@pytest.fixture(params=SHAPES, ids=[f"queue-{shape}" for shape in SHAPES])
def queue(request: pytest.FixtureRequest, d1_bridge: D1Bridge) -> Iterator[BridgeQueue]:
    with fake_pyodide(), d1_bridge.new_queue(request.param) as bridge_queue:
        yield bridge_queue


def plain_object(queue: BridgeQueue, value: dict[str, Any]) -> Any:
    """``value`` as a Worker of ``queue``'s SDK shape sends a JS object."""
    if queue.shape == "external":
        return value  # the SDK's wrapper converts it (python_to_rpc)
    return to_js(value, dict_converter=object_from_entries)  # js.Object.fromEntries


async def test_sent_bodies_arrive_as_queues_delivers_them(queue: BridgeQueue) -> None:
    seen: list[Any] = []

    async def consume(batch: Any) -> None:
        seen.append(batch)
        batch.ackAll()

    queue.consume(consume)
    await queue.producer.send("text")
    await queue.producer.send(plain_object(queue, {"n": 1, "nested": {"ok": True}}))
    delivered = await queue.wait_for_deliveries(1)
    while sum(len(d.messages) for d in delivered) < 2:
        delivered = await queue.wait_for_deliveries(len(delivered) + 1)
    bodies = [m.body for d in delivered for m in d.messages]
    assert bodies == ["text", {"n": 1, "nested": {"ok": True}}]
    batch = seen[0]
    assert batch.queue == queue.name
    message = next(iter(batch.messages))
    assert (message.body, message.attempts, isinstance(message.id, str)) == ("text", 1, True)
    if queue.shape == "builtin":
        assert isinstance(batch, JsProxy)  # raw, as the built-in SDK hands it over
    else:
        last = list(seen[-1].messages)[-1]
        assert isinstance(last.body, JsDict) and last.body.nested == {"ok": True}


async def test_a_retried_message_comes_back_with_its_attempts_counted(
        queue: BridgeQueue) -> None:
    async def retry_first_time(batch: Any) -> None:
        for message in batch.messages:
            if message.body == "again" and message.attempts == 1:
                message.retry()
            else:
                message.ack()

    queue.consume(retry_first_time)
    await queue.producer.send("again")
    first, second = await queue.wait_for_deliveries(2)
    assert first.calls == (("retry", first.messages[0].id),)
    assert second.messages[0].id == first.messages[0].id
    assert (first.attempts, second.attempts) == ([1], [2])
    assert second.calls == (("ack", first.messages[0].id),)


async def test_a_consumer_that_raises_has_the_batch_redelivered(queue: BridgeQueue) -> None:
    async def fail_once(batch: Any) -> None:
        if not queue.deliveries:
            raise RuntimeError("consumer down")
        batch.ackAll()

    queue.consume(fail_once)
    await queue.producer.send("x")
    first, second = await queue.wait_for_deliveries(2)
    assert first.raised == "RuntimeError: consumer down" and first.calls == ()
    assert second.attempts == [2] and second.raised is None


async def test_none_is_undefined_on_the_builtin_sdk_and_null_on_the_external_one(
        queue: BridgeQueue) -> None:
    queue.consume(lambda batch: _ack(batch))
    if queue.shape == "builtin":
        with pytest.raises(D1Error, match="Message body cannot be undefined"):
            await queue.producer.send(None)
        return
    await queue.producer.send(None)
    (delivery,) = await queue.wait_for_deliveries(1)
    assert [m.body for m in delivery.messages] == [None]


async def _ack(batch: Any) -> None:
    batch.ackAll()


async def test_a_handed_back_queue_refuses_its_producer_and_what_arrives_is_acked(
        d1_bridge: D1Bridge) -> None:
    queue = d1_bridge.new_queue("external")
    queue.consume(_ack)
    unclaimed = len(d1_bridge.unclaimed_deliveries)
    await queue.producer.send("in flight")
    queue.close()  # before Miniflare delivers it (50 ms batch timeout)
    with pytest.raises(StaleQueueBinding):
        await queue.producer.send("late")
    for _ in range(500):  # at most 5 s
        if len(d1_bridge.unclaimed_deliveries) > unclaimed:
            break
        await asyncio.sleep(0.01)
    event = d1_bridge.unclaimed_deliveries[unclaimed]
    assert (event["queue"], [m["body"] for m in event["messages"]]) == (queue.name, ["in flight"])
    assert queue.deliveries == []
    # Acknowledged: the queue's next user sees only its own messages.
    for _ in range(len(d1_bridge.queues) - 1):
        d1_bridge.new_queue("external").close()
    with d1_bridge.new_queue("external") as again:
        assert again.name == queue.name
        again.consume(_ack)
        await again.producer.send("marker")
        delivered = await again.wait_for_deliveries(1)
    assert [m.body for d in delivered for m in d.messages] == ["marker"]
