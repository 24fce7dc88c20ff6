from intervals import Interval, IntervalSet


def test_point_is_not_empty():
    p = Interval.point(3)
    assert not p.is_empty
    assert 3 in p
    assert 3.0001 not in p
    assert p.length == 0
    assert str(p) == "[3, 3]"


def test_closed_equal_ends_not_empty():
    assert not Interval(2, 2, True, True).is_empty


def test_degenerate_non_closed_are_empty():
    assert Interval(3, 3).is_empty
    assert Interval(3, 3, False, True).is_empty
    assert Interval.open(3, 3).is_empty


def test_point_in_set():
    s = IntervalSet([Interval.point(3), (5, 6)])
    assert len(s) == 2
    assert 3 in s
    assert str(s) == "[3, 3] ∪ [5, 6)"
