"""A crash-safe, resumable results CSV: rows are appended as they finish, never rewritten in place.

Each ``append`` is one ``write`` to a file opened with O_APPEND, followed by fsync, so
a finished batch is on disk before the next one starts. A process killed mid-write can
leave at most a partial last line or an incomplete unit (a cell with fewer rows than
expected); ``load`` drops those, atomically rewriting the file (temp file + rename),
so a re-run redoes exactly the unfinished units: nothing lost, nothing duplicated.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from gcs.experiments.export import csv_safe, unescape_cell
from gcs.runtime.arguments import ArgumentTypeError
from gcs.runtime.quoting import quoted

LIST_COLUMNS = ("responses",)  # stored as JSON text in the CSV


def _to_csv(frame: pd.DataFrame, header: bool) -> bytes:
    frame = frame.copy()
    for column in LIST_COLUMNS:
        if column in frame:
            frame[column] = [json.dumps(list(v), ensure_ascii=False) for v in frame[column]]
    buffer = io.StringIO()
    csv_safe(frame).to_csv(buffer, index=False, header=header, lineterminator="\n")  # user text never a formula
    return buffer.getvalue().encode("utf-8")


def _parse(values: pd.Series, kind: type) -> pd.Series:
    if kind is bool:
        return values.map({"True": True, "False": False})
    if kind is float:
        return pd.to_numeric(values.replace("", np.nan))  # an empty cell is a missing number (pandas 3 reads no "nan")
    if kind is int:
        return values.astype(int)
    return values


class ResultsLog:
    """``path``: the CSV; ``columns``: its header; ``keys``: columns naming a unit of work;
    ``rows_per_unit``: how many rows a finished unit has (e.g. one per metric); ``types``:
    column -> bool/int/float for reading back (others stay strings, empty ones included)."""

    def __init__(self, path: str | Path, columns: Sequence[str], keys: Sequence[str], rows_per_unit: int = 1,
                 types: dict[str, type] | None = None):
        self.path, self.columns, self.keys, self.rows_per_unit = Path(path), list(columns), list(keys), rows_per_unit
        self.types = dict(types or {})

    def _read(self) -> tuple[pd.DataFrame, bool]:
        """The rows of complete lines, and whether the file ended cleanly (no partial last line)."""
        data = self.path.read_bytes() if self.path.exists() else b""
        complete = data[: data.rfind(b"\n") + 1]  # a partial last line is an interrupted write
        if not complete:
            return pd.DataFrame(columns=self.columns), not data
        try:
            frame = pd.read_csv(io.BytesIO(complete), dtype=str, keep_default_na=False)
        except (pd.errors.ParserError, UnicodeDecodeError) as error:
            raise ValueError(f"{self.path} is damaged ({error}); fix or remove it, or use another --out") from None
        if list(frame.columns) != self.columns:
            raise ValueError(f"{self.path} has columns {list(frame.columns)}, expected {self.columns}: "
                             "use another --out")
        frame = frame.map(unescape_cell)
        for column in self.columns:
            frame[column] = self._parsed(frame[column])
        return frame, len(complete) == len(data)

    def _parsed(self, values: pd.Series):
        """A column read back as its type; a damaged value is a ValueError naming its line."""

        def parse(series):
            if values.name in LIST_COLUMNS:
                return [json.loads(v) for v in series]
            kind = self.types.get(values.name)
            parsed = series if kind is None else _parse(series, kind)
            if kind is bool and parsed.isna().any():
                raise ValueError("not True/False")
            return parsed

        try:
            return parse(values)
        except (ValueError, TypeError):
            for line, value in enumerate(values, start=2):  # line 1 is the header
                try:
                    parse(pd.Series([value], name=values.name))
                except (ValueError, TypeError):
                    raise ValueError(f"{self.path} line {line}: {values.name} {value[:60]!r} is damaged; fix or "
                                     f"remove that line, or use another --out") from None
            raise

    def load(self) -> pd.DataFrame:
        """The finished rows, after dropping what an interrupted write left behind."""
        frame, clean = self._read()
        sizes = frame.groupby(self.keys, sort=False, dropna=False)[self.keys[0]].transform("size")
        finished = frame[sizes == self.rows_per_unit] if len(frame) else frame
        if len(finished) != len(frame) or not clean:
            self._replace(finished)
        return finished.reset_index(drop=True)

    def done(self) -> set[tuple]:
        """Keys of the finished units."""
        return finished_keys(self.load(), self.keys)

    def _replace(self, frame: pd.DataFrame) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle, temporary = tempfile.mkstemp(prefix=f".{self.path.name}-", dir=self.path.parent)
        try:
            with os.fdopen(handle, "wb") as file:
                file.write(_to_csv(frame[self.columns], header=True))
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, self.path)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise

    def append(self, frame: pd.DataFrame) -> None:
        """Add finished units (all rows of each) in one write."""
        if frame.empty:
            return
        if not self.path.exists() or self.path.stat().st_size == 0:
            self._replace(frame)
            return
        data = _to_csv(frame[self.columns], header=False)
        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            written = os.write(descriptor, data)
            if written != len(data):
                raise OSError(f"short write to {self.path}: {written} of {len(data)} bytes (disk full?)")
            os.fsync(descriptor)
        finally:
            os.close(descriptor)


def finished_keys(resume, keys: Sequence[str]) -> set[tuple]:
    """The units an earlier run finished, from what ``resume`` means wherever gcs takes it: that run's results (a
    DataFrame with the ``keys`` columns, as the function returned them or handed them to ``on_results``, e.g. read
    back from a file) or the keys themselves (tuples in ``keys``' order).

    >>> sorted(finished_keys(pd.DataFrame({"seed": [0, 0, 1], "method": ["is"] * 3}), ["seed", "method"]))
    [(0, 'is'), (1, 'is')]
    >>> finished_keys([(2, "gcs")], ["seed", "method"])
    {(2, 'gcs')}
    """
    if isinstance(resume, pd.DataFrame):
        missing = [key for key in keys if key not in resume.columns]
        if missing:
            raise ValueError(f"resume: the earlier results lack the columns {missing} (they need {list(keys)})")
        return {tuple(row) for row in resume[list(keys)].itertuples(index=False)}
    if isinstance(resume, (str, bytes)) or not isinstance(resume, Iterable):
        raise ArgumentTypeError(f"resume must be an earlier run's results (a DataFrame) or their keys, got "
                                f"{type(resume).__name__}")
    found = set()
    for i, key in enumerate(resume):
        if isinstance(key, (str, bytes)) or not isinstance(key, Sequence) or len(key) != len(keys):
            raise ValueError(f"resume[{i}] must be a key ({', '.join(keys)}), got {quoted(key)}")
        found.add(tuple(key))
    return found
