"""Structured JSON logs of lifecycle events: one line per transition.

``JsonLogHook(level="info")`` is an event hook writing each event at or
above ``level`` as one JSON object on one line::

    {"level":"info","logger":"tickwork","event":"settled","job_id":"a",
     "queue":"q","lane":"l","at":1767225600000,"outcome":"completed",
     "attempt":1,"duration_ms":12}

Workers Logs and Logpush index the fields of a JSON line written to stdout
(``print``, the default ``write``): filter on ``$metadata`` ``event``,
``queue`` or ``outcome``. The Worker and the ``JobOwner`` Durable Object
install it from the ``TICKWORK_LOG_LEVEL`` variable (``log_hook_for``).

Levels, lowest first: ``debug`` (claims), ``info`` (every other transition),
``warn`` (a settlement ``failed``, ``outcome_unknown`` or ``interrupted``,
a lane refusal), and ``off``. Pure Python: runs on Pyodide.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any, Final

from tickwork.events import Event

__all__ = ["DEFAULT_LOG_LEVEL", "LOG_LEVELS", "LOG_LEVEL_VAR", "JsonLogHook", "event_level",
           "log_hook_for"]

#: The levels a hook takes, lowest first ("off" writes nothing).
LOG_LEVELS: Final = ("debug", "info", "warn", "off")
#: The Worker's and the Durable Object's variable naming the level.
LOG_LEVEL_VAR: Final = "TICKWORK_LOG_LEVEL"
#: The level without the variable: every transition but claims.
DEFAULT_LOG_LEVEL: Final = "info"

_RANK: Final = {name: rank for rank, name in enumerate(LOG_LEVELS)}
_BAD_OUTCOMES: Final = frozenset({"failed", "outcome_unknown", "interrupted"})


def event_level(event: Event) -> str:
    """The level an event is logged at."""
    if event.kind == "claimed":
        return "debug"
    if event.kind == "refused" or (event.kind == "settled" and event.outcome in _BAD_OUTCOMES):
        return "warn"
    return "info"


def _check_level(level: object, name: str) -> str:
    if not isinstance(level, str) or level.strip().lower() not in _RANK:
        raise ValueError(f"{name} must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    return level.strip().lower()


class JsonLogHook:
    """An event hook writing one JSON line per event at or above ``level``
    through ``write`` (``print`` by default: stdout)."""

    def __init__(self, level: str = DEFAULT_LOG_LEVEL,
                 write: Callable[[str], Any] = print) -> None:
        self.level = _check_level(level, "level")
        if not callable(write):
            raise TypeError(f"write must be a callable taking a line, got {type(write).__name__}")
        self._threshold = _RANK[self.level]
        self._write = write

    def __call__(self, event: Event) -> None:
        level = event_level(event)
        if _RANK[level] < self._threshold:
            return
        fields = event.to_dict()
        line: dict[str, Any] = {"level": level, "logger": "tickwork",
                                "event": fields.pop("kind")}
        line.update(fields)
        self._write(json.dumps(line, separators=(",", ":"), ensure_ascii=False))


def log_hook_for(configured: object, write: Callable[[str], Any] = print) -> JsonLogHook | None:
    """The hook a ``TICKWORK_LOG_LEVEL`` value asks for: at
    ``DEFAULT_LOG_LEVEL`` when it is unset (None or empty), None for
    ``off``; any other value is refused, naming the variable."""
    value = DEFAULT_LOG_LEVEL if configured is None or configured == "" else configured
    level = _check_level(value, LOG_LEVEL_VAR)
    return None if level == "off" else JsonLogHook(level, write)
