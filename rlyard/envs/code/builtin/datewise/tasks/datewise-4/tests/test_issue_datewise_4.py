import datetime as dt

import pytest

from datewise import WEEKDAYS, parse, parse_relative

MONDAY = dt.date(2024, 3, 11)


def test_next_same_weekday_is_a_week_later():
    assert parse_relative("next monday", MONDAY) == dt.date(2024, 3, 18)


def test_last_same_weekday_is_a_week_earlier():
    assert parse_relative("last monday", MONDAY) == dt.date(2024, 3, 4)


@pytest.mark.parametrize("offset", range(7))
def test_never_returns_reference_day(offset):
    today = MONDAY + dt.timedelta(days=offset)
    for name in WEEKDAYS:
        nxt = parse_relative(f"next {name}", today)
        last = parse_relative(f"last {name}", today)
        assert 1 <= (nxt - today).days <= 7
        assert 1 <= (today - last).days <= 7
        assert WEEKDAYS[nxt.weekday()] == name
        assert WEEKDAYS[last.weekday()] == name


def test_parse_dispatch_same_weekday():
    sunday = dt.date(2024, 3, 17)
    assert parse("next sun", sunday) == dt.date(2024, 3, 24)
    assert parse("Last Sunday", sunday) == dt.date(2024, 3, 10)
