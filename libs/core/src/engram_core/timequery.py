"""``time_query`` phrases → an inclusive UTC window. Pure: ``now`` is passed in.

Every phrase resolves to a *period* ``[start, end]`` (both inclusive; ``end`` is the last
microsecond of the period, like a bare date as ``end`` in ``check_time_range``):

* ``today``, ``yesterday``, ``now`` (an instant);
* ``this week|month|year`` and ``last week|month|year``: whole calendar periods in the
  request's time zone, weeks starting on Monday (``last week`` is the previous Mon–Sun);
* ``last|past N minutes|hours|days|weeks|months|years`` (and ``last hour``, ``past day``,
  ``past week``…): rolling, ``[now − N units, now]``; minutes and hours are absolute time,
  days and longer are wall-clock time in the zone (so "last 7 days" starts at the same
  local hour across a DST change); months and years clamp the day (Mar 31 − 1 month = Feb
  28/29);
* ``N units ago``: an instant;
* a weekday, ``friday`` or ``fri`` (the latest one, today included), ``last friday`` (the
  latest before today), ``this friday`` (the one of this Monday-to-Sunday week);
* ISO forms: year ``2024``, month ``2024-02``, week ``2024-W05``, date ``2024-02-29`` (each
  the whole period), datetime ``2024-02-29T10:00[:00][Z|±hh:mm]`` (an instant; without an
  offset it is in the request's time zone);
* written dates, read as scoring reads them in a query's text (`engram_core.written_dates`):
  ``May 3, 2024``, ``3 May 2024``, ``the 3rd of May, 2024``, ``Sept 3rd 2024`` (the day),
  ``May 2024`` (the month); ``on|in|during P`` is P.

and the composite forms combine periods P and Q:

* ``before P`` → ``(open, P.start)`` (exclusive); ``after P`` → ``(P.end, open)``
  (exclusive: "after 2024-03-01" starts on Mar 2); ``since|from P`` → ``[P.start, open)``;
  ``until|till|by P`` → ``(open, P.end]``;
* ``between P and Q``, ``[from] P to|until|through Q`` and ISO intervals ``P/Q`` →
  ``[P.start, Q.end]``; an ISO interval side may be ``..`` (open).

Matching ignores case and surrounding/extra whitespace. Anything else raises
``InvalidArgument("time_query", …)`` listing the accepted forms.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from datetime import timezone as fixed_offset
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from engram_core.errors import InvalidArgument
from engram_core.written_dates import WrittenDate, written_date

FIELD = "time_query"
TIMEZONE_FIELD = "timezone"
MAX_LENGTH = 200
MAX_COUNT = 100_000  # "last N days": beyond this N a window is not a filter any more
_TICK = timedelta(microseconds=1)

ACCEPTED = (
    "accepted: today, yesterday, now; this|last week|month|year; "
    "last|past N minutes|hours|days|weeks|months|years (e.g. 'last 24 hours'); N days ago; "
    "ISO 2024, 2024-02, 2024-W05, 2024-02-29, 2024-02-29T10:00Z; "
    "written May 3, 2024, 3 May 2024, May 2024; [last|this] friday; on|in D; "
    "before|after|since|until D; between D and D; D to D; ISO range D/D"
)

_UNITS: dict[str, str] = {
    **dict.fromkeys(("minute", "minutes", "min", "mins"), "minute"),
    **dict.fromkeys(("hour", "hours", "hr", "hrs", "h"), "hour"),
    **dict.fromkeys(("day", "days", "d"), "day"),
    **dict.fromkeys(("week", "weeks", "wk", "wks", "w"), "week"),
    **dict.fromkeys(("month", "months"), "month"),
    **dict.fromkeys(("year", "years", "yr", "yrs", "y"), "year"),
}
_UNIT = "|".join(sorted(_UNITS, key=len, reverse=True))
_ROLLING = re.compile(
    rf"^(?:(?:in|within|during|over)\s+)?(?:the\s+)?(last|past)\s+(?:([0-9]+)\s*)?({_UNIT})$"
)
_AGO = re.compile(rf"^([0-9]+)\s*({_UNIT})\s+ago$")
_CALENDAR = re.compile(r"^(this|last|current|previous)\s+(week|month|year)$")
_YEAR = re.compile(r"^([0-9]{4})$")
_MONTH = re.compile(r"^([0-9]{4})-([0-9]{2})$")
_WEEK = re.compile(r"^([0-9]{4})-?w([0-9]{2})$")
_BETWEEN = re.compile(r"^between\s+(.+?)\s+and\s+(.+)$")
_SPAN = re.compile(r"^(?:from\s+)?(.+?)\s+(?:to|until|till|through)\s+(.+)$")
_WEEKDAYS: dict[str, int] = {
    **{d.lower(): i for i, d in enumerate(calendar.day_name)},
    **{d.lower(): i for i, d in enumerate(calendar.day_abbr)},
}
_WEEKDAY = re.compile(rf"^(?:(last|this)\s+)?({'|'.join(_WEEKDAYS)})$")
_ON = re.compile(r"^(?:on|in|during)\s+(.+)$")  # "on May 3, 2024", "in March 2024": the period
_PREFIX = re.compile(r"^(before|after|since|from|until|till|by)\s+(.+)$")
_OFFSET = re.compile(r"^([+-])([0-9]{2}):?([0-9]{2})$")
_ZONE = re.compile(r"^[A-Za-z0-9_+\-]+(?:/[A-Za-z0-9_+\-]+)*$")  # Area/Location/...
MAX_ZONE_LENGTH = 64  # the longest IANA name has 32


@dataclass(frozen=True, slots=True)
class TimeRange:
    """An inclusive window on ``Memory.timestamp`` in UTC; None is an open end."""

    start: datetime | None = None
    end: datetime | None = None

    def intersect(self, other: TimeRange) -> TimeRange | None:
        """The overlap of two windows, or None when they do not overlap."""
        start = _later(self.start, other.start)
        end = _earlier(self.end, other.end)
        if start is not None and end is not None and start > end:
            return None
        return TimeRange(start, end)

    def contains(self, when: datetime) -> bool:
        return (self.start is None or when >= self.start) and (self.end is None or when <= self.end)

    def describe(self) -> str:
        lo = self.start.isoformat() if self.start else "open"
        hi = self.end.isoformat() if self.end else "open"
        return f"[{lo} .. {hi}]"


def _later(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else max(a, b)


def _earlier(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


def parse_timezone(name: str | None, field: str = TIMEZONE_FIELD) -> tzinfo:
    """An IANA zone (``Europe/Paris``), ``UTC`` or a fixed offset (``+02:00``); empty → UTC."""
    text = (name or "").strip()
    if not text:
        return UTC
    offset = _OFFSET.match(text)
    if offset:
        sign, hours, minutes = offset.groups()
        delta = timedelta(hours=int(hours), minutes=int(minutes))
        if delta >= timedelta(hours=24):
            raise InvalidArgument(field, f"offset out of range: {text[:64]!r}")
        return fixed_offset(-delta if sign == "-" else delta)
    if len(text) > MAX_ZONE_LENGTH:
        raise InvalidArgument(field, f"longer than {MAX_ZONE_LENGTH} characters")
    # Checked before zoneinfo sees it: a zone name is a relative path of the tz database, and
    # zoneinfo answers others (a directory such as "America", non-ASCII) with OS errors.
    if not _ZONE.fullmatch(text):
        raise InvalidArgument(field, f"not an IANA time zone name or ±hh:mm: {text[:64]!r}")
    try:
        return ZoneInfo(text)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        raise InvalidArgument(field, f"unknown IANA time zone {text[:64]!r}") from exc


def parse_time_query(
    text: str, now: datetime, timezone: str | tzinfo | None = None, *, field: str = FIELD
) -> TimeRange:
    """The window ``text`` names, as of ``now`` (aware), in ``timezone`` (default UTC)."""
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    zone = timezone if isinstance(timezone, tzinfo) else parse_timezone(timezone)
    phrase = " ".join(text.split()).lower()
    if not phrase:
        raise InvalidArgument(field, f"must not be empty; {ACCEPTED}")
    if len(phrase) > MAX_LENGTH:
        raise InvalidArgument(field, f"longer than {MAX_LENGTH} characters")
    try:
        window = _Parser(now.astimezone(zone), zone).window(phrase)
    except OverflowError as exc:
        raise InvalidArgument(field, f"{phrase[:64]!r} reaches outside the years 1..9999") from exc
    except _Unknown as exc:
        where = "" if exc.part == phrase else f" in {phrase[:64]!r}"
        raise InvalidArgument(field, f"{exc.reason} {exc.part[:64]!r}{where}; {ACCEPTED}") from exc
    if window.start is not None and window.end is not None and window.start > window.end:
        raise InvalidArgument(field, f"starts after it ends: {window.describe()}")
    return window


def intersect_window(
    window: TimeRange,
    start: datetime | None,
    end: datetime | None,
    *,
    field: str = FIELD,
    start_field: str = "start",
    end_field: str = "end",
) -> TimeRange:
    """``window`` narrowed by explicit ``start``/``end``; no overlap is InvalidArgument.

    The error names ``field`` and says which explicit bound it misses, e.g.
    ``time_query: [...] ends before start (2024-03-01T00:00:00+00:00)``.
    """
    explicit = TimeRange(start, end)
    both = window.intersect(explicit)
    if both is not None:
        return both
    if start is not None and window.end is not None and window.end < start:
        why = f"ends before {start_field} ({start.isoformat()})"
    elif end is not None and window.start is not None:
        why = f"starts after {end_field} ({end.isoformat()})"
    else:  # start > end: check_time_range refuses that first; kept for direct callers
        why = f"does not overlap {start_field}..{end_field} {explicit.describe()}"
    raise InvalidArgument(field, f"{window.describe()} {why}; no memory can match both")


def resolve_window(
    time_query: str,
    start: datetime | None,
    end: datetime | None,
    *,
    now: datetime,
    timezone: str | tzinfo | None = None,
) -> TimeRange:
    """What a recall filters ``timestamp`` on: the ``time_query`` window (if any) ∩ start/end.

    A time zone is checked even without a ``time_query``: a wrong one is an error either way."""
    zone = timezone if isinstance(timezone, tzinfo) else parse_timezone(timezone)
    if not time_query.strip():
        return TimeRange(start, end)
    return intersect_window(parse_time_query(time_query, now, zone), start, end)


class _Unknown(Exception):
    """``part`` of the phrase is not a known form; ``reason`` says why."""

    def __init__(self, reason: str, part: str) -> None:
        super().__init__(f"{reason} {part!r}")
        self.reason = reason
        self.part = part


@dataclass(frozen=True, slots=True)
class _Parser:
    now: datetime  # in ``zone``
    zone: tzinfo

    def window(self, phrase: str) -> TimeRange:
        m = _BETWEEN.match(phrase)
        if m:
            return self._span(m.group(1), m.group(2))
        m = _PREFIX.match(phrase)
        if m:
            word, rest = m.groups()
            # "from A to B" / "until A"... the prefix only when the rest is one period.
            if word != "from" or not _SPAN.match(phrase):
                p = self.period(rest)
                if word == "before":
                    return TimeRange(None, _utc(p.start) - _TICK)
                if word == "after":
                    return TimeRange(_utc(p.end) + _TICK, None)
                if word in ("since", "from"):
                    return TimeRange(p.start, None)
                return TimeRange(None, p.end)
        m = _SPAN.match(phrase)
        if m:
            return self._span(m.group(1), m.group(2))
        if "/" in phrase:
            lo, _, hi = phrase.partition("/")
            first = None if lo.strip() == ".." else self.period(lo.strip()).start
            last = None if hi.strip() == ".." else self.period(hi.strip()).end
            return TimeRange(first, last)
        return self.period(phrase)

    def _span(self, a: str, b: str) -> TimeRange:
        return TimeRange(self.period(a).start, self.period(b).end)

    def period(self, phrase: str) -> TimeRange:
        """One period with both ends set."""
        now = self.now
        if phrase == "now":
            return _instant(now)
        if phrase == "today":
            return self._days(now.date(), 1)
        if phrase == "yesterday":
            return self._days(now.date() - timedelta(days=1), 1)
        m = _CALENDAR.match(phrase)
        if m:
            return self._calendar(m.group(1) in ("last", "previous"), m.group(2))
        m = _ROLLING.match(phrase)
        if m:
            count = _count(m.group(2) or "1")
            return TimeRange(_utc(self._back(count, _UNITS[m.group(3)])), _utc(now))
        m = _AGO.match(phrase)
        if m:
            return _instant(self._back(_count(m.group(1)), _UNITS[m.group(2)]))
        m = _WEEKDAY.match(phrase)
        if m:
            return self._weekday(m.group(1), _WEEKDAYS[m.group(2)])
        m = _ON.match(phrase)
        if m:
            return self.period(m.group(1))
        try:
            written = written_date(phrase)
        except ValueError as exc:
            raise _Unknown("no such date:", phrase) from exc
        if written is not None:
            return self._written(written)
        return self._iso(phrase)

    def _weekday(self, which: str | None, weekday: int) -> TimeRange:
        """``friday``: the latest Friday, today included; ``last friday``: the latest before
        today; ``this friday``: the Friday of this week (Monday to Sunday)."""
        today = self.now.date()
        back = (today.weekday() - weekday) % 7
        if which == "last" and back == 0:
            back = 7
        elif which == "this":
            back = today.weekday() - weekday  # negative: later this week
        return self._days(today - timedelta(days=back), 1)

    def _written(self, d: WrittenDate) -> TimeRange:
        if d.month is None:
            return self._months(date(d.year, 1, 1), 12)
        if d.day is None:
            return self._months(date(d.year, d.month, 1), 1)
        return self._days(date(d.year, d.month, d.day), 1)

    def _calendar(self, previous: bool, unit: str) -> TimeRange:
        today = self.now.date()
        if unit == "week":
            monday = today - timedelta(days=today.weekday())
            return self._days(monday - timedelta(weeks=1) if previous else monday, 7)
        if unit == "month":
            first = today.replace(day=1)
            if previous:
                first = (first - timedelta(days=1)).replace(day=1)
            return self._months(first, 1)
        return self._months(date(today.year - 1 if previous else today.year, 1, 1), 12)

    def _iso(self, phrase: str) -> TimeRange:
        m = _YEAR.match(phrase)
        if m:
            return self._months(date(_year(m.group(1)), 1, 1), 12)
        m = _MONTH.match(phrase)
        if m:
            month = int(m.group(2))
            if not 1 <= month <= 12:
                raise _Unknown("no such month:", phrase)
            return self._months(date(_year(m.group(1)), month, 1), 1)
        m = _WEEK.match(phrase)
        if m:
            try:
                monday = date.fromisocalendar(_year(m.group(1)), int(m.group(2)), 1)
            except ValueError as exc:
                raise _Unknown("no such ISO week:", phrase) from exc
            return self._days(monday, 7)
        token = phrase.upper()  # fromisoformat wants the "T" and "Z" upper-case
        if not any(c in token for c in "T: "):
            try:
                return self._days(date.fromisoformat(token), 1)
            except ValueError:
                pass
        try:
            moment = datetime.fromisoformat(token)
        except ValueError as exc:
            raise _Unknown("not a time phrase:", phrase) from exc
        return _instant(moment if moment.tzinfo else moment.replace(tzinfo=self.zone))

    def _days(self, first: date, days: int) -> TimeRange:
        try:
            after: date | None = first + timedelta(days=days)
        except OverflowError:
            after = None
        return self._between_midnights(first, after)

    def _months(self, first: date, months: int) -> TimeRange:
        try:
            year, month = _shift_month(first.year, first.month, months)
        except OverflowError:
            return self._between_midnights(first, None)
        return self._between_midnights(first, date(year, month, 1))

    def _between_midnights(self, first: date, after: date | None) -> TimeRange:
        """From ``first``'s local midnight to just before ``after``'s (None: end of time)."""
        start = _utc(datetime.combine(first, time.min, tzinfo=self.zone))
        if after is None:
            return TimeRange(start, datetime.max.replace(tzinfo=UTC))
        # The next period's first local midnight, in UTC, minus one tick: right on DST days
        # (23 or 25 hours long).
        end = _utc(datetime.combine(after, time.min, tzinfo=self.zone)) - _TICK
        return TimeRange(start, end)

    def _back(self, count: int, unit: str) -> datetime:
        """``now`` minus ``count`` units (hours and minutes absolute; days and up wall-clock)."""
        now = self.now
        if unit == "minute":
            return _utc(now) - timedelta(minutes=count)
        if unit == "hour":
            return _utc(now) - timedelta(hours=count)
        if unit == "day":
            return now - timedelta(days=count)
        if unit == "week":
            return now - timedelta(weeks=count)
        return _add_months(now, -count if unit == "month" else -12 * count)


def _count(digits: str) -> int:
    value = int(digits)
    if not 1 <= value <= MAX_COUNT:
        raise _Unknown(f"the count must be within 1..{MAX_COUNT}:", digits)
    return value


def _year(digits: str) -> int:
    if int(digits) < 1:
        raise _Unknown("no such year:", digits)
    return int(digits)


def _utc(moment: datetime | None) -> datetime:
    assert moment is not None  # periods always have both ends
    return moment.astimezone(UTC)


def _instant(moment: datetime) -> TimeRange:
    at = _utc(moment)
    return TimeRange(at, at)


def _shift_month(year: int, month: int, delta: int) -> tuple[int, int]:
    index = year * 12 + (month - 1) + delta
    if not 12 <= index <= 9999 * 12 + 11:
        raise OverflowError("month out of range")
    return index // 12, index % 12 + 1


def _add_months(moment: datetime, months: int) -> datetime:
    """Wall-clock month arithmetic, the day clamped to the target month's length."""
    year, month = _shift_month(moment.year, moment.month, months)
    last_day = calendar.monthrange(year, month)[1]
    return moment.replace(year=year, month=month, day=min(moment.day, last_day))
