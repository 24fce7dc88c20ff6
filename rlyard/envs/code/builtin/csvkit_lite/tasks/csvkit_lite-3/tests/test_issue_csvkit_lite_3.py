import pytest

from csvkit_lite import CSVError, Table, format_row, parse, write


def test_doubled_quote_in_middle_and_end():
    assert parse('q1,"He said ""hi"""\n') == [["q1", 'He said "hi"']]


def test_field_that_is_only_a_quote():
    assert parse('"""",x') == [['"', "x"]]
    assert parse('a,""""""') == [["a", '""']]


def test_round_trip_through_writer():
    rows = [["text", "n"], ['"quoted"', "1"], ['a ""b"" c', "2"], ['ends with "', "3"]]
    assert parse(write(rows)) == rows


def test_other_quotechar():
    assert parse("'it''s',x", quotechar="'") == [["it's", "x"]]


def test_table_round_trip_with_quotes():
    t = Table.from_csv('name,quote\nAda,"""Hello"", she said"\n')
    assert t.column("quote") == ['"Hello", she said']
    assert Table.from_csv(t.to_csv()).rows == t.rows


def test_still_rejects_stray_quote():
    with pytest.raises(CSVError):
        parse('"abc"x,1')
