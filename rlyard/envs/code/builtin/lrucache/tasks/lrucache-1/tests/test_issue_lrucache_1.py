from lrucache import LRUCache


def test_overwrite_moves_key_to_most_recent():
    c = LRUCache(maxsize=3)
    c["a"] = 1
    c["b"] = 2
    c["c"] = 3
    c["a"] = 10
    assert c.keys() == ["b", "c", "a"]


def test_overwritten_key_survives_eviction():
    c = LRUCache(maxsize=2)
    c["a"] = 1
    c["b"] = 2
    c.put("a", 10)
    c["c"] = 3
    assert c.keys() == ["a", "c"]
    assert c.peek("a") == 10
    assert "b" not in c


def test_get_or_set_then_overwrite_order():
    c = LRUCache(maxsize=2)
    c.get_or_set("x", lambda: 1)
    c.get_or_set("y", lambda: 2)
    c["x"] = 3
    c["z"] = 4
    assert "y" not in c
    assert c.keys() == ["x", "z"]
