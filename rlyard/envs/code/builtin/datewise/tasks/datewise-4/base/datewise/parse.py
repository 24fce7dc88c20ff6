"""Parsing of ISO 8601 dates and English relative date phrases."""

from __future__ import annotations

import datetime as _dt
import re

from .cal import add_months, days_in_month, weekday_from_name


class DateParseError(ValueError):
    """Raised when a string cannot be understood as a date."""


_ISO_DATE = re.compile(r"^(\d{4})-(\d{2})-(\d{2})$")
_ISO_BASIC = re.compile(r"^(\d{4})(\d{2})(\d{2})$")
_ISO_ORDINAL = re.compile(r"^(\d{4})-(\d{3})$")
_ISO_WEEK = re.compile(r"^(\d{4})-?W(\d{2})(?:-?([1-7]))?$")
_ISO_DATETIME = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2}))?$"
)

_NUMBER_WORDS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5}
_UNIT = r"(day|week|month|year)s?"
_COUNT = r"(\d+|an?|one|two|three|four|five)"
_REL_AGO = re.compile(rf"^{_COUNT}\s+{_UNIT}\s+ago$")
_REL_IN = re.compile(rf"^in\s+{_COUNT}\s+{_UNIT}$")
_REL_WEEKDAY = re.compile(r"^(next|last)\s+([a-z]+)$")


def _make_date(year: int, month: int, day: int, text: str) -> _dt.date:
    if not 1 <= month <= 12:
        raise DateParseError(f"invalid month in {text!r}")
    if not 1 <= day <= days_in_month(year, month):
        raise DateParseError(f"invalid day in {text!r}")
    return _dt.date(year, month, day)


def _ordinal_date(year: int, ordinal: int, text: str) -> _dt.date:
    length = 366 if days_in_month(year, 2) == 29 else 365
    if not 1 <= ordinal <= length:
        raise DateParseError(f"invalid day of year in {text!r}")
    return _dt.date(year, 1, 1) + _dt.timedelta(days=ordinal - 1)


def _week_date(year: int, week: int, weekday: int, text: str) -> _dt.date:
    try:
        return _dt.date.fromisocalendar(year, week, weekday)
    except ValueError:
        raise DateParseError(f"invalid week date {text!r}") from None


def parse_iso(text: str) -> _dt.date | _dt.datetime:
    """Parse an ISO 8601 calendar date or date-time.

    Accepted forms::

        2024-03-09            calendar date
        20240309              basic calendar date
        2024-069              ordinal date (day of year)
        2024-W10-6, 2024W106  ISO week date (weekday 1 = Monday)
        2024-W10              ISO week (its Monday)
        2024-03-09T14:05      date-time (seconds optional, "T" or space)
    """
    s = text.strip()
    m = _ISO_DATE.match(s) or _ISO_BASIC.match(s)
    if m:
        return _make_date(int(m[1]), int(m[2]), int(m[3]), text)
    m = _ISO_ORDINAL.match(s)
    if m:
        return _ordinal_date(int(m[1]), int(m[2]), text)
    m = _ISO_WEEK.match(s)
    if m:
        return _week_date(int(m[1]), int(m[2]), int(m[3] or 1), text)
    m = _ISO_DATETIME.match(s)
    if m:
        d = _make_date(int(m[1]), int(m[2]), int(m[3]), text)
        hour, minute, second = int(m[4]), int(m[5]), int(m[6] or 0)
        if hour > 23 or minute > 59 or second > 59:
            raise DateParseError(f"invalid time in {text!r}")
        return _dt.datetime(d.year, d.month, d.day, hour, minute, second)
    raise DateParseError(f"not an ISO date: {text!r}")


def _count(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBER_WORDS[word]


def _shift(today: _dt.date, n: int, unit: str) -> _dt.date:
    if unit == "day":
        return today + _dt.timedelta(days=n)
    if unit == "week":
        return today + _dt.timedelta(weeks=n)
    if unit == "month":
        return add_months(today, n)
    if unit == "year":
        return add_months(today, 12 * n)
    raise DateParseError(f"unknown unit {unit!r}")  # pragma: no cover


def parse_relative(text: str, today: _dt.date) -> _dt.date:
    """Parse phrases like "today", "3 days ago", "in 2 weeks", "next friday"."""
    s = " ".join(text.strip().lower().split())
    if s == "today":
        return today
    if s == "yesterday":
        return today - _dt.timedelta(days=1)
    if s == "tomorrow":
        return today + _dt.timedelta(days=1)
    m = _REL_AGO.match(s)
    if m:
        return _shift(today, -_count(m[1]), m[2])
    m = _REL_IN.match(s)
    if m:
        return _shift(today, _count(m[1]), m[2])
    m = _REL_WEEKDAY.match(s)
    if m:
        try:
            target = weekday_from_name(m[2])
        except ValueError:
            raise DateParseError(f"unknown weekday in {text!r}") from None
        if m[1] == "next":
            delta = (target - today.weekday()) % 7
            return today + _dt.timedelta(days=delta)
        delta = (today.weekday() - target) % 7
        return today - _dt.timedelta(days=delta)
    raise DateParseError(f"unrecognised relative date: {text!r}")


def parse(text: str, today: _dt.date | None = None) -> _dt.date | _dt.datetime:
    """Parse either an ISO date or a relative phrase (relative to ``today``)."""
    try:
        return parse_iso(text)
    except DateParseError:
        pass
    if today is None:
        today = _dt.date.today()
    return parse_relative(text, today)
