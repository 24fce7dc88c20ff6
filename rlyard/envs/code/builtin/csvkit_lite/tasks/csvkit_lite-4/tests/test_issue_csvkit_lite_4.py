from csvkit_lite import Table

DATA = "name,score,ok\nAda,7,yes\nBob,,\nCy,3,no\nDee,NA,yes\nEve,7,\n"


def test_missing_sorted_last_ascending():
    t = Table.from_csv(DATA)
    assert t.sort_by("score").column("name") == ["Cy", "Ada", "Eve", "Bob", "Dee"]


def test_missing_sorted_last_descending():
    t = Table.from_csv(DATA)
    assert t.sort_by("score", reverse=True).column("name") == ["Ada", "Eve", "Cy", "Bob", "Dee"]


def test_bool_column_with_missing():
    t = Table.from_csv(DATA)
    assert t.sort_by("ok").column("name") == ["Cy", "Ada", "Dee", "Bob", "Eve"]


def test_all_missing_column_keeps_order():
    t = Table(["a", "b"], [[1, None], [2, None], [3, None]], {"a": "int", "b": "int"})
    assert t.sort_by("b").column("a") == [1, 2, 3]
    assert t.sort_by("b", reverse=True).column("a") == [1, 2, 3]
