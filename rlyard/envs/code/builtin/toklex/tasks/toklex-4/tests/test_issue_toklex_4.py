import pytest

from toklex import NUMBER, LexError, tokenize


@pytest.mark.parametrize("src, value", [
    ("6.02e23", 6.02e23),
    ("1e10", 1e10),
    (".5e1", 5.0),
    ("2.5E-3", 0.0025),
    ("7e+2", 700.0),
])
def test_exponent_literals(src, value):
    toks = tokenize(src)
    assert len(toks) == 2
    assert toks[0].kind == NUMBER
    assert toks[0].text == src
    assert isinstance(toks[0].value, float)
    assert toks[0].value == pytest.approx(value)


def test_exponent_in_expression_positions():
    toks = tokenize("x = 6.02e23 * 2")
    assert [(t.value, t.col) for t in toks[2:]] == [(6.02e23, 5), ("*", 13), (2, 15), (None, 16)]


@pytest.mark.parametrize("src, col", [("1e", 3), ("3e+", 4), ("x + 2E-", 8)])
def test_exponent_without_digits(src, col):
    with pytest.raises(LexError) as e:
        tokenize(src)
    assert e.value.col == col


def test_hex_with_e_digit_unchanged():
    assert tokenize("0x1E")[0].value == 30
