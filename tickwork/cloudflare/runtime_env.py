"""The ``env`` a Workers entrypoint class works with: the SDK's wrapper, exactly once.

The Workers runtime builds an entrypoint class (a ``WorkerEntrypoint`` or a
``DurableObject``) with ``cls(ctx, env)``, ``env`` being the JavaScript
object that holds the bindings. The Python SDK then wraps ``env`` in its
env wrapper inside ``__init__`` so that bindings read from it speak Python.
How many times depends on the SDK and on the class hierarchy:

* the built-in SDK (compatibility dates before 2026-04-21) wraps once per
  subclass in the chain, and its wrapper is not idempotent: a class made by
  ``worker_class()`` or ``job_owner_class()`` (a subclass of a subclass)
  receives ``env`` wrapped twice, and a Durable Object stub read through the
  outer wrapper returns a coroutine instead of the reply (measured in
  workerd: every owner route answered 500);
* the external SDK (``workers-runtime-sdk``) makes its wrapper idempotent,
  so any depth is one wrapper.

tickwork does not depend on either. ``RuntimeEnv.__new__`` keeps the env
the runtime passed, before any ``__init__`` wrapper saw it (the SDKs wrap in
``__init__`` only), and ``RuntimeEnv.__init__`` then rebuilds ``self.env``
as one layer of whichever wrapper the SDK used, around that env. The
deployment's executors receive the same, so their own bindings behave as
the SDK documents whatever the class hierarchy.
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["RuntimeEnv", "env_wrapped_once"]


def _is_js_object(value: Any) -> bool:
    """True for a Pyodide ``JsProxy`` (a JavaScript object as Python sees it)."""
    try:
        from pyodide.ffi import JsProxy  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return False
    return isinstance(value, JsProxy)


_reported: set[str] = set()


def env_wrapped_once(runtime_env: Any, sdk_env: Any) -> Any:
    """``runtime_env`` in one layer of the wrapper ``sdk_env`` is made of.

    ``sdk_env`` is what the SDK's ``__init__`` wrappers made of
    ``runtime_env`` (the object the runtime passed). Unwrapped (the same
    object, or a JavaScript object: no SDK wrapper at all) it is kept; else
    the wrapper's own class is applied once to ``runtime_env``, as the SDK
    does for a direct subclass. A wrapper class that cannot be rebuilt that
    way is kept as it is, and said once on stderr.
    """
    if runtime_env is None or sdk_env is runtime_env or _is_js_object(sdk_env):
        return sdk_env
    wrapper = type(sdk_env)
    try:
        return wrapper(runtime_env)
    except Exception as error:
        name = f"{wrapper.__module__}.{wrapper.__qualname__}"
        if name not in _reported:
            _reported.add(name)
            print(f"tickwork: cannot rebuild the SDK's env wrapper {name} "
                  f"({type(error).__name__}: {error}); using env as the SDK passed it",
                  file=sys.stderr)
        return sdk_env


class RuntimeEnv:
    """Mixin of tickwork's entrypoint classes: ``self.env`` is the runtime's
    env in exactly one SDK wrapper (see the module doc).

    Put it before the SDK's base class; ``__init__`` must run (subclasses
    that define their own call ``super().__init__(ctx, env)``)."""

    #: The env exactly as the runtime passed it to the class.
    _runtime_env: Any = None
    #: The env with one SDK wrapper (set by ``__init__``).
    env: Any

    def __new__(cls, *args: Any, **kwargs: Any) -> Any:
        instance = super().__new__(cls)
        instance._runtime_env = args[1] if len(args) > 1 else kwargs.get("env")
        return instance

    def __init__(self, ctx: Any, env: Any) -> None:
        super().__init__(ctx, env)  # type: ignore[call-arg]
        self.env = env_wrapped_once(self._runtime_env, self.env)
