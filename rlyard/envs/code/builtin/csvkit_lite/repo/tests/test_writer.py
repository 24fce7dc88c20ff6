from csvkit_lite import format_row, write


def test_plain_fields_unquoted():
    assert format_row(["a", 1, 2.5]) == "a,1,2.5"


def test_quotes_when_needed():
    assert format_row(["a,b", 'say "hi"']) == '"a,b","say ""hi"""'
    assert format_row([" padded"]) == '" padded"'


def test_none_and_bool():
    assert format_row([None, True, False]) == ",true,false"


def test_write_rows():
    assert write([["a", "b"], [1, 2]]) == "a,b\n1,2\n"
    assert write([["a", "b"]], delimiter=";", lineterminator="\r\n") == "a;b\r\n"
