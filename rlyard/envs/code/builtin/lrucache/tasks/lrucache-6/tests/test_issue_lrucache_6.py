from lrucache import LRUCache, lru_cache


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_get_extends_lifetime():
    clock = Clock()
    c = LRUCache(maxsize=10, ttl=10, sliding=True, clock=clock)
    assert c.sliding is True
    c["s"] = "data"
    for t in (8.0, 16.0, 24.0, 33.0):
        clock.t = t
        assert c.get("s") == "data"
    clock.t = 43.0
    assert c.get("s") is None
    assert c.stats().expirations == 1


def test_peek_and_contains_do_not_extend():
    clock = Clock()
    c = LRUCache(ttl=10, sliding=True, clock=clock)
    c["s"] = 1
    clock.t = 9.0
    assert c.peek("s") == 1
    assert "s" in c
    clock.t = 10.5
    assert "s" not in c


def test_per_entry_ttl_is_used_when_sliding():
    clock = Clock()
    c = LRUCache(ttl=100, sliding=True, clock=clock)
    c.put("short", 1, ttl=2)
    c.put("default_ttl", 2)
    c2 = LRUCache(sliding=True, clock=clock)
    c2["no_ttl"] = 3
    clock.t = 1.5
    assert c["short"] == 1
    clock.t = 3.0
    assert c.get("short") == 1
    clock.t = 5.5
    assert c.get("short") is None
    clock.t = 1000.0
    assert c2.get("no_ttl") == 3
    assert c.get("default_ttl") is None


def test_default_is_not_sliding():
    clock = Clock()
    c = LRUCache(ttl=10, clock=clock)
    assert c.sliding is False
    c["s"] = 1
    clock.t = 8.0
    assert c.get("s") == 1
    clock.t = 12.0
    assert c.get("s") is None


def test_decorator_sliding():
    clock = Clock()
    calls = []

    @lru_cache(maxsize=4, ttl=5, sliding=True, clock=clock)
    def load(k):
        calls.append(k)
        return k.upper()

    for t in (0.0, 4.0, 8.0, 12.0):
        clock.t = t
        assert load("a") == "A"
    assert calls == ["a"]
    assert load.cache.sliding is True
    clock.t = 20.0
    load("a")
    assert calls == ["a", "a"]
