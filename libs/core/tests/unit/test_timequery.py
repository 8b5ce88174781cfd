"""time_query phrases. Every expected window is worked out by hand from the calendar."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from engram_core.errors import InvalidArgument
from engram_core.timequery import (
    ACCEPTED,
    TimeRange,
    intersect_window,
    parse_time_query,
    parse_timezone,
    resolve_window,
)

# A Wednesday, mid-month, in a leap year.
NOW = datetime(2024, 3, 13, 15, 30, 45, tzinfo=UTC)
END_OF_DAY = timedelta(days=1) - timedelta(microseconds=1)


def utc(y: int, m: int, d: int, h: int = 0, mi: int = 0, s: int = 0) -> datetime:
    return datetime(y, m, d, h, mi, s, tzinfo=UTC)


def day(y: int, m: int, d: int) -> TimeRange:
    return TimeRange(utc(y, m, d), utc(y, m, d) + END_OF_DAY)


def last_tick(y: int, m: int, d: int) -> datetime:
    """The last microsecond before the given midnight."""
    return utc(y, m, d) - timedelta(microseconds=1)


def q(text: str, now: datetime = NOW, tz: str | None = None) -> TimeRange:
    return parse_time_query(text, now, tz)


# --- single periods -----------------------------------------------------------------------


def test_today_and_yesterday_are_whole_days() -> None:
    assert q("today") == day(2024, 3, 13)
    assert q("yesterday") == day(2024, 3, 12)


def test_yesterday_crosses_month_and_year() -> None:
    assert q("yesterday", utc(2024, 3, 1, 8)) == day(2024, 2, 29)  # leap day
    assert q("yesterday", utc(2023, 3, 1, 8)) == day(2023, 2, 28)
    assert q("yesterday", utc(2024, 1, 1, 0, 0)) == day(2023, 12, 31)


def test_now_is_an_instant() -> None:
    assert q("now") == TimeRange(NOW, NOW)


def test_weeks_start_on_monday() -> None:
    # 2024-03-13 is a Wednesday: this week is Mon 11th .. Sun 17th.
    assert q("this week") == TimeRange(utc(2024, 3, 11), last_tick(2024, 3, 18))
    assert q("last week") == TimeRange(utc(2024, 3, 4), last_tick(2024, 3, 11))
    assert q("previous week") == q("last week")
    assert q("current week") == q("this week")


@pytest.mark.parametrize(
    ("now", "monday"),
    [
        (utc(2024, 3, 11, 0, 0), utc(2024, 3, 11)),  # Monday midnight: its own week
        (utc(2024, 3, 17, 23, 59), utc(2024, 3, 11)),  # Sunday night: still that week
        (utc(2024, 3, 18, 0, 0), utc(2024, 3, 18)),  # next Monday: a new week
    ],
)
def test_week_boundaries(now: datetime, monday: datetime) -> None:
    assert q("this week", now).start == monday
    assert q("last week", now).start == monday - timedelta(weeks=1)


def test_last_week_across_the_new_year() -> None:
    # 2024-01-03 is a Wednesday; the week before is Mon 2023-12-25 .. Sun 2023-12-31.
    assert q("last week", utc(2024, 1, 3, 12)) == TimeRange(
        utc(2023, 12, 25), last_tick(2024, 1, 1)
    )


def test_months() -> None:
    assert q("this month") == TimeRange(utc(2024, 3, 1), last_tick(2024, 4, 1))
    assert q("last month") == TimeRange(utc(2024, 2, 1), last_tick(2024, 3, 1))  # to Feb 29
    assert q("last month", utc(2023, 3, 31, 12)) == TimeRange(
        utc(2023, 2, 1), last_tick(2023, 3, 1)
    )
    assert q("last month", utc(2024, 1, 15)) == TimeRange(utc(2023, 12, 1), last_tick(2024, 1, 1))
    assert q("this month", utc(2024, 12, 31, 23, 59)) == TimeRange(
        utc(2024, 12, 1), last_tick(2025, 1, 1)
    )


def test_years() -> None:
    assert q("this year") == TimeRange(utc(2024, 1, 1), last_tick(2025, 1, 1))
    assert q("last year") == TimeRange(utc(2023, 1, 1), last_tick(2024, 1, 1))


# --- rolling windows ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "start"),
    [
        ("last 24 hours", utc(2024, 3, 12, 15, 30, 45)),
        ("last 24h", utc(2024, 3, 12, 15, 30, 45)),
        ("past 2 hours", utc(2024, 3, 13, 13, 30, 45)),
        ("last hour", utc(2024, 3, 13, 14, 30, 45)),
        ("last 90 minutes", utc(2024, 3, 13, 14, 0, 45)),
        ("last 7 days", utc(2024, 3, 6, 15, 30, 45)),
        ("last 1 day", utc(2024, 3, 12, 15, 30, 45)),
        ("last day", utc(2024, 3, 12, 15, 30, 45)),
        ("past week", utc(2024, 3, 6, 15, 30, 45)),
        ("last 2 weeks", utc(2024, 2, 28, 15, 30, 45)),
        ("last 3 months", utc(2023, 12, 13, 15, 30, 45)),
        ("past month", utc(2024, 2, 13, 15, 30, 45)),
        ("last 2 years", utc(2022, 3, 13, 15, 30, 45)),
        ("in the last 3 days", utc(2024, 3, 10, 15, 30, 45)),
        ("within the past 3 days", utc(2024, 3, 10, 15, 30, 45)),
    ],
)
def test_rolling_windows_end_now(text: str, start: datetime) -> None:
    assert q(text) == TimeRange(start, NOW)


def test_rolling_months_clamp_the_day() -> None:
    assert q("last 1 month", utc(2024, 3, 31, 9)).start == utc(2024, 2, 29, 9)  # leap
    assert q("last 1 month", utc(2023, 3, 31, 9)).start == utc(2023, 2, 28, 9)
    assert q("last 1 year", utc(2024, 2, 29, 9)).start == utc(2023, 2, 28, 9)
    assert q("last 13 months", utc(2024, 1, 31, 9)).start == utc(2022, 12, 31, 9)


def test_ago_is_an_instant() -> None:
    at = utc(2024, 3, 10, 15, 30, 45)
    assert q("3 days ago") == TimeRange(at, at)
    assert q("since 3 days ago") == TimeRange(at, None)


# --- ISO forms ----------------------------------------------------------------------------


def test_iso_date_is_the_whole_day() -> None:
    assert q("2024-02-29") == day(2024, 2, 29)
    assert q("20240229") == day(2024, 2, 29)


def test_iso_month_year_week() -> None:
    assert q("2024-02") == TimeRange(utc(2024, 2, 1), last_tick(2024, 3, 1))
    assert q("2023-02") == TimeRange(utc(2023, 2, 1), last_tick(2023, 3, 1))
    assert q("2023-12") == TimeRange(utc(2023, 12, 1), last_tick(2024, 1, 1))
    assert q("2024") == TimeRange(utc(2024, 1, 1), last_tick(2025, 1, 1))
    # ISO week 1 of 2025 starts on Monday 2024-12-30.
    assert q("2025-W01") == TimeRange(utc(2024, 12, 30), last_tick(2025, 1, 6))
    assert q("2024w05") == TimeRange(utc(2024, 1, 29), last_tick(2024, 2, 5))


def test_iso_datetimes_are_instants() -> None:
    at = utc(2024, 2, 29, 10, 15)
    assert q("2024-02-29T10:15Z") == TimeRange(at, at)
    assert q("2024-02-29t10:15:00z") == TimeRange(at, at)
    assert q("2024-02-29 10:15") == TimeRange(at, at)
    assert q("2024-02-29T12:15+02:00") == TimeRange(at, at)


def test_year_9999_ends_at_the_last_instant() -> None:
    assert q("9999-12-31").end == datetime.max.replace(tzinfo=UTC)
    assert q("9999").end == datetime.max.replace(tzinfo=UTC)


# --- weekdays -----------------------------------------------------------------------------


def test_weekdays_count_back_from_today() -> None:
    # NOW is Wednesday 13 March 2024.
    assert q("friday") == q("fri") == q("on Friday") == day(2024, 3, 8)
    assert q("wednesday") == day(2024, 3, 13)  # today is the latest Wednesday
    assert q("last wednesday") == day(2024, 3, 6)  # "last": before today
    assert q("last tuesday") == day(2024, 3, 12)
    assert q("this friday") == day(2024, 3, 15)  # this Monday-to-Sunday week, ahead
    assert q("this monday") == day(2024, 3, 11)
    assert q("since last monday") == TimeRange(utc(2024, 3, 11), None)


def test_weekdays_follow_the_timezone() -> None:
    # 15:30 UTC is 00:30 on Thursday in Tokyo: there "yesterday" and "wednesday" agree.
    assert q("wednesday", tz="Asia/Tokyo") == q("yesterday", tz="Asia/Tokyo")


# --- written dates ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "May 3, 2024",
        "may 3 2024",
        "3 May 2024",
        "3rd of May, 2024",
        "the 3rd of May 2024",
        "on May 3rd, 2024",
        "on 2024-05-03",
    ],
)
def test_written_days_are_the_whole_day(text: str) -> None:
    assert q(text) == day(2024, 5, 3)


def test_written_months_and_prefixes() -> None:
    assert q("Sept 2023") == TimeRange(utc(2023, 9, 1), last_tick(2023, 10, 1))
    assert q("in February 2024") == TimeRange(utc(2024, 2, 1), last_tick(2024, 3, 1))
    assert q("during 2023") == TimeRange(utc(2023, 1, 1), last_tick(2024, 1, 1))
    assert q("after May 1, 2024") == TimeRange(utc(2024, 5, 2), None)
    assert q("between Jan 5, 2024 and Feb 2024") == TimeRange(
        utc(2024, 1, 5), last_tick(2024, 3, 1)
    )
    assert q("1 May 2024 to 3 May 2024") == TimeRange(utc(2024, 5, 1), last_tick(2024, 5, 4))
    assert q("December 31, 9999").end == datetime.max.replace(tzinfo=UTC)


def test_written_dates_follow_the_timezone() -> None:
    # Berlin is UTC+2 in May: the day starts at 22:00 UTC the day before.
    assert q("May 3, 2024", tz="Europe/Berlin") == TimeRange(
        utc(2024, 5, 2, 22), utc(2024, 5, 3, 22) - timedelta(microseconds=1)
    )


# --- composite forms ----------------------------------------------------------------------


def test_before_and_after_exclude_the_period() -> None:
    assert q("before 2024-03-01") == TimeRange(None, last_tick(2024, 3, 1))
    assert q("after 2024-02-28") == TimeRange(utc(2024, 2, 29), None)
    assert q("after 2024-02") == TimeRange(utc(2024, 3, 1), None)
    at = utc(2024, 3, 1, 12)
    assert q("before 2024-03-01T12:00Z") == TimeRange(None, at - timedelta(microseconds=1))
    assert q("after 2024-03-01T12:00Z") == TimeRange(at + timedelta(microseconds=1), None)


def test_since_and_until_include_the_period() -> None:
    assert q("since 2024-03-01") == TimeRange(utc(2024, 3, 1), None)
    assert q("from 2024-03-01") == TimeRange(utc(2024, 3, 1), None)
    assert q("since last week") == TimeRange(utc(2024, 3, 4), None)
    assert q("since yesterday") == TimeRange(utc(2024, 3, 12), None)
    assert q("until 2024-03-01") == TimeRange(None, last_tick(2024, 3, 2))
    assert q("until today") == TimeRange(None, last_tick(2024, 3, 14))
    assert q("by 2024-03-01") == q("till 2024-03-01") == q("until 2024-03-01")


@pytest.mark.parametrize(
    "text",
    [
        "between 2024-01-01 and 2024-01-31",
        "2024-01-01 to 2024-01-31",
        "from 2024-01-01 to 2024-01-31",
        "2024-01-01 until 2024-01-31",
        "2024-01-01 through 2024-01-31",
        "2024-01-01/2024-01-31",
        "2024-01-01 / 2024-01-31",
        "between 2024-01 and 2024-01",
        "2024-01",
    ],
)
def test_ranges_include_both_ends(text: str) -> None:
    assert q(text) == TimeRange(utc(2024, 1, 1), last_tick(2024, 2, 1))


def test_iso_range_of_the_issue_example_and_open_ends() -> None:
    # A bare date as the end is the whole day, as for the request's `end`.
    assert q("2024-01-01/2024-02-01") == TimeRange(utc(2024, 1, 1), last_tick(2024, 2, 2))
    assert q("2024-01-01/..") == TimeRange(utc(2024, 1, 1), None)
    assert q("../2024-01-01") == TimeRange(None, last_tick(2024, 1, 2))
    at = utc(2024, 1, 1, 6)
    assert q("2024-01-01T06:00Z/2024-01-01T07:00Z") == TimeRange(at, at + timedelta(hours=1))


def test_ranges_mix_phrases() -> None:
    assert q("between last week and today") == TimeRange(utc(2024, 3, 4), last_tick(2024, 3, 14))
    assert q("2024-03-01 to now") == TimeRange(utc(2024, 3, 1), NOW)
    assert q("yesterday to today") == TimeRange(utc(2024, 3, 12), last_tick(2024, 3, 14))


def test_case_and_whitespace_do_not_matter() -> None:
    assert q("  LAST   Week ") == q("last week")
    assert q("Between 2024-01-01 AND 2024-01-31") == q("between 2024-01-01 and 2024-01-31")
    assert q("\tToday\n") == q("today")


# --- time zones ---------------------------------------------------------------------------


def test_timezone_shifts_day_boundaries() -> None:
    # 15:30 UTC is 00:30 the next day in Tokyo (UTC+9): "today" is Tokyo's 14th.
    tokyo = q("today", tz="Asia/Tokyo")
    assert tokyo == TimeRange(
        utc(2024, 3, 13, 15), utc(2024, 3, 14, 15) - timedelta(microseconds=1)
    )
    # 15:30 UTC is 08:30 in Los Angeles (UTC-7 after the 10 March DST change).
    la = q("yesterday", tz="America/Los_Angeles")
    assert la == TimeRange(utc(2024, 3, 12, 7), utc(2024, 3, 13, 7) - timedelta(microseconds=1))


def test_timezone_applies_to_naive_datetimes_and_dates() -> None:
    paris = "Europe/Paris"  # UTC+1 in February
    assert q("2024-02-29", tz=paris) == TimeRange(
        utc(2024, 2, 28, 23), utc(2024, 2, 29, 23) - timedelta(microseconds=1)
    )
    at = utc(2024, 2, 29, 9)
    assert q("2024-02-29T10:00", tz=paris) == TimeRange(at, at)
    # An explicit offset wins over the zone.
    assert q("2024-02-29T10:00Z", tz=paris) == TimeRange(utc(2024, 2, 29, 10), utc(2024, 2, 29, 10))


def test_dst_days_are_23_and_25_hours() -> None:
    spring = q("today", utc(2024, 3, 31, 12), "Europe/Paris")
    assert spring.start == utc(2024, 3, 30, 23)
    assert spring.end == utc(2024, 3, 31, 22) - timedelta(microseconds=1)
    autumn = q("today", utc(2024, 10, 27, 12), "Europe/Paris")
    assert autumn.start == utc(2024, 10, 26, 22)
    assert autumn.end == utc(2024, 10, 27, 23) - timedelta(microseconds=1)


def test_rolling_days_keep_the_local_hour_across_dst() -> None:
    # Paris 2024-04-02 12:00 (UTC+2); a week before is 2024-03-26 12:00 (UTC+1) = 11:00 UTC.
    now = utc(2024, 4, 2, 10)
    assert q("last 7 days", now, "Europe/Paris").start == utc(2024, 3, 26, 11)
    # Hours are absolute: 168 hours before is 10:00 UTC.
    assert q("last 168 hours", now, "Europe/Paris").start == utc(2024, 3, 26, 10)


def test_fixed_offsets_and_utc() -> None:
    assert q("today", tz="+09:00") == q("today", tz="Asia/Tokyo")
    assert q("today", tz="UTC") == q("today")
    assert q("today", tz="") == q("today")
    assert parse_timezone("-0330") == timezone(-timedelta(hours=3, minutes=30))
    assert parse_time_query("today", NOW, ZoneInfo("Asia/Tokyo")) == q("today", tz="Asia/Tokyo")


@pytest.mark.parametrize(
    "bad",
    [
        "Mars/Olympus",
        "../etc/passwd",
        "+25:00",
        "Europe/",
        # What zoneinfo answers with OS errors: directories, long and non-ASCII names.
        "America",
        "Etc",
        "Europe",
        "/usr",
        "A" * 256,
        "Europe/" + "x" * 300,
        "Amérique/Paris",
        "Europe/\udcff",
        "Europe//Paris",
        "Europe/./Paris",
    ],
)
def test_unknown_timezone_names_the_field(bad: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        q("today", tz=bad)
    assert err.value.field == "timezone"
    with pytest.raises(InvalidArgument) as err:  # checked with no time_query too
        resolve_window("", None, None, now=NOW, timezone=bad)
    assert err.value.field == "timezone"


def test_naive_now_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="aware"):
        parse_time_query("today", datetime(2024, 1, 1))


# --- errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "tomorrow-ish",
        "last fortnight",
        "next week",
        "last 0 days",
        "last 1000000 days",
        "2024-13",
        "2024-00",
        "2024-W54",
        "0000",
        "2024-02-30",
        "31 February 2023",
        "on May 32, 2024",
        "next friday",
        "last fridays",
        "on",
        "03/01/2024",
        "before",
        "between 2024-01-01",
        "between 2024-01-01 and soon",
        "x" * 300,
    ],
)
def test_malformed_phrases_name_the_field(bad: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        q(bad)
    assert err.value.field == "time_query"


def test_error_lists_what_is_accepted_and_the_bad_part() -> None:
    with pytest.raises(InvalidArgument) as err:
        q("between 2024-01-01 and Soon")
    assert "'soon'" in err.value.reason
    assert ACCEPTED in err.value.reason
    for form in (
        "today",
        "yesterday",
        "last 24 hours",
        "between",
        "before",
        "ISO range",
        "May 2024",
        "friday",
    ):
        assert form in ACCEPTED


def test_reversed_range_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="starts after it ends") as err:
        q("between 2024-02-01 and 2024-01-01")
    assert err.value.field == "time_query"


def test_out_of_range_is_refused_not_crashing() -> None:
    for bad in ("before 0001-01-01", "after 9999-12-31", "last 5000 years"):
        with pytest.raises(InvalidArgument, match=r"1\.\.9999"):
            q(bad)


# --- combining with start/end -------------------------------------------------------------


def test_intersect_window_narrows_to_the_overlap() -> None:
    window = q("last month")  # Feb 2024
    got = intersect_window(window, utc(2024, 2, 10), utc(2024, 3, 5))
    assert got == TimeRange(utc(2024, 2, 10), last_tick(2024, 3, 1))
    assert intersect_window(window, None, None) == window
    assert intersect_window(q("since 2024-02-01"), None, utc(2024, 2, 5)) == TimeRange(
        utc(2024, 2, 1), utc(2024, 2, 5)
    )


def test_touching_bounds_overlap_in_one_instant() -> None:
    at = utc(2024, 2, 1)
    assert intersect_window(q("since 2024-02-01"), None, at) == TimeRange(at, at)


def test_disjoint_windows_name_time_query_and_the_bound() -> None:
    with pytest.raises(InvalidArgument) as err:
        intersect_window(q("last month"), utc(2024, 3, 1), None)
    assert err.value.field == "time_query"
    assert "ends before start" in err.value.reason
    with pytest.raises(InvalidArgument) as err:
        intersect_window(q("this month"), None, utc(2024, 2, 1))
    assert err.value.field == "time_query"
    assert "starts after end" in err.value.reason


def test_resolve_window() -> None:
    assert resolve_window("", utc(2024, 1, 1), None, now=NOW) == TimeRange(utc(2024, 1, 1), None)
    assert resolve_window("  ", None, None, now=NOW) == TimeRange()
    got = resolve_window("today", None, utc(2024, 3, 13, 12), now=NOW, timezone="UTC")
    assert got == TimeRange(utc(2024, 3, 13), utc(2024, 3, 13, 12))


def test_time_range_contains_is_inclusive() -> None:
    window = day(2024, 2, 29)
    assert window.contains(utc(2024, 2, 29))
    assert window.contains(utc(2024, 2, 29) + END_OF_DAY)
    assert not window.contains(utc(2024, 3, 1))
    assert TimeRange().contains(utc(1, 1, 1))
