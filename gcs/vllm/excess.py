"""Each request's excess surprise token by token, recorded by the plugin from the logits it samples anyway.

A reader in the process that runs the model announces the keys it will read (``expect``) and names one in each
request (``gcs_excess_key``, one key per request); at every draw of such a request the plugin stores ``E_p[z] - z_y``
under it: the model's untempered logits z as the plugin receives them, p = softmax(z), y the token the request drew
(the quantity ``gcs.sampling.processor.ExcessRecorder`` records on transformers, ``gcs.excess_surprise``'s terms).
``take`` hands the values over and forgets the key. A key nobody in the process expects is ignored: the plugin
computes and stores nothing for it, so a server's clients naming keys cost it nothing. ``gcs.engines.vllm`` is such a
reader where vLLM's engine runs in its process (on CPU: ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and one worker, its
defaults); with workers in processes of their own its keys reach no store that expects them, ``take`` finds nothing,
and the caller passes the model over the tokens instead (``gcs.frame_excess``).

    >>> records = ExcessRecords()
    >>> records.expect(["a"])
    >>> records.record("a", 0, 0.5); records.record("a", 1, 1.5); records.record("a", 1, -0.5)  # index 1 redrawn
    >>> records.record("b", 0, 9.0)  # expected by nobody: ignored
    >>> records.take("a"), records.take("a"), records.take("b")
    ([0.5, -0.5], None, None)

A draw vLLM discards (a row still in chunked prefill) is asked for again at the same output index: the new value
replaces it and everything after it.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections.abc import Iterable, Sequence
from typing import cast

from gcs.sampling.processor import RecordedSteps


class ExcessRecords:
    """Per-step values by key, for the keys a reader expects; safe to use from several threads."""

    def __init__(self):
        self._values: dict[str, array] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many keys are expected (recorded or not yet)."""
        return len(self._values)

    def expect(self, keys: Iterable[str]) -> None:
        """Record the draws of requests naming these keys, until ``take`` (a key expected already starts over)."""
        with self._lock:
            self._values.update((key, array("d")) for key in keys)

    def expects(self, key: str) -> bool:
        return key in self._values

    def record(self, key: str, index: int, value: float) -> None:
        """``value`` at output ``index`` of ``key``'s request (a redone index replaces it and what followed); nothing
        for a key nobody expects."""
        with self._lock:
            values = self._values.get(key)
            if values is None:
                return
            del values[index:]
            values.extend([math.nan] * (index - len(values)))  # an index never seen: NaN, so a mean shows it
            values.append(value)

    def record_many(self, keys: Sequence[str], indices: Sequence[int], values: Sequence[float]) -> None:
        for key, index, value in zip(keys, indices, values, strict=True):
            self.record(key, index, value)

    def take(self, key: str) -> list[float] | None:
        """The values recorded under ``key``, no longer expected; None when none were recorded here."""
        with self._lock:
            values = self._values.pop(key, None)
        return values.tolist() if values else None


RECORDS = ExcessRecords()  # this process's records: the plugin writes them, gcs.engines.vllm expects and takes them


def recorded_steps(records: Iterable[list[float] | None]) -> RecordedSteps | None:
    """Rows' records (``ExcessRecords.take``'s) as ``RecordedSteps``, or None when any row has none here.

    >>> recorded_steps([[0.5], None]) is None
    True
    """
    rows = list(records)
    return None if any(row is None for row in rows) else RecordedSteps(cast(list[list[float]], rows))
