import pytest

from toklex import COMMENT, EOF, STRING, LexError, tokenize


def vals(src):
    return [t.value for t in tokenize(src)][:-1]


def test_block_comment_skipped():
    assert vals("a /* note */ b") == ["a", "b"]
    assert vals("a/**/b") == ["a", "b"]
    assert vals("/* only a comment */") == []


def test_multiline_block_comment_positions():
    toks = tokenize("x /* one\n two\n   three */ y\nz")
    assert [(t.value, t.line, t.col) for t in toks] == [
        ("x", 1, 1), ("y", 3, 13), ("z", 4, 1), (None, 4, 2),
    ]


def test_nested_block_comments():
    assert vals("a /* outer /* inner */ still comment */ b") == ["a", "b"]
    assert vals("/*/* */*/ c") == ["c"]


def test_unterminated_block_comment_points_at_opening():
    with pytest.raises(LexError) as e:
        tokenize("a\n  /* never\n closed")
    assert (e.value.line, e.value.col) == (2, 3)
    with pytest.raises(LexError) as e:
        tokenize("x /* a /* b */")
    assert (e.value.line, e.value.col) == (1, 3)


def test_not_comments():
    toks = tokenize('"/* not a comment */" a */ b')
    assert toks[0].kind == STRING and toks[0].value == "/* not a comment */"
    assert [t.value for t in toks[1:-1]] == ["a", "*", "/", "b"]
    assert vals("a / *b") == ["a", "/", "*", "b"]


def test_block_comments_kept_when_requested():
    toks = tokenize("a /* x\ny */ b # z", comments=True)
    assert [(t.kind, t.value) for t in toks] == [
        ("IDENT", "a"), (COMMENT, " x\ny "), ("IDENT", "b"), (COMMENT, " z"), (EOF, None),
    ]
    assert (toks[1].line, toks[1].col) == (1, 3)
