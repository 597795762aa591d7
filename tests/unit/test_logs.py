"""JSON log lines of lifecycle events (what the Worker and JobOwner write)."""

from __future__ import annotations

import json

import pytest

from tickwork.events import Event
from tickwork.logs import JsonLogHook, event_level, log_hook_for

CLAIMED = Event("claimed", "a", "q", "l", 5, attempt=1)
SETTLED = Event("settled", "a", "q", "l", 9, outcome="completed", attempt=1, duration_ms=4)
FAILED = Event("settled", "b", "q", "l", 9, outcome="failed", reason="nope", attempt=2,
               duration_ms=1)
REFUSED = Event("refused", None, None, "l", 9, reason="suspended", count=3)


def lines(level: str, *events: Event) -> list[dict[str, object]]:
    written: list[str] = []
    hook = JsonLogHook(level, write=written.append)
    for event in events:
        hook(event)
    assert all("\n" not in line for line in written)  # one line per event
    return [json.loads(line) for line in written]


def test_a_settlement_is_one_json_line_with_its_fields() -> None:
    assert lines("info", SETTLED) == [{
        "level": "info", "logger": "tickwork", "event": "settled", "job_id": "a",
        "queue": "q", "lane": "l", "at": 9, "outcome": "completed", "attempt": 1,
        "duration_ms": 4}]


def test_levels_filter_what_is_written() -> None:
    every = (CLAIMED, SETTLED, FAILED, REFUSED)
    assert [line["event"] for line in lines("debug", *every)] == [
        "claimed", "settled", "settled", "refused"]
    assert [(line["event"], line["level"]) for line in lines("info", *every)] == [
        ("settled", "info"), ("settled", "warn"), ("refused", "warn")]
    assert [line.get("job_id") for line in lines("warn", *every)] == ["b", None]
    assert lines("off", *every) == []


@pytest.mark.parametrize(("outcome", "level"), [
    ("completed", "info"), ("cancelled", "info"), ("failed", "warn"),
    ("outcome_unknown", "warn"), ("interrupted", "warn")])
def test_bad_outcomes_are_warnings(outcome: str, level: str) -> None:
    assert event_level(Event("settled", "a", "q", "l", 0, outcome=outcome)) == level


def test_the_variable_picks_the_level_and_off_means_no_hook() -> None:
    default = log_hook_for(None)
    assert default is not None and default.level == "info"
    assert log_hook_for("") is not None
    debug = log_hook_for(" DEBUG ")
    assert debug is not None and debug.level == "debug"
    assert log_hook_for("off") is None


@pytest.mark.parametrize("value", ["verbose", "error", 3])
def test_an_unknown_level_is_refused_naming_the_variable(value: object) -> None:
    with pytest.raises(ValueError, match="TICKWORK_LOG_LEVEL must be one of debug, info, warn, "
                                         "off"):
        log_hook_for(value)
    with pytest.raises(ValueError, match="level must be one of"):
        JsonLogHook(value)  # type: ignore[arg-type]
