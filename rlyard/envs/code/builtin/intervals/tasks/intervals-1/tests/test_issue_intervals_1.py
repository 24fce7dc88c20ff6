import math

from intervals import Interval, IntervalSet


def test_open_upper_end_excluded():
    assert 3 not in Interval(1, 3)
    assert 3 not in Interval.open(1, 3)
    assert 2.999 in Interval(1, 3)


def test_closed_upper_end_included():
    assert 3 in Interval.closed(1, 3)
    assert 3 in Interval(1, 3, False, True)


def test_set_membership_at_upper_ends():
    s = IntervalSet([(1, 3), (5, 7, True, True)])
    assert 3 not in s
    assert 7 in s
    assert 7.0001 not in s


def test_infinite_upper_end():
    assert math.inf not in Interval(0, math.inf)
