"""The lexer."""

from __future__ import annotations

from typing import Any

from .tokens import (
    COMMENT,
    EOF,
    IDENT,
    KEYWORD,
    KEYWORDS,
    NUMBER,
    OP,
    OPERATORS,
    PUNCT,
    PUNCTUATION,
    STRING,
    LexError,
    Token,
)

_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\", '"': '"', "'": "'"}
_HEX = "0123456789abcdefABCDEF"


class Lexer:
    """Turns source text into tokens, tracking 1-based line and column numbers.

    Whitespace is skipped, as are comments: ``# ...`` to the end of the line
    and ``/* ... */`` blocks, which may span lines and nest.  With
    ``comments=True`` comments are returned as COMMENT tokens instead.
    """

    def __init__(self, source: str, *, comments: bool = False) -> None:
        self.src = source
        self.comments = comments
        self.pos = 0
        self.line = 1
        self.col = 1

    # -- cursor -----------------------------------------------------------
    def _peek(self, k: int = 0) -> str:
        i = self.pos + k
        return self.src[i] if i < len(self.src) else ""

    def _advance(self, n: int = 1) -> None:
        for _ in range(n):
            if self.src[self.pos] == "\n":
                self.line += 1
                self.col = 1
            else:
                self.col += 1
            self.pos += 1

    def _error(self, message: str, line: int | None = None, col: int | None = None) -> LexError:
        return LexError(message, self.line if line is None else line, self.col if col is None else col)

    # -- driver -------------------------------------------------------------
    def tokens(self) -> list[Token]:
        out: list[Token] = []
        while True:
            comment = self._skip_trivia()
            if comment is not None:
                out.append(comment)
                continue
            if self.pos >= len(self.src):
                out.append(Token(EOF, None, "", self.line, self.col, self.line, self.col))
                return out
            out.append(self._token())

    def _make(self, kind: str, value: Any, start: tuple[int, int, int]) -> Token:
        pos, line, col = start
        return Token(kind, value, self.src[pos:self.pos], line, col, self.line, self.col)

    def _skip_trivia(self) -> Token | None:
        """Skip whitespace and comments; return a COMMENT token if those are kept."""
        while self.pos < len(self.src):
            ch = self._peek()
            start = (self.pos, self.line, self.col)
            if ch in " \t\r\n":
                self._advance()
            elif ch == "#":
                while self._peek() not in ("", "\n"):
                    self._advance()
                if self.comments:
                    return self._make(COMMENT, self.src[start[0] + 1:self.pos], start)
            elif ch == "/" and self._peek(1) == "*":
                self._block_comment()
                if self.comments:
                    return self._make(COMMENT, self.src[start[0] + 2:self.pos - 2], start)
            else:
                break
        return None

    def _block_comment(self) -> None:
        line, col = self.line, self.col
        self._advance(2)
        depth = 1
        while depth:
            if self.pos >= len(self.src):
                raise self._error("unterminated block comment", line, col)
            if self._peek() == "/" and self._peek(1) == "*":
                depth += 1
                self._advance(2)
            elif self._peek() == "*" and self._peek(1) == "/":
                depth -= 1
                self._advance(2)
            else:
                self._advance()

    def _token(self) -> Token:
        start = (self.pos, self.line, self.col)
        ch = self._peek()
        if ch.isdigit() or (ch == "." and self._peek(1).isdigit()):
            return self._make(NUMBER, self._number(), start)
        if ch.isalpha() or ch == "_":
            while self._peek().isalnum() or self._peek() == "_":
                self._advance()
            word = self.src[start[0]:self.pos]
            return self._make(KEYWORD if word in KEYWORDS else IDENT, word, start)
        if ch in "\"'":
            return self._make(STRING, self._string(), start)
        for op in OPERATORS:
            if self.src.startswith(op, self.pos):
                self._advance(len(op))
                return self._make(OP, op, start)
        if ch in PUNCTUATION:
            self._advance()
            return self._make(PUNCT, ch, start)
        raise self._error(f"unexpected character {ch!r}")

    # -- literals -------------------------------------------------------------
    def _digits(self, allowed: str = "0123456789") -> int:
        n = 0
        while self._peek() and self._peek() in allowed:
            self._advance()
            n += 1
        return n

    def _number(self) -> int | float:
        start = self.pos
        if self._peek() == "0" and self._peek(1) in ("x", "X"):
            self._advance(2)
            if not self._digits(_HEX):
                raise self._error("malformed hex literal")
            value: int | float = int(self.src[start + 2:self.pos], 16)
        else:
            is_float = False
            self._digits()
            if self._peek() == "." and self._peek(1).isdigit():
                is_float = True
                self._advance()
                self._digits()
            text = self.src[start:self.pos]
            value = float(text) if is_float else int(text)
        if self._peek().isalnum() or self._peek() == "_":
            raise self._error("invalid character in number literal")
        return value

    def _string(self) -> str:
        quote = self._peek()
        line, col = self.line, self.col
        i = self.pos + 1
        while True:
            if i >= len(self.src) or self.src[i] == "\n":
                raise self._error("unterminated string", line, col)
            if self.src[i] == "\\":
                i += 2
                continue
            if self.src[i] == quote:
                break
            i += 1
        value = self._unescape(self.src[self.pos + 1:i], line, col + 1)
        self._advance(i + 1 - self.pos)
        return value

    def _unescape(self, raw: str, line: int, col: int) -> str:
        """Decode escapes in the body of a string that starts at (line, col)."""
        out = []
        i = 0
        while i < len(raw):
            ch = raw[i]
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            esc = raw[i + 1] if i + 1 < len(raw) else ""
            if esc in _ESCAPES and esc:
                out.append(_ESCAPES[esc])
                i += 2
            elif esc == "u":
                digits = raw[i + 2:i + 6]
                if len(digits) != 4 or any(d not in _HEX for d in digits):
                    raise self._error("invalid \\u escape", line, col + i)
                out.append(chr(int(digits, 16)))
                i += 6
            else:
                raise self._error(f"unknown escape sequence \\{esc}", line, col + i)
        return "".join(out)


def tokenize(source: str, *, comments: bool = False) -> list[Token]:
    """Tokenize ``source``; the last token is always EOF."""
    return Lexer(source, comments=comments).tokens()
