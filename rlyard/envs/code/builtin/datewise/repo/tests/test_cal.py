import datetime as dt

import pytest

from datewise import add_months, days_in_month, is_leap_year, month_from_name, weekday_from_name, weekday_name


def test_leap_years_basic():
    assert is_leap_year(2024)
    assert not is_leap_year(2023)
    assert is_leap_year(2000)


def test_days_in_month():
    assert days_in_month(2023, 1) == 31
    assert days_in_month(2023, 4) == 30
    assert days_in_month(2023, 2) == 28
    assert days_in_month(2024, 2) == 29
    with pytest.raises(ValueError):
        days_in_month(2023, 13)


def test_add_months_clamps_day():
    assert add_months(dt.date(2024, 1, 31), 1) == dt.date(2024, 2, 29)
    assert add_months(dt.date(2023, 1, 31), 1) == dt.date(2023, 2, 28)
    assert add_months(dt.date(2024, 3, 15), 2) == dt.date(2024, 5, 15)
    assert add_months(dt.date(2024, 5, 31), 1) == dt.date(2024, 6, 30)


def test_weekday_names():
    assert weekday_name(dt.date(2024, 3, 13)) == "Wednesday"
    assert weekday_name(dt.date(2024, 3, 13), short=True) == "Wed"
    assert weekday_from_name("Friday") == 4
    assert weekday_from_name("tue") == 1
    assert weekday_from_name("Thurs") == 3
    with pytest.raises(ValueError):
        weekday_from_name("funday")


def test_month_names():
    assert month_from_name("January") == 1
    assert month_from_name("sept") == 9
    assert month_from_name("Dec.") == 12
