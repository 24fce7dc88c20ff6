import datetime as dt

from datewise import format_date, humanize

WED = dt.date(2024, 3, 13)


def test_format_default():
    assert format_date(dt.date(2024, 3, 9)) == "2024-03-09"


def test_format_tokens():
    d = dt.date(2024, 3, 9)
    assert format_date(d, "dddd D MMMM YYYY") == "Saturday 9 March 2024"
    assert format_date(d, "ddd, DD MMM YY") == "Sat, 09 Mar 24"
    assert format_date(d, "M/D/YYYY") == "3/9/2024"


def test_format_time_and_literals():
    t = dt.datetime(2024, 3, 9, 7, 4, 5)
    assert format_date(t, "YYYY-MM-DD[T]HH:mm:ss") == "2024-03-09T07:04:05"
    assert format_date(t, "[Today is] dddd") == "Today is Saturday"


def test_humanize_near():
    assert humanize(WED, WED) == "today"
    assert humanize(dt.date(2024, 3, 12), WED) == "yesterday"
    assert humanize(dt.date(2024, 3, 14), WED) == "tomorrow"
    assert humanize(dt.date(2024, 3, 10), WED) == "3 days ago"
    assert humanize(dt.date(2024, 3, 18), WED) == "in 5 days"


def test_humanize_far():
    assert humanize(dt.date(2024, 2, 28), WED) == "2 weeks ago"
    assert humanize(dt.date(2024, 6, 1), WED) == "in 2 months"
    assert humanize(dt.date(2021, 1, 1), WED) == "3 years ago"
    assert humanize(dt.datetime(2024, 3, 16, 9, 0), WED) == "in 3 days"
