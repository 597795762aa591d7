"""The Durable Object RPC of the job service: both sides, built from the operations table.

What crosses Workers RPC between the Worker and a ``JobOwner`` is text: every
argument is a str or a bool (ids, names, a flag) or JSON text (the jobs of
an ingest), and every reply is the JSON text of an envelope,
``{"ok": true, "value": ...}`` or ``{"ok": false, "status": N, "error": {...}}``.
RPC converts structured values on the way (a whole float 1.0 arrives as 1,
so a payload would change; an int at +-(2**53 - 1) crosses as a BigInt),
while a string arrives as it was sent. Refusals travel as data because an
exception raised in the object reaches the caller as a bare JsException
whose message is only the remote traceback text.

* ``RpcService`` (the Worker's side) is a JobService that calls the object's
  method of the operation's name;
* ``rpc_methods`` (the object's side) gives a class one RPC method per
  operation, defined in the class's own ``__dict__``: some workerd versions
  list only those as RPC methods, not inherited ones.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, TypeVar

from tickwork._pyodide import load_jsnull
from tickwork.api import wire
from tickwork.api.operations import OPERATIONS, Operation
from tickwork.api.service import JobService, call
from tickwork.api.wire import ApiError
from tickwork.model.errors import InvalidArgument

T = TypeVar("T", bound=type)


async def rpc_reply(body: Callable[[], Awaitable[Any] | Any]) -> str:
    """Run one RPC method body on the object's side; its reply envelope as JSON text.

    Bad input and conflicts become error envelopes; anything else (a bug, a
    storage failure) propagates, so the caller sees a 5xx and nothing is
    reported as done that was not.
    """
    try:
        value = body()
        if inspect.isawaitable(value):
            value = await value
    except Exception as error:
        refused = wire.error_for(error)
        if refused is None:
            raise
        return wire.to_json_text({"ok": False, "status": refused.status, **refused.to_wire()})
    return wire.to_json_text({"ok": True, "value": value})


def unwrap(reply: Any) -> Any:
    """The value of a JobOwner's reply envelope (JSON text); refusals raise ApiError."""
    if not isinstance(reply, str):
        raise RuntimeError(f"JobOwner replied with {type(reply).__name__}, "
                           "not the JSON text of an RPC envelope")
    envelope = json.loads(reply)
    if not isinstance(envelope, Mapping) or "ok" not in envelope:
        raise RuntimeError("JobOwner's reply is not an RPC envelope")
    if envelope["ok"]:
        return envelope.get("value")
    error = envelope["error"]
    details = {key: value for key, value in error.items()
               if key not in ("code", "message", "field")}
    raise ApiError(int(envelope["status"]), error["code"], error["message"], error.get("field"),
                   details=details)


def plain_data(value: Any) -> Any:
    """JSON-like data from JS as plain Python: a JS proxy (a JS object, Array or
    Map) becomes plain Python, recursively, and JS null (``pyodide.ffi.jsnull``,
    truthy) becomes None."""
    return _plain(value, load_jsnull())


def _plain(value: Any, jsnull: object | None) -> Any:
    if value is None or (jsnull is not None and value is jsnull):
        return None
    to_py = getattr(value, "to_py", None)
    if to_py is not None:
        value = to_py()
    if isinstance(value, Mapping):
        return {str(key): _plain(item, jsnull) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain(item, jsnull) for item in value]
    return value


class RpcService(JobService):
    """A ``JobOwner`` Durable Object stub as a JobService (the Worker's side)."""

    def __init__(self, stub: Any) -> None:
        self.stub = stub

    async def perform(self, operation: Operation, args: tuple[Any, ...]) -> Any:
        method = getattr(self.stub, operation.name)
        reply = await method(*operation.args_to_rpc(args))
        return operation.result_from_wire(unwrap(reply))


class JobOwnerRpc:
    """What ``rpc_methods`` needs of the Durable Object class it decorates.

    ``_job_service()`` returns the object's service (underscored, so the
    runtime does not list it as an RPC method); ``_after_call(operation)``
    runs after every call that produced a reply, refusals included
    (``JobOwner`` brings its alarm in step there, and notes a write for the
    directory of owners).
    """

    def _job_service(self) -> JobService:
        raise NotImplementedError

    async def _after_call(self, operation: Operation) -> None:
        """Default: nothing."""

    async def _reply(self, operation: Operation, body: Callable[[], Awaitable[Any] | Any]) -> str:
        reply = await rpc_reply(body)
        await self._after_call(operation)
        return reply


def _rpc_method(operation: Operation) -> Callable[..., Awaitable[str]]:
    arity = operation.arity

    async def method(self: JobOwnerRpc, *args: Any) -> str:
        async def body() -> Any:
            if len(args) != arity:
                raise InvalidArgument("arguments", f"{operation.name} takes {arity} "
                                                   f"argument(s), got {len(args)}")
            decoded = operation.args_from_rpc(tuple(plain_data(arg) for arg in args))
            result = await call(self._job_service(), operation, decoded)
            return operation.result_to_wire(result)
        return await self._reply(operation, body)

    method.__name__ = method.__qualname__ = operation.name
    method.__doc__ = f"RPC: {operation.summary} (a JSON text envelope)."
    return method


def rpc_methods(cls: T) -> T:
    """Define one RPC method per operation on ``cls`` itself (its own ``__dict__``).

    Each decodes its text arguments (``Operation.args_from_rpc``), calls the
    service method of its name on ``cls._job_service()``, and replies with
    the JSON text of an envelope; ``_after_call`` runs before it replies.
    """
    if not issubclass(cls, JobOwnerRpc):
        raise TypeError(f"{cls.__name__} must subclass JobOwnerRpc")
    for operation in OPERATIONS:
        if operation.name in vars(cls):
            raise TypeError(f"{cls.__name__}.{operation.name} would hide its RPC method")
        setattr(cls, operation.name, _rpc_method(operation))
    return cls
