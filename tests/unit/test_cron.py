"""Cron expressions (tickwork.model.cron) and schedule slots
(tickwork.model.schedules): checked against cronsim, a well-kept cron
library, on many expressions and times, plus the cases people get wrong:
month ends, leap days, both day fields, daylight-saving changes (a UTC
schedule has none), and bad input named by field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import cronsim
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tickwork import InvalidArgument, Schedule, ScheduledJob
from tickwork.model.cron import Cron, slot_text
from tickwork.model.schedules import validate_schedule

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def ms(moment: datetime) -> int:
    return int((moment - EPOCH).total_seconds() * 1000)


def at(text: str) -> int:
    return ms(datetime.fromisoformat(text).replace(tzinfo=UTC))


def field(low: int, high: int, names: tuple[str, ...] = ()) -> st.SearchStrategy[str]:
    value = st.integers(low, high).map(str)
    if names:
        value = value | st.sampled_from(names)
    ranged = st.tuples(st.integers(low, high), st.integers(low, high)).map(
        lambda pair: f"{min(pair)}-{max(pair)}")
    item = st.one_of(st.just("*"), value, ranged,
                     st.tuples(st.sampled_from(["*", str(low)]), st.integers(1, 12)).map(
                         lambda pair: f"{pair[0]}/{pair[1]}"))
    return st.lists(item, min_size=1, max_size=3).map(",".join)


EXPRESSIONS = st.tuples(
    field(0, 59), field(0, 23), field(1, 31), field(1, 12, ("jan", "jun", "dec")),
    field(0, 7, ("sun", "mon", "fri")),
).map(" ".join)


@settings(max_examples=400, deadline=None)
@given(EXPRESSIONS, st.integers(0, 4_000_000_000_000))
def test_slots_match_cronsim(expression: str, epoch_ms: int) -> None:
    try:
        cron = Cron.parse(expression)
    except InvalidArgument:
        # Ours refuses only what has no slot at all (say, February 30).
        with pytest.raises((StopIteration, cronsim.CronSimError)):
            next(cronsim.CronSim(expression, EPOCH))
        return
    moment = EPOCH + timedelta(milliseconds=epoch_ms)
    assert cron.next_after(epoch_ms) == ms(next(cronsim.CronSim(expression, moment)))
    # cronsim's reverse walk is strictly before; ours is at or before.
    after_minute = moment.replace(second=0, microsecond=0) + timedelta(minutes=1)
    assert cron.last_at_or_before(epoch_ms) == ms(
        next(cronsim.CronSim(expression, after_minute, reverse=True)))


@pytest.mark.parametrize(("expression", "start", "slots"), [
    # Month ends: the 31st only in months that have one; the last days.
    ("0 0 31 * *", "2026-01-31T00:00:00", ["2026-03-31", "2026-05-31", "2026-07-31"]),
    ("0 0 30 * *", "2027-01-30T00:00:00", ["2027-03-30", "2027-04-30", "2027-05-30"]),
    ("0 12 28-31 2 *", "2027-02-28T12:00:00", ["2028-02-28", "2028-02-29", "2029-02-28"]),
    # Leap days, across 2100 (no leap day) to 2104.
    ("0 0 29 2 *", "2096-03-01T00:00:00", ["2104-02-29", "2108-02-29"]),
    # Both day fields restricted: either matches (the 1st, and Mondays).
    ("0 9 1 * mon", "2026-11-30T09:00:00", ["2026-12-01", "2026-12-07", "2026-12-14"]),
    # Only the weekday restricted: the weekday alone decides.
    ("0 9 * * 5", "2026-12-01T00:00:00", ["2026-12-04", "2026-12-11"]),
])
def test_month_ends_leap_days_and_day_fields(expression: str, start: str,
                                             slots: list[str]) -> None:
    cron = Cron.parse(expression)
    found, now = [], at(start)
    for _ in slots:
        found_slot = cron.next_after(now)
        assert found_slot is not None
        found.append(slot_text(found_slot)[:10])
        now = found_slot
    assert found == slots


@pytest.mark.parametrize(("changes", "first", "second"), [
    # Europe's clocks go forward on 2027-03-28 at 01:00 UTC and back on
    # 2027-10-31 at 01:00 UTC; the US's on 2027-03-14 and 2027-11-07 at
    # 07:00 and 06:00 UTC. A UTC schedule never skips or repeats a slot.
    ("2027-03-28T00:00:00", "2027-03-28T02:00:00Z", "2027-03-29T02:00:00Z"),
    ("2027-10-31T00:00:00", "2027-10-31T02:00:00Z", "2027-11-01T02:00:00Z"),
    ("2027-03-14T00:00:00", "2027-03-14T02:00:00Z", "2027-03-15T02:00:00Z"),
    ("2027-11-07T00:00:00", "2027-11-07T02:00:00Z", "2027-11-08T02:00:00Z"),
])
def test_daylight_saving_changes_move_no_utc_slot(changes: str, first: str,
                                                  second: str) -> None:
    cron = Cron.parse("0 2 * * *")
    one = cron.next_after(at(changes))
    assert one is not None and slot_text(one) == first
    two = cron.next_after(one)
    assert two is not None and slot_text(two) == second and two - one == 86_400_000
    hourly = Cron.parse("@hourly")
    slot, seen = at(changes) - 86_400_000, []
    for _ in range(72):
        following = hourly.next_after(slot)
        assert following is not None
        seen.append(following - slot)
        slot = following
    assert set(seen[1:]) == {3_600_000}  # 72 slots an hour apart: none doubled or lost


@pytest.mark.parametrize(("expression", "problem"), [
    ("* * * *", "has 4 fields"),
    ("60 * * * *", "minute '60'"),
    ("* 24 * * *", "hour '24'"),
    ("* * 0 * *", "day of month '0'"),
    ("* * * 13 *", "month '13'"),
    ("* * * * 8", "day of week '8'"),
    ("5-1 * * * *", "runs backwards"),
    ("*/0 * * * *", "the step must be"),
    ("* * * foo *", "is not a number or a name"),
    ("0 0 30 2 *", "matches no day"),
    ("0 0 31 4,6,9,11 *", "matches no day"),
    ("", "1 to 200"),
])
def test_bad_expressions_say_what_is_wrong(expression: str, problem: str) -> None:
    with pytest.raises(InvalidArgument, match=problem) as raised:
        Cron.parse(expression)
    assert raised.value.field == "cron"


def test_macros_and_names() -> None:
    assert Cron.parse("@daily").next_after(at("2026-12-01T00:00:00")) == at("2026-12-02T00:00:00")
    assert Cron.parse("@weekly").next_after(at("2026-12-01T00:00:00")) == at(
        "2026-12-06T00:00:00")  # a Sunday
    assert Cron.parse("0 0 * * SUN").weekdays == Cron.parse("0 0 * * 7").weekdays == {0}
    assert Cron.parse("0 0 1 JAN *").months == {1}


def test_due_slots_take_the_latest_up_to_the_bound() -> None:
    job = ScheduledJob("q", "q")
    valid = validate_schedule(Schedule("s", job, cron="0 * * * *", catch_up=3))
    slots, after = valid.due_slots(at("2026-12-01T00:00:00"), at("2026-12-01T10:30:00"))
    assert [slot_text(slot) for slot in slots] == [
        "2026-12-01T08:00:00Z", "2026-12-01T09:00:00Z", "2026-12-01T10:00:00Z"]
    assert after == at("2026-12-01T11:00:00")
    assert valid.due_slots(at("2026-12-01T11:00:00"), at("2026-12-01T10:30:00")) == (
        [], at("2026-12-01T11:00:00"))
    every = validate_schedule(Schedule("e", job, every_ms=90_000, catch_up=1000))
    slots, after = every.due_slots(0, 450_000)
    assert (slots, after) == ([0, 90_000, 180_000, 270_000, 360_000, 450_000], 540_000)
    job_of = valid.slot_job(at("2026-12-01T10:00:00"))
    assert (job_of.job_id, job_of.run_at) == ("s@2026-12-01T10:00:00Z", at("2026-12-01T10:00:00"))
