import pytest

import csvkit_lite
from csvkit_lite import CSVError, Table, parse


def test_sniff_common_delimiters():
    sniff = csvkit_lite.sniff
    assert sniff("a,b,c\n1,2,3\n") == ","
    assert sniff("name;price\nTea;1,5\nCake;2,25\n") == ";"
    assert sniff("a\tb\nx, y\tz\n") == "\t"
    assert sniff("a|b|c\n1|2|3\n") == "|"


def test_sniff_respects_quotes_and_consistency():
    sniff = csvkit_lite.sniff
    assert sniff('id;comment\n1;"a;b;c"\n2;plain\n') == ";"
    assert sniff('x,y\n"1;2",3\n"4;5;6",7\n') == ","


def test_sniff_default_and_error():
    sniff = csvkit_lite.sniff
    assert sniff("justone\ncolumn\n", default=",") == ","
    with pytest.raises(CSVError):
        sniff("justone\ncolumn\n")
    assert sniff("a;b\n1;2\n", candidates=(",", "|"), default="?") == "?"


def test_parse_with_detection():
    assert parse("a;b\n1;2\n", delimiter=None) == [["a", "b"], ["1", "2"]]
    assert parse("solo\nx\n", delimiter=None) == [["solo"], ["x"]]


def test_table_detects_and_writes_back():
    t = Table.from_csv("name;price;qty\nTea;1,5;3\nCake;2,25;1\n")
    assert t.header == ["name", "price", "qty"]
    assert t.delimiter == ";"
    assert t.column("qty") == [3, 1]
    sub = t.where("qty", ">", 1).select("name", "price")
    assert sub.delimiter == ";"
    assert sub.to_csv() == "name;price\nTea;1,5\n"
    assert t.select("name").to_csv(delimiter="|") == "name\nTea\nCake\n"


def test_explicit_delimiter_wins():
    t = Table.from_csv("a;b,c\n1;2,3\n", delimiter=",")
    assert t.header == ["a;b", "c"]
    assert t.delimiter == ","
