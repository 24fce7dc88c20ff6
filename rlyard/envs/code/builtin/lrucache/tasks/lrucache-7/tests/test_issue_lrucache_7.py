from lrucache import lru_cache, make_key


def test_keyword_order_shares_entry():
    calls = []

    @lru_cache(maxsize=16)
    def area(width, height):
        calls.append((width, height))
        return width * height

    assert area(width=2, height=3) == 6
    assert area(height=3, width=2) == 6
    assert calls == [(2, 3)]
    assert area.cache_info().currsize == 1


def test_make_key_order_insensitive():
    assert make_key((1,), {"a": 1, "b": 2}) == make_key((1,), {"b": 2, "a": 1})
    assert hash(make_key((), {"x": 1, "y": 2})) == hash(make_key((), {"y": 2, "x": 1}))
    assert make_key((1,), {"a": 1}) != make_key((1,), {"a": 2})


def test_typed_distinguishes_keyword_types():
    @lru_cache(maxsize=16, typed=True)
    def kind(x):
        return type(x).__name__

    assert kind(x=1) == "int"
    assert kind(x=1.0) == "float"
    assert kind(x=True) == "bool"
    assert kind.cache_info().currsize == 3


def test_make_key_typed_keywords():
    assert make_key((), {"x": 1}, typed=True) != make_key((), {"x": 1.0}, typed=True)
    assert make_key((), {"x": 1}, typed=False) == make_key((), {"x": 1.0}, typed=False)
    assert make_key((), {"b": 1, "a": 2.0}, typed=True) == make_key((), {"a": 2.0, "b": 1}, typed=True)
