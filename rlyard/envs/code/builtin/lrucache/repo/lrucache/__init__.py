"""lrucache: a least-recently-used cache with optional expiry, and a memoizing decorator."""

from .cache import CacheStats, LRUCache
from .decorator import lru_cache, make_key

__all__ = ["CacheStats", "LRUCache", "lru_cache", "make_key"]
__version__ = "1.2.0"
