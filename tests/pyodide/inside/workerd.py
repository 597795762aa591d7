"""The Workers runtime's side of a Python Worker, for the real-Pyodide tier.

What workerd does around a Python Worker's classes, and no more (runs inside
Pyodide; the bindings are JavaScript objects from ``js/bindings.mjs``):

* It builds an entrypoint class with ``cls(ctx, env)``, both JavaScript
  objects (a Worker's ``ExecutionContext``; a Durable Object's
  ``DurableObjectState`` with its ``storage``), and the env a plain JS
  object of bindings; whatever the ``workers`` SDK does with them then
  happens in its own classes (the tier switches between the real
  ``workers-runtime-sdk`` and the built-in-shaped stand-in: ``sdk_shapes``).
* It calls a known handler with JavaScript arguments: ``fetch`` gets the
  SDK's ``Request`` around the JS Request (what the built-in SDK was
  measured to hand over, and what the external SDK's ``python_from_rpc``
  makes of a Request), and the answer's ``js_object`` goes back;
  ``scheduled`` gets a ``ScheduledController``; ``alarm`` an
  ``AlarmInvocationInfo``. An RPC call reaches a public method with the
  cloned JS arguments as Pyodide's FFI converts them.
* Every call is one event (``tests.support.workers_events``): a timer armed
  during an event never fires once it has ended, and an event still waiting
  after its time limit fails (``EventHung``), as the runtime fails it.
"""

from __future__ import annotations

import inspect
import io
import sys
from collections.abc import Callable
from types import FunctionType
from typing import Any

import js  # type: ignore[import-not-found]
import tickwork_tier  # type: ignore[import-not-found]  # registered by runner.mjs
from pyodide.ffi import JsProxy, create_proxy, to_js  # type: ignore[import-not-found]

from tests.support.workers_events import WorkersEvents

#: Seconds one event may take before the runtime stand-in fails it.
EVENT_LIMIT_S = 60.0
#: The frame of Miniflare's synchronous proxy call in a traceback (run.py).
PROXY_LOST_STEP = "in SynchronousFetcher.fetch"


class _Tee(io.StringIO):
    """Keeps what is written, and passes it on to ``through``."""

    def __init__(self, through: Any) -> None:
        super().__init__()
        self.through = through

    def write(self, text: str) -> int:
        self.through.write(text)
        return super().write(text)


def rpc_methods(cls: type) -> set[str]:
    """Public functions of the class and its bases: what workerd lists as RPC methods."""
    names = set()
    for base in reversed(cls.__mro__):
        for name, value in vars(base).items():
            if not name.startswith("_") and isinstance(value, FunctionType):
                names.add(name)
    return names - {"alarm", "fetch", "scheduled", "queue"}


def js_object(values: dict[str, Any]) -> Any:
    return to_js(values, dict_converter=js.Object.fromEntries)


class DurableObjects:
    """One Durable Object class behind a JS ``DurableObjectNamespace``: an
    instance per name over that name's ``ctx.storage`` (``js/do_storage.mjs``);
    ``evict(name)`` ends the instance, the next one gets a new storage object
    over the same database."""

    def __init__(self, runtime: Runtime, cls: type) -> None:
        self.runtime = runtime
        self.cls = cls
        self.calls: list[tuple[str, str]] = []
        self._storages: dict[str, Any] = {}
        self._instances: dict[str, Any] = {}
        self._dispatch = create_proxy(self.dispatch)
        self.binding = tickwork_tier.bindings.DurableObjectNamespace.new(
            self._dispatch, to_js(sorted(rpc_methods(cls))))

    def storage(self, name: str) -> Any:
        if name not in self._storages:
            self._storages[name] = tickwork_tier.newStorage()
        return self._storages[name]

    def instance(self, name: str, *, by_alarm: bool = False) -> Any:
        """The object's instance, made if there is none: one its alarm makes
        (``by_alarm``) has no ``ctx.id.name`` for its life, as observed in
        workerd (see ``js/bindings.mjs``)."""
        if name not in self._instances:
            ctx = tickwork_tier.bindings.DurableObjectState.new(self.storage(name), name,
                                                                not by_alarm)
            self._instances[name] = self.runtime.construct(self.cls, ctx)
        return self._instances[name]

    def evict(self, name: str) -> None:
        self._instances.pop(name, None)
        if name in self._storages:
            self._storages[name] = tickwork_tier.evictStorage(self._storages[name])

    async def dispatch(self, name: str, method: str, args: Any) -> Any:
        """The object's side of one RPC call (called from the JS stub)."""
        if method not in rpc_methods(self.cls):
            raise TypeError(f'The RPC receiver does not implement the method "{method}".')
        self.calls.append((name, method))
        arguments = args.to_py(depth=1) if isinstance(args, JsProxy) else list(args)
        instance = self.instance(name)
        return await self.runtime.event(lambda: getattr(instance, method)(*arguments),
                                        f"rpc {method} on {name}")

    async def alarm(self, name: str, retry_count: int = 0) -> None:
        """Deliver the object's alarm, as the runtime does (it clears it first)."""
        await self.storage(name).deleteAlarm()
        info = tickwork_tier.bindings.AlarmInvocationInfo.new(retry_count)
        instance = self.instance(name, by_alarm=True)
        await self.runtime.event(lambda: instance.alarm(info), f"alarm of {name}")

    def close(self) -> None:
        for storage in self._storages.values():
            storage.evicted = True
        self._dispatch.destroy()


class Runtime:
    """One deployment's runtime: its env, its events and its handlers."""

    def __init__(self) -> None:
        self.events = WorkersEvents()
        self.env = tickwork_tier.bindings.makeEnv(to_js([]))

    def close(self) -> None:
        self.events.close()

    # ------------------------------------------------------------ bindings

    def bind(self, name: str, value: Any) -> None:
        """``env.<name> = value`` (a JS object, or a str for a variable or secret)."""
        setattr(self.env, name, value)

    def d1(self, db: Any) -> Any:
        """Miniflare's D1 as workerd's ``D1Database`` class."""
        return tickwork_tier.bindings.D1Database.new(db)

    def durable_objects(self, cls: type) -> DurableObjects:
        return DurableObjects(self, cls)

    # ------------------------------------------------------------ classes

    def construct(self, cls: type, ctx: Any) -> Any:
        """``cls(ctx, env)``, as the runtime builds an entrypoint class."""
        return cls(ctx, self.env)

    def worker(self, cls: type) -> Any:
        return self.construct(cls, tickwork_tier.bindings.ExecutionContext.new())

    async def event(self, make: Callable[[], Any], name: str) -> Any:
        async def handler() -> Any:
            result = make()
            return await result if inspect.isawaitable(result) else result

        return await self.events.run(handler, name=name, limit_s=EVENT_LIMIT_S)

    # ------------------------------------------------------------ handlers

    async def fetch(self, worker: Any, request: Any) -> Any:
        """One fetch event; ``request`` is a JS Request. The JS Response.

        The Worker answers any failure with a bare 500 and writes the
        traceback to stderr. When that traceback shows Miniflare's D1 proxy
        losing step (the harness breaking, see run.py), it is raised here,
        so the runner restarts Miniflare and runs the case again, saying so,
        instead of the case failing on a 500 that hides why."""
        sdk = sys.modules["workers"]
        logged = _Tee(sys.stderr)
        sys.stderr = logged
        async def fetch_event() -> Any:
            answer = await worker.fetch(sdk.Request(request))
            # The event lasts until what the handler gave ctx.waitUntil has
            # settled (its timers fire meanwhile), as in the runtime.
            settled = getattr(worker.ctx, "settled", None)
            if settled is not None:
                await settled()
            return answer

        try:
            answer = await self.event(fetch_event, "fetch")
        finally:
            sys.stderr = logged.through
        response = getattr(answer, "js_object", answer)
        text = logged.getvalue()
        if int(response.status) == 500 and PROXY_LOST_STEP in text:
            raise RuntimeError(f"the Worker answered 500 after Miniflare's proxy lost step:\n"
                               f"{text}")
        return response

    async def queue(self, worker: Any, batch: Any) -> None:
        """One queue event: ``batch`` is a JS ``MessageBatch`` (``js/bindings.mjs``)."""
        await self.event(lambda: worker.queue(batch), "queue")

    async def scheduled(self, worker: Any, scheduled_ms: int, cron: str = "* * * * *") -> None:
        controller = tickwork_tier.bindings.ScheduledController.new(cron, scheduled_ms)
        await self.event(lambda: worker.scheduled(controller), f"cron {scheduled_ms}")
