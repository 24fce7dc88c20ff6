from lrucache import LRUCache


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def make():
    clock = Clock()
    c = LRUCache(maxsize=10, ttl=5, clock=clock)
    c["a"] = 1
    c.put("b", 2, ttl=60)
    c["c"] = 3
    clock.t = 10.0
    return c, clock


def test_contains_ignores_expired():
    c, _ = make()
    assert "a" not in c
    assert "b" in c


def test_len_and_currsize_count_live_entries():
    c, _ = make()
    assert len(c) == 1
    assert c.stats().currsize == 1


def test_keys_items_iteration_skip_expired():
    c, _ = make()
    assert c.keys() == ["b"]
    assert c.items() == [("b", 2)]
    assert list(c) == ["b"]


def test_expirations_counted_once():
    c, clock = make()
    len(c)
    "a" in c
    c.keys()
    assert c.stats().expirations == 2
    clock.t = 100.0
    assert len(c) == 0
    assert c.stats().expirations == 3
