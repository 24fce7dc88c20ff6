"""A single interval with open or closed ends."""

from __future__ import annotations

import math
from dataclasses import dataclass

INF = math.inf


def _fmt(x: float) -> str:
    if x == INF:
        return "inf"
    if x == -INF:
        return "-inf"
    return repr(x)


@dataclass(frozen=True)
class Interval:
    """The set of numbers between ``lo`` and ``hi``.

    By default an interval is half-open, ``[lo, hi)``: it contains ``lo`` but
    not ``hi``.  ``lo_closed`` / ``hi_closed`` choose each end.  Infinite ends
    are always open.  An interval with ``lo > hi``, or ``lo == hi`` without
    both ends closed, is empty.
    """

    lo: float
    hi: float
    lo_closed: bool = True
    hi_closed: bool = False

    def __post_init__(self) -> None:
        if math.isnan(self.lo) or math.isnan(self.hi):
            raise ValueError("interval bounds must not be NaN")
        if self.lo == -INF and self.lo_closed:
            object.__setattr__(self, "lo_closed", False)
        if self.hi == INF and self.hi_closed:
            object.__setattr__(self, "hi_closed", False)

    # -- constructors -----------------------------------------------------------
    @classmethod
    def closed(cls, lo: float, hi: float) -> "Interval":
        return cls(lo, hi, True, True)

    @classmethod
    def open(cls, lo: float, hi: float) -> "Interval":
        return cls(lo, hi, False, False)

    @classmethod
    def point(cls, x: float) -> "Interval":
        return cls(x, x, True, True)

    # -- properties ---------------------------------------------------------------
    @property
    def is_empty(self) -> bool:
        return self.lo > self.hi or (self.lo == self.hi and not (self.lo_closed and self.hi_closed))

    @property
    def length(self) -> float:
        return 0 if self.is_empty else self.hi - self.lo

    def __contains__(self, x: float) -> bool:
        if self.is_empty:
            return False
        above_lo = x > self.lo or (self.lo_closed and x == self.lo)
        below_hi = x < self.hi or (self.hi_closed and x == self.hi)
        return above_lo and below_hi

    # -- relations ------------------------------------------------------------------
    def intersection(self, other: "Interval") -> "Interval":
        """The common part (possibly empty)."""
        if self.lo > other.lo:
            lo, lo_closed = self.lo, self.lo_closed
        elif self.lo < other.lo:
            lo, lo_closed = other.lo, other.lo_closed
        else:
            lo, lo_closed = self.lo, self.lo_closed and other.lo_closed
        if self.hi < other.hi:
            hi, hi_closed = self.hi, self.hi_closed
        elif self.hi > other.hi:
            hi, hi_closed = other.hi, other.hi_closed
        else:
            hi, hi_closed = self.hi, self.hi_closed and other.hi_closed
        return Interval(lo, hi, lo_closed, hi_closed)

    def overlaps(self, other: "Interval") -> bool:
        """True if the two intervals share at least one point."""
        return not self.intersection(other).is_empty

    def touches(self, other: "Interval") -> bool:
        """True if the union of the two is a single interval."""
        return self.overlaps(other)

    def hull(self, other: "Interval") -> "Interval":
        """The smallest interval containing both."""
        if self.lo < other.lo:
            lo, lo_closed = self.lo, self.lo_closed
        elif self.lo > other.lo:
            lo, lo_closed = other.lo, other.lo_closed
        else:
            lo, lo_closed = self.lo, self.lo_closed or other.lo_closed
        if self.hi > other.hi:
            hi, hi_closed = self.hi, self.hi_closed
        elif self.hi < other.hi:
            hi, hi_closed = other.hi, other.hi_closed
        else:
            hi, hi_closed = self.hi, self.hi_closed or other.hi_closed
        return Interval(lo, hi, lo_closed, hi_closed)

    def sort_key(self) -> tuple:
        """Orders intervals by where they start (a closed start comes first)."""
        return (self.lo, not self.lo_closed, self.hi, self.hi_closed)

    def __str__(self) -> str:
        if self.is_empty:
            return "∅"
        return f"{'[' if self.lo_closed else '('}{_fmt(self.lo)}, {_fmt(self.hi)}{']' if self.hi_closed else ')'}"
