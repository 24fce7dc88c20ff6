import pytest

from intervals import Interval, IntervalSet


def test_overlapping_intervals_merge():
    s = IntervalSet([(1, 4), (2, 6)])
    assert list(s) == [Interval(1, 6)]


def test_sorted_and_disjoint():
    s = IntervalSet([(10, 12), (0, 1), (5, 6)])
    assert [iv.lo for iv in s] == [0, 5, 10]
    assert len(s) == 3


def test_add_bridging_interval():
    s = IntervalSet([(0, 2), (4, 6), (8, 10)])
    s.add((1, 9))
    assert list(s) == [Interval(0, 10)]


def test_membership():
    s = IntervalSet([(0, 2), (4, 6)])
    assert 1 in s
    assert 4 in s
    assert 3 not in s
    assert 7 not in s


def test_union_and_total_length():
    s = IntervalSet([(0, 2)]) | IntervalSet([(5, 7), (1, 3)])
    assert list(s) == [Interval(0, 3), Interval(5, 7)]
    assert s.total_length == 5


def test_intersection_interior():
    a = IntervalSet([(0, 4), (10, 12)])
    b = IntervalSet([(2, 11)])
    assert list(a & b) == [Interval(2, 4), Interval(10, 11)]


def test_remove_middle():
    s = IntervalSet([(0, 10)])
    s.remove((2, 3))
    assert 1 in s
    assert 2.5 not in s
    assert 4 in s
    assert len(s) == 2
    assert s.total_length == 9


def test_remove_everything():
    s = IntervalSet([(1, 2), (3, 4)])
    s.remove((0, 5))
    assert not s
    assert str(s) == "∅"


def test_equality_and_str():
    assert IntervalSet([(0, 1), (2, 3)]) == IntervalSet([(2, 3), (0, 1)])
    assert IntervalSet([(0, 1)]) != IntervalSet([(0, 2)])
    assert str(IntervalSet([(0, 1), (2, 3, False, True)])) == "[0, 1) ∪ (2, 3]"


def test_bad_input():
    with pytest.raises(TypeError):
        IntervalSet(["0-1"])
