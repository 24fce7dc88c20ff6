import pytest

from csvkit_lite import CSVError, Table

DATA = """name,dept,salary,remote
Ada,eng,120,yes
Grace,eng,135,no
Linus,ops,99,yes
Barbara,research,150,no
"""


def table():
    return Table.from_csv(DATA)


def test_from_csv_types():
    t = table()
    assert t.types == {"name": "str", "dept": "str", "salary": "int", "remote": "bool"}
    assert len(t) == 4
    assert t.column("salary") == [120, 135, 99, 150]


def test_select_and_missing_column():
    t = table().select("salary", "name")
    assert t.header == ["salary", "name"]
    assert t.rows[0] == [120, "Ada"]
    with pytest.raises(KeyError):
        table().select("age")


def test_where_and_filter():
    t = table()
    assert t.where("salary", ">=", 130).column("name") == ["Grace", "Barbara"]
    assert t.where("dept", "contains", "e").column("name") == ["Ada", "Grace", "Barbara"]
    assert t.filter(lambda r: r["remote"]).column("name") == ["Ada", "Linus"]


def test_sort_by():
    t = table()
    assert t.sort_by("salary").column("name") == ["Linus", "Ada", "Grace", "Barbara"]
    assert t.sort_by("name", reverse=True).column("name") == ["Linus", "Grace", "Barbara", "Ada"]


def test_to_csv_round_trip():
    t = table()
    out = t.to_csv()
    assert out.splitlines()[1] == "Ada,eng,120,true"
    again = Table.from_csv(out)
    assert again.rows == t.rows


def test_ragged_rows_rejected():
    with pytest.raises(CSVError):
        Table.from_csv("a,b\n1,2,3\n")
