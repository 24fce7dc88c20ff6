import datetime as dt

import pytest

from datewise import DateParseError, parse, parse_iso, parse_relative

WED = dt.date(2024, 3, 13)


def test_parse_iso_date():
    assert parse_iso("2024-03-09") == dt.date(2024, 3, 9)
    assert parse_iso(" 2024-02-29 ") == dt.date(2024, 2, 29)


def test_parse_iso_datetime():
    assert parse_iso("2024-03-09T14:05") == dt.datetime(2024, 3, 9, 14, 5)
    assert parse_iso("2024-03-09 14:05:30") == dt.datetime(2024, 3, 9, 14, 5, 30)


@pytest.mark.parametrize("bad", ["2024-13-01", "2023-02-29", "2024-04-31", "2024-03-09T25:00", "march"])
def test_parse_iso_rejects(bad):
    with pytest.raises(DateParseError):
        parse_iso(bad)


def test_relative_keywords():
    assert parse_relative("today", WED) == WED
    assert parse_relative("Yesterday", WED) == dt.date(2024, 3, 12)
    assert parse_relative("tomorrow", WED) == dt.date(2024, 3, 14)


def test_relative_days_and_weeks():
    assert parse_relative("3 days ago", WED) == dt.date(2024, 3, 10)
    assert parse_relative("in 2 weeks", WED) == dt.date(2024, 3, 27)
    assert parse_relative("a week ago", WED) == dt.date(2024, 3, 6)
    assert parse_relative("in  one   day", WED) == dt.date(2024, 3, 14)


def test_relative_weekdays():
    assert parse_relative("next friday", WED) == dt.date(2024, 3, 15)
    assert parse_relative("last monday", WED) == dt.date(2024, 3, 11)
    assert parse_relative("next tue", WED) == dt.date(2024, 3, 19)


def test_parse_dispatch():
    assert parse("2024-01-05") == dt.date(2024, 1, 5)
    assert parse("2 days ago", WED) == dt.date(2024, 3, 11)
    with pytest.raises(DateParseError):
        parse("the day after never", WED)
