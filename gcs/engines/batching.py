"""Many rows through few batches: units packed under a row budget, each batch run and handed back per unit.

    for units, decoded in run_batches(cells, rows_of, settings_of, model):
        ...   # decoded[i]: Batch.decode's records of units[i]'s rows

Sweeps, style experiments and rewording all run through ``run_batches``. A unit is whatever
the caller counts (a sweep cell, one style response, a set of rewordings); units with
different sampling settings never share a batch (``pack``).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from tqdm.auto import tqdm

from gcs.checks import check_engine
from gcs.engines.batch import Batch, Cancelled, Row
from gcs.engines.models import Model
from gcs.runtime.arguments import ArgumentTypeError, is_integer
from gcs.runtime.quoting import quoted
from gcs.settings import SamplingSettings

MAX_BATCH_ROWS_CPU = 48


def auto_batch_rows(model: Model, tokens_per_row: int) -> int:
    """Rows per ``generate`` call: a fixed 48 on CPU (larger batches gain nothing there);
    on CUDA as many as half the free memory holds in KV cache."""
    if model.device.type != "cuda":
        return MAX_BATCH_ROWS_CPU
    config: Any = model.model.config  # a transformers config (gcs.Model types the model as a torch Module)
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    bytes_per_token = 2 * config.num_hidden_layers * heads * head_dim * next(model.model.parameters()).element_size()
    free, _ = torch.cuda.mem_get_info(model.device)
    return max(1, min(1024, int(0.5 * free / (bytes_per_token * tokens_per_row))))


def default_batch_rows(engine, model: Model, max_new_tokens: int, rows: int) -> int:
    """Rows per batch when the caller names none: all of them on vLLM (it batches and queues requests itself), a
    few rounds of every endpoint's requests on served endpoints (``Endpoints.batch_rows``: a run that fails keeps the
    batches before it), ``auto_batch_rows`` on transformers."""
    if engine == "vllm":
        return max(1, rows)
    if engine != "transformers":
        return engine.batch_rows
    return auto_batch_rows(model, max_new_tokens + 128)


def pack(units: Sequence, rows_of: Callable, settings_of: Callable, batch_rows: int) -> list[list]:
    """Consecutive units with equal settings, chunked so each chunk has at most ``batch_rows`` rows.

    >>> settings = {0: "T=0", 1: "T=1"}
    >>> pack([(0, "a"), (0, "b"), (0, "c"), (1, "d")], lambda u: ["row"] * 2, lambda u: settings[u[0]], 4)
    [[(0, 'a'), (0, 'b')], [(0, 'c')], [(1, 'd')]]
    """
    chunks: list[list] = []
    current: list = []
    size = 0
    for unit in units:
        rows = len(rows_of(unit))
        if current and (size + rows > batch_rows or settings_of(unit) != settings_of(current[0])):
            chunks.append(current)
            current, size = [], 0
        current.append(unit)
        size += rows
    if current:
        chunks.append(current)
    return chunks


Progress = Any  # bool, a callback (done, total) or a tqdm-like bar: see ``reporting``


def check_progress(progress: Progress) -> Progress:
    """``progress`` as ``reporting`` takes it, or ArgumentTypeError."""
    if not (progress is None or isinstance(progress, bool) or hasattr(progress, "update") or callable(progress)):
        raise ArgumentTypeError(f"progress must be True, False, a tqdm-like bar or a callback (done, total), got "
                                f"{type(progress).__name__}")
    return progress


MAX_BATCH_ROWS = 1_000_000  # every entry point's bound (a larger number is no batch any machine holds)


def check_batch_rows(batch_rows: int | None) -> int | None:
    """``batch_rows`` as ``run_batches`` takes it: None (automatic) or a positive whole number, else
    ArgumentTypeError or ValueError naming it.

    >>> check_batch_rows(None), check_batch_rows(64)
    (None, 64)
    >>> check_batch_rows(-5)
    Traceback (most recent call last):
    ...
    ValueError: batch_rows must be a positive whole number of rows (at most 1,000,000), or None (automatic), got -5
    """
    if batch_rows is None:
        return None
    if not is_integer(batch_rows):
        raise ArgumentTypeError(f"batch_rows must be a whole number of rows or None, got {type(batch_rows).__name__} "
                                f"{quoted(batch_rows)}")
    if not 1 <= batch_rows <= MAX_BATCH_ROWS:
        raise ValueError(f"batch_rows must be a positive whole number of rows (at most {MAX_BATCH_ROWS:,}), or None "
                         f"(automatic), got {quoted(batch_rows)}")
    return batch_rows


@contextlib.contextmanager
def reporting(progress: Progress, total: int, description: str, unit: str = "unit") -> Iterator[Callable[[int], None]]:
    """``advance(n)``: n more of ``total`` units done, told to ``progress``, which means the same wherever gcs takes it:
    False or None (nothing), True (a tqdm bar of gcs's own, which gradio's ``Progress(track_tqdm=True)`` follows), a
    tqdm-like bar (its ``update(n)``) or a callback ``progress(done, total)``.

    >>> seen = []
    >>> with reporting(lambda done, total: seen.append((done, total)), 3, "demo") as advance:
    ...     advance(2); advance(1)
    >>> seen
    [(2, 3), (3, 3)]
    """
    check_progress(progress)
    done = 0
    with tqdm(total=total, desc=description, unit=unit, disable=progress is not True) as bar:
        def advance(n: int) -> None:
            nonlocal done
            done += n
            bar.update(n)
            if hasattr(progress, "update"):  # a tqdm-like bar (tqdm, gr.Progress().tqdm, ...)
                progress.update(n)
            elif callable(progress):
                progress(done, total)

        yield advance


def run_batches(
    units: Sequence,
    rows_of: Callable[[object], list[Row]],
    settings_of: Callable[[object], SamplingSettings],
    model: Model,
    batch_rows: int | None = None,
    generate_kwargs: dict | None = None,
    progress: Progress = False,
    description: str = "generate",
    stop: threading.Event | None = None,
    engine: Any = "transformers",
) -> Iterator[tuple[list, list[list[dict]]]]:
    """Generate the rows of every unit in as few batches as ``batch_rows`` allows; yield per batch.

    A unit is whatever the caller counts (a sweep cell, one style response, a set of
    rewordings): ``rows_of(unit)`` gives its rows, ``settings_of(unit)`` its sampling
    settings (units with different settings never share a batch). Yields ``(units,
    decoded)`` for each batch, ``decoded[i]`` being ``Batch.decode``'s records of
    ``units[i]``'s rows. ``progress``: see ``reporting`` (it counts units).
    ``batch_rows`` defaults to ``auto_batch_rows``; on the vLLM engine, to all rows (vLLM batches
    them itself). Setting ``stop`` ends the running batch after its current token and raises
    ``Cancelled`` (nothing partial is yielded).
    """
    tokens = max((settings_of(u).max_new_tokens for u in units), default=1)
    unit_rows = [rows_of(unit) for unit in units]  # each unit's rows, built once
    engine = check_engine(engine)
    if not batch_rows:  # vLLM batches (and queues) requests itself: hand it all rows of a setting at once
        batch_rows = default_batch_rows(engine, model, tokens, sum(map(len, unit_rows)))
    chunks = pack(range(len(units)), lambda i: unit_rows[i], lambda i: settings_of(units[i]), batch_rows)
    done = 0
    with reporting(progress, len(units), description) as advance:
        for chunk in chunks:
            batch = Batch([row for i in chunk for row in unit_rows[i]], model, settings_of(units[chunk[0]]),
                          dict(generate_kwargs or {}), engine)
            try:
                new_tokens = batch.complete(stop)
            except Cancelled:
                raise Cancelled(f"{description} stopped after {done} of {len(units)} units") from None
            decoded, start = batch.decode(new_tokens), 0
            per_unit = []
            for i in chunk:
                per_unit.append(decoded[start : start + len(unit_rows[i])])
                start += len(unit_rows[i])
            yield [units[i] for i in chunk], per_unit
            done += len(chunk)
            advance(len(chunk))
