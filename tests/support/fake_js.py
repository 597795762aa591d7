"""A stand-in for the ``js`` module: ``AbortController`` (what worker/http.py uses)
and ``Object.fromEntries`` (for ``to_js(..., dict_converter=Object.fromEntries)``).

``AbortController.new()`` gives a controller whose ``signal`` has ``aborted``,
``reason`` and ``addEventListener("abort", fn)``; ``abort(reason)`` is
idempotent and runs the listeners synchronously, as in JavaScript.
"""

from __future__ import annotations

import contextlib
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from tests.support.fakes.pyodide_ffi import object_from_entries


class FakeJsAbortSignal:
    def __init__(self) -> None:
        self.aborted = False
        self.reason: Any = None
        self._listeners: list[Callable[[Any], object]] = []

    def addEventListener(self, kind: str, listener: Callable[[Any], object]) -> None:
        assert kind == "abort"
        self._listeners.append(listener)


class FakeAbortController:
    created: ClassVar[list[FakeAbortController]] = []

    def __init__(self) -> None:
        self.signal = FakeJsAbortSignal()

    @classmethod
    def new(cls) -> FakeAbortController:
        controller = cls()
        cls.created.append(controller)
        return controller

    def abort(self, reason: Any = None) -> None:
        if self.signal.aborted:
            return
        self.signal.aborted = True
        self.signal.reason = reason
        for listener in self.signal._listeners:
            listener(reason)


@contextlib.contextmanager
def installed_js_module() -> Iterator[types.ModuleType]:
    previous = sys.modules.get("js")
    module = types.ModuleType("js")
    module.AbortController = FakeAbortController  # type: ignore[attr-defined]
    module.Object = types.SimpleNamespace(  # type: ignore[attr-defined]
        fromEntries=object_from_entries)
    FakeAbortController.created = []
    sys.modules["js"] = module
    try:
        yield module
    finally:
        if previous is None:
            sys.modules.pop("js", None)
        else:
            sys.modules["js"] = previous
