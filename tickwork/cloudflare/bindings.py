"""What tickwork's Workers entrypoints read from their env, and how they log.

Shared by the Worker (``app``, ``worker``), the drains of the shared queues
(``shared_drains``), the pump and ``JobOwner``: a binding read defensively
(a missing one, or JS null, is None), a Durable Object stub by name, the
JSON event log ``TICKWORK_LOG_LEVEL`` asks for, and the two kinds of log
line (Workers shows every stderr line as an error).
"""

from __future__ import annotations

import sys
from typing import Any

from tickwork._pyodide import load_jsnull
from tickwork.logs import DEFAULT_LOG_LEVEL, LOG_LEVEL_VAR, JsonLogHook, log_hook_for

__all__ = ["NoWake", "binding", "event_log", "log", "log_error", "owner_stub"]


class NoWake:
    """The wake of a runtime that arms nothing itself (a shared drain's:
    it re-arms the pump when it ends, ``shared_drains.drain_shared``)."""

    def recompute(self) -> None:
        return None


def log(message: str) -> None:
    """An informational line: stdout, which Workers logs show at level "log"
    (wrangler prints every stderr line as an [ERROR])."""
    print(f"tickwork: {message}")


def log_error(message: str) -> None:
    """A line about a failure: stderr (shown as an error)."""
    print(f"tickwork: {message}", file=sys.stderr)


def binding(env: Any, name: str) -> Any:
    """``env.<name>``, or None when it is missing (or JS null/undefined)."""
    try:
        value = getattr(env, name, None)
    except Exception:
        return None
    if value is None or value is load_jsnull():
        return None
    return value


#: Unknown TICKWORK_LOG_LEVEL values already reported by this isolate.
_REPORTED_LOG_LEVELS: set[str] = set()


def event_log(env: Any) -> JsonLogHook | None:
    """The JSON log of lifecycle events ``TICKWORK_LOG_LEVEL`` asks for
    (``tickwork.logs``: one line per transition on stdout, "info" by
    default, none for "off").

    An unknown level does not take the Worker down (it would otherwise
    fail every request, ``/v1/health`` included, and every Durable Object
    constructor): the default level is used and one error line per isolate
    and value names the variable, the value and the levels it takes."""
    configured = binding(env, LOG_LEVEL_VAR)
    try:
        return log_hook_for(configured)
    except ValueError as error:
        shown = repr(configured)[:100]
        if shown not in _REPORTED_LOG_LEVELS and len(_REPORTED_LOG_LEVELS) < 16:
            _REPORTED_LOG_LEVELS.add(shown)
            log_error(f"{error}; logging at {DEFAULT_LOG_LEVEL!r} instead")
        return log_hook_for(None)


def owner_stub(namespace: Any, owner: str) -> Any:
    get_by_name = getattr(namespace, "getByName", None)
    if get_by_name is not None:
        return get_by_name(owner)
    return namespace.get(namespace.idFromName(owner))
