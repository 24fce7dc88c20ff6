"""datewise: small, dependency-free date parsing and formatting."""

from .cal import (
    MONTHS,
    WEEKDAYS,
    add_months,
    days_in_month,
    is_leap_year,
    month_from_name,
    weekday_from_name,
    weekday_name,
)
from .format import format_date, humanize
from .parse import DateParseError, parse, parse_iso, parse_relative

__all__ = [
    "MONTHS",
    "WEEKDAYS",
    "DateParseError",
    "add_months",
    "days_in_month",
    "format_date",
    "humanize",
    "is_leap_year",
    "month_from_name",
    "parse",
    "parse_iso",
    "parse_relative",
    "weekday_from_name",
    "weekday_name",
]

__version__ = "0.4.1"
