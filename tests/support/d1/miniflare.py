"""A real Cloudflare D1 engine (and real Cloudflare Queues) for the Python tests, through Miniflare.

:class:`D1Bridge` runs ``node tests/support/d1/bridge.mjs`` (Miniflare, pinned in the
repository's ``package.json``; install it with ``npm ci``) and talks to it in
JSON lines over the process's stdin/stdout. Every statement is executed by the
D1 binding of a real workerd worker, so SQL, binding rules, limits, batch
atomicity and error messages are D1's own. Nothing here re-implements them.

Bindings: ``bridge.binding(shape)`` returns an object with the D1 binding's
API as Python code sees it in a Worker, asynchronous like the real one::

    db = bridge.binding("external")        # or "builtin"
    stmt = db.prepare("INSERT INTO t(a, b) VALUES (?1, ?2)").bind(1, "x")
    await stmt.run()                       # also first(), first("col"), all(), raw()
    await db.batch([stmt, other])          # one round trip, one transaction
    await db.exec("CREATE TABLE u(a)")
    db.stats.round_trips, db.stats.statements

``"builtin"``
    The ``workers`` module built into workerd hands ``env.DB`` over as a raw
    JsProxy. The binding here is such a JsProxy (from
    ``tests.support.fakes.pyodide_ffi``); arguments go through Pyodide's implicit
    Python -> JS conversion (``py_to_js``) and results come back through the
    JS -> Python one (``js_to_py``): rows are ``JsObject`` (attribute access,
    ``to_py()``), SQL NULL is ``jsnull`` (truthy, not None), ``first()`` of
    no row is ``jsnull``, every number crossed as a JS double and reads back
    as ``int`` when it is a safe integer (so REAL 2.0 reads as ``2``), BLOBs
    come back as a JS Array of byte numbers. Python ``None`` crosses as JS
    ``undefined``, which D1's ``bind()`` rejects with ``D1_TYPE_ERROR``; bind
    ``jsnull`` for NULL. Python ``bytes`` crosses as a PyProxy, which D1 also
    rejects; bind ``to_js(data)`` (a Uint8Array).

``"external"``
    PyPI ``workers-runtime-sdk`` wraps a ``D1Database`` binding in
    ``_BindingWrapper`` (workers-py ``_EnvWrapper``); that wrapper, ported in
    ``tests.support.fakes.do_storage``, is applied to the same JsProxy: arguments go
    through ``python_to_rpc`` (``None`` -> null, ``bytes`` -> Uint8Array,
    tuples refused), results through ``python_from_rpc`` (dict-like ``JsDict``
    rows and results, NULL and no-row as ``None``, BLOBs as ``list`` of ints).

Errors: D1 rejects with a JS ``Error``; it surfaces as :class:`D1Error`, a
subclass of the fake ``pyodide.ffi.JsException`` (as the real error is a
``JsException``): ``.name`` is the JS class (``"Error"``), ``.message`` D1's
message (``"D1_ERROR: UNIQUE constraint failed: ..."``, ``"D1_TYPE_ERROR:
..."``), ``str()`` is ``"Error: <message>"``, ``.cause`` the inner message.
Values: every Python number reaches D1 as a JS double, so a bound ``5`` is
REAL to SQLite (``typeof(?1)`` is ``'real'``) until a column's INTEGER
affinity converts it; NaN and infinities bind as NULL; booleans as 1/0; an
int at or beyond +-(2**53 - 1) crosses as a BigInt (measured), which D1 refuses. Keyword
arguments follow Pyodide: they become one trailing JS object, so pass the
column of ``first("col")`` positionally (``raw(columnNames=True)`` works as
in the real SDKs). With the external shape ``first(None)`` sends ``null``,
which D1 takes as a column name (``D1_COLUMN_NOTFOUND``), as the real SDK does.

``bind()`` raises synchronously, like the real one: values that D1's ``bind``
may refuse (anything but str, number, boolean, null and byte buffers) are
checked by D1 itself at once, with one extra bridge call (not counted in
``stats``, because a Worker's ``bind()`` makes no round trip).

A JS promise starts its work when it is created, and so does this one: the
request leaves when ``run()``/``batch()``/... is called, and awaiting it only
waits for the answer. Cancelling the awaiting task does not cancel the query,
as in a Worker.

Event loops: the bridge is meant to live for the whole test session, while
pytest-asyncio gives every test its own event loop. So the bridge's I/O is
bound to no loop: it owns blocking pipes, one writer lock and a reader thread;
every request is a ``concurrent.futures.Future`` keyed by a request id, and
``await`` wraps that future into whichever loop is running at that moment
(``asyncio.wrap_future``). Any number of tasks of any loop can have requests
in flight at once (they are pipelined; the answers come back in any order and
are matched by id). D1 itself runs them one at a time, as a real D1 database
(a single Durable Object) does.

Queues: the same worker has queue producers ``Q_0`` .. and consumes every one
of them itself, so Miniflare's own broker batches, redelivers and counts
attempts. ``bridge.new_queue(shape)`` hands a test one of them
(:class:`BridgeQueue`): ``queue.producer`` is the binding as Python sees it in
a Worker (``await env.TICKWORK_QUEUE.send(body)``, ``sendBatch``), and
``queue.consume(callback)`` makes every batch Miniflare delivers an
``await callback(batch)`` in the test's event loop, with ``batch`` shaped like
the runtime's ``MessageBatch`` (``queue``, ``messages`` with ``id``, ``body``,
``attempts``, ``timestamp``, ``ack()``, ``retry()``; ``ackAll()``,
``retryAll()``), raw for ``"builtin"``, in ``_BindingWrapper`` for
``"external"`` (as the SDK's ``queue()`` wrapper hands it over). The calls the
callback made are replayed on the real batch, in order, once it returns; if it
raised, the real handler throws, so Miniflare retries the whole batch. A
delivery with no consumer (a test that has ended) is acknowledged and kept in
``bridge.unclaimed_deliveries``. ``queue.deliveries`` records each delivery
(messages, calls, what was raised). The consumer settings are Miniflare's
options in ``bridge.info["queue_consumer"]``: up to 100 messages a batch, 50 ms
batch timeout, 4 attempts, no retry delay. JS errors of ``send`` surface as
:class:`D1Error` (a ``JsException``), as D1's do.

Fresh databases: the worker has a small pool of D1 databases (``DB_0`` ..);
``new_database()`` takes the next one round-robin and empties it (drops every
table, view and trigger, so every index and row goes too; D1's own ``_cf_``
tables stay, as in a new D1 database). A binding is tied to one generation of
its database: after the database was handed to a later test, using an old
binding raises :class:`StaleD1Binding` instead of writing into someone
else's test.
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import collections
import concurrent.futures
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tests.support.fakes.do_storage import _BindingWrapper, python_from_rpc, python_to_rpc
from tests.support.fakes.pyodide_ffi import (
    JsArray,
    JsBigInt,
    JsBuffer,
    JsDate,
    JsDoubleProxy,
    JsException,
    JsMap,
    JsObject,
    JsProxy,
    PyProxy,
    js_to_py,
    jsnull,
    py_to_js,
)

Shape = Literal["external", "builtin"]

#: Both answer shapes, in the order the parametrised fixture uses.
SHAPES: tuple[Shape, ...] = ("external", "builtin")

#: The repository root (it holds package.json and node_modules/).
REPO_ROOT = Path(__file__).resolve().parents[3]

#: The Node side of the bridge.
BRIDGE_SCRIPT = Path(__file__).resolve().with_name("bridge.mjs")

#: How many D1 databases the worker has; ``new_database()`` cycles through them.
DEFAULT_DATABASES = 8

#: How many queues the worker produces to and consumes; ``new_queue()`` cycles through them.
DEFAULT_QUEUES = 4

#: Compatibility date of the bridge's worker (the one the project's wrangler.toml uses).
COMPATIBILITY_DATE = "2026-04-01"

#: Seconds to wait for Miniflare to start, and for a synchronous bridge call.
STARTUP_TIMEOUT = 120.0
CALL_TIMEOUT = 60.0

_STATEMENT_METHODS = ("first", "all", "run", "raw")


# ---------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------
class D1BridgeError(RuntimeError):
    """The bridge itself failed: not installed, did not start, died, or a bug here."""


class StaleD1Binding(RuntimeError):
    """A binding was used after its database was handed to a later test."""


class D1Error(JsException):
    """An error raised by the D1 binding (a JS ``Error``, seen from Python).

    ``message`` is D1's message (``"D1_ERROR: ..."``, ``"D1_TYPE_ERROR: ..."``,
    ``"D1_EXEC_ERROR: ..."``, ``"D1_COLUMN_NOTFOUND: ..."``); ``cause`` is the
    message of the error's ``cause``, if it has one.
    """

    def __init__(self, name: str, message: str, cause: str | None = None) -> None:
        super().__init__(name, message)
        self.cause = cause


# ---------------------------------------------------------------------------
# Statistics
# ---------------------------------------------------------------------------
@dataclass
class D1Stats:
    """What a binding has cost so far.

    ``round_trips``: requests to D1 (each ``first``/``all``/``run``/``raw``,
    ``batch`` and ``exec``; ``prepare`` and ``bind`` make none).
    ``statements``: SQL statements sent (a batch counts each of its
    statements; ``exec`` counts 1 when called and, once awaited
    successfully, the rest of what D1 reports in ``count``).
    """

    round_trips: int = 0
    statements: int = 0

    def snapshot(self) -> D1Stats:
        return D1Stats(self.round_trips, self.statements)

    def since(self, earlier: D1Stats) -> D1Stats:
        """The cost between ``earlier`` (a snapshot) and now."""
        return D1Stats(self.round_trips - earlier.round_trips, self.statements - earlier.statements)

    def reset(self) -> None:
        self.round_trips = 0
        self.statements = 0


@dataclass(frozen=True)
class D1DatabaseHandle:
    """One fresh database: the worker's binding name and its generation."""

    name: str
    generation: int


# ---------------------------------------------------------------------------
# Wire format (see bridge.mjs): JS-side values <-> JSON
# ---------------------------------------------------------------------------
def _encode(value: Any) -> Any:
    """A JS-side value (as the fakes represent it) -> JSON for the worker."""
    if value is None:
        return {"$": "undefined"}
    if value is jsnull:
        return None
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        number = float(value)
        return number if math.isfinite(number) else {"$": "number", "v": _js_number_text(number)}
    if isinstance(value, JsBigInt):
        return {"$": "bigint", "v": str(value.value)}
    if isinstance(value, JsBuffer):
        data = base64.b64encode(value.to_bytes()).decode("ascii")
        return {"$": value.constructor.name, "b64": data}
    if isinstance(value, JsArray):
        return [_encode(item) for item in value._items]
    if isinstance(value, JsObject):
        props: dict[str, Any] = value._props
        return {"$": "object", "v": {key: _encode(item) for key, item in props.items()}}
    if isinstance(value, JsMap):
        return {"$": "map", "v": [[_encode(k), _encode(v)] for k, v in value._entries.items()]}
    if isinstance(value, JsDate):
        return {"$": "date", "v": value._millis}
    if isinstance(value, (_JsD1Database, _JsD1PreparedStatement)):
        # A real D1 object would be coerced by bind(); there is no need to bind one.
        raise TypeError("d1 fixture: a D1 object cannot be sent as a value")
    if isinstance(value, PyProxy):
        return _pyproxy(value.obj)
    if isinstance(value, JsDoubleProxy):
        return _pyproxy(value.unwrap())
    if isinstance(value, JsProxy):
        raise TypeError(f"d1 fixture: cannot send {type(value).__name__} to D1")
    raise TypeError(f"d1 fixture: not a JS-side value: {value!r}")


def _pyproxy(obj: Any) -> dict[str, Any]:
    return {"$": "pyproxy", "repr": str(obj), "callable": callable(obj)}


def _js_number_text(number: float) -> str:
    if math.isnan(number):
        return "NaN"
    return "Infinity" if number > 0 else "-Infinity"


def _decode(value: Any) -> Any:
    """JSON from the worker -> the JS-side value (numbers are doubles, null is jsnull)."""
    if value is None:
        return jsnull
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, list):
        return JsArray([_decode(item) for item in value])
    if isinstance(value, dict):
        tag = value.get("$")
        if tag is None:
            return JsObject((key, _decode(item)) for key, item in value.items())
        if tag == "object":
            return JsObject((key, _decode(item)) for key, item in value["v"].items())
        if tag == "undefined":
            return None
        if tag == "number":
            return float(value["v"].replace("Infinity", "inf"))
        if tag == "bigint":
            return JsBigInt(int(value["v"]))
        if tag in ("ArrayBuffer", "Uint8Array"):
            return JsBuffer(base64.b64decode(value["b64"]), kind=tag)
        if tag == "map":
            return JsMap((_decode(k), _decode(v)) for k, v in value["v"])
        if tag == "date":
            return JsDate(value["v"])
        if tag == "pyproxy":
            return value["repr"]
        raise D1BridgeError(f"unknown value tag from the bridge: {tag!r}")
    raise D1BridgeError(f"unexpected JSON from the bridge: {value!r}")


def _surely_bindable(value: Any) -> bool:
    """True for JS-side values D1's ``bind()`` accepts without a check: string,
    number, boolean, null and byte buffers (workerd d1-api ``bind``; each case
    is asserted against the real D1 in test_miniflare_bridge.py). Everything
    else is checked by D1 itself before ``bind()`` returns."""
    return value is jsnull or isinstance(value, (str, bool, float, JsBuffer))


# ---------------------------------------------------------------------------
# The bridge process
# ---------------------------------------------------------------------------
def check_node_setup(root: Path = REPO_ROOT) -> str:
    """Return the ``node`` executable, or raise :class:`D1BridgeError` saying
    exactly what is missing (Node.js, or ``npm ci`` not run)."""
    node = os.environ.get("TICKWORK_NODE") or shutil.which("node")
    if node is None:
        raise D1BridgeError(
            "the D1 tests need Node.js (20 or newer) on PATH, with the repository's "
            f"npm packages installed: install Node, then run `npm ci` in {root}"
        )
    installed = root / "node_modules" / "miniflare" / "package.json"
    if not installed.is_file():
        raise D1BridgeError(
            f"miniflare is not installed ({installed} is missing): run `npm ci` in {root} "
            "to install the pinned versions from package-lock.json"
        )
    try:
        wanted = json.loads((root / "package.json").read_text())["devDependencies"]["miniflare"]
        have = json.loads(installed.read_text())["version"]
    except (OSError, KeyError, ValueError) as error:
        raise D1BridgeError(f"cannot read the miniflare versions under {root}: {error}") from error
    if have != wanted:
        raise D1BridgeError(
            f"node_modules has miniflare {have}, package.json pins {wanted}: run `npm ci` in {root}"
        )
    return node


class D1Bridge:
    """The Node process serving a real D1. Start it with :meth:`start`."""

    def __init__(
        self,
        process: subprocess.Popen[bytes],
        *,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> None:
        self._process = process
        assert process.stdin is not None and process.stdout is not None
        self._stdin = process.stdin
        self._write_lock = threading.Lock()
        self._pending_lock = threading.Lock()
        self._pending: dict[int, concurrent.futures.Future[dict[str, Any]]] = {}
        self._next_id = 0
        self._closed = False
        self._dead: str | None = None
        self._stderr_tail: collections.deque[str] = collections.deque(maxlen=200)
        self._ready: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        self._database_lock = threading.Lock()
        self._generations: dict[str, int] = {}
        self._cursor = 0
        self._queue_lock = threading.Lock()
        self._queue_cursor = 0
        self._queue_users: dict[str, BridgeQueue] = {}
        started = time.perf_counter()
        self._readers = [
            threading.Thread(target=self._read_stdout, name="d1-bridge-stdout", daemon=True),
            threading.Thread(target=self._read_stderr, name="d1-bridge-stderr", daemon=True),
        ]
        for reader in self._readers:
            reader.start()
        try:
            self.info: dict[str, Any] = self._ready.result(timeout=startup_timeout)
        except concurrent.futures.TimeoutError:
            self.close()
            raise D1BridgeError(
                f"Miniflare did not start within {startup_timeout:.0f} s{self._stderr_text()}"
            ) from None
        except D1BridgeError:
            self.close()
            raise
        #: Seconds from spawning node until the worker answered (all databases warm).
        self.startup_seconds = time.perf_counter() - started
        self.databases: tuple[str, ...] = tuple(self.info["databases"])
        self._generations = dict.fromkeys(self.databases, 0)
        self.queues: tuple[str, ...] = tuple(self.info.get("queues", ()))
        #: Deliveries that found no consumer (acknowledged): the raw events.
        self.unclaimed_deliveries: list[dict[str, Any]] = []
        _live_bridges.add(self)

    @classmethod
    def start(
        cls,
        *,
        root: Path = REPO_ROOT,
        databases: int = DEFAULT_DATABASES,
        queues: int = DEFAULT_QUEUES,
        compatibility_date: str = COMPATIBILITY_DATE,
        startup_timeout: float = STARTUP_TIMEOUT,
    ) -> D1Bridge:
        """Spawn the bridge and wait until Miniflare serves (about 1 to 1.5 s
        on a 2-core machine, with or without queues)."""
        node = check_node_setup(root)
        command = [
            node,
            str(BRIDGE_SCRIPT),
            "--databases",
            str(databases),
            "--queues",
            str(queues),
            "--compatibility-date",
            compatibility_date,
        ]
        process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=root,
            # Its own session: a Ctrl-C meant for pytest does not kill it
            # mid-test; it exits on "shutdown" or when its stdin closes.
            start_new_session=True,
        )
        return cls(process, startup_timeout=startup_timeout)

    # -- process I/O --------------------------------------------------------------
    def _read_stdout(self) -> None:
        stdout = self._process.stdout
        assert stdout is not None
        try:
            for raw in stdout:
                try:
                    message = json.loads(raw)
                except ValueError:
                    self._stderr_tail.append(f"[bridge stdout, not JSON] {raw!r}")
                    continue
                if "event" in message:
                    self._on_event(message)
                    continue
                with self._pending_lock:
                    future = self._pending.pop(message.get("id"), None)
                if future is None:
                    self._stderr_tail.append(f"[bridge answer without a request] {message!r}")
                    continue
                future.set_result(message)
        finally:
            self._on_exit()

    def _read_stderr(self) -> None:
        stderr = self._process.stderr
        assert stderr is not None
        for raw in stderr:
            self._stderr_tail.append(raw.decode("utf-8", "replace").rstrip())

    def _on_event(self, message: dict[str, Any]) -> None:
        if message["event"] == "queue_batch":
            self._on_queue_batch(message)
        elif message["event"] == "ready" and not self._ready.done():
            self._ready.set_result(message)
        elif message["event"] == "fatal":
            self._dead = f"the D1 bridge failed: {message.get('message')}"
            if not self._ready.done():
                self._ready.set_exception(D1BridgeError(self._dead + self._stderr_text()))

    def _on_exit(self) -> None:
        try:
            code = self._process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            code = None
        if not self._closed:
            # Node died on its own (a SIGKILL, a crash): workerd, which Miniflare
            # spawned into this process group, would live on as an orphan.
            self._kill_group()
        if self._dead is None:
            self._dead = (
                "the D1 bridge was closed" if self._closed
                else f"the D1 bridge exited unexpectedly (exit code {code})"
            )
        error = D1BridgeError(self._dead + self._stderr_text())
        if not self._ready.done():
            self._ready.set_exception(error)
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for future in pending.values():
            future.set_exception(error)

    def _stderr_text(self) -> str:
        time.sleep(0.05)  # let the stderr reader catch up with a dying process
        tail = "\n".join(list(self._stderr_tail)[-40:])
        return f"\n--- bridge stderr (last lines) ---\n{tail}" if tail else ""

    def submit(self, message: Mapping[str, Any]) -> concurrent.futures.Future[dict[str, Any]]:
        """Send one request; the future gets the raw answer (``ok`` or ``error``).

        The future is already 'running', so it cannot be cancelled: like a JS
        promise, a request that has left always completes.
        """
        future: concurrent.futures.Future[dict[str, Any]] = concurrent.futures.Future()
        future.set_running_or_notify_cancel()
        with self._pending_lock:
            if self._dead is not None or self._closed:
                raise D1BridgeError(self._dead or "the D1 bridge is closed")
            self._next_id += 1
            request_id = self._next_id
            self._pending[request_id] = future
        line = json.dumps({"id": request_id, **message}, separators=(",", ":"), allow_nan=False)
        try:
            with self._write_lock:
                self._stdin.write(line.encode("utf-8") + b"\n")
                self._stdin.flush()
        except (OSError, ValueError) as error:
            with self._pending_lock:
                self._pending.pop(request_id, None)
            raise D1BridgeError(f"cannot write to the D1 bridge: {error}") from error
        return future

    def call(self, message: Mapping[str, Any], timeout: float = CALL_TIMEOUT) -> Any:
        """Send one request and wait (blocking) for its decoded result."""
        future = self.submit(message)
        try:
            reply = future.result(timeout=timeout)
        except concurrent.futures.TimeoutError:
            raise D1BridgeError(f"no answer from the D1 bridge within {timeout:.0f} s") from None
        return _unwrap(reply)

    async def acall(self, message: Mapping[str, Any]) -> Any:
        """Send one request and await its decoded result (in any event loop)."""
        reply: dict[str, Any] = await asyncio.wrap_future(self.submit(message))
        return _unwrap(reply)

    def ping(self) -> float:
        """One round trip through Node, the WebSocket and the worker; returns seconds."""
        started = time.perf_counter()
        self.call({"op": "ping"})
        return time.perf_counter() - started

    # -- databases and bindings ----------------------------------------------------------
    def new_database(self) -> D1DatabaseHandle:
        """Take the next database of the pool, emptied; older handles to it go stale."""
        with self._database_lock:
            name = self.databases[self._cursor % len(self.databases)]
            self._cursor += 1
            self._generations[name] += 1
            generation = self._generations[name]
        self.call({"op": "reset", "db": name})
        return D1DatabaseHandle(name, generation)

    def retire(self, database: D1DatabaseHandle) -> None:
        """Make every binding of ``database`` stale (e.g. when its test ends)."""
        with self._database_lock:
            if self._generations.get(database.name) == database.generation:
                self._generations[database.name] += 1

    def check_current(self, database: D1DatabaseHandle) -> None:
        if self._generations.get(database.name) != database.generation:
            raise StaleD1Binding(
                f"D1 database {database.name} (generation {database.generation}) was retired "
                "or handed to a later test; this binding must not be used any more"
            )

    def binding(
        self,
        shape: Shape = "external",
        *,
        database: D1DatabaseHandle | None = None,
        yield_to_loop: bool = False,
    ) -> Any:
        """A D1 binding (``env.DB`` as Python sees it) of the given shape.

        Without ``database`` it gets a fresh one (:meth:`new_database`); pass
        a handle (``other_binding.database``) to share a database. With
        ``yield_to_loop=True`` every call awaits ``asyncio.sleep(0)`` before
        and after waiting for D1, so concurrent tasks interleave more.
        For ``"builtin"`` the caller should have the fake pyodide installed
        (``tests.support.fakes.pyodide_ffi.fake_pyodide()``) for the code under test.
        """
        if shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, not {shape!r}")
        handle = database if database is not None else self.new_database()
        self.check_current(handle)
        js = _JsD1Database(_Connection(self, handle, shape, yield_to_loop))
        return js if shape == "builtin" else _BindingWrapper(js)

    # -- queues -----------------------------------------------------------------------------
    def new_queue(self, shape: Shape = "external") -> BridgeQueue:
        """Take the next queue of the pool for one test (see :class:`BridgeQueue`);
        an earlier test's handle to it goes stale."""
        if shape not in SHAPES:
            raise ValueError(f"shape must be one of {SHAPES}, not {shape!r}")
        if not self.queues:
            raise D1BridgeError("this bridge was started without queues")
        with self._queue_lock:
            name = self.queues[self._queue_cursor % len(self.queues)]
            self._queue_cursor += 1
            queue = BridgeQueue(self, name, shape)
            self._queue_users[name] = queue
        return queue

    def _queue_user(self, name: str) -> BridgeQueue | None:
        with self._queue_lock:
            return self._queue_users.get(name)

    def _release_queue(self, queue: BridgeQueue) -> None:
        with self._queue_lock:
            if self._queue_users.get(queue.name) is queue:
                del self._queue_users[queue.name]

    def _on_queue_batch(self, event: dict[str, Any]) -> None:
        """A batch Miniflare delivered (reader thread): to its queue's consumer,
        or acknowledged as unclaimed."""
        queue = self._queue_user(str(event.get("queue")))
        if queue is None or not queue._deliver(event):
            self.unclaimed_deliveries.append(event)
            self._send_verdict(event["delivery"], [["ackAll", None, None]], None)

    def _send_verdict(self, delivery: int, calls: list[list[Any]], raised: str | None) -> None:
        try:
            future = self.submit({"op": "queue_verdict", "delivery": delivery, "calls": calls,
                                  "raise": raised})
        except D1BridgeError as error:
            self._stderr_tail.append(f"[queue verdict for delivery {delivery} not sent] {error}")
            return

        def check(done: concurrent.futures.Future[dict[str, Any]]) -> None:
            reply = done.result() if done.exception() is None else {"error": str(done.exception())}
            if reply.get("error") is not None:
                self._stderr_tail.append(
                    f"[queue verdict for delivery {delivery} refused] {reply['error']}")

        future.add_done_callback(check)

    def debug_query(self, database: D1DatabaseHandle, sql: str, *params: Any) -> list[Any]:
        """Run one statement synchronously, outside any binding and its stats;
        rows as plain dicts (external-SDK conversion). For assertions."""
        message = {
            "op": "stmt",
            "db": database.name,
            "sql": sql,
            "params": [_encode(py_to_js(python_to_rpc(param))) for param in params],
            "method": "all",
            "args": [],
        }
        result = self.call(message)
        converted = python_from_rpc(result)
        return [dict(row) for row in converted["results"]]

    # -- lifecycle --------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        return self._dead is None and not self._closed and self._process.poll() is None

    def close(self, timeout: float = 15.0) -> None:
        """Shut Miniflare down cleanly (idempotent); kill it if it does not go."""
        if self._closed:
            return
        if self._dead is None:
            try:
                future = self.submit({"op": "shutdown"})
                with contextlib.suppress(Exception):
                    future.result(timeout=timeout)
            except D1BridgeError:
                pass
        self._closed = True
        with contextlib.suppress(OSError, ValueError):
            self._stdin.close()
        try:
            self._process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self._kill_group()
            self._process.wait(timeout=5)
        for reader in self._readers:
            reader.join(timeout=5)
        _live_bridges.discard(self)

    @property
    def process_group(self) -> int:
        """The bridge's process group (node and the workerd Miniflare starts)."""
        return self._process.pid

    def _kill_group(self) -> None:
        """SIGKILL node and workerd: the group started for this bridge, by its id."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signal.SIGKILL)

    def __enter__(self) -> D1Bridge:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "alive" if self.alive else (self._dead or "closed")
        return f"<D1Bridge pid={self._process.pid} {state}>"


_live_bridges: weakref.WeakSet[D1Bridge] = weakref.WeakSet()


@atexit.register
def _close_live_bridges() -> None:
    for bridge in list(_live_bridges):
        with contextlib.suppress(Exception):
            bridge.close(timeout=5)


def _unwrap(reply: Mapping[str, Any]) -> Any:
    """An answer -> the JS-side result value, or raise the JS error."""
    error = reply.get("error")
    if error is None:
        return _decode(reply.get("ok"))
    message = str(error.get("message"))
    if message.startswith("d1 bridge:"):
        raise D1BridgeError(message)
    raise D1Error(str(error.get("name") or "Error"), message, error.get("cause"))


# ---------------------------------------------------------------------------
# The D1 binding as JS objects (the built-in SDK's view; the external SDK
# wraps these in _BindingWrapper)
# ---------------------------------------------------------------------------
class _Connection:
    """What a binding and its statements share: bridge, database, stats, options."""

    def __init__(
        self, bridge: D1Bridge, database: D1DatabaseHandle, shape: Shape, yield_to_loop: bool
    ) -> None:
        self.bridge = bridge
        self.database = database
        self.shape = shape
        self.yield_to_loop = yield_to_loop
        self.stats = D1Stats()

    def send(
        self, message: dict[str, Any], on_result: Callable[[Any], None] | None = None
    ) -> _D1Promise:
        self.bridge.check_current(self.database)
        future = self.bridge.submit({**message, "db": self.database.name})
        return _D1Promise(future, self.yield_to_loop, on_result)

    def check_bind(self, sql: Any, params: list[Any]) -> None:
        self.bridge.check_current(self.database)
        self.bridge.call({"op": "bind", "db": self.database.name, "sql": sql, "params": params})


def _js_arguments(args: Iterable[Any], kwargs: Mapping[str, Any]) -> list[Any]:
    """Arguments of a JsProxy call as JS receives them: each converted
    implicitly; keyword arguments become one trailing object (Pyodide)."""
    values = [py_to_js(arg) for arg in args]
    if kwargs:
        values.append(JsObject((key, py_to_js(value)) for key, value in kwargs.items()))
    return values


class _D1Promise(JsProxy):
    """The Promise a D1 method returns: already sent; ``await`` gives the result."""

    _js_class = "Promise"

    def __init__(
        self,
        future: concurrent.futures.Future[dict[str, Any]],
        yield_to_loop: bool,
        on_result: Callable[[Any], None] | None,
    ) -> None:
        self._future = future
        self._yield = yield_to_loop
        self._on_result = on_result
        self._settled = False

    def then(self, *callbacks: Any) -> Any:
        """Present (the SDK detects promises by a callable ``then``); use ``await``."""
        raise NotImplementedError("d1 fixture: await the promise instead of calling then()")

    def __await__(self) -> Generator[Any, None, Any]:
        return self._settle().__await__()

    async def _settle(self) -> Any:
        if self._yield:
            await asyncio.sleep(0)
        reply = await asyncio.wrap_future(self._future)
        if self._yield:
            await asyncio.sleep(0)
        result = _unwrap(reply)
        if self._on_result is not None and not self._settled:
            self._on_result(result)
        self._settled = True
        return js_to_py(result)


class _JsD1Database(JsProxy):
    """``env.DB``: a D1Database JS object.

    ``stats``, ``database``, ``shape`` and ``bridge`` are test helpers, not
    D1 API (the external wrapper passes them through unchanged).
    """

    _js_class = "D1Database"

    def __init__(self, connection: _Connection) -> None:
        self._connection = connection

    @property
    def stats(self) -> D1Stats:
        return self._connection.stats

    @property
    def database(self) -> D1DatabaseHandle:
        return self._connection.database

    @property
    def shape(self) -> Shape:
        return self._connection.shape

    @property
    def bridge(self) -> D1Bridge:
        return self._connection.bridge

    def prepare(self, *args: Any, **kwargs: Any) -> _JsD1PreparedStatement:
        values = _js_arguments(args, kwargs)
        query = values[0] if values else None
        return _JsD1PreparedStatement(self._connection, _encode(query), None)

    def batch(self, *args: Any, **kwargs: Any) -> _D1Promise:
        values = _js_arguments(args, kwargs)
        statements = values[0] if values else None
        if isinstance(statements, PyProxy) and isinstance(statements.obj, (list, tuple)):
            items = list(statements.obj)  # a Python list crossing as a PyProxy
        elif isinstance(statements, JsArray):
            items = list(statements)
        else:
            raise TypeError(
                "d1 fixture: batch() takes a list (or JS Array) of prepared statements, "
                f"not {statements!r}"
            )
        specs: list[dict[str, Any]] = []
        for item in items:
            if not isinstance(item, _JsD1PreparedStatement):
                raise TypeError(f"d1 fixture: batch() item is not a prepared statement: {item!r}")
            if item._connection.database != self._connection.database:
                raise TypeError("d1 fixture: batch() item was prepared on another database")
            specs.append({"sql": item._sql, "params": item._params})
        stats = self._connection.stats
        stats.round_trips += 1
        stats.statements += len(specs)
        return self._connection.send({"op": "batch", "statements": specs})

    def exec(self, *args: Any, **kwargs: Any) -> _D1Promise:
        values = _js_arguments(args, kwargs)
        stats = self._connection.stats
        stats.round_trips += 1
        stats.statements += 1

        def count_statements(result: Any) -> None:
            if isinstance(result, JsObject):
                count = getattr(result, "count", 1)
                if isinstance(count, int) and count > 1:
                    stats.statements += count - 1

        query = _encode(values[0] if values else None)
        return self._connection.send({"op": "exec", "sql": query}, count_statements)

    def __repr__(self) -> str:
        database = self._connection.database
        return f"[object D1Database {database.name}#{database.generation}]"


class _JsD1PreparedStatement(JsProxy):
    """A D1PreparedStatement JS object: immutable; ``bind`` returns a new one."""

    _js_class = "D1PreparedStatement"

    def __init__(self, connection: _Connection, sql: Any, params: list[Any] | None) -> None:
        self._connection = connection
        self._sql = sql
        self._params = params

    def bind(self, *args: Any, **kwargs: Any) -> _JsD1PreparedStatement:
        values = _js_arguments(args, kwargs)
        params = [_encode(value) for value in values]
        if not all(_surely_bindable(value) for value in values):
            self._connection.check_bind(self._sql, params)  # raises D1's own error
        return _JsD1PreparedStatement(self._connection, self._sql, params)

    def first(self, *args: Any, **kwargs: Any) -> _D1Promise:
        return self._execute("first", args, kwargs)

    def all(self, *args: Any, **kwargs: Any) -> _D1Promise:
        return self._execute("all", args, kwargs)

    def run(self, *args: Any, **kwargs: Any) -> _D1Promise:
        return self._execute("run", args, kwargs)

    def raw(self, *args: Any, **kwargs: Any) -> _D1Promise:
        return self._execute("raw", args, kwargs)

    def _execute(self, method: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> _D1Promise:
        assert method in _STATEMENT_METHODS
        stats = self._connection.stats
        stats.round_trips += 1
        stats.statements += 1
        message = {
            "op": "stmt",
            "sql": self._sql,
            "params": self._params,
            "method": method,
            "args": [_encode(value) for value in _js_arguments(args, kwargs)],
        }
        return self._connection.send(message)

    def __repr__(self) -> str:
        return f"[object D1PreparedStatement {self._sql!r}]"


# ---------------------------------------------------------------------------
# Queues: a producer binding and a consumer per test (see the module doc)
# ---------------------------------------------------------------------------
class StaleQueueBinding(RuntimeError):
    """A queue binding was used after its test handed the queue back."""


@dataclass(frozen=True)
class QueueMessageRecord:
    """One message of a delivery, as plain Python (``body`` as the external SDK converts it)."""

    id: str
    body: Any
    attempts: int


@dataclass(frozen=True)
class QueueDelivery:
    """One batch Miniflare delivered to a test's consumer, and what the consumer did:
    ``calls`` in order (``("ackAll", None)``, ``("retry", message_id)``, ...),
    ``raised`` the exception's text when the callback raised."""

    delivery: int
    queue: str
    messages: tuple[QueueMessageRecord, ...]
    calls: tuple[tuple[str, str | None], ...]
    raised: str | None

    @property
    def attempts(self) -> list[int]:
        return [message.attempts for message in self.messages]


QueueConsumer = Callable[[Any], Awaitable[object]]


class BridgeQueue:
    """One of the bridge's queues, for one test: ``producer`` (the binding, in
    the test's SDK shape), ``consume(callback)``, ``deliveries``. ``close()``
    (or the end of a ``with`` block) hands it back: later deliveries are
    acknowledged unclaimed and the producer raises :class:`StaleQueueBinding`.

    Deliveries carry only the queue's name, so a message still in Miniflare
    when its test handed the queue back goes to whoever holds that queue
    when it is delivered; with the pool rotating, that takes a message in
    flight (a delay, a retry) across as many later tests as there are queues."""

    def __init__(self, bridge: D1Bridge, name: str, shape: Shape) -> None:
        self.bridge = bridge
        self.name = name
        self.shape = shape
        self.deliveries: list[QueueDelivery] = []
        self.closed = False
        self._consumer: tuple[asyncio.AbstractEventLoop, QueueConsumer] | None = None
        js = _JsWorkerQueue(self)
        self.producer: Any = js if shape == "builtin" else _BindingWrapper(js)

    def check_current(self) -> None:
        if self.closed or self.bridge._queue_user(self.name) is not self:
            raise StaleQueueBinding(f"queue {self.name} was handed back or given to a later test; "
                                    "this binding must not be used any more")

    def consume(self, callback: QueueConsumer) -> None:
        """Deliver every batch of this queue to ``await callback(batch)`` in the
        running event loop (call it from the test)."""
        self.check_current()
        self._consumer = (asyncio.get_running_loop(), callback)

    async def wait_for_deliveries(self, count: int, timeout: float = 10.0) -> list[QueueDelivery]:
        """The first ``count`` deliveries, once they were handled (D1BridgeError
        after ``timeout`` seconds without them)."""
        deadline = time.monotonic() + timeout
        while len(self.deliveries) < count:
            if time.monotonic() > deadline:
                raise D1BridgeError(
                    f"queue {self.name}: {len(self.deliveries)} deliveries within {timeout:.0f} s, "
                    f"not {count}{self.bridge._stderr_text()}")
            await asyncio.sleep(0.01)
        return self.deliveries[:count]

    def close(self) -> None:
        self.closed = True
        self._consumer = None
        self.bridge._release_queue(self)

    def __enter__(self) -> BridgeQueue:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _deliver(self, event: dict[str, Any]) -> bool:
        """(reader thread) Run the consumer on ``event``'s batch in its loop;
        False when there is no consumer to run."""
        consumer = self._consumer
        if consumer is None or self.closed:
            return False
        loop, callback = consumer
        batch = _JsMessageBatch(event)
        view = batch if self.shape == "builtin" else _MessageBatchWrapper(batch)
        try:
            asyncio.run_coroutine_threadsafe(self._consume(callback, view, batch, event), loop)
        except RuntimeError:  # the test's loop is closed: the test has ended
            return False
        return True

    async def _consume(self, callback: QueueConsumer, view: Any, batch: _JsMessageBatch,
                       event: dict[str, Any]) -> None:
        raised: str | None = None
        try:
            await callback(view)
        except Exception as error:  # the handler threw: the runtime retries the batch
            raised = f"{type(error).__name__}: {error}"
        self.bridge._send_verdict(event["delivery"], batch._calls, raised)
        messages = tuple(
            QueueMessageRecord(str(item["id"]), python_from_rpc(_decode(item["body"])),
                               int(item["attempts"]))
            for item in event["messages"])
        calls = tuple((str(call[0]), call[1]) for call in batch._calls)
        self.deliveries.append(QueueDelivery(int(event["delivery"]), self.name, messages, calls,
                                             raised))

    def __repr__(self) -> str:
        return f"<BridgeQueue {self.name} {self.shape}{' closed' if self.closed else ''}>"


class _JsWorkerQueue(JsProxy):
    """``env.<QUEUE>``: a Queues producer binding (workerd ``WorkerQueue``)."""

    _js_class = "WorkerQueue"

    def __init__(self, queue: BridgeQueue) -> None:
        self._queue = queue

    def send(self, *args: Any, **kwargs: Any) -> _D1Promise:
        values = _js_arguments(args, kwargs)
        return self._submit("queue_send", body=_encode(values[0] if values else None),
                            options=_encode(values[1]) if len(values) > 1 else None)

    def sendBatch(self, *args: Any, **kwargs: Any) -> _D1Promise:
        values = _js_arguments(args, kwargs)
        return self._submit("queue_send_batch", messages=_encode(values[0] if values else None),
                            options=_encode(values[1]) if len(values) > 1 else None)

    def _submit(self, op: str, **fields: Any) -> _D1Promise:
        self._queue.check_current()
        future = self._queue.bridge.submit({"op": op, "queue": self._queue.name, **fields})
        return _D1Promise(future, False, None)

    def __repr__(self) -> str:
        return f"[object WorkerQueue {self._queue.name}]"


class _JsQueueMessage(JsProxy):
    """One message of a delivered batch; ``ack()``/``retry()`` are recorded on the batch."""

    def __init__(self, batch: _JsMessageBatch, item: Mapping[str, Any], js_class: str) -> None:
        self._batch = batch
        self._js_class = js_class
        self._id = str(item["id"])
        self._body = _decode(item["body"])
        self._attempts = float(item["attempts"])
        self._timestamp = JsDate(item["timestamp"])

    @property
    def id(self) -> str:
        return self._id

    @property
    def body(self) -> Any:
        return js_to_py(self._body)

    @property
    def attempts(self) -> Any:
        return js_to_py(self._attempts)

    @property
    def timestamp(self) -> JsDate:
        return self._timestamp

    def ack(self, *args: Any, **kwargs: Any) -> None:
        self._batch._record("ack", self._id, args, kwargs)

    def retry(self, *args: Any, **kwargs: Any) -> None:
        self._batch._record("retry", self._id, args, kwargs)

    def __repr__(self) -> str:
        return "[object QueueMessage]"


class _JsMessageBatch(JsProxy):
    """The batch a ``queue()`` handler receives (the runtime's ``MessageBatch``)."""

    def __init__(self, event: Mapping[str, Any]) -> None:
        self._js_class = str(event.get("batch_class") or "MessageBatch")
        self._queue = str(event["queue"])
        self._calls: list[list[Any]] = []
        message_class = str(event.get("message_class") or "Message")
        self._messages = JsArray(_JsQueueMessage(self, item, message_class)
                                 for item in event["messages"])

    @property
    def queue(self) -> str:
        return self._queue

    @property
    def messages(self) -> JsArray:
        return self._messages

    def ackAll(self, *args: Any, **kwargs: Any) -> None:
        self._record("ackAll", None, args, kwargs)

    def retryAll(self, *args: Any, **kwargs: Any) -> None:
        self._record("retryAll", None, args, kwargs)

    def _record(self, call: str, message_id: str | None, args: tuple[Any, ...],
                kwargs: Mapping[str, Any]) -> None:
        values = _js_arguments(args, kwargs)
        self._calls.append([call, message_id, _encode(values[0]) if values else None])

    def __repr__(self) -> str:
        return "[object MessageBatch]"


class _MessageBatchWrapper(_BindingWrapper):
    """The external SDK's view of a batch: its current ``_BindingWrapper`` also
    wraps each JS object of a list result (``batch.messages``), so a message's
    ``body`` arrives converted (a dict) and ``ack()`` still reaches JS."""

    def _convert_result(self, result: Any) -> Any:
        converted = python_from_rpc(result)
        if isinstance(converted, list):
            return [self.__class__(item) if isinstance(item, JsProxy) else item
                    for item in converted]
        if isinstance(converted, JsProxy):
            return self.__class__(converted)
        return converted


__all__ = [
    "BRIDGE_SCRIPT",
    "COMPATIBILITY_DATE",
    "DEFAULT_DATABASES",
    "DEFAULT_QUEUES",
    "REPO_ROOT",
    "SHAPES",
    "BridgeQueue",
    "D1Bridge",
    "D1BridgeError",
    "D1DatabaseHandle",
    "D1Error",
    "D1Stats",
    "QueueDelivery",
    "QueueMessageRecord",
    "Shape",
    "StaleD1Binding",
    "StaleQueueBinding",
    "check_node_setup",
]
