from intervals import Interval, IntervalSet


def test_overlaps_at_shared_end_point():
    a, b = Interval.closed(0, 2), Interval.closed(2, 4)
    assert a.overlaps(b) and b.overlaps(a)
    assert not Interval(0, 2).overlaps(Interval(2, 4))
    assert not Interval.closed(0, 2).overlaps(Interval.open(2, 4))


def test_intersection_with_equal_bounds_is_symmetric():
    a, b = Interval(1, 3), Interval(1, 3, False, True)
    assert a.intersection(b) == Interval.open(1, 3)
    assert b.intersection(a) == Interval.open(1, 3)
    assert Interval.closed(1, 3).intersection(Interval.closed(1, 3)) == Interval.closed(1, 3)
    assert Interval(0, 5, True, True).intersection(Interval(2, 5)) == Interval(2, 5)


def test_set_intersection_keeps_single_points():
    a = IntervalSet([Interval.closed(0, 2), Interval.closed(5, 6)])
    b = IntervalSet([Interval.closed(2, 5)])
    assert list(a & b) == [Interval.point(2), Interval.point(5)]
    assert list(b & a) == [Interval.point(2), Interval.point(5)]


def test_set_intersection_equal_ends():
    a = IntervalSet([(0, 4)])
    b = IntervalSet([Interval(0, 4, False, True)])
    assert list(a & b) == [Interval.open(0, 4)]


def test_remove_interval_touching_at_point():
    s = IntervalSet([Interval.closed(0, 2)])
    s.remove(Interval.closed(2, 4))
    assert 2 not in s
    assert list(s) == [Interval(0, 2, True, False)]
