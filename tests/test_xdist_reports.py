"""Reports with a lone surrogate reach pytest-xdist's controller.

A test that logs an executor's exception keeps the log in its report
("Captured log call"); when the exception's text holds a lone surrogate
(tests/behaviour/test_error_summaries.py raises one on purpose), execnet could
not send that report and its worker died. tests/conftest.py escapes such
characters as the report is serialised.
"""

from __future__ import annotations

import execnet
import pytest

from tests.support.reports import utf8_safe


def report_with(section: str) -> pytest.TestReport:
    return pytest.TestReport(
        nodeid="tests/x.py::test_x", location=("tests/x.py", 0, "test_x"), keywords={},
        outcome="passed", longrepr=None, when="call",
        sections=[("Captured log call", section)])


def test_a_report_holding_a_lone_surrogate_is_sent_with_it_escaped(
        pytestconfig: pytest.Config) -> None:
    report = report_with("ValueError: bad \ud800 and é ☃\n")
    with pytest.raises(execnet.DataFormatError, match="utf-8"):
        execnet.dumps(report._to_json())
    data = pytestconfig.hook.pytest_report_to_serializable(config=pytestconfig, report=report)
    received = pytestconfig.hook.pytest_report_from_serializable(
        config=pytestconfig, data=execnet.loads(execnet.dumps(data)))
    assert received.sections == [("Captured log call", "ValueError: bad \\ud800 and é ☃\n")]
    assert (received.nodeid, received.outcome) == ("tests/x.py::test_x", "passed")


def test_a_report_utf8_can_encode_is_sent_unchanged(pytestconfig: pytest.Config) -> None:
    report = report_with("naïve ☃ 😀 \\ud800 as typed\n")
    data = pytestconfig.hook.pytest_report_to_serializable(config=pytestconfig, report=report)
    assert data == report._to_json() | {"$report_type": "TestReport"}


def test_utf8_safe_escapes_strs_at_any_depth_and_keeps_the_shape() -> None:
    value = {"a\udfff": [("x\ud800", 1, None), {"b": "ok"}], "n": 2.5}
    assert utf8_safe(value) == {"a\\udfff": [("x\\ud800", 1, None), {"b": "ok"}], "n": 2.5}
