"""JobOwner's RPC methods through a namespace stub: every argument and reply
crosses the Workers RPC boundary of the stand-in, and every outcome is read
back from the object's SQLite file."""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.durable_objects.conftest import OWNER, STORAGE_ERROR, Host, job
from tests.support.fakes.pyodide_ffi import JsException
from tickwork import Job, Recovery
from tickwork.api import ApiError, RpcService, wire
from tickwork.model.jobs import MAX_SAFE_INTEGER, canonical_json


async def test_ingest_one_job(host: Host) -> None:
    reply = await host.stub().ingest(job("a", priority=3, payload={"n": 1}))
    assert reply == {"ok": True, "value": ["queued"]}
    assert host.rows() == {"a": ("queued", None, None, 0, None)}
    replay = await host.stub().ingest(job("a", priority=3, payload={"n": 1}))
    assert replay == {"ok": True, "value": ["duplicate"]}


async def test_ingest_a_list(host: Host) -> None:
    reply = await host.stub().ingest([job("a"), job("b", queue="other"), job("a")])
    assert reply == {"ok": True, "value": ["queued", "queued", "duplicate"]}
    assert list(host.rows()) == ["a", "b"]


async def test_a_conflict_in_a_list_stores_nothing(host: Host) -> None:
    await host.stub().ingest(job("a", payload={"v": 1}))
    reply = await host.stub().ingest([job("b"), job("a", payload={"v": 2}), job("c")])
    assert reply["ok"] is False
    assert reply["status"] == 409
    assert reply["error"]["code"] == "ingest_conflict"
    assert reply["error"]["field"] == "job_id"
    assert list(host.rows()) == ["a"]


async def test_an_invalid_job_in_a_list_stores_nothing(host: Host) -> None:
    reply = await host.stub().ingest([job("b"), job("c", priority=1.5)])
    assert reply["ok"] is False
    assert reply["status"] == 400
    assert reply["error"]["code"] == "invalid_job"
    assert reply["error"]["field"] == "jobs[1].priority"
    reply = await host.stub().ingest({"job_id": "d", "payload": None})
    assert (reply["status"], reply["error"]["field"]) == (400, "jobs[0].queue")
    assert host.rows() == {}


@pytest.mark.parametrize("argument", [
    [{"job_id": "d", "queue": "q"}],  # a list, not its JSON text
    '{"job_id": "d", "queue": "q"}',  # one job, not a list
    "[]",
    "[{",
    7,
])
async def test_ingest_takes_only_the_json_text_of_a_job_list(host: Host, argument: object) -> None:
    reply = json.loads(await host.raw_stub().ingest(argument))
    assert (reply["ok"], reply["status"], reply["error"]["field"]) == (False, 400, "jobs")
    assert host.rows() == {}


async def test_replies_are_json_text_and_carry_floats_and_edge_integers_unchanged(
    host: Host,
) -> None:
    # Over RPC a whole float arrives as an int, and +-(2**53 - 1) as a BigInt;
    # as JSON text both arrive exactly as sent, in both directions.
    edge = MAX_SAFE_INTEGER
    payload = {"f": 1.0, "big": edge, "small": -edge, "nested": [2.0, {"z": 0.5}]}
    sent = wire.to_json_text([{"job_id": "a", "queue": "q", "priority": edge,
                               "payload": payload, "recovery": {"max_recoveries": edge}}])
    reply = await host.raw_stub().ingest(sent)
    assert isinstance(reply, str) and json.loads(reply) == {"ok": True, "value": ["queued"]}
    text = await host.raw_stub().read("a")
    assert isinstance(text, str)
    record = json.loads(text)["value"]
    assert record["payload"] == payload and type(record["payload"]["f"]) is float
    assert (record["priority"], record["recovery"]) == (edge, {"max_recoveries": edge})
    stored = host.namespace.storage(OWNER).debug_query(
        "SELECT payload_json FROM tickwork_jobs")
    assert stored == [(canonical_json(payload),)]


async def test_every_operation_through_the_worker_side_client(host: Host) -> None:
    # RpcService is what the Worker uses: if it sent anything Workers RPC cannot
    # carry, the stub would raise before the object saw the call.
    jobs = RpcService(host.raw_stub())
    statuses = await jobs.ingest([
        Job("a", "q", "lane-1", 5, {"x": [1, None, "y"]}, Recovery(2)),
        Job("b", "q", "lane-2", 1, None),
        Job("c", "r", "lane-1", 0, {}),
        Job("d", "s", "lane-3", 0, "text"),
    ])
    assert statuses == ["queued"] * 4

    record = await jobs.read("a")
    assert record is not None
    assert (record.payload, record.recovery, record.state) == (
        {"x": [1, None, "y"]}, Recovery(2), "queued")
    assert await jobs.read("missing") is None
    head = await jobs.read_queue_head("q")
    assert head is not None and head.job_id == "a"
    assert await jobs.read_queue_head("empty") is None

    cancelled = await jobs.cancel("b", "cancel-b")
    assert (cancelled.status, cancelled.job_id) == ("recorded", "b")
    assert (await jobs.cancel("b", "cancel-b")).status == "replayed"
    assert (await jobs.cancel("b", "other", only_if_queued=True)).status == "conflict"
    refused = await jobs.fail_lane("lane-1", "tenant_blocked")
    assert (refused.settled, refused.more) == (2, False)
    assert await jobs.purge("s") == 1

    statuses_by_queue = {status.queue: status for status in await jobs.status()}
    assert set(statuses_by_queue) == {"q", "r"}
    assert statuses_by_queue["q"].settled == 1
    assert statuses_by_queue["q"].outcomes["failed"] == 1
    q = await jobs.queue_status("q")
    assert (q.queued, q.running, q.settled) == (1, 0, 1)

    assert host.rows() == {
        "a": ("settled", "failed", "tenant_blocked", 0, None),
        "b": ("queued", None, None, 0, "cancel-b"),
        "c": ("settled", "failed", "tenant_blocked", 0, None),
    }
    with pytest.raises(ApiError) as refused_read:
        await jobs.read("")
    assert (refused_read.value.status, refused_read.value.field) == (400, "job_id")
    assert [method for _, method in host.namespace.calls].count("ingest") == 1


async def test_bad_arguments_come_back_as_envelopes(host: Host) -> None:
    stub = host.stub()
    assert (await stub.read(""))["error"]["field"] == "job_id"
    assert (await stub.read_queue_head(7))["status"] == 400
    assert (await stub.cancel("x", "", False))["error"]["field"] == "cancellation_id"
    assert (await stub.fail_lane("lane", ""))["error"]["field"] == "reason"
    assert (await stub.purge(None))["error"]["field"] == "queue"
    assert (await stub.queue_status(""))["error"]["field"] == "queue"
    assert (await stub.cancel("missing", "c", False))["value"]["status"] == "not_found"
    assert host.rows() == {}


@pytest.mark.parametrize("argument", [
    ("a", "q"),                    # tuple: python_to_rpc refuses it
    bytearray(b"a"),
    [{"job_id": "a", "queue": ("q",)}],
])
async def test_the_stand_in_refuses_what_rpc_cannot_carry(host: Host, argument: object) -> None:
    with pytest.raises(TypeError, match="cannot be sent over RPC"):
        await host.raw_stub().ingest(argument)
    assert host.namespace.calls == []


@pytest.mark.parametrize("argument", [
    Job("a", "q", "q", 0, {}),     # a custom class
    lambda: None,                  # a callable
])
async def test_python_objects_fail_the_structured_clone(host: Host, argument: object) -> None:
    with pytest.raises(JsException) as refused:
        await host.raw_stub().ingest(argument)
    assert refused.value.name == "DataCloneError"
    assert host.namespace.calls == []


async def test_only_public_rpc_methods_are_callable(host: Host) -> None:
    stub = host.raw_stub()
    for method in ("_job_service", "_executor", "alarm", "runtime", "no_such_method"):
        with pytest.raises(TypeError, match="does not implement"):
            await getattr(stub, method)()
    with pytest.raises(TypeError, match="positional"):
        await stub.cancel("a", "c", only_if_queued=True)
    assert host.namespace.calls == []


async def test_a_storage_failure_reaches_the_caller_as_a_bare_error(host: Host) -> None:
    await host.stub().ingest(job("a"))
    host.faults.sql = True
    with pytest.raises(JsException) as failed:
        await host.stub().ingest(job("b"))
    # As measured: the caller sees only the remote traceback, as text.
    assert str(failed.value).startswith("Error: PythonError: Traceback (most recent call last):")
    assert STORAGE_ERROR in failed.value.message
    host.faults.sql = False
    assert list(host.rows()) == ["a"]


async def test_a_reply_that_cannot_be_cloned_is_refused(host: Host) -> None:
    class Leaky(host.owner_class):  # type: ignore[misc, name-defined]
        async def leak(self) -> object:
            return self.runtime

    host.namespace.cls = Leaky
    with pytest.raises(JsException) as refused:
        await host.stub("leaky").leak()
    assert refused.value.name == "DataCloneError"


async def test_reads_see_a_running_job_while_the_alarm_executes_it(host: Host) -> None:
    await host.stub().ingest(job("slow", payload={"do": "block"}))
    delivering = asyncio.create_task(host.scheduler.run_due())
    await host.executor.blocked.wait()
    record = (await host.stub().read("slow"))["value"]
    assert (record["state"], record["started_at"]) == ("running", host.clock())
    host.executor.release("slow")
    [delivery] = await delivering
    assert delivery.outcome == "ok"
    assert host.rows(OWNER)["slow"][:2] == ("settled", "completed")
