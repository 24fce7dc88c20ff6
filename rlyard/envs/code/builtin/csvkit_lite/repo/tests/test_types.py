from csvkit_lite import convert, infer_type, is_null


def test_infer_basic():
    assert infer_type(["1", "2", "30"]) == "int"
    assert infer_type(["1.5", "2", ".5"]) == "float"
    assert infer_type(["true", "False", "yes"]) == "bool"
    assert infer_type(["a", "1"]) == "str"


def test_infer_ignores_nulls():
    assert infer_type(["1", "", "NA", "3"]) == "int"
    assert infer_type(["", "null"]) == "str"


def test_convert():
    assert convert("42", "int") == 42
    assert convert(" 2.5 ", "float") == 2.5
    assert convert("Yes", "bool") is True
    assert convert("", "int") is None
    assert convert("N/A", "float") is None
    assert convert("", "str") == ""


def test_is_null():
    assert is_null("  ")
    assert is_null("None")
    assert not is_null("0")
