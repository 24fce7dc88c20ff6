from intervals import Interval, IntervalSet


def test_remove_closed_interval_removes_ends():
    s = IntervalSet([(0, 10)])
    s.remove(Interval.closed(2, 3))
    assert list(s) == [Interval(0, 2, True, False), Interval(3, 10, False, False)]
    assert 2 not in s and 3 not in s


def test_remove_open_interval_keeps_ends():
    s = IntervalSet([(0, 10)])
    s.remove(Interval.open(2, 3))
    assert list(s) == [Interval(0, 2, True, True), Interval(3, 10, True, False)]
    assert 2 in s and 3 in s


def test_remove_half_open():
    s = IntervalSet([(0, 10)])
    s.remove((2, 3))
    assert str(s) == "[0, 2) ∪ [3, 10)"


def test_remove_point_and_prefix():
    s = IntervalSet([Interval.closed(0, 4)])
    s.remove(Interval.point(1))
    assert str(s) == "[0, 1) ∪ (1, 4]"
    s.remove(Interval(0, 1, True, True))
    assert str(s) == "(1, 4]"
    s.remove(Interval.open(3, 10))
    assert str(s) == "(1, 3]"
