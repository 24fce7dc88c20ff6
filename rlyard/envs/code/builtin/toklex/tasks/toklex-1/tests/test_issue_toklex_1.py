import pytest

from toklex import LexError, tokenize


def test_columns_on_second_line():
    toks = tokenize("a\nbc d")
    assert [(t.value, t.line, t.col) for t in toks] == [("a", 1, 1), ("bc", 2, 1), ("d", 2, 4), (None, 2, 5)]


def test_columns_after_blank_lines_and_comments():
    toks = tokenize("# header\n\n   let x = 1 # note\n\tfoo")
    assert [(t.value, t.line, t.col) for t in toks] == [
        ("let", 3, 4), ("x", 3, 8), ("=", 3, 10), (1, 3, 12), ("foo", 4, 2), (None, 4, 5),
    ]


def test_error_column_on_later_line():
    with pytest.raises(LexError) as e:
        tokenize("x\n  @")
    assert (e.value.line, e.value.col) == (2, 3)
    assert "line 2, column 3" in str(e.value)


def test_eof_after_trailing_newline():
    toks = tokenize("a\n")
    assert (toks[-1].line, toks[-1].col) == (2, 1)
