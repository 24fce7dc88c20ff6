import datetime as dt

import pytest

import datewise
from datewise import DateParseError, parse, parse_relative

END_OF_MARCH = dt.date(2024, 3, 31)


@pytest.mark.parametrize("phrase, expected", [
    ("2 months ago", dt.date(2024, 1, 31)),
    ("1 month ago", dt.date(2024, 2, 29)),
    ("a month ago", dt.date(2024, 2, 29)),
    ("in 1 month", dt.date(2024, 4, 30)),
    ("in three months", dt.date(2024, 6, 30)),
    ("in 10 months", dt.date(2025, 1, 31)),
    ("13 months ago", dt.date(2023, 2, 28)),
])
def test_month_phrases(phrase, expected):
    assert parse_relative(phrase, END_OF_MARCH) == expected


@pytest.mark.parametrize("phrase, expected", [
    ("in 1 year", dt.date(2025, 2, 28)),
    ("a year ago", dt.date(2023, 2, 28)),
    ("4 years ago", dt.date(2020, 2, 29)),
    ("in one year", dt.date(2025, 2, 28)),
])
def test_year_phrases_clamp_leap_day(phrase, expected):
    assert parse_relative(phrase, dt.date(2024, 2, 29)) == expected


def test_parse_dispatches_month_phrases():
    assert parse("In 2 Years", dt.date(2024, 7, 4)) == dt.date(2026, 7, 4)
    with pytest.raises(DateParseError):
        parse("in 2 fortnights", dt.date(2024, 7, 4))


def test_add_years_helper():
    add_years = datewise.add_years
    assert add_years(dt.date(2024, 2, 29), 1) == dt.date(2025, 2, 28)
    assert add_years(dt.date(2024, 2, 29), 4) == dt.date(2028, 2, 29)
    assert add_years(dt.date(2024, 2, 29), -1) == dt.date(2023, 2, 28)
    assert add_years(dt.datetime(2021, 6, 1, 8, 30), 2) == dt.datetime(2023, 6, 1, 8, 30)
    assert "add_years" in datewise.__all__
