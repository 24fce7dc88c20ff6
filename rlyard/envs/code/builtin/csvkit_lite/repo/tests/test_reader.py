import pytest

from csvkit_lite import CSVError, parse


def test_simple_rows():
    assert parse("a,b,c\n1,2,3\n") == [["a", "b", "c"], ["1", "2", "3"]]


def test_no_trailing_newline_and_crlf():
    assert parse("a,b\r\n1,2") == [["a", "b"], ["1", "2"]]


def test_quoted_delimiter():
    assert parse('name,addr\nAda,"1 Main St, London"\n') == [["name", "addr"], ["Ada", "1 Main St, London"]]


def test_empty_fields():
    assert parse("a,,c\n,,\n") == [["a", "", "c"], ["", "", ""]]
    assert parse('x,""\n') == [["x", ""]]


def test_blank_lines_skipped():
    assert parse("a\n\nb\n\n") == [["a"], ["b"]]


def test_other_delimiter():
    assert parse("a;b\n1;2", delimiter=";") == [["a", "b"], ["1", "2"]]


def test_errors():
    with pytest.raises(CSVError):
        parse('a,"unterminated\n')
    with pytest.raises(CSVError):
        parse('a,b"c\n')
