"""A memoizing decorator built on LRUCache."""

from __future__ import annotations

import functools
import time
from typing import Any, Callable, Hashable

from .cache import _MISSING, LRUCache

_KWD_MARK = object()


def make_key(args: tuple, kwargs: dict, typed: bool = False) -> Hashable:
    """Build a hashable cache key from call arguments.

    Keyword arguments are order-insensitive: ``f(a=1, b=2)`` and ``f(b=2, a=1)``
    share an entry.  With ``typed=True`` arguments of different types
    (``1`` and ``1.0``) get separate entries, positional and keyword alike.
    """
    items = tuple(sorted(kwargs.items()))
    key: tuple = args
    if items:
        key += (_KWD_MARK,) + items
    if typed:
        key += tuple(type(v) for v in args)
        key += tuple(type(v) for _, v in items)
    return key


def lru_cache(
    maxsize: int | None | Callable = 128,
    ttl: float | None = None,
    *,
    typed: bool = False,
    sliding: bool = False,
    clock: Callable[[], float] = time.monotonic,
):
    """Memoize a function in an :class:`LRUCache`.

    Usable bare (``@lru_cache``) or with arguments (``@lru_cache(maxsize=32,
    ttl=60)``).  The wrapper gets ``cache`` (the LRUCache), ``cache_info()``
    (its stats) and ``cache_clear()`` (drop entries and reset counters).
    """
    if callable(maxsize):
        return lru_cache()(maxsize)

    def decorating(func: Callable) -> Callable:
        cache = LRUCache(maxsize, ttl, sliding=sliding, clock=clock)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            key = make_key(args, kwargs, typed)
            value = cache.get(key, _MISSING)
            if value is _MISSING:
                value = func(*args, **kwargs)
                cache.put(key, value)
            return value

        def cache_clear() -> None:
            cache.clear()
            cache.reset_stats()

        wrapper.cache = cache
        wrapper.cache_info = cache.stats
        wrapper.cache_clear = cache_clear
        return wrapper

    return decorating
