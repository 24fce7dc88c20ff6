"""intervals: intervals on the real line and sets of disjoint intervals."""

from .interval import Interval
from .intervalset import IntervalSet

__all__ = ["Interval", "IntervalSet"]
__version__ = "0.2.0"
