import math

import pytest

from intervals import Interval


def test_default_half_open():
    iv = Interval(1, 3)
    assert (iv.lo_closed, iv.hi_closed) == (True, False)
    assert 1 in iv
    assert 2.5 in iv
    assert 0.5 not in iv
    assert 7 not in iv


def test_open_and_closed_lower_end():
    assert 1 not in Interval.open(1, 3)
    assert 1 in Interval.closed(1, 3)
    assert 3 in Interval.closed(1, 3)


def test_str():
    assert str(Interval(1, 3)) == "[1, 3)"
    assert str(Interval.open(0.5, 2)) == "(0.5, 2)"
    assert str(Interval(-math.inf, 0, True, True)) == "(-inf, 0]"
    assert str(Interval(5, 1)) == "∅"


def test_infinite_ends_are_open():
    iv = Interval(-math.inf, math.inf, True, True)
    assert (iv.lo_closed, iv.hi_closed) == (False, False)
    assert 1e300 in iv


def test_nan_rejected():
    with pytest.raises(ValueError):
        Interval(math.nan, 1)


def test_empty_and_length():
    assert Interval(3, 1).is_empty
    assert Interval.open(2, 2).is_empty
    assert Interval(2, 2).is_empty
    assert not Interval(1, 2).is_empty
    assert Interval(1, 4).length == 3
    assert Interval(4, 1).length == 0


def test_intersection_and_overlaps_interior():
    a, b = Interval(0, 5), Interval(3, 8)
    assert a.intersection(b) == Interval(3, 5)
    assert a.overlaps(b)
    assert not Interval(0, 1).overlaps(Interval(2, 3))
    assert Interval(0, 1).intersection(Interval(2, 3)).is_empty


def test_hull():
    assert Interval(0, 2).hull(Interval(5, 6, False, True)) == Interval(0, 6, True, True)
    assert Interval.open(0, 2).hull(Interval(0, 1)) == Interval(0, 2, True, False)
