"""Sets of disjoint intervals."""

from __future__ import annotations

from typing import Iterable, Iterator, Union

from .interval import INF, Interval

IntervalLike = Union[Interval, tuple]


def _coerce(x: IntervalLike) -> Interval:
    if isinstance(x, Interval):
        return x
    if isinstance(x, tuple) and len(x) in (2, 4):
        return Interval(*x)
    raise TypeError(f"expected an Interval or a (lo, hi[, lo_closed, hi_closed]) tuple, got {x!r}")


def _subtract(cur: Interval, iv: Interval) -> list[Interval]:
    """``cur`` minus ``iv``: zero, one or two pieces."""
    if not cur.overlaps(iv):
        return [cur]
    left = cur.intersection(Interval(-INF, iv.lo, False, iv.lo_closed))
    right = cur.intersection(Interval(iv.hi, INF, iv.hi_closed, False))
    return [p for p in (left, right) if not p.is_empty]


class IntervalSet:
    """A union of intervals, kept as a sorted list of disjoint, non-touching intervals.

    Tuples are accepted wherever an interval is: ``(1, 3)`` is ``[1, 3)``,
    ``(1, 3, False, True)`` is ``(1, 3]``.  Sets compare equal when they cover
    the same points.
    """

    def __init__(self, intervals: Iterable[IntervalLike] = ()) -> None:
        self._items: list[Interval] = []
        for iv in intervals:
            self.add(iv)

    def copy(self) -> "IntervalSet":
        new = IntervalSet()
        new._items = list(self._items)
        return new

    # -- mutation ------------------------------------------------------------------
    def add(self, iv: IntervalLike) -> None:
        """Add an interval, merging it with every interval it overlaps or touches."""
        merged = _coerce(iv)
        if merged.is_empty:
            return
        keep = []
        for cur in self._items:
            if cur.touches(merged):
                merged = merged.hull(cur)
            else:
                keep.append(cur)
        keep.append(merged)
        keep.sort(key=Interval.sort_key)
        self._items = keep

    def remove(self, iv: IntervalLike) -> None:
        """Remove every point of ``iv`` from the set."""
        iv = _coerce(iv)
        if iv.is_empty:
            return
        out: list[Interval] = []
        for cur in self._items:
            out.extend(_subtract(cur, iv))
        self._items = out

    # -- set algebra ---------------------------------------------------------------
    def union(self, other: "IntervalSet | Iterable[IntervalLike]") -> "IntervalSet":
        new = self.copy()
        for iv in other:
            new.add(iv)
        return new

    def intersection(self, other: "IntervalSet") -> "IntervalSet":
        a, b = self._items, list(other)
        out = IntervalSet()
        i = j = 0
        while i < len(a) and j < len(b):
            common = a[i].intersection(b[j])
            if not common.is_empty:
                out._items.append(common)
            if (a[i].hi, a[i].hi_closed) < (b[j].hi, b[j].hi_closed):
                i += 1
            else:
                j += 1
        return out

    def difference(self, other: "IntervalSet | Iterable[IntervalLike]") -> "IntervalSet":
        new = self.copy()
        for iv in other:
            new.remove(iv)
        return new

    def complement(self, within: IntervalLike | None = None) -> "IntervalSet":
        """Every point of ``within`` (default: the whole real line) not in this set."""
        bounds = Interval(-INF, INF, False, False) if within is None else _coerce(within)
        return IntervalSet([bounds]).difference(self)

    __or__ = union
    __and__ = intersection
    __sub__ = difference

    def __invert__(self) -> "IntervalSet":
        return self.complement()

    # -- queries -------------------------------------------------------------------
    def __contains__(self, x: float) -> bool:
        return any(x in iv for iv in self._items)

    @property
    def total_length(self) -> float:
        return sum(iv.length for iv in self._items)

    def __iter__(self) -> Iterator[Interval]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __bool__(self) -> bool:
        return bool(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, IntervalSet):
            return NotImplemented
        return self._items == other._items

    def __str__(self) -> str:
        return " ∪ ".join(str(iv) for iv in self._items) or "∅"

    def __repr__(self) -> str:
        return f"IntervalSet({self})"
