"""Cron expressions in UTC: parse five fields, find the slots around a time.

    cron = Cron.parse("30 2 * * 1-5")      # 02:30 UTC, Monday to Friday
    cron.next_after(epoch_ms)              # the first slot strictly after
    cron.last_at_or_before(epoch_ms)       # the latest slot at or before

The fields are minute (0-59), hour (0-23), day of month (1-31), month (1-12
or jan-dec) and day of week (0-7, 0 and 7 are Sunday, or sun-sat). Each is
``*``, a value, a range ``a-b``, a step ``*/n``, ``a-b/n`` or ``a/n`` (from
``a`` to the field's end), or a comma list of those. ``@yearly``
(``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``) and
``@hourly`` stand for their usual expressions. As in Vixie and Debian cron,
when both day fields are restricted a day matches if either does ("the
1st, and every Monday"); when one of them starts with ``*`` (``*``,
``*/2``), a day must match both.

Times are UTC, always: a slot is an instant, with no daylight-saving gaps
or repeats. Written here rather than taken from a library so the engine
keeps no runtime dependency (a Worker vendors every one); the tests compare
it with ``cronsim`` on many expressions and times.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from tickwork.model.errors import InvalidArgument

MINUTE_MS = 60_000
DAY_MS = 86_400_000
#: How far a search for a slot looks (days): longer than any gap between
#: slots of a valid expression (February 29 on a given weekday repeats
#: within 28 years; the Gregorian gap of 2100 makes it 32).
SEARCH_DAYS = 366 * 33
#: The longest expression accepted, in characters.
MAX_CRON_LENGTH = 200
#: The largest step (``*/n``) accepted.
MAX_STEP = 1000

_MONTHS = {name: number for number, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
    start=1)}
_WEEKDAYS = {name: number for number, name in enumerate(
    ("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
_MACROS = {
    "@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
# (name, lowest, highest, names) per field.
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _WEEKDAYS),
)


@dataclass(frozen=True, slots=True)
class Cron:
    """A parsed expression: the set of values each field matches."""

    expression: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday .. 6 = Saturday
    #: Whether the day of month / day of week field is restricted (does not
    #: start with ``*``).
    days_restricted: bool
    weekdays_restricted: bool

    @classmethod
    def parse(cls, expression: object, field: str = "cron") -> Cron:
        """The expression, or InvalidArgument naming ``field`` and the part at fault."""
        if not isinstance(expression, str):
            raise InvalidArgument(field, f"must be a string, got {type(expression).__name__}")
        if not 1 <= len(expression) <= MAX_CRON_LENGTH:
            raise InvalidArgument(field, f"must be 1 to {MAX_CRON_LENGTH} characters")
        text = _MACROS.get(expression.strip().lower(), expression)
        parts = text.split()
        if len(parts) != 5:
            raise InvalidArgument(field, f"{expression!r} has {len(parts)} fields; a cron "
                                         "expression has 5 (minute hour day month weekday) "
                                         "or is one of " + ", ".join(sorted(_MACROS)))
        values = [_parse_field(part, *spec, field=field)
                  for part, spec in zip(parts, _FIELDS, strict=True)]
        weekdays = frozenset(day % 7 for day in values[4])
        cron = cls(expression, tuple(sorted(values[0])), tuple(sorted(values[1])),
                   frozenset(values[2]), frozenset(values[3]), weekdays,
                   not parts[2].startswith("*"), not parts[4].startswith("*"))
        if cron.next_after(0) is None:
            raise InvalidArgument(field, f"{expression!r} matches no day (say, February 30)")
        return cron

    def matches_day(self, day: date) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = day.isoweekday() % 7 in self.weekdays
        if self.days_restricted and self.weekdays_restricted:
            return in_month or in_week
        return in_month and in_week

    def next_after(self, epoch_ms: int) -> int | None:
        """The first slot strictly after ``epoch_ms`` (epoch ms), or None
        within ``SEARCH_DAYS``."""
        start = _minute_of(epoch_ms) + 1  # the first whole minute after
        day, minute_of_day = divmod(start, 1440)
        for offset in range(SEARCH_DAYS):
            current = _EPOCH + timedelta(days=day + offset)
            if self.matches_day(current):
                floor = minute_of_day if offset == 0 else 0
                for hour in self.hours:
                    if (hour + 1) * 60 <= floor:
                        continue
                    for minute in self.minutes:
                        if hour * 60 + minute >= floor:
                            return ((day + offset) * 1440 + hour * 60 + minute) * MINUTE_MS
        return None

    def last_at_or_before(self, epoch_ms: int) -> int | None:
        """The latest slot at or before ``epoch_ms``, or None within ``SEARCH_DAYS``."""
        end = _minute_of(epoch_ms)
        day, minute_of_day = divmod(end, 1440)
        for offset in range(SEARCH_DAYS):
            current = _EPOCH + timedelta(days=day - offset)
            if self.matches_day(current):
                ceiling = minute_of_day if offset == 0 else 1439
                for hour in reversed(self.hours):
                    if hour * 60 > ceiling:
                        continue
                    for minute in reversed(self.minutes):
                        if hour * 60 + minute <= ceiling:
                            return ((day - offset) * 1440 + hour * 60 + minute) * MINUTE_MS
        return None


_EPOCH = date(1970, 1, 1)


def _minute_of(epoch_ms: int) -> int:
    """The whole minute (since the epoch) ``epoch_ms`` falls in."""
    return epoch_ms // MINUTE_MS


def _parse_field(text: str, name: str, lowest: int, highest: int,
                 names: dict[str, int], *, field: str) -> set[int]:
    found: set[int] = set()
    for item in text.split(","):
        problem = f"{name} {item!r} in {text!r}"
        body, slash, step_text = item.partition("/")
        step = 1
        if slash:
            if not (step_text.isascii() and step_text.isdigit()) or not (
                    1 <= int(step_text) <= MAX_STEP):
                raise InvalidArgument(field, f"{problem}: the step must be 1 to {MAX_STEP}")
            step = int(step_text)
        if body == "*":
            first, last = lowest, highest
        else:
            start_text, dash, end_text = body.partition("-")
            first = _value(start_text, lowest, highest, names, problem, field)
            if dash:
                last = _value(end_text, lowest, highest, names, problem, field)
                if last < first:
                    raise InvalidArgument(field, f"{problem}: the range runs backwards")
            else:
                last = highest if slash else first
        found.update(range(first, last + 1, step))
    return found


def _value(text: str, lowest: int, highest: int, names: dict[str, int], problem: str,
           field: str) -> int:
    if text.lower() in names:
        return names[text.lower()]
    if not (text.isascii() and text.isdigit()):
        raise InvalidArgument(field, f"{problem}: {text!r} is not a number"
                                     + (" or a name" if names else ""))
    value = int(text)
    if not lowest <= value <= highest:
        raise InvalidArgument(field, f"{problem}: {value} is outside {lowest}-{highest}")
    return value


def slot_text(epoch_ms: int) -> str:
    """A slot as it appears in its job's id: ISO 8601 UTC, to the second
    (``2026-12-01T02:30:00Z``)."""
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=epoch_ms)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
