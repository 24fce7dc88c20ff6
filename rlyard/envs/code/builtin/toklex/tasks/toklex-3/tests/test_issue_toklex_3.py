import pytest

from toklex import EOF, IDENT, OP, STRING, LexError, tokenize


def test_string_ending_in_escaped_backslash():
    toks = tokenize(r'let dir = "C:\\temp\\"')
    assert toks[3].kind == STRING
    assert toks[3].value == "C:\\temp\\"
    assert toks[4].kind == EOF


def test_only_escaped_backslashes():
    toks = tokenize(r'"\\" "\\\\" ' + r"'\\'")
    assert [t.value for t in toks[:-1]] == ["\\", "\\\\", "\\"]


def test_code_after_backslash_string():
    toks = tokenize(r'"\\" + x')
    assert [(t.kind, t.value, t.col) for t in toks] == [
        (STRING, "\\", 1), (OP, "+", 6), (IDENT, "x", 8), (EOF, None, 9),
    ]


def test_escaped_backslash_then_escaped_quote():
    toks = tokenize(r'"a\\\"b" c')
    assert toks[0].value == 'a\\"b'
    assert toks[1].value == "c"


def test_really_unterminated_after_escaped_quote():
    with pytest.raises(LexError):
        tokenize(r'"abc\"')
