"""Each request's excess surprise token by token, recorded by the plugin from the logits it samples anyway.

A request that names a key (``gcs_excess_key``) has, at every draw, ``E_p[z] - z_y`` stored under that key: the
model's untempered logits z as the plugin receives them, p = softmax(z), y the token the request drew (the
quantity ``gcs.sampling.processor.ExcessRecorder`` records on transformers, ``gcs.excess_surprise``'s terms). The
records live in the process that runs the model: ``take`` reads them there, so they reach a caller only where vLLM's
engine runs in the caller's process (``gcs.engines.vllm`` on CPU: ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and one
worker). Anywhere else a caller finds nothing and passes the model over the tokens instead (``gcs.frame_excess``).

    >>> records = ExcessRecords(limit=2)
    >>> records.record("a", 0, 0.5); records.record("a", 1, 1.5); records.record("a", 1, -0.5)  # index 1 redrawn
    >>> records.take("a"), records.take("a")
    ([0.5, -0.5], None)

A draw vLLM discards (a row still in chunked prefill) is asked for again at the same output index: the new value
replaces it and everything after it. Only the ``limit`` most recently started records are kept, so requests whose
records nobody takes (a server's clients naming a key) hold a bounded amount of memory.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import cast

RECORD_LIMIT = 1024  # requests whose records are kept at once: 1,024 x 4,096 tokens x 8 bytes is 32 MiB at most


class ExcessRecords:
    """Per-step values by key, bounded in keys (the oldest dropped first); safe to use from several threads."""

    def __init__(self, limit: int = RECORD_LIMIT):
        self.limit = limit
        self._values: OrderedDict[str, array] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._values)

    def record(self, key: str, index: int, value: float) -> None:
        """``value`` at output ``index`` of ``key``'s request (a redone index replaces it and what followed)."""
        with self._lock:
            values = self._values.get(key)
            if values is None:
                values = self._values[key] = array("d")
                while len(self._values) > self.limit:
                    self._values.popitem(last=False)
            del values[index:]
            values.extend([float("nan")] * (index - len(values)))  # an index never seen: NaN, so a mean shows it
            values.append(value)

    def record_many(self, keys: Sequence[str], indices: Sequence[int], values: Sequence[float]) -> None:
        for key, index, value in zip(keys, indices, values, strict=True):
            self.record(key, index, value)

    def take(self, key: str) -> list[float] | None:
        """The values recorded under ``key`` (removed), None when there are none here."""
        with self._lock:
            values = self._values.pop(key, None)
        return None if values is None else values.tolist()


RECORDS = ExcessRecords()  # this process's records: the plugin writes them, gcs.engines.vllm takes them


class RecordedSteps:
    """Rows' recorded steps, read as ``ExcessRecorder.means`` reads its own (``gcs.engines.batch.Batch.decode``).

    >>> RecordedSteps([[1.0, 2.0, 9.0], []]).means([2, 0])  # each row's mean over its first n tokens
    [1.5, nan]
    """

    def __init__(self, rows: Sequence[Sequence[float]]):
        self.rows = [list(row) for row in rows]

    def means(self, lengths: Sequence[int]) -> list[float]:
        """Per row, its mean over its first ``lengths[row]`` steps (NaN for none, or for fewer steps recorded)."""
        return [math.fsum(row[:n]) / n if 0 < n <= len(row) else math.nan
                for row, n in zip(self.rows, lengths, strict=True)]


def recorded_steps(records: Iterable[list[float] | None]) -> RecordedSteps | None:
    """Rows' records (``ExcessRecords.take``'s) as ``RecordedSteps``, or None when any row has none here.

    >>> recorded_steps([[0.5], None]) is None
    True
    """
    rows = list(records)
    return None if any(row is None for row in rows) else RecordedSteps(cast(list[list[float]], rows))
