from csvkit_lite import Table, infer_type


def test_negative_ints_infer_int():
    assert infer_type(["3", "-2", "10"]) == "int"
    assert infer_type(["-1"]) == "int"


def test_plus_sign_ints_infer_int():
    assert infer_type(["+5", "6", " -7 "]) == "int"


def test_signed_decimals_stay_float():
    assert infer_type(["-2", "-2.5"]) == "float"


def test_table_converts_signed_ints():
    t = Table.from_csv("city,delta\nOslo,-4\nRome,7\nNice,+2\n")
    assert t.types["delta"] == "int"
    assert t.column("delta") == [-4, 7, 2]
    assert all(type(v) is int for v in t.column("delta"))
