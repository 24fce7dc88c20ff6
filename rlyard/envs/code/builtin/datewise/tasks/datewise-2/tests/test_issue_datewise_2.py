import datetime as dt

from datewise import humanize

TODAY = dt.date(2024, 3, 13)


def test_one_week_is_singular():
    assert humanize(dt.date(2024, 3, 6), TODAY) == "1 week ago"
    assert humanize(dt.date(2024, 3, 22), TODAY) == "in 1 week"


def test_one_month_is_singular():
    assert humanize(dt.date(2024, 4, 20), TODAY) == "in 1 month"
    assert humanize(dt.date(2024, 2, 1), TODAY) == "1 month ago"


def test_one_year_is_singular():
    assert humanize(dt.date(2023, 1, 1), TODAY) == "1 year ago"
    assert humanize(dt.date(2025, 3, 13), TODAY) == "in 1 year"


def test_plural_still_plural():
    assert humanize(dt.date(2024, 2, 28), TODAY) == "2 weeks ago"
    assert humanize(dt.date(2026, 6, 1), TODAY) == "in 2 years"
