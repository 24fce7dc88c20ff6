"""Calendar helpers: leap years, month lengths, month arithmetic, names."""

from __future__ import annotations

import datetime as _dt

WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
MONTHS = [
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
]


def is_leap_year(year: int) -> bool:
    """Gregorian leap year rule."""
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    """Number of days in ``month`` (1-12) of ``year``."""
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")
    if month == 2:
        return 29 if is_leap_year(year) else 28
    if month in (4, 6, 9, 11):
        return 30
    return 31


def add_months(d: _dt.date, n: int) -> _dt.date:
    """Shift ``d`` by ``n`` calendar months (``n`` may be negative).

    The day of month is clamped to the length of the target month, so
    Jan 31 + 1 month is Feb 28 (or Feb 29 in a leap year).
    Works for ``date`` and ``datetime`` alike (the time is kept).
    """
    total = d.year * 12 + (d.month - 1) + n
    year, month0 = divmod(total, 12)
    month = month0 + 1
    day = min(d.day, days_in_month(year, month))
    return d.replace(year=year, month=month, day=day)


def add_years(d: _dt.date, n: int) -> _dt.date:
    """Shift ``d`` by ``n`` years; Feb 29 becomes Feb 28 in non-leap years."""
    return add_months(d, 12 * n)


def weekday_name(d: _dt.date, short: bool = False) -> str:
    """English weekday name of ``d``, capitalised ("Monday" or "Mon")."""
    name = WEEKDAYS[d.weekday()].capitalize()
    return name[:3] if short else name


def _lookup(name: str, names: list[str], what: str) -> int:
    key = name.strip().lower().rstrip(".")
    for i, full in enumerate(names):
        if key == full or (len(key) >= 3 and full.startswith(key)):
            return i
    raise ValueError(f"unknown {what} name: {name!r}")


def weekday_from_name(name: str) -> int:
    """0 for Monday ... 6 for Sunday; accepts full names and abbreviations ("tue", "Thurs")."""
    return _lookup(name, WEEKDAYS, "weekday")


def month_from_name(name: str) -> int:
    """1 for January ... 12 for December; accepts full names and abbreviations ("Sep", "sept")."""
    return _lookup(name, MONTHS, "month") + 1
