import pytest

from toklex import EOF, IDENT, KEYWORD, NUMBER, OP, PUNCT, STRING, LexError, tokenize


def kinds_values(src):
    return [(t.kind, t.value) for t in tokenize(src)]


def test_empty_source():
    toks = tokenize("")
    assert [(t.kind, t.line, t.col) for t in toks] == [(EOF, 1, 1)]


def test_simple_expression():
    assert kinds_values("let x = a + 42;") == [
        (KEYWORD, "let"), (IDENT, "x"), (OP, "="), (IDENT, "a"), (OP, "+"),
        (NUMBER, 42), (PUNCT, ";"), (EOF, None),
    ]


def test_numbers():
    assert kinds_values("0 7 3.25 .5 0x1F 0XaB") == [
        (NUMBER, 0), (NUMBER, 7), (NUMBER, 3.25), (NUMBER, 0.5), (NUMBER, 31), (NUMBER, 171), (EOF, None),
    ]
    assert isinstance(tokenize("3.0")[0].value, float)
    assert isinstance(tokenize("3")[0].value, int)


def test_member_access_after_int():
    assert kinds_values("1.foo") == [(NUMBER, 1), (PUNCT, "."), (IDENT, "foo"), (EOF, None)]


def test_bad_numbers():
    with pytest.raises(LexError):
        tokenize("12abc")
    with pytest.raises(LexError):
        tokenize("0x")


def test_strings_and_escapes():
    toks = tokenize(r'"a\tb" ' + r"'it\'s' " + r'"\u00e9\n"')
    assert [t.value for t in toks[:-1]] == ["a\tb", "it's", "\u00e9\n"]
    assert toks[0].text == r'"a\tb"'
    assert all(t.kind == STRING for t in toks[:-1])


def test_string_errors():
    with pytest.raises(LexError):
        tokenize('"never closed')
    with pytest.raises(LexError):
        tokenize('"bad \\q escape"')
    with pytest.raises(LexError):
        tokenize('"\\u12"')


def test_keywords_vs_identifiers():
    assert kinds_values("if iffy letter let _x1") == [
        (KEYWORD, "if"), (IDENT, "iffy"), (IDENT, "letter"), (KEYWORD, "let"), (IDENT, "_x1"), (EOF, None),
    ]


def test_operators_longest_match():
    assert [t.value for t in tokenize("a==b!=c&&d||e->f**2")][:-1] == [
        "a", "==", "b", "!=", "c", "&&", "d", "||", "e", "->", "f", "**", 2,
    ]
    assert [t.value for t in tokenize("!x = -y % 3 < 4 > 5")][:-1] == ["!", "x", "=", "-", "y", "%", 3, "<", 4, ">", 5]


def test_line_comments_skipped():
    assert kinds_values("a # comment + 1\n# whole line\nb") == [(IDENT, "a"), (IDENT, "b"), (EOF, None)]


def test_positions_first_line():
    toks = tokenize("foo(1, 'x')")
    assert [(t.value, t.line, t.col) for t in toks] == [
        ("foo", 1, 1), ("(", 1, 4), (1, 1, 5), (",", 1, 6), ("x", 1, 8), (")", 1, 11), (None, 1, 12),
    ]


def test_line_numbers():
    toks = tokenize("a\n\nb\n  c")
    assert [(t.value, t.line) for t in toks] == [("a", 1), ("b", 3), ("c", 4), (None, 4)]


def test_unexpected_character():
    with pytest.raises(LexError) as e:
        tokenize("a @ b")
    assert (e.value.line, e.value.col) == (1, 3)
