"""csvkit_lite: read, query and write small CSV files without dependencies."""

from .reader import CSVError, parse
from .table import Table
from .types import convert, infer_type, is_null
from .writer import format_row, write

__all__ = [
    "CSVError",
    "Table",
    "convert",
    "format_row",
    "infer_type",
    "is_null",
    "parse",
    "write",
]
__version__ = "0.3.0"
