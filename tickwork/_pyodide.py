"""The edge between tickwork's values and JavaScript (Pyodide's FFI).

Everything tickwork hands to a JS API on the Workers runtime (a Durable
Object's ``sql.exec``, a D1 ``bind``, ``setAlarm``) goes through
``js_number`` / ``to_sql_bindings`` here, so one place decides how a value
crosses.

Integers: Pyodide 0.28.2 (what workerd runs for tickwork's compatibility
date) converts a Python int to a JS Number only when it lies strictly
between ``-(2**53 - 1)`` and ``2**53 - 1``; the two bounds themselves, and
everything beyond, cross as BigInt, which DO SQL and D1 both refuse
("Cannot convert a BigInt value to a number", ``D1_TYPE_ERROR``).
tickwork accepts integers up to and including ``+-(2**53 - 1)`` everywhere
(priorities, recovery budgets, cursors), so the bounds are bound as the equal
float: a double holds them exactly and crosses as a Number, the same JS
value a smaller int would give. Anything beyond is refused here, before JS
sees it.

Booleans bind as 1/0 (SQLite has no booleans; a DO would store ``True`` as
the TEXT ``'true'``), and None as ``pyodide.ffi.jsnull`` (Python None crosses
as JS undefined, which D1 rejects).

``pyodide`` is looked up when a store is built, never at import: CPython
hosts have no ``pyodide``, and tests install a stand-in in ``sys.modules``
first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Pyodide hands an int to JS as a Number only strictly inside +-this bound.
JS_NUMBER_BOUND = 2**53 - 1


def load_jsnull() -> object | None:
    """``pyodide.ffi.jsnull`` (how SQL NULL must be bound and comes back), or None."""
    try:
        from pyodide.ffi import jsnull  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return jsnull  # type: ignore[no-any-return, unused-ignore]


def load_to_js_for(value: Any) -> Any:
    """``pyodide.ffi.to_js`` when ``value`` is a raw JS proxy (built-in SDK), else None."""
    try:
        from pyodide.ffi import JsProxy, to_js  # type: ignore[import-not-found, unused-ignore]
    except ImportError:
        return None
    return to_js if isinstance(value, JsProxy) else None


def js_number(value: int, what: str = "integer") -> int | float:
    """``value`` as something Pyodide hands to JS as a Number, equal to it.

    Integers strictly inside +-(2**53 - 1) stay ints; the bounds become the
    equal float; anything beyond cannot be a JS Number exactly and raises
    ``ValueError`` naming ``what``.
    """
    if -JS_NUMBER_BOUND < value < JS_NUMBER_BOUND:
        return value
    if value in (JS_NUMBER_BOUND, -JS_NUMBER_BOUND):
        return float(value)
    raise ValueError(
        f"{what} {value} is beyond +-(2**53 - 1): a JS Number cannot hold it exactly")


def to_sql_bindings(values: Sequence[Any], jsnull: object | None) -> list[Any]:
    """``values`` as SQL bindings every JS database API takes (see the module doc).

    None becomes ``jsnull`` (when Pyodide is present), a bool 1 or 0, an int
    a value that crosses as a JS Number (``js_number``); str, float and
    bytes-like values pass unchanged.
    """
    bound: list[Any] = []
    for index, value in enumerate(values):
        kind = type(value)
        if kind is int:
            if not -JS_NUMBER_BOUND < value < JS_NUMBER_BOUND:
                value = js_number(value, f"binding {index}: the integer")
        elif kind is bool:
            value = int(value)
        elif value is None and jsnull is not None:
            value = jsnull
        bound.append(value)
    return bound


def plain_value(value: Any, jsnull: object | None) -> Any:
    """A SQLite value from JS as plain Python: NULL as None, integers as int.

    SQLite INTEGERs travel as JS doubles; tickwork stores no REALs and keeps
    every integer within +-(2**53 - 1), so an integral float is an int.
    """
    if value is None or value is jsnull:
        return None
    if type(value) is float and value.is_integer():
        return int(value)
    return value


# ------------------------------------------------------------ fetch failures
# A rejected Workers ``fetch`` says only JavaScript's message (an OSError, a
# pyodide.http.AbortError or a bare JsException, by Pyodide version). Used by
# the webhook transport (tickwork.cloudflare.http) and tickwork.client.

#: Lower-case fragments of a fetch error that prove nothing was sent.
_BEFORE_SENDING = (
    "invalid url",
    "fetch api cannot load",
    "failed to parse url",
    "dns",
    "name not resolved",
    "could not resolve",
    "enotfound",
    "connection refused",
    "econnrefused",
    "too many redirects",
)


def fetch_error_message(error: BaseException) -> str:
    """The message of a failed ``fetch``: the JS error's own, else Python's."""
    js_message = getattr(error, "message", None)
    if isinstance(js_message, str) and js_message:
        return js_message
    return str(error) or type(error).__name__


def fetch_never_sent(error: BaseException) -> bool:
    """True only when the failure's message proves the request never left
    (a bad URL, a DNS failure, a refused connection); otherwise it may have."""
    lowered = fetch_error_message(error).lower()
    return any(fragment in lowered for fragment in _BEFORE_SENDING)
