from lrucache import LRUCache


def test_peek_does_not_update_recency():
    c = LRUCache(maxsize=2)
    c["a"] = 1
    c["b"] = 2
    assert c.peek("a") == 1
    c["c"] = 3
    assert c.keys() == ["b", "c"]


def test_peek_does_not_count_hits_or_misses():
    c = LRUCache(maxsize=4)
    c["a"] = 1
    c.peek("a")
    c.peek("missing")
    s = c.stats()
    assert (s.hits, s.misses) == (0, 0)


def test_get_still_counts_after_peek():
    c = LRUCache(maxsize=4)
    c["a"] = 1
    c.peek("a")
    c.get("a")
    c.get("nope")
    s = c.stats()
    assert (s.hits, s.misses) == (1, 1)
    assert c.keys() == ["a"]
