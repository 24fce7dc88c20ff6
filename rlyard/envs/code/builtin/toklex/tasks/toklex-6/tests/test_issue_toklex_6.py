import toklex
from toklex import Lexer, tokenize


def spans(toks):
    return [(t.kind, t.line, t.col, t.end_line, t.end_col) for t in toks]


def test_end_positions_single_line():
    toks = tokenize("let name = 'Ada' ** 2.5")
    assert [(t.text, t.end_line, t.end_col) for t in toks] == [
        ("let", 1, 4), ("name", 1, 9), ("=", 1, 11), ("'Ada'", 1, 17), ("**", 1, 20), ("2.5", 1, 24), ("", 1, 24),
    ]


def test_end_positions_across_lines():
    toks = tokenize("a\n  bb\n\n")
    assert spans(toks) == [("IDENT", 1, 1, 1, 2), ("IDENT", 2, 3, 2, 5), ("EOF", 4, 1, 4, 1)]


def test_comments_mode_example():
    toks = tokenize("foo /* a\nb */ 'x'", comments=True)
    assert spans(toks) == [
        ("IDENT", 1, 1, 1, 4), ("COMMENT", 1, 5, 2, 5), ("STRING", 2, 6, 2, 9), ("EOF", 2, 9, 2, 9),
    ]
    c = toks[1]
    assert c.kind == toklex.COMMENT
    assert c.text == "/* a\nb */"
    assert c.value == " a\nb "


def test_line_comments_kept_without_newline():
    toks = Lexer("x # todo\n# second\ny", comments=True).tokens()
    assert [(t.kind, t.value, t.text) for t in toks] == [
        ("IDENT", "x", "x"), ("COMMENT", " todo", "# todo"), ("COMMENT", " second", "# second"),
        ("IDENT", "y", "y"), ("EOF", None, ""),
    ]
    assert (toks[1].line, toks[1].col, toks[1].end_line, toks[1].end_col) == (1, 3, 1, 9)


def test_default_mode_unchanged():
    src = "a /* x */ b # c\nd"
    assert [t.value for t in tokenize(src)] == ["a", "b", "d", None]
    assert all(t.kind != "COMMENT" for t in tokenize(src))
