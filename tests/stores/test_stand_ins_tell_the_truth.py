"""The CPython stand-ins against every fact measured in a real workerd.

``python-workers-facts.md``, section "Measured in real workerd" (workerd
1.20260426.1, Pyodide 0.28.2, built-in SDK), lists what tickwork's Worker and
Durable Object met there. One test per fact; the stand-ins (``tests/support/fakes``,
the D1 bridge in ``tests/support/d1``, the request and namespace stand-ins) must
reproduce each, messages included. Where a stand-in was kinder than the
runtime, it hid bugs from every test built on it; these tests keep that from
coming back. The real-Pyodide tier (``tests/pyodide``) checks the same facts
against Pyodide's own FFI.
"""

from __future__ import annotations

import json
import types
from collections.abc import Iterator, Mapping
from http import HTTPMethod
from pathlib import Path
from typing import Any

import pytest

from tests.support.d1.fixtures import d1_binding, d1_bridge  # noqa: F401
from tests.support.d1.miniflare import D1Bridge, D1Error
from tests.support.fakes.alarms import MAX_RETRIES, RETRY_OFFSETS_MS, AlarmScheduler, SimClock
from tests.support.fakes.do_namespace import FakeDurableObjectNamespace, carry
from tests.support.fakes.do_storage import FakeDurableObjectStorage
from tests.support.fakes.pyodide_ffi import (
    JsBigInt,
    JsBuffer,
    JsException,
    JsObject,
    JsProxy,
    fake_pyodide,
    jsnull,
    py_to_js,
    to_js,
)
from tests.support.fakes.workers_module import Request, installed_workers_module

EDGE = 2**53 - 1


@pytest.fixture
def storage() -> Iterator[FakeDurableObjectStorage]:
    """A Durable Object's storage as the built-in SDK shows it (the measured shape)."""
    store = FakeDurableObjectStorage(sdk="builtin")
    store.sql.exec("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT, v REAL, b BLOB)")
    yield store
    store.close()


@pytest.fixture
def db(d1_bridge: D1Bridge) -> Iterator[Any]:  # noqa: F811
    with d1_binding(d1_bridge, "builtin") as binding:
        yield binding


# ----------------------------------------------------------- integer boundary


def test_ints_cross_as_numbers_only_strictly_inside_the_bounds() -> None:
    assert not isinstance(py_to_js(EDGE - 1), JsBigInt)
    assert not isinstance(py_to_js(-(EDGE - 1)), JsBigInt)
    for value in (EDGE, -EDGE, EDGE + 1):
        assert isinstance(py_to_js(value), JsBigInt), value
    assert not isinstance(py_to_js(float(EDGE)), JsBigInt)  # a whole float is a Number


def test_do_sql_refuses_a_bigint_binding_with_the_measured_error(
    storage: FakeDurableObjectStorage,
) -> None:
    with pytest.raises(JsException) as refused:
        storage.sql.exec("SELECT ?", -EDGE)
    assert str(refused.value) == "TypeError: Cannot convert a BigInt value to a number"


async def test_d1_refuses_a_bigint_binding_with_the_measured_error(db: Any) -> None:
    with pytest.raises(D1Error) as refused:
        db.prepare("SELECT ?1").bind(-EDGE)
    assert refused.value.message == (
        "D1_TYPE_ERROR: Type 'bigint' not supported for value '-9007199254740991'")


# ----------------------------------------------------------- DO SQL values


def test_do_rows_are_proxies_and_values_read_back_as_measured(
    storage: FakeDurableObjectStorage,
) -> None:
    storage.sql.exec("INSERT INTO t VALUES (7, NULL, 2.0, ?)", to_js(b"\x01"))
    [row] = storage.sql.exec("SELECT id, name, v, b FROM t").toArray()
    assert isinstance(row, JsProxy) and not isinstance(row, Mapping)
    assert (row.id, type(row.id)) == (7, int)
    assert (row.v, type(row.v)) == (2, int)  # REAL 2.0 reads back as the int 2
    assert row.name is jsnull
    assert isinstance(row.b, JsBuffer) and row.b.constructor.name == "ArrayBuffer"
    converted = row.to_py()
    assert converted["name"] is jsnull
    assert isinstance(converted["b"], memoryview)


def test_do_binding_none_stores_null_and_true_stores_text(
    storage: FakeDurableObjectStorage,
) -> None:
    storage.sql.exec("INSERT INTO t (id, name) VALUES (1, ?)", None)
    storage.sql.exec("INSERT INTO t (id, name) VALUES (2, ?)", True)
    assert storage.debug_query("SELECT typeof(name), name FROM t ORDER BY id") == [
        ("null", None), ("text", "true")]


def test_do_too_many_parameters_names_the_offset(storage: FakeDurableObjectStorage) -> None:
    with pytest.raises(JsException) as refused:
        storage.sql.exec("INSERT INTO t (name) SELECT " + " || ".join(["?"] * 101),
                         *["x"] * 101)
    offset = len("INSERT INTO t (name) SELECT ") + 100 * len("? || ")
    assert refused.value.message == f"too many SQL variables at offset {offset}: SQLITE_ERROR"


def test_do_begin_is_refused_with_the_measured_message(storage: FakeDurableObjectStorage) -> None:
    with pytest.raises(JsException) as refused:
        storage.sql.exec("BEGIN")
    assert refused.value.message.startswith(
        "To execute a transaction, please use the state.storage.transaction() or "
        "state.storage.transactionSync() APIs")


def test_do_transaction_sync_returns_nests_and_reraises_the_original_exception(
    storage: FakeDurableObjectStorage,
) -> None:
    class Refused(Exception):
        pass

    def inner() -> None:
        storage.sql.exec("INSERT INTO t (id) VALUES (2)")
        raise Refused

    def outer() -> str:
        storage.sql.exec("INSERT INTO t (id) VALUES (1)")
        with pytest.raises(Refused):
            storage.transactionSync(inner)
        return "value"

    assert storage.transactionSync(outer) == "value"
    assert storage.debug_query("SELECT id FROM t") == [(1,)]


# ----------------------------------------------------------- D1 values


async def test_d1_rows_keep_jsnull_and_changes_is_an_int(db: Any) -> None:
    await db.prepare("CREATE TABLE t (a INTEGER, b TEXT)").run()
    ran = await db.prepare("INSERT INTO t VALUES (1, NULL)").run()
    assert (ran.meta.changes, type(ran.meta.changes)) == (1, int)
    raw = (await db.prepare("SELECT a, b FROM t").raw()).to_py()
    assert raw == [[1, jsnull]] and raw[0][1] is jsnull
    # A plain Python list is a batch (measured); rows keep jsnull there too.
    [result] = (await db.batch([db.prepare("SELECT b FROM t")])).to_py()
    assert result["results"][0]["b"] is jsnull


async def test_d1_binding_none_fails_and_true_binds_as_one(db: Any) -> None:
    with pytest.raises(D1Error) as refused:
        db.prepare("SELECT ?1").bind(None)
    assert refused.value.message == (
        "D1_TYPE_ERROR: Type 'undefined' not supported for value 'undefined'")
    assert await db.prepare("SELECT ?1 AS v").bind(True).first("v") == 1


async def test_d1_a_failed_batch_rolls_back_and_begin_is_refused(db: Any) -> None:
    await db.prepare("CREATE TABLE t (a INTEGER PRIMARY KEY)").run()
    with pytest.raises(D1Error):
        await db.batch([db.prepare("INSERT INTO t VALUES (1)"),
                        db.prepare("INSERT INTO t VALUES (1)")])
    assert await db.prepare("SELECT count(*) AS n FROM t").first("n") == 0
    with pytest.raises(D1Error) as refused:
        await db.prepare("BEGIN").run()
    assert refused.value.message.startswith("D1_ERROR: To execute a transaction")


# ----------------------------------------------------------- RPC


def test_rpc_delivers_plain_python_with_whole_floats_as_ints() -> None:
    arrived = carry({"f": 1.0, "list": [None, 2.0], "nested": {"g": 0.5}})
    assert arrived == {"f": 1, "list": [None, 2], "nested": {"g": 0.5}}
    assert type(arrived["f"]) is int and type(arrived["list"][1]) is int
    assert isinstance(arrived, dict) and isinstance(arrived["nested"], dict)


def test_rpc_carries_sets_and_bytes_and_refuses_tuples() -> None:
    assert carry({1, 2}) == {1, 2}
    arrived = carry(b"xy")
    assert isinstance(arrived, memoryview) and bytes(arrived) == b"xy"
    with pytest.raises(TypeError) as refused:
        carry(("a",))
    assert str(refused.value) == "<class 'tuple'> cannot be sent over RPC."
    assert carry(EDGE) == EDGE  # a BigInt travels (and comes back as an int)


async def test_rpc_a_remote_exception_arrives_as_its_traceback(tmp_path: Path) -> None:
    class Failing:
        def __init__(self, ctx: Any, env: Any) -> None:
            pass

        async def boom(self) -> None:
            raise RuntimeError("it broke")

    namespace = FakeDurableObjectNamespace(Failing, directory=tmp_path, sdk="external")
    with pytest.raises(JsException) as failed:
        await namespace.getByName("x").boom()
    text = str(failed.value)
    assert text.startswith("Error: PythonError: Traceback (most recent call last):")
    assert text.rstrip().endswith("RuntimeError: it broke")
    namespace.close()


# ----------------------------------------------------------- alarms


async def test_get_alarm_is_jsnull_or_an_int(storage: FakeDurableObjectStorage) -> None:
    assert await storage.getAlarm() is jsnull
    await storage.setAlarm(1_796_000_000_000)
    value = await storage.getAlarm()
    assert (value, type(value)) == (1_796_000_000_000, int)


class _Recorder:
    """A Durable Object whose alarm handler records, writes, then raises."""

    def __init__(self, ctx: Any, env: Any) -> None:
        self.storage = ctx.storage
        self.env = env

    async def alarm(self, info: Any) -> None:
        self.env.infos.append((info.retryCount, info.isRetry))
        self.storage.sql.exec("CREATE TABLE IF NOT EXISTS w (n INTEGER)")
        self.storage.sql.exec("INSERT INTO w VALUES (?)", info.retryCount)
        raise RuntimeError("keeps failing")


async def test_a_failing_alarm_is_delivered_seven_times_at_the_measured_times(
    tmp_path: Path,
) -> None:
    with fake_pyodide():
        env = types.SimpleNamespace(infos=[])
        namespace = FakeDurableObjectNamespace(_Recorder, env, directory=tmp_path)
        clock = SimClock()
        scheduler = AlarmScheduler(namespace, clock)
        start = clock()
        await namespace.storage("x").setAlarm(start)
        deliveries = await scheduler.run_until_idle()
        assert len(deliveries) == MAX_RETRIES + 1 == 7
        assert env.infos == [(n, n > 0) for n in range(7)]
        assert all(type(count) is int and type(retry) is bool for count, retry in env.infos)
        retried_at = [d.retry_at - start for d in deliveries if d.retry_at is not None]
        assert retried_at == list(RETRY_OFFSETS_MS) == [2_200, 7_100, 15_800, 34_900,
                                                        71_900, 136_500]
        # Writes made before each raise were kept, not rolled back.
        assert namespace.storage("x").debug_query("SELECT n FROM w") == [
            (n,) for n in range(7)]
        namespace.close()


async def test_a_persisted_alarm_fires_again_after_a_restart(tmp_path: Path) -> None:
    with fake_pyodide():
        env = types.SimpleNamespace(infos=[])
        namespace = FakeDurableObjectNamespace(_Recorder, env, directory=tmp_path)
        clock = SimClock()
        await namespace.storage("x").setAlarm(clock() + 1_000)
        namespace.evict("x")  # the runtime restarts; the alarm lives in storage
        scheduler = AlarmScheduler(namespace, clock)
        [first, *_] = await scheduler.run_until_idle()
        assert first.retry_count == 0 and env.infos[0] == (0, False)
        namespace.close()


def test_alarm_info_is_a_js_object_with_an_int_count_and_a_bool() -> None:
    info = JsObject([("retryCount", 2.0), ("isRetry", True)])
    assert (info.retryCount, type(info.retryCount), info.isRetry) == (2, int, True)


# ----------------------------------------------------------- requests


def test_a_request_has_an_http_method_and_none_for_a_missing_header() -> None:
    request = Request("https://w.example/v1/health", method="POST",
                      headers={"content-type": "application/json"}, body=b"{}")
    assert request.method is HTTPMethod.POST
    assert request.headers.get("authorization") is None
    assert request.headers.get("Content-Type") == "application/json"


def test_the_url_parser_resolves_percent_encoded_dot_segments() -> None:
    request = Request("https://w.example/v1/owners/%2E%2E/jobs/%2e/x")
    assert request.url == "https://w.example/v1/jobs/x"


def test_a_response_takes_bytes_status_and_a_header_dict() -> None:
    with installed_workers_module() as workers:
        response = workers.Response(json.dumps({"ok": True}).encode(), status=201,
                                    headers={"content-type": "application/json"})
        assert (response.status, response.body) == (201, b'{"ok": true}')
        assert response.headers.get("content-type") == "application/json"
