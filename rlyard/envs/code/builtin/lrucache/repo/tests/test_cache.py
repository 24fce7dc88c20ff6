import pytest

from lrucache import CacheStats, LRUCache


class FakeClock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t

    def advance(self, dt):
        self.t += dt


def test_basic_get_put():
    c = LRUCache(maxsize=4)
    c.put("a", 1)
    c["b"] = 2
    assert c.get("a") == 1
    assert c["b"] == 2
    assert c.get("zzz") is None
    assert c.get("zzz", 7) == 7
    with pytest.raises(KeyError):
        c["zzz"]


def test_evicts_least_recently_used():
    c = LRUCache(maxsize=2)
    c["a"] = 1
    c["b"] = 2
    c.get("a")
    c["c"] = 3
    assert "b" not in c
    assert c.keys() == ["a", "c"]
    assert c.stats().evictions == 1


def test_peek_and_contains_return_values():
    c = LRUCache(maxsize=3)
    c["x"] = 10
    assert c.peek("x") == 10
    assert c.peek("y", "none") == "none"
    assert "x" in c
    assert "y" not in c


def test_pop_and_delete():
    c = LRUCache()
    c["a"] = 1
    c["b"] = 2
    assert c.pop("a") == 1
    assert c.pop("a", None) is None
    with pytest.raises(KeyError):
        c.pop("a")
    del c["b"]
    assert len(c) == 0
    with pytest.raises(KeyError):
        del c["b"]


def test_stats_counts_hits_and_misses():
    c = LRUCache(maxsize=10)
    c["a"] = 1
    c.get("a")
    c.get("a")
    c.get("b")
    s = c.stats()
    assert isinstance(s, CacheStats)
    assert (s.hits, s.misses, s.currsize, s.maxsize) == (2, 1, 1, 10)
    assert s.hit_rate == pytest.approx(2 / 3)
    c.reset_stats()
    assert c.stats().hits == 0


def test_ttl_expiry_on_get():
    clock = FakeClock()
    c = LRUCache(maxsize=10, ttl=5, clock=clock)
    c["a"] = 1
    clock.advance(4.9)
    assert c.get("a") == 1
    clock.advance(0.2)
    assert c.get("a") is None
    assert c.stats().expirations == 1


def test_per_entry_ttl():
    clock = FakeClock()
    c = LRUCache(ttl=100, clock=clock)
    c.put("short", 1, ttl=1)
    c.put("long", 2)
    clock.advance(2)
    assert c.get("short") is None
    assert c.get("long") == 2


def test_resize_shrinks():
    c = LRUCache(maxsize=5)
    for k in "abcde":
        c[k] = k
    c.resize(2)
    assert c.keys() == ["d", "e"]
    assert c.maxsize == 2


def test_invalid_arguments():
    with pytest.raises(ValueError):
        LRUCache(maxsize=-1)
    with pytest.raises(ValueError):
        LRUCache(ttl=0)


def test_get_or_set():
    c = LRUCache()
    calls = []
    assert c.get_or_set("k", lambda: calls.append(1) or 42) == 42
    assert c.get_or_set("k", lambda: calls.append(1) or 43) == 42
    assert calls == [1]
