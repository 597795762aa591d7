"""What a job's record keeps when its executor raises: a bounded error summary.

(Not to be confused with ``tickwork.model.errors``, the exceptions tickwork
itself raises.) The summary is plain text, capped in characters so a job's
row stays small whatever an executor throws, and sanitised so every store
(SQLite, D1, Durable Object storage, PostgreSQL) stores and returns it
exactly: lone surrogates, which no UTF-8 store can hold, become U+FFFD, and
so do NUL characters, which PostgreSQL text cannot hold.

Pure Python with no I/O: it runs unchanged on Pyodide.
"""

from __future__ import annotations

import json
import traceback as _traceback
from typing import Any, NamedTuple

#: Longest exception type name kept (characters); a longer one is cut.
MAX_ERROR_TYPE = 200
#: Longest message kept (characters); a longer one ends with ``TRUNCATED_MARK``.
MAX_ERROR_MESSAGE = 2_000
#: Longest traceback kept (characters). A longer one keeps its end (the
#: innermost frames and the exception itself), after a line saying how many
#: characters were cut.
MAX_ERROR_TRACEBACK = 8_000
#: Longest ``Attempt.error`` line (``"Type: message"``) a history entry keeps.
MAX_ERROR_LINE = 300
#: The character that ends a message cut to ``MAX_ERROR_MESSAGE``.
TRUNCATED_MARK = "\u2026"

_REPLACEMENT = "\ufffd"


class ErrorSummary(NamedTuple):
    """An exception as a job's record keeps it.

    ``type`` is the class's qualified name (``ValueError``,
    ``mypkg.errors.Boom``), ``message`` is ``str(exception)``, and
    ``traceback`` the formatted traceback, chained exceptions included ("" when
    there is none). Each is capped: ``MAX_ERROR_TYPE``, ``MAX_ERROR_MESSAGE``
    and ``MAX_ERROR_TRACEBACK`` characters.
    """

    type: str
    message: str
    traceback: str

    @property
    def line(self) -> str:
        """``"Type: message"``, cut to ``MAX_ERROR_LINE`` characters (what a
        history entry keeps as ``Attempt.error``)."""
        return error_line(self.type, self.message)


def clean_text(text: str) -> str:
    """``text`` with lone surrogates and NUL characters replaced by U+FFFD."""
    if "\x00" in text:
        text = text.replace("\x00", _REPLACEMENT)
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # One U+FFFD per lone surrogate, so lengths (and the caps) stay as counted.
        return "".join(_REPLACEMENT if "\ud800" <= ch <= "\udfff" else ch for ch in text)
    return text


def error_line(type_name: str, message: str) -> str:
    """The short text of an error a history entry keeps."""
    return f"{type_name}: {message}"[:MAX_ERROR_LINE]


def _cap_message(message: str) -> str:
    if len(message) <= MAX_ERROR_MESSAGE:
        return message
    return message[:MAX_ERROR_MESSAGE - len(TRUNCATED_MARK)] + TRUNCATED_MARK


def _cap_traceback(text: str) -> str:
    if len(text) <= MAX_ERROR_TRACEBACK:
        return text
    # The marker's length depends on the count it reports: recount until it
    # is stable (twice at most: the count only shrinks by a few characters).
    kept = MAX_ERROR_TRACEBACK
    while True:
        marker = f"[tickwork: {len(text) - kept} characters of traceback cut]\n"
        if len(marker) + kept == MAX_ERROR_TRACEBACK:
            return marker + text[len(text) - kept:]
        kept = MAX_ERROR_TRACEBACK - len(marker)


def _type_name(error: BaseException) -> str:
    cls = type(error)
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", cls.__name__)
    if module in (None, "builtins", "__main__"):
        return str(name)
    return f"{module}.{name}"


def _message(error: BaseException) -> str:
    try:
        return str(error)
    except Exception as problem:  # an executor's __str__ may itself be broken
        return f"<str() of the exception raised {type(problem).__name__}>"


def summarize_exception(error: BaseException) -> ErrorSummary:
    """The bounded summary of ``error`` a job's record keeps."""
    try:
        text = "".join(_traceback.format_exception(error))
    except Exception as problem:  # a broken __str__ reaches format_exception too
        text = f"<formatting the traceback raised {type(problem).__name__}>\n"
    return ErrorSummary(
        clean_text(_type_name(error))[:MAX_ERROR_TYPE],
        _cap_message(clean_text(_message(error))),
        _cap_traceback(clean_text(text)),
    )


def summary_to_value(summary: ErrorSummary) -> dict[str, str]:
    """The summary as the JSON object stored and sent on the wire."""
    return {"type": summary.type, "message": summary.message, "traceback": summary.traceback}


def summary_from_value(value: Any) -> ErrorSummary | None:
    """A summary from its JSON object (None for null)."""
    if value is None:
        return None
    return ErrorSummary(str(value["type"]), str(value["message"]),
                        str(value.get("traceback", "")))


_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def summary_to_json(summary: ErrorSummary | None) -> str | None:
    """The summary as the ``error_json`` column stores it (None for NULL)."""
    if summary is None:
        return None
    return _ENCODER.encode(summary_to_value(summary))


def summary_from_json(text: str | None) -> ErrorSummary | None:
    """The summary stored as ``error_json``."""
    if text is None:
        return None
    return summary_from_value(json.loads(text))
