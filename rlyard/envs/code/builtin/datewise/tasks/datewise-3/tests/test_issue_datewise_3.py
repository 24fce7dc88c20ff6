import datetime as dt

import pytest

from datewise import add_months, add_years, parse_relative


def test_landing_in_december():
    assert add_months(dt.date(2024, 11, 15), 1) == dt.date(2024, 12, 15)
    assert add_months(dt.date(2024, 1, 31), 11) == dt.date(2024, 12, 31)


def test_negative_across_year_boundary():
    assert add_months(dt.date(2024, 1, 15), -1) == dt.date(2023, 12, 15)
    assert add_months(dt.date(2024, 3, 31), -13) == dt.date(2023, 2, 28)
    assert add_months(dt.date(2024, 2, 10), -26) == dt.date(2021, 12, 10)


@pytest.mark.parametrize("n, expected", [
    (12, dt.date(2025, 6, 30)),
    (24, dt.date(2026, 6, 30)),
    (-12, dt.date(2023, 6, 30)),
    (7, dt.date(2025, 1, 30)),
    (18, dt.date(2025, 12, 30)),
])
def test_year_rollover(n, expected):
    assert add_months(dt.date(2024, 6, 30), n) == expected


def test_add_years_from_december():
    assert add_years(dt.date(2023, 12, 1), 1) == dt.date(2024, 12, 1)


def test_relative_month_phrase_in_january():
    assert parse_relative("1 month ago", dt.date(2024, 1, 20)) == dt.date(2023, 12, 20)
