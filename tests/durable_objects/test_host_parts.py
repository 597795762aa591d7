"""The parts of the Durable Object host on their own: alarm_info reading,
AlarmWake's write discipline, the default executor wiring, and the
stand-ins' own rules (namespace identity, RPC shapes, retry schedule)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import FunctionType, SimpleNamespace
from typing import Any

import pytest

from tests.durable_objects.conftest import (
    OWNER,
    STORAGE_ERROR,
    DecodingStub,
    Faults,
    FlakyStorage,
    Host,
    job,
)
from tests.support.fakes.alarms import MAX_RETRIES, RETRY_OFFSETS_MS
from tests.support.fakes.do_namespace import FakeDurableObjectNamespace, carry, rpc_methods
from tests.support.fakes.do_storage import FakeDurableObjectStorage, JsDict
from tests.support.fakes.pyodide_ffi import JsException, JsObject, fake_pyodide, jsnull
from tests.support.fakes.workers_module import installed_workers_module
from tickwork.api import OPERATIONS, JobOwnerRpc
from tickwork.api import rpc_methods as api_rpc_methods


@pytest.fixture
def glue() -> Iterator[Any]:
    """The durable_objects package, imported under the stand-in workers module."""
    with installed_workers_module(), fake_pyodide():
        import durable_objects
        from tickwork.cloudflare import alarm_wake

        yield SimpleNamespace(package=durable_objects, alarm_wake=alarm_wake)


class ThrowingInfo:
    @property
    def retryCount(self) -> int:
        raise JsException("Error", "detached")


@pytest.mark.parametrize(("info", "count"), [
    (None, 0),
    (JsObject([("retryCount", 3.0), ("isRetry", True)]), 3),
    (JsObject([("retryCount", 0.0), ("isRetry", False)]), 0),
    ({"retryCount": 2, "isRetry": True}, 2),
    (JsObject([("isRetry", True)]), 1),
    ({"retryCount": jsnull, "isRetry": True}, 1),
    ({"retryCount": True}, 0),
    ({"retryCount": -1}, 0),
    ({"retryCount": float("nan")}, 0),
    (ThrowingInfo(), 0),
    ("not an info object", 0),
])
def test_alarm_retry_count_is_read_defensively(glue: Any, info: object, count: int) -> None:
    assert glue.alarm_wake.alarm_retry_count(info) == count


class CountingStorage:
    """Alarm methods of a storage, counting writes."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage
        self.writes: list[tuple[str, int | None]] = []

    def getAlarm(self) -> Any:
        return self._storage.getAlarm()

    def setAlarm(self, when: int) -> Any:
        self.writes.append(("set", when))
        return self._storage.setAlarm(when)

    def deleteAlarm(self) -> Any:
        self.writes.append(("delete", None))
        return self._storage.deleteAlarm()


async def test_alarm_wake_writes_only_when_the_alarm_must_change(
    glue: Any, storage: FakeDurableObjectStorage
) -> None:
    state: dict[str, Any] = {"pending": False, "now": 1_000}
    counting = CountingStorage(storage)
    wake = glue.alarm_wake.AlarmWake(
        counting, next_at=lambda: state["now"] if state["pending"] else None,
        clock=lambda: state["now"])
    wake.recompute()
    await wake.flush()
    assert counting.writes == []  # nothing pending, nothing armed
    state["pending"] = True
    for _ in range(3):
        wake.recompute()
    await wake.flush()
    assert counting.writes == [("set", 1_000)]
    state["now"] = 1_500
    wake.recompute()
    await wake.flush()
    assert counting.writes == [("set", 1_000)]  # armed in the past: fires anyway
    state["pending"] = False
    wake.recompute()
    await wake.flush()
    assert counting.writes[-1] == ("delete", None)
    assert await storage.getAlarm() in (None, jsnull)


async def test_alarm_wake_arms_for_the_next_due_time(
    glue: Any, storage: FakeDurableObjectStorage
) -> None:
    """Work due later arms the alarm for that moment, once; a floor later than
    it wins; work due earlier than the floor does not undercut it."""
    state: dict[str, Any] = {"next": 9_000, "now": 1_000}
    counting = CountingStorage(storage)
    wake = glue.alarm_wake.AlarmWake(counting, next_at=lambda: state["next"],
                                     clock=lambda: state["now"])
    for _ in range(3):
        wake.recompute()
        await wake.flush()
    assert counting.writes == [("set", 9_000)]
    wake.delay_until(12_000)
    wake.recompute()
    await wake.flush()
    assert counting.writes[-1] == ("set", 12_000)
    wake.delay_until(None)
    state["next"] = 500  # overdue: fires now
    wake.recompute()
    await wake.flush()
    assert counting.writes[-1] == ("set", 1_000)


async def test_alarm_wake_holds_and_floors(glue: Any, storage: FakeDurableObjectStorage) -> None:
    now = 5_000
    wake = glue.alarm_wake.AlarmWake(storage, next_at=lambda: now, clock=lambda: now)
    wake.hold()
    wake.recompute()
    await wake.flush()
    assert await storage.getAlarm() in (None, jsnull)  # held: nothing written
    wake.release()
    wake.delay_until(now + 700)
    await wake.flush()
    assert await storage.getAlarm() == now + 700
    wake.delay_until(None)
    wake.recompute()
    await wake.flush()
    assert await storage.getAlarm() == now
    with pytest.raises(RuntimeError):
        wake.release()


async def test_alarm_wake_retries_after_a_storage_error(
    glue: Any, storage: FakeDurableObjectStorage
) -> None:
    faults = Faults(alarms=True)
    wake = glue.alarm_wake.AlarmWake(FlakyStorage(storage, faults), next_at=lambda: 42,
                                     clock=lambda: 42)
    wake.recompute()  # the background drain fails...
    await asyncio.sleep(0)
    with pytest.raises(JsException, match="SQLITE_IOERR"):
        await wake.flush()  # ...and flush reports it
    faults.alarms = False
    await wake.flush()  # still stale: applied now
    assert await storage.getAlarm() == 42


async def test_the_default_executor_is_the_worker_registry(tmp_path: Path) -> None:
    with installed_workers_module(), fake_pyodide():
        from durable_objects import JobOwner

        namespace = FakeDurableObjectNamespace(JobOwner, SimpleNamespace(), directory=tmp_path)
        stub = namespace.getByName(OWNER)
        await stub.ingest('[{"job_id": "a", "queue": "no-such-queue"}]')
        await namespace.instance(OWNER).alarm(None)
        [row] = namespace.storage(OWNER).debug_query(
            "SELECT state, outcome, failure_reason FROM tickwork_jobs")
        assert row == ("settled", "failed", "no_executor")
        assert await namespace.storage(OWNER).getAlarm() is jsnull
        namespace.close()


RPC_METHODS = ["alarm", "backlog", "cancel", "cancel_lane", "clear_limit", "clear_rate_limit",
               "clear_retention", "dead_letters", "delete_schedule", "explain", "fail_lane",
               "find_jobs", "history", "ingest", "limits", "list_jobs", "pause", "pause_schedule",
               "purge", "put_schedule", "queue_status", "rate_limits", "read", "read_queue_head",
               "read_settled", "ready", "redrive", "redrive_dead_letters", "resume",
               "resume_schedule", "retention", "schedules", "set_limit", "set_rate_limit",
               "set_retention", "status", "storage"]


def _own_public_functions(cls: type) -> list[str]:
    return sorted(name for name, value in vars(cls).items()
                  if not name.startswith("_") and isinstance(value, FunctionType))


def test_only_public_functions_are_rpc_methods(glue: Any) -> None:
    assert rpc_methods(glue.package.JobOwner) == RPC_METHODS


def test_every_rpc_method_is_defined_on_the_class_itself(glue: Any) -> None:
    # The strict reading: some workerd versions list only the functions in
    # the class's own __dict__, so an inherited RPC method would be missing.
    assert _own_public_functions(glue.package.JobOwner) == RPC_METHODS
    # One per operation the API serves (a new operation included), and alarm.
    assert {operation.name for operation in OPERATIONS} | {"alarm"} == set(RPC_METHODS)
    # The mixin itself defines none: they come from the operations table.
    assert _own_public_functions(JobOwnerRpc) == []


def test_an_rpc_method_cannot_be_hidden_by_a_method_of_the_class() -> None:
    class Clash(JobOwnerRpc):
        async def read(self, job_id: Any) -> str:
            return "mine"

    with pytest.raises(TypeError, match="would hide its RPC method"):
        api_rpc_methods(Clash)


async def test_one_instance_per_name_rebuilt_from_storage_after_eviction(host: Host) -> None:
    namespace = host.namespace
    by_name = DecodingStub(namespace.getByName(OWNER))
    by_id = DecodingStub(namespace.get(namespace.idFromName(OWNER)))
    id_by_name, id_by_id = namespace.getByName(OWNER).id, namespace.get(
        namespace.idFromName(OWNER)).id
    assert id_by_id.equals(id_by_name) and id_by_id.toString() == id_by_name.toString()
    await by_name.ingest(job("a"))
    first = namespace.instance(OWNER)
    assert (await by_id.read("a"))["value"]["job_id"] == "a"
    assert namespace.instance(OWNER) is first and namespace.incarnation(OWNER) == 1
    namespace.evict(OWNER)
    assert first.ctx.storage._storage.evicted
    assert (await by_id.read("a"))["value"]["state"] == "queued"
    assert namespace.instance(OWNER) is not first and namespace.incarnation(OWNER) == 2
    other = DecodingStub(namespace.getByName("tenant-2"))
    assert (await other.read("a"))["value"] is None


def test_rpc_values_arrive_as_plain_data() -> None:
    sent = {"a": [1, None, {"b": 2.5}], "c": True, 3: "key"}
    arrived = carry(sent)
    assert arrived == {"a": [1, None, {"b": 2.5}], "c": True, "3": "key"}
    assert isinstance(arrived, JsDict)
    assert carry(None) is None
    assert bytes(carry(b"xy")) == b"xy"  # a Uint8Array: arrives as a memoryview


async def test_failed_alarms_are_retried_with_backoff_then_dropped(host: Host) -> None:
    await host.stub().ingest(job("a"))
    host.faults.sql = host.faults.alarms = True
    host.owner_class.alarm_raise_below_retry = MAX_RETRIES + 1  # never reschedule itself
    deliveries = await host.scheduler.run_until_idle()
    assert [(d.retry_count, d.outcome) for d in deliveries] == [
        (count, "raised") for count in range(MAX_RETRIES + 1)]
    retry_times = [d.retry_at for d in deliveries[:-1] if d.retry_at is not None]
    assert len(retry_times) == MAX_RETRIES
    # As measured in real workerd: retries 1-6 at about +2.2 ... +136.5 s after the first.
    first = deliveries[0].retry_at - RETRY_OFFSETS_MS[0]  # type: ignore[operator]
    assert [when - first for when in retry_times] == list(RETRY_OFFSETS_MS)
    assert deliveries[-1].retry_at is None  # the 6th retry failed: given up
    assert STORAGE_ERROR in str(deliveries[-1].error)
    host.faults.sql = host.faults.alarms = False
    assert await host.alarm() is None
    assert host.rows()["a"][0] == "queued"  # the runtime gave up; the next event re-arms
    await host.stub().ingest(job("a"))
    await host.scheduler.run_until_idle()
    assert host.rows()["a"][:2] == ("settled", "completed")
