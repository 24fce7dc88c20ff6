"""Formatting dates with moment.js-style tokens, and humanized differences."""

from __future__ import annotations

import datetime as _dt
import re

from .cal import MONTHS, WEEKDAYS

# Longest tokens first so that "MMMM" wins over "MM".  Text in [brackets] is literal.
_TOKEN_RE = re.compile(
    r"\[([^\]]*)\]|GGGG|YYYY|YY|MMMM|MMM|MM|M|DDDD|DD|D|dddd|ddd|WW|E|HH|mm|ss"
)


def _render(d: _dt.date, tok: str) -> str:
    if tok == "YYYY":
        return f"{d.year:04d}"
    if tok == "YY":
        return f"{d.year % 100:02d}"
    if tok == "MMMM":
        return MONTHS[d.month - 1].capitalize()
    if tok == "MMM":
        return MONTHS[d.month - 1][:3].capitalize()
    if tok == "MM":
        return f"{d.month:02d}"
    if tok == "M":
        return str(d.month)
    if tok == "DD":
        return f"{d.day:02d}"
    if tok == "D":
        return str(d.day)
    if tok == "DDDD":
        return f"{d.timetuple().tm_yday:03d}"
    if tok == "dddd":
        return WEEKDAYS[d.weekday()].capitalize()
    if tok == "ddd":
        return WEEKDAYS[d.weekday()][:3].capitalize()
    if tok == "GGGG":
        return f"{d.isocalendar()[0]:04d}"
    if tok == "WW":
        return f"{d.isocalendar()[1]:02d}"
    if tok == "E":
        return str(d.isoweekday())
    if tok == "HH":
        return f"{getattr(d, 'hour', 0):02d}"
    if tok == "mm":
        return f"{getattr(d, 'minute', 0):02d}"
    if tok == "ss":
        return f"{getattr(d, 'second', 0):02d}"
    raise ValueError(f"unknown token {tok!r}")  # pragma: no cover


def format_date(d: _dt.date, fmt: str = "YYYY-MM-DD") -> str:
    """Format ``d`` using tokens such as YYYY, MM, DD, MMM, dddd, HH, mm, ss.

    ISO week tokens: GGGG (ISO week-numbering year), WW (ISO week), E (ISO
    weekday 1-7); DDDD is the day of the year.  Wrap literal text in brackets:
    ``format_date(d, "[Week] WW")``.
    """

    def repl(m: re.Match) -> str:
        if m.group(1) is not None:
            return m.group(1)
        return _render(d, m.group(0))

    return _TOKEN_RE.sub(repl, fmt)


def humanize(d: _dt.date, today: _dt.date | None = None) -> str:
    """Describe ``d`` relative to ``today``: "today", "yesterday", "3 days ago", "in 2 weeks"."""
    if isinstance(d, _dt.datetime):
        d = d.date()
    if today is None:
        today = _dt.date.today()
    if isinstance(today, _dt.datetime):
        today = today.date()
    days = (d - today).days
    if days == 0:
        return "today"
    if days == 1:
        return "tomorrow"
    if days == -1:
        return "yesterday"
    n = abs(days)
    if n < 7:
        unit, count = "day", n
    elif n < 30:
        unit, count = "week", n // 7
    elif n < 365:
        unit, count = "month", n // 30
    else:
        unit, count = "year", n // 365
    label = f"{count} {unit}{'s' if count else ''}"
    return f"in {label}" if days > 0 else f"{label} ago"
