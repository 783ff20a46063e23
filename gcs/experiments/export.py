"""CSV files that are safe to open in a spreadsheet: text cells cannot start a formula.

A cell that begins with ``= + - @``, a tab or a carriage return is a formula to Excel,
LibreOffice and Sheets (``=HYPERLINK(...)``, ``+cmd|' /C calc'!A0``). OWASP's rule: prefix
such text cells with a single quote. Here a cell that already begins with a quote gets one
too, so ``unescape_cell`` restores every text exactly (the CLI reads its own results back).
Only text columns are touched: numbers stay numbers. JSON output needs none of this.

>>> escape_cell("=HYPERLINK(\\"http://x\\")"), escape_cell("'quoted"), escape_cell("plain")
('\\'=HYPERLINK("http://x")', "''quoted", 'plain')
>>> unescape_cell(escape_cell("@SUM(A1)")) == "@SUM(A1)"
True
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r", "'")


def escape_cell(value):
    """``value`` with a leading quote if it is text that a spreadsheet would read as a formula (or starts with one)."""
    return "'" + value if isinstance(value, str) and value.startswith(FORMULA_STARTS) else value


def unescape_cell(value):
    """The inverse of ``escape_cell``."""
    return value[1:] if isinstance(value, str) and value.startswith("'") else value


def csv_safe(frame: pd.DataFrame) -> pd.DataFrame:
    """A copy of ``frame`` whose text cells cannot become spreadsheet formulas (``escape_cell``).

    Args:
        frame: any frame.

    Returns:
        The copy; columns that hold no text are unchanged.

    Examples:
        >>> import pandas as pd
        >>> csv_safe(pd.DataFrame({"response": ["=1+1", "hi"], "n": [1, 2]})).to_dict("list")
        {'response': ["'=1+1", 'hi'], 'n': [1, 2]}
    """
    safe = frame.copy()
    for column in safe.columns:
        if pd.api.types.is_object_dtype(safe[column]) or pd.api.types.is_string_dtype(safe[column]):
            safe[column] = safe[column].map(escape_cell)
    return safe


def write_csv(frame: pd.DataFrame, path: str | Path) -> Path:
    """Write ``frame`` to ``path`` as a spreadsheet-safe CSV (``csv_safe``, no index).

    Args:
        frame: the frame to write.
        path: the file to write.

    Returns:
        The path written.

    Examples:
        >>> import pandas as pd, pathlib, tempfile
        >>> path = write_csv(pd.DataFrame({"response": ["=1+1"]}), pathlib.Path(tempfile.mkdtemp()) / "answers.csv")
        >>> path.read_text().splitlines()
        ['response', "'=1+1"]
    """
    csv_safe(frame).to_csv(path, index=False)
    return Path(path)
