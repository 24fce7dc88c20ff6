"""toklex: a tokenizer for a small expression language."""

from .lexer import Lexer, tokenize
from .tokens import COMMENT, EOF, IDENT, KEYWORD, KEYWORDS, NUMBER, OP, OPERATORS, PUNCT, STRING, LexError, Token

__all__ = [
    "COMMENT",
    "EOF",
    "IDENT",
    "KEYWORD",
    "KEYWORDS",
    "LexError",
    "Lexer",
    "NUMBER",
    "OP",
    "OPERATORS",
    "PUNCT",
    "STRING",
    "Token",
    "tokenize",
]
__version__ = "0.5.0"
