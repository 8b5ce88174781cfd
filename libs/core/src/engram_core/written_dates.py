"""Calendar dates as people write them — "8 May, 2023", "May 8th 2023", "the 3rd of June
2022", "March 2023", "2023-05-08", "2023" — read into year, month and day. Pure.

Shared by scoring's ``time`` component (dates named anywhere in a query's text) and
``time_query`` (a whole phrase naming one period), so both read a date the same way.
"""

from __future__ import annotations

import calendar
import re
from dataclasses import dataclass
from datetime import date

MONTHS: dict[str, int] = {
    **{m.lower(): i for i, m in enumerate(calendar.month_name) if m},
    **{m.lower(): i for i, m in enumerate(calendar.month_abbr) if m},
    "sept": 9,
}
_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_ORD = r"(?:st|nd|rd|th)?"

# Most specific first: a stretch of text read as a day is not also read as its month.
FORMS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("iso", re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")),
    ("dmy", re.compile(rf"\b(\d{{1,2}}){_ORD}\s+(?:of\s+)?({_MONTH})\.?,?\s+(\d{{4}})\b", re.I)),
    ("mdy", re.compile(rf"\b({_MONTH})\.?\s+(\d{{1,2}}){_ORD},?\s+(\d{{4}})\b", re.I)),
    ("my", re.compile(rf"\b({_MONTH})\.?,?\s+(?:of\s+)?(\d{{4}})\b", re.I)),
    ("y", re.compile(r"\b((?:19|20)\d{2})\b")),
)


_WRITTEN = ("dmy", "mdy", "my")  # the forms ISO parsing does not cover


@dataclass(frozen=True, slots=True)
class WrittenDate:
    """A day, a month (``day`` None) or a year (``month`` and ``day`` None)."""

    year: int
    month: int | None = None
    day: int | None = None


def _read(kind: str, g: tuple[str, ...]) -> WrittenDate | None:
    """The date a form's groups name; None when there is no such day or year."""
    if kind == "y":
        return WrittenDate(int(g[0]))
    if kind == "my":
        year, month = int(g[1]), MONTHS[g[0].lower()]
        return WrittenDate(year, month) if year >= 1 else None
    if kind == "iso":
        year, month, day = int(g[0]), int(g[1]), int(g[2])
    elif kind == "dmy":
        year, month, day = int(g[2]), MONTHS[g[1].lower()], int(g[0])
    else:  # mdy
        year, month, day = int(g[2]), MONTHS[g[0].lower()], int(g[1])
    try:
        date(year, month, day)
    except ValueError:
        return None
    return WrittenDate(year, month, day)


def dates_in(text: str) -> list[WrittenDate]:
    """Every date written in ``text``, in the order of FORMS, each stretch read once (by the
    most specific form that names a real date: "31 February, 2023" is February 2023)."""
    claimed: list[tuple[int, int]] = []
    out: list[WrittenDate] = []
    for kind, rx in FORMS:
        for m in rx.finditer(text):
            if any(m.start() < e and s < m.end() for s, e in claimed):
                continue
            found = _read(kind, m.groups())
            if found is not None:
                claimed.append((m.start(), m.end()))
                out.append(found)
    return out


def written_date(phrase: str) -> WrittenDate | None:
    """The date ``phrase`` is, whole, in a written (not ISO) form; None when it is not one.
    Raises ValueError when it has the form of one but names no such day."""
    text = phrase.strip().removeprefix("the ")
    for kind, rx in FORMS:
        if kind in _WRITTEN and (m := rx.fullmatch(text)) is not None:
            found = _read(kind, m.groups())
            if found is None:
                raise ValueError(f"no such date: {text!r}")
            return found
    return None
