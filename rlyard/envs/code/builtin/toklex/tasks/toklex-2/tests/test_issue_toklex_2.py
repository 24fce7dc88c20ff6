from toklex import OP, OPERATORS, tokenize


def values(src):
    return [t.value for t in tokenize(src)][:-1]


def test_less_equal():
    assert values("a <= b") == ["a", "<=", "b"]


def test_greater_equal():
    assert values("x>=10") == ["x", ">=", 10]


def test_mixed_comparisons():
    toks = tokenize("a<=b>=c<d>e==f")
    ops = [(t.value, t.col) for t in toks if t.kind == OP]
    assert ops == [("<=", 2), (">=", 5), ("<", 8), (">", 10), ("==", 12)]


def test_operator_table_lists_them():
    assert "<=" in OPERATORS and ">=" in OPERATORS
