import pytest

from csvkit_lite import CSVError, Table, parse


def test_newline_inside_quotes():
    text = 'id,description\n1,"Printer on fire.\nPlease help."\n2,ok\n'
    assert parse(text) == [["id", "description"], ["1", "Printer on fire.\nPlease help."], ["2", "ok"]]


def test_crlf_and_cr_inside_quotes_are_kept():
    text = 'a,b\r\n"x\r\ny","p\rq"\r\n"",z\r\n'
    assert parse(text) == [["a", "b"], ["x\r\ny", "p\rq"], ["", "z"]]


def test_blank_line_inside_quotes_is_kept():
    assert parse('n\n"para 1\n\npara 2"\n') == [["n"], ["para 1\n\npara 2"]]


def test_unusual_line_separators_are_data():
    assert parse("a,b\nx\x0cy,p\u2028q\n") == [["a", "b"], ["x\x0cy", "p\u2028q"]]


def test_unterminated_reports_start_line():
    with pytest.raises(CSVError, match="line 4"):
        parse('a,b\n1,"ok\nstill ok"\n3,"never closed\n4,5\n6,7\n')


def test_table_round_trip_multiline():
    text = 'id,notes,score\n1,"line one\nline two",5\n2,"a ""quoted""\nthing",7\n'
    t = Table.from_csv(text)
    assert t.types["score"] == "int"
    assert t.column("notes") == ["line one\nline two", 'a "quoted"\nthing']
    assert Table.from_csv(t.to_csv()).rows == t.rows
