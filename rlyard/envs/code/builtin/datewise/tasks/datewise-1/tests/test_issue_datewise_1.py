import datetime as dt

import pytest

from datewise import DateParseError, add_months, days_in_month, is_leap_year, parse_iso


@pytest.mark.parametrize("year", [1700, 1800, 1900, 2100, 2200])
def test_century_years_are_not_leap(year):
    assert is_leap_year(year) is False


@pytest.mark.parametrize("year", [1600, 2000, 2400])
def test_quadricentennial_years_are_leap(year):
    assert is_leap_year(year) is True


def test_february_length_in_century_year():
    assert days_in_month(1900, 2) == 28
    assert days_in_month(2000, 2) == 29


def test_parse_iso_rejects_feb_29_of_century_year():
    with pytest.raises(DateParseError):
        parse_iso("1900-02-29")
    assert parse_iso("2000-02-29") == dt.date(2000, 2, 29)


def test_add_months_clamps_in_century_year():
    assert add_months(dt.date(1900, 1, 31), 1) == dt.date(1900, 2, 28)
