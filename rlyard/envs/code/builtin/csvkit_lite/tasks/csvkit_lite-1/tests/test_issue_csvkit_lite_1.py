from csvkit_lite import Table, format_row, parse, write


def test_newline_value_is_quoted():
    assert format_row([1, "first line\nsecond line"]) == '1,"first line\nsecond line"'


def test_carriage_return_value_is_quoted():
    assert format_row(["a\rb", "c\r\nd"]) == '"a\rb","c\r\nd"'


def test_write_round_trips_multiline_values():
    rows = [["id", "note"], ["1", "first line\nsecond line"], ["2", "plain"]]
    assert parse(write(rows)) == rows


def test_table_to_csv_round_trip():
    t = Table(["id", "note"], [[1, "line one\nline two"], [2, "ok"]], {"id": "int", "note": "str"})
    again = Table.from_csv(t.to_csv())
    assert again.rows == t.rows
