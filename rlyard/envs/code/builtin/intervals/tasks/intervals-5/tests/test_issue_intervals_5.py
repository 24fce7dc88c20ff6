import math

from intervals import Interval, IntervalSet


def test_difference_method_and_operator():
    a = IntervalSet([(0, 10), (20, 30)])
    b = IntervalSet([(5, 25)])
    expected = IntervalSet([(0, 5), (25, 30)])
    assert a.difference(b) == expected
    assert a - b == expected
    assert a == IntervalSet([(0, 10), (20, 30)])
    assert b == IntervalSet([(5, 25)])
    assert a.difference([(0, 1), Interval.closed(9, 20)]) == IntervalSet([(1, 9), Interval.open(20, 30)])


def test_complement_within_bounds():
    busy = IntervalSet([(9, 10.5), (13, 14), Interval.closed(16, 17)])
    free = busy.complement((8, 18))
    assert str(free) == "[8, 9) ∪ [10.5, 13) ∪ [14, 16) ∪ (17, 18)"
    assert free.total_length == 6.5


def test_complement_flips_ends():
    s = IntervalSet([(1, 3), Interval.open(5, 6)])
    c = s.complement(Interval.closed(0, 10))
    assert list(c) == [Interval(0, 1, True, False), Interval(3, 5, True, True), Interval(6, 10, True, True)]


def test_complement_whole_line_and_invert():
    s = IntervalSet([Interval.closed(0, 1)])
    c = ~s
    assert list(c) == [Interval(-math.inf, 0, False, False), Interval(1, math.inf, False, False)]
    assert s.complement() == c
    assert ~c == s
    assert ~IntervalSet() == IntervalSet([Interval(-math.inf, math.inf)])
    assert not ~IntervalSet([Interval(-math.inf, math.inf)])


def test_complement_edge_cases():
    s = IntervalSet([(0, 5)])
    assert not s.complement((1, 4))
    assert s.complement((10, 20)) == IntervalSet([(10, 20)])
    assert IntervalSet().complement(Interval.open(2, 3)) == IntervalSet([Interval.open(2, 3)])
    assert s.complement((0, 5)) == IntervalSet()
