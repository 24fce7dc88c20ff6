from intervals import Interval, IntervalSet


def test_adjacent_half_open_merge():
    s = IntervalSet([(1, 3), (3, 5)])
    assert list(s) == [Interval(1, 5)]
    assert s == IntervalSet([(1, 5)])


def test_closed_end_meets_open_start():
    s = IntervalSet([Interval.closed(0, 2), Interval.open(2, 4)])
    assert list(s) == [Interval(0, 4, True, False)]


def test_gap_of_one_point_not_merged():
    s = IntervalSet([(1, 3), Interval.open(3, 5)])
    assert len(s) == 2
    assert 3 not in s


def test_touches():
    assert Interval(1, 3).touches(Interval(3, 5))
    assert Interval(3, 5).touches(Interval(1, 3))
    assert not Interval(1, 3).touches(Interval.open(3, 5))
    assert Interval(1, 3, True, True).touches(Interval.open(3, 5))
    assert not Interval(1, 3).touches(Interval(4, 5))


def test_union_chain_of_adjacent():
    s = IntervalSet([(0, 1)]) | IntervalSet([(2, 3), (1, 2)])
    assert list(s) == [Interval(0, 3)]
    assert s.total_length == 3
