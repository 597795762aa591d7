"""A stand-in for the ``js`` module: only ``AbortController`` (what worker/http.py uses).

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
    FakeAbortController.created = []
    sys.modules["js"] = module
    try:
        yield module
    finally:
        if previous is None:
            sys.modules.pop("js", None)
        else:
            sys.modules["js"] = previous
