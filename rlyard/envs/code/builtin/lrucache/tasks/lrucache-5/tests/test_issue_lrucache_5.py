import pytest

from lrucache import LRUCache, lru_cache


def test_unbounded_cache_never_evicts():
    c = LRUCache(maxsize=None)
    for i in range(5000):
        c[i] = i
    assert len(c) == 5000
    s = c.stats()
    assert s.evictions == 0
    assert s.maxsize is None
    assert c.maxsize is None
    assert c.keys()[:3] == [0, 1, 2]


def test_unbounded_cache_still_expires():
    now = [0.0]
    c = LRUCache(maxsize=None, ttl=10, clock=lambda: now[0])
    c["a"] = 1
    now[0] = 11.0
    assert c.get("a") is None
    assert c.stats().expirations == 1


def test_resize_to_and_from_unbounded():
    c = LRUCache(maxsize=2)
    c.resize(None)
    for k in "abcdef":
        c[k] = k
    assert c.keys() == list("abcdef")
    c.get("a")
    c.resize(3)
    assert c.keys() == ["e", "f", "a"]
    assert c.stats().evictions == 3
    assert c.maxsize == 3


def test_decorator_unbounded():
    calls = []

    @lru_cache(maxsize=None)
    def sq(x):
        calls.append(x)
        return x * x

    for _ in range(2):
        for i in range(300):
            sq(i)
    assert len(calls) == 300
    info = sq.cache_info()
    assert info.maxsize is None
    assert (info.hits, info.misses, info.currsize) == (300, 300, 300)

    @lru_cache(None)
    def ident(x):
        return x

    assert ident(5) == 5
    assert ident.cache_info().maxsize is None


def test_still_rejects_bad_sizes():
    with pytest.raises(ValueError):
        LRUCache(maxsize=-3)
    with pytest.raises((TypeError, ValueError)):
        LRUCache(maxsize="10")
    with pytest.raises((TypeError, ValueError)):
        lru_cache(maxsize=2.5)(lambda x: x)
