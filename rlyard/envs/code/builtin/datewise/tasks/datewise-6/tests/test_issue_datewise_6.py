import datetime as dt

import pytest

from datewise import DateParseError, format_date, parse, parse_iso


@pytest.mark.parametrize("text, expected", [
    ("2024-W10-6", dt.date(2024, 3, 9)),
    ("2024W106", dt.date(2024, 3, 9)),
    ("2024-W10", dt.date(2024, 3, 4)),
    ("2020-W53-7", dt.date(2021, 1, 3)),
    ("2020-W01-1", dt.date(2019, 12, 30)),
    ("2026-W01-4", dt.date(2026, 1, 1)),
])
def test_week_dates(text, expected):
    assert parse_iso(text) == expected


@pytest.mark.parametrize("text, expected", [
    ("2024-069", dt.date(2024, 3, 9)),
    ("2024-001", dt.date(2024, 1, 1)),
    ("2024-366", dt.date(2024, 12, 31)),
    ("2023-365", dt.date(2023, 12, 31)),
    ("20240309", dt.date(2024, 3, 9)),
])
def test_ordinal_and_basic_dates(text, expected):
    assert parse_iso(text) == expected
    assert parse(text) == expected


@pytest.mark.parametrize("bad", ["2021-W53-1", "2024-W00-1", "2023-366", "2024-000", "20230229", "2024-W10-8"])
def test_invalid_week_and_ordinal_dates(bad):
    with pytest.raises(DateParseError):
        parse_iso(bad)


def test_format_iso_week_tokens():
    assert format_date(dt.date(2021, 1, 3), "GGGG-[W]WW-E") == "2020-W53-7"
    assert format_date(dt.date(2024, 3, 9), "GGGG-[W]WW-E") == "2024-W10-6"
    assert format_date(dt.date(2024, 3, 9), "YYYY-DDDD") == "2024-069"
    assert format_date(dt.date(2024, 12, 31), "YYYY-DDDD") == "2024-366"


def test_week_date_round_trip():
    d = dt.date(2019, 12, 30)
    for i in range(0, 800, 37):
        day = d + dt.timedelta(days=i)
        assert parse_iso(format_date(day, "GGGG-[W]WW-E")) == day
        assert parse_iso(format_date(day, "YYYY-DDDD")) == day
