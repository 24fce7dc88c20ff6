"""An in-memory table with column selection, filtering and sorting."""

from __future__ import annotations

import operator
from typing import Any, Callable, Iterator

from .reader import CSVError, parse
from .types import convert, infer_type
from .writer import write

_OPS: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
    "contains": lambda a, b: str(b) in str(a),
    "startswith": lambda a, b: str(a).startswith(str(b)),
}


class Table:
    """Rows of values under a header.  Operations return new tables."""

    def __init__(
        self,
        header: list[str],
        rows: list[list[Any]],
        types: dict[str, str] | None = None,
    ) -> None:
        self.header = list(header)
        if len(set(self.header)) != len(self.header):
            raise CSVError(f"duplicate column names in header {self.header}")
        for n, row in enumerate(rows, start=1):
            if len(row) != len(self.header):
                raise CSVError(f"row {n} has {len(row)} fields, expected {len(self.header)}")
        self.rows = [list(r) for r in rows]
        self.types = dict(types) if types else {h: "str" for h in self.header}

    @classmethod
    def from_csv(cls, text: str, delimiter: str = ",", infer: bool = True) -> "Table":
        """Build a table from CSV text whose first row is the header.

        With ``infer`` each column is converted to its inferred type.
        """
        records = parse(text, delimiter=delimiter)
        if not records:
            raise CSVError("no header row")
        header, data = records[0], records[1:]
        types = {h: "str" for h in header}
        if infer:
            for i, h in enumerate(header):
                types[h] = infer_type(r[i] for r in data if i < len(r))
            data = [[convert(v, types[h]) for v, h in zip(r, header)] if len(r) == len(header) else r for r in data]
        return cls(header, data, types)

    # -- access -------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.to_dicts())

    def _index(self, name: str) -> int:
        try:
            return self.header.index(name)
        except ValueError:
            raise KeyError(f"no column named {name!r}; columns are {self.header}") from None

    def column(self, name: str) -> list[Any]:
        i = self._index(name)
        return [r[i] for r in self.rows]

    def to_dicts(self) -> list[dict[str, Any]]:
        return [dict(zip(self.header, r)) for r in self.rows]

    def _derive(self, header: list[str], rows: list[list[Any]]) -> "Table":
        return Table(header, rows, {h: self.types[h] for h in header})

    # -- operations -----------------------------------------------------------
    def select(self, *names: str) -> "Table":
        idx = [self._index(n) for n in names]
        return self._derive(list(names), [[r[i] for i in idx] for r in self.rows])

    def filter(self, pred: Callable[[dict[str, Any]], bool]) -> "Table":
        return self._derive(self.header, [r for r, d in zip(self.rows, self.to_dicts()) if pred(d)])

    def where(self, name: str, op: str, value: Any) -> "Table":
        """Rows whose ``name`` column compares true with ``value``; None never matches."""
        if op not in _OPS:
            raise ValueError(f"unknown operator {op!r}")
        i, fn = self._index(name), _OPS[op]
        return self._derive(self.header, [r for r in self.rows if r[i] is not None and fn(r[i], value)])

    def sort_by(self, name: str, reverse: bool = False) -> "Table":
        """Stable sort on one column; missing values (None) always go last."""
        i = self._index(name)
        present = [r for r in self.rows if r[i] is not None]
        missing = [r for r in self.rows if r[i] is None]
        present.sort(key=lambda r: r[i], reverse=reverse)
        return self._derive(self.header, present + missing)

    def to_csv(self, delimiter: str = ",") -> str:
        return write([self.header, *self.rows], delimiter=delimiter)
