from lrucache import lru_cache


def test_memoizes():
    calls = []

    @lru_cache(maxsize=8)
    def square(x):
        calls.append(x)
        return x * x

    assert square(3) == 9
    assert square(3) == 9
    assert square(4) == 16
    assert calls == [3, 4]
    info = square.cache_info()
    assert (info.hits, info.misses, info.currsize) == (1, 2, 2)


def test_bare_decorator_and_wraps():
    @lru_cache
    def fib(n):
        """Fibonacci."""
        return n if n < 2 else fib(n - 1) + fib(n - 2)

    assert fib(60) == 1548008755920
    assert fib.__name__ == "fib"
    assert fib.__doc__ == "Fibonacci."


def test_cache_clear():
    @lru_cache(maxsize=4)
    def ident(x):
        return x

    ident(1)
    ident(1)
    ident.cache_clear()
    info = ident.cache_info()
    assert (info.hits, info.misses, info.currsize) == (0, 0, 0)


def test_keyword_arguments():
    calls = []

    @lru_cache(maxsize=8)
    def add(a, b=0):
        calls.append((a, b))
        return a + b

    assert add(1, b=2) == 3
    assert add(1, b=2) == 3
    assert len(calls) == 1
