"""The LRUCache container."""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Iterator

_MISSING: Any = object()


@dataclass(frozen=True)
class CacheStats:
    """A snapshot of a cache's counters."""

    hits: int
    misses: int
    evictions: int
    expirations: int
    currsize: int
    maxsize: int | None

    @property
    def hit_rate(self) -> float:
        total = self.hits + self.misses
        return self.hits / total if total else 0.0


class _Entry:
    __slots__ = ("value", "ttl", "expires_at")

    def __init__(self, value: Any, ttl: float | None, expires_at: float | None) -> None:
        self.value = value
        self.ttl = ttl
        self.expires_at = expires_at


def _check_maxsize(maxsize: int | None) -> int | None:
    if maxsize is None:
        return None
    if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 0:
        raise ValueError(f"maxsize must be a non-negative int or None, got {maxsize!r}")
    return maxsize


def _check_ttl(ttl: float | None) -> float | None:
    if ttl is not None and not ttl > 0:
        raise ValueError(f"ttl must be a positive number of seconds or None, got {ttl!r}")
    return ttl


class LRUCache:
    """A mapping that keeps at most ``maxsize`` entries, evicting the least recently used.

    ``maxsize=None`` means unbounded.  ``ttl`` (seconds) is the default lifetime
    of an entry; ``put(..., ttl=...)`` overrides it per entry.  With
    ``sliding=True`` a successful ``get`` restarts the entry's lifetime.
    ``clock`` returns the current time in seconds (injectable for tests).

    Only ``get`` / ``[]`` count as uses: they update recency and the hit / miss
    counters.  ``peek`` and ``in`` look without touching anything.
    """

    def __init__(
        self,
        maxsize: int | None = 128,
        ttl: float | None = None,
        *,
        sliding: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._maxsize = _check_maxsize(maxsize)
        self.ttl = _check_ttl(ttl)
        self.sliding = sliding
        self._clock = clock
        self._data: OrderedDict[Hashable, _Entry] = OrderedDict()
        self._hits = self._misses = self._evictions = self._expirations = 0

    # -- internals -------------------------------------------------------
    @staticmethod
    def _is_expired(entry: _Entry, now: float) -> bool:
        return entry.expires_at is not None and now >= entry.expires_at

    def _lookup(self, key: Hashable) -> _Entry | None:
        """The live entry for ``key``, dropping it first if it has expired."""
        entry = self._data.get(key)
        if entry is None:
            return None
        if self._is_expired(entry, self._clock()):
            del self._data[key]
            self._expirations += 1
            return None
        return entry

    def _purge_expired(self) -> None:
        now = self._clock()
        dead = [k for k, e in self._data.items() if self._is_expired(e, now)]
        for k in dead:
            del self._data[k]
        self._expirations += len(dead)

    def _evict_to(self, size: int) -> None:
        while len(self._data) > size:
            self._data.popitem(last=False)
            self._evictions += 1

    def _use(self, key: Hashable, entry: _Entry) -> Any:
        self._hits += 1
        self._data.move_to_end(key)
        if self.sliding and entry.ttl is not None:
            entry.expires_at = self._clock() + entry.ttl
        return entry.value

    # -- public API -------------------------------------------------------
    @property
    def maxsize(self) -> int | None:
        return self._maxsize

    def get(self, key: Hashable, default: Any = None) -> Any:
        entry = self._lookup(key)
        if entry is None:
            self._misses += 1
            return default
        return self._use(key, entry)

    def peek(self, key: Hashable, default: Any = None) -> Any:
        """Like ``get`` but without updating recency or statistics."""
        entry = self._lookup(key)
        return default if entry is None else entry.value

    def put(self, key: Hashable, value: Any, ttl: float | None = None) -> None:
        ttl = self.ttl if ttl is None else _check_ttl(ttl)
        expires_at = None if ttl is None else self._clock() + ttl
        self._data[key] = _Entry(value, ttl, expires_at)
        if self._maxsize is not None and len(self._data) > self._maxsize:
            self._purge_expired()
            self._evict_to(self._maxsize)

    def get_or_set(self, key: Hashable, factory: Callable[[], Any], ttl: float | None = None) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            value = factory()
            self.put(key, value, ttl)
        return value

    def pop(self, key: Hashable, default: Any = _MISSING) -> Any:
        entry = self._lookup(key)
        if entry is None:
            if default is _MISSING:
                raise KeyError(key)
            return default
        del self._data[key]
        return entry.value

    def resize(self, maxsize: int | None) -> None:
        """Change the capacity, evicting least recently used entries if needed."""
        self._maxsize = _check_maxsize(maxsize)
        if self._maxsize is not None and len(self._data) > self._maxsize:
            self._purge_expired()
            self._evict_to(self._maxsize)

    def clear(self) -> None:
        self._data.clear()

    def reset_stats(self) -> None:
        self._hits = self._misses = self._evictions = self._expirations = 0

    def stats(self) -> CacheStats:
        return CacheStats(
            hits=self._hits,
            misses=self._misses,
            evictions=self._evictions,
            expirations=self._expirations,
            currsize=len(self),
            maxsize=self._maxsize,
        )

    def keys(self) -> list[Hashable]:
        """Live keys, least recently used first."""
        self._purge_expired()
        return list(self._data)

    def items(self) -> list[tuple[Hashable, Any]]:
        self._purge_expired()
        return [(k, e.value) for k, e in self._data.items()]

    # -- mapping protocol --------------------------------------------------
    def __getitem__(self, key: Hashable) -> Any:
        value = self.get(key, _MISSING)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: Hashable, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: Hashable) -> None:
        self.pop(key)

    def __contains__(self, key: Hashable) -> bool:
        return self._lookup(key) is not None

    def __len__(self) -> int:
        self._purge_expired()
        return len(self._data)

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self.keys())

    def __repr__(self) -> str:
        return f"LRUCache(maxsize={self._maxsize!r}, ttl={self.ttl!r}, currsize={len(self)})"
