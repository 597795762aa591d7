"""JobOwner's RPC methods through a namespace stub: every argument and reply
crosses the Workers RPC boundary of the stand-in, and every outcome is read
back from the object's SQLite file."""

from __future__ import annotations

import asyncio

import pytest

from tests.durable_objects.conftest import OWNER, Host, job
from tests.fakes.pyodide_ffi import JsException
from tickwork import Job, Recovery
from tickwork.api import ApiError, RpcJobs


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
    reply = await host.stub().ingest({"job_id": "d", "payload_json": "null"})
    assert (reply["status"], reply["error"]["field"]) == (400, "jobs[0].queue")
    # The RPC shape is job_to_rpc's: a payload travels as JSON text.
    reply = await host.stub().ingest({"job_id": "d", "queue": "q", "payload": {"n": 1}})
    assert (reply["status"], reply["error"]["field"]) == (400, "jobs[0]")
    assert host.rows() == {}


async def test_every_operation_through_the_worker_side_client(host: Host) -> None:
    # RpcJobs is what the Worker uses: if it sent anything Workers RPC cannot
    # carry, the stub would raise before the object saw the call.
    jobs = RpcJobs(host.stub())
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

    cancelled = await jobs.cancel("b", "cancel-b", False)
    assert (cancelled.status, cancelled.job_id) == ("recorded", "b")
    assert (await jobs.cancel("b", "cancel-b", False)).status == "replayed"
    assert (await jobs.cancel("b", "other", True)).status == "conflict"
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
        await host.stub().ingest(argument)
    assert host.namespace.calls == []


@pytest.mark.parametrize("argument", [
    Job("a", "q", "q", 0, {}),     # a custom class
    lambda: None,                  # a callable
    {"job": {1, 2}},               # a set, nested
])
async def test_python_objects_fail_the_structured_clone(host: Host, argument: object) -> None:
    with pytest.raises(JsException) as refused:
        await host.stub().ingest(argument)
    assert refused.value.name == "DataCloneError"
    assert host.namespace.calls == []


async def test_only_public_rpc_methods_are_callable(host: Host) -> None:
    stub = host.stub()
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
    assert failed.value.name == "Error"
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
