"""A small RFC 4180 style CSV reader."""

from __future__ import annotations

DEFAULT_CANDIDATES = (",", ";", "\t", "|")


class CSVError(ValueError):
    """Malformed CSV input."""


def parse(text: str, delimiter: str | None = ",", quotechar: str = '"') -> list[list[str]]:
    """Split CSV ``text`` into rows of string fields.

    - Fields may be wrapped in ``quotechar``; inside quotes the delimiter,
      newlines and doubled quote characters (``""`` -> ``"``) are literal.
    - Rows end at ``\\n``, ``\\r\\n`` or ``\\r``; blank lines are skipped.
    - ``delimiter=None`` guesses the delimiter with :func:`sniff`.

    Raises :class:`CSVError` for an unterminated quoted field or a quote in
    the middle of an unquoted field.
    """
    if delimiter is None:
        delimiter = sniff(text, default=",")
    if len(delimiter) != 1 or len(quotechar) != 1 or delimiter == quotechar:
        raise ValueError("delimiter and quotechar must be distinct single characters")

    rows: list[list[str]] = []
    row: list[str] = []
    field: list[str] = []
    in_quotes = False      # inside a quoted section
    was_quoted = False     # current field had a quoted section (so it exists even if empty)
    line = 1
    quote_line = 1
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if in_quotes:
            if ch == quotechar:
                if i + 1 < n and text[i + 1] == quotechar:
                    field.append(quotechar)
                    i += 2
                    continue
                in_quotes = False
            else:
                if ch == "\n":
                    line += 1
                field.append(ch)
            i += 1
            continue
        if ch == delimiter:
            row.append("".join(field))
            field, was_quoted = [], False
        elif ch == "\n" or ch == "\r":
            if row or field or was_quoted:
                row.append("".join(field))
                rows.append(row)
            row, field, was_quoted = [], [], False
            if ch == "\r" and i + 1 < n and text[i + 1] == "\n":
                i += 1
            line += 1
        elif ch == quotechar:
            if field or was_quoted:
                raise CSVError(f"line {line}: unexpected quote character in field")
            in_quotes = was_quoted = True
            quote_line = line
        else:
            if was_quoted:
                raise CSVError(f"line {line}: text after closing quote")
            field.append(ch)
        i += 1
    if in_quotes:
        raise CSVError(f"line {quote_line}: unterminated quoted field")
    if row or field or was_quoted:
        row.append("".join(field))
        rows.append(row)
    return rows


def sniff(text: str, candidates: str | tuple = DEFAULT_CANDIDATES, default: str | None = None) -> str:
    """Guess the delimiter of ``text`` among ``candidates``.

    A candidate is plausible when the text parses with it and gives at least
    two fields on some row.  Candidates giving the same number of fields on
    every row beat inconsistent ones; then more fields wins; ties go to the
    earlier candidate.  Returns ``default`` when nothing is plausible, or
    raises :class:`CSVError` if no default is given.
    """
    best: tuple | None = None
    best_delim = None
    for rank, delim in enumerate(candidates):
        try:
            rows = parse(text, delimiter=delim)
        except CSVError:
            continue
        counts = [len(r) for r in rows]
        if not counts or max(counts) < 2:
            continue
        score = (len(set(counts)) == 1, max(set(counts), key=counts.count), -rank)
        if best is None or score > best:
            best, best_delim = score, delim
    if best_delim is None:
        if default is None:
            raise CSVError("could not determine the delimiter")
        return default
    return best_delim
