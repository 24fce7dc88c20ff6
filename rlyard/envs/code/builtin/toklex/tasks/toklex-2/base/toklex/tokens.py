"""Token kinds, the Token record and LexError."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

NUMBER = "NUMBER"
STRING = "STRING"
IDENT = "IDENT"
KEYWORD = "KEYWORD"
OP = "OP"
PUNCT = "PUNCT"
COMMENT = "COMMENT"
EOF = "EOF"

KEYWORDS = frozenset(
    {"let", "fn", "if", "else", "while", "return", "true", "false", "null", "and", "or", "not"}
)

# Longest first: the lexer takes the first operator that matches.
OPERATORS = ("**", "==", "!=", "&&", "||", "->", "+", "-", "*", "/", "%", "<", ">", "=", "!")
PUNCTUATION = "(){}[],;:."


@dataclass(frozen=True)
class Token:
    """One token.

    ``value`` is the decoded value: an int or float for NUMBER, the unescaped
    text for STRING, the comment body for COMMENT, the source text otherwise
    (None for EOF).  ``text`` is the exact source text.  ``line`` / ``col``
    (1-based) locate its first character; ``end_line`` / ``end_col`` the
    position just after its last character.
    """

    kind: str
    value: Any
    text: str
    line: int
    col: int
    end_line: int
    end_col: int

    def __repr__(self) -> str:
        return f"Token({self.kind}, {self.value!r}, {self.line}:{self.col})"


class LexError(Exception):
    """Invalid input; ``line`` and ``col`` point at the offending character."""

    def __init__(self, message: str, line: int, col: int) -> None:
        super().__init__(f"{message} at line {line}, column {col}")
        self.message = message
        self.line = line
        self.col = col
