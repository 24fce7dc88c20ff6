from lrucache import lru_cache


def test_none_result_is_cached():
    calls = []

    @lru_cache(maxsize=4)
    def f(x):
        calls.append(x)
        return None

    assert f(1) is None
    assert f(1) is None
    assert f(1) is None
    assert calls == [1]


def test_none_result_cached_for_keyword_calls_until_clear():
    calls = []

    @lru_cache(maxsize=4)
    def find(name, default=None):
        calls.append(name)
        return default

    find("k", default=None)
    find("k", default=None)
    assert calls == ["k"]
    find.cache_clear()
    find("k", default=None)
    find("k", default=None)
    assert calls == ["k", "k"]


def test_mixed_none_and_values():
    calls = []

    @lru_cache(maxsize=8)
    def maybe(x):
        calls.append(x)
        return x if x % 2 else None

    for _ in range(2):
        assert [maybe(i) for i in range(4)] == [None, 1, None, 3]
    assert calls == [0, 1, 2, 3]
