"""Test reports that pytest-xdist can send from a worker to the controller.

xdist's workers send each report through execnet, which encodes every str as
strict UTF-8. A test whose captured output holds a lone surrogate (say, a
log record whose traceback shows an executor's ``ValueError("\\ud800")``) would
make that encoding raise inside the worker, which then dies with an
INTERNALERROR however the test went. ``utf8_safe`` escapes such characters
(``\\ud800`` as the six characters ``\\ud800``, as ``sys.stderr`` would show
them) so the report arrives; see ``pytest_report_to_serializable`` in
tests/conftest.py.
"""

from __future__ import annotations

from typing import Any


def utf8_safe(value: Any) -> Any:
    """``value`` (a serialised report: dicts, lists and tuples of plain
    values) with every str UTF-8 cannot encode escaped; the rest unchanged."""
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {utf8_safe(key): utf8_safe(item) for key, item in value.items()}
    if isinstance(value, list):
        return [utf8_safe(item) for item in value]
    if isinstance(value, tuple):
        return tuple(utf8_safe(item) for item in value)
    return value
