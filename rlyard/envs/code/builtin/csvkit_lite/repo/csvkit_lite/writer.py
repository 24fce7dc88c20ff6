"""Writing rows back to CSV text."""

from __future__ import annotations

from typing import Any, Iterable


def _to_text(value: Any) -> str:
    if value is None:
        return ""
    if value is True:
        return "true"
    if value is False:
        return "false"
    return str(value)


def _needs_quotes(text: str, delimiter: str, quotechar: str) -> bool:
    return (
        delimiter in text
        or quotechar in text
        or "\n" in text
        or "\r" in text
        or text != text.strip(" ")
    )


def format_row(row: Iterable[Any], delimiter: str = ",", quotechar: str = '"') -> str:
    """One CSV line (without the line terminator), quoting fields only when needed."""
    out = []
    for value in row:
        text = _to_text(value)
        if _needs_quotes(text, delimiter, quotechar):
            text = quotechar + text.replace(quotechar, quotechar * 2) + quotechar
        out.append(text)
    return delimiter.join(out)


def write(rows: Iterable[Iterable[Any]], delimiter: str = ",", quotechar: str = '"', lineterminator: str = "\n") -> str:
    """CSV text for ``rows``; ``None`` is written as an empty field, booleans as true/false."""
    return "".join(format_row(r, delimiter, quotechar) + lineterminator for r in rows)
