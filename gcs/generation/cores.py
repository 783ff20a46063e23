"""The cores of side-by-side generation: many prompts x methods x seeds as one batch (``gcs.engines.batch``).

Each core takes a checked ``SamplingSettings``: ``prepare`` lays out the batch (every row one response), and
``generate_with`` / ``compare_with`` decode it into responses or ``compare``'s tidy frame, once or after every step.
With ensembling, a prompt's rewordings join the batch as extra rows of its group; an ``EnsembleLogitsProcessor``
gives the group the geometric mean of their next-token distributions, and all rows of the group append the same
token, sharing the response prefix. The keyword entry points around them: ``gcs.generation.responses``.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterator, Sequence

import pandas as pd

from gcs.checks import check_engine
from gcs.engines.batch import Batch, Row, check_plain_text
from gcs.engines.endpoints import EngineChoice
from gcs.engines.models import Model, resolve_model
from gcs.rewording import reword
from gcs.runtime.arguments import ArgumentTypeError, check_prompts, check_stop, is_integer
from gcs.settings import SamplingSettings, check_settings

__all__ = ["FRAME_COLUMNS", "prepare", "decoded_rows", "generate_with", "compare_with", "frame"]

FRAME_COLUMNS = ("prompt_index", "prompt", "method", "seed", "temperature", "top_k", "top_p", "ensemble",
                 "raw_response", "response", "n_tokens", "token_ids", "finished")


def _explicit_rewordings(ensemble, n_prompts: int) -> list[tuple[str, ...]] | None:
    """Rewordings given per prompt (checked), or None when ``ensemble`` is off or a count."""
    if ensemble is None or is_integer(ensemble):
        return None
    if isinstance(ensemble, (str, bool)) or not isinstance(ensemble, Sequence):
        raise ArgumentTypeError(f"ensemble must be None, a number of rewordings (0-8), or one list of rewordings per "
                                f"prompt, got {type(ensemble).__name__}")
    if len(ensemble) != n_prompts:
        raise ValueError(f"ensemble has {len(ensemble)} lists of rewordings for {n_prompts} prompts")
    return [tuple(check_prompts(r, f"ensemble[{i}]")) if len(r) else () for i, r in enumerate(ensemble)]


def prepare(prompts: Sequence[str], settings: SamplingSettings, model: Model | str | None = None,
            rewordings: Sequence[Sequence[str]] | None = None, engine: EngineChoice = "transformers",
            record_excess: bool = False, **generate_kwargs) -> tuple[Batch, bool]:
    """The batch of every method x seed x prompt, and whether ensembling was requested.

    ``rewordings`` (one list per prompt) replaces the ones the model would write for
    ``settings.ensemble``. ``engine`` runs it on "transformers" or "vllm" (``gcs.vllm.plugin``).
    ``record_excess``: see ``Batch``.
    """
    prompts = check_prompts(prompts)
    # before any rewording is written: a refused request costs nothing
    engine = check_engine(engine,
                          ensembling=bool(settings.ensemble) or (rewordings is not None and not is_integer(rewordings)))
    explicit = _explicit_rewordings(rewordings, len(prompts))
    model = resolve_model(model)
    check_plain_text(prompts, model, "prompts")
    for i, given in enumerate(explicit or ()):
        check_plain_text(given, model, f"ensemble[{i}]")
    if explicit is None and settings.ensemble:
        explicit = [tuple(r) for r in reword(prompts, n=settings.ensemble, model=model)]
    ensembled = explicit is not None
    explicit = explicit or [()] * len(prompts)
    rows = [Row(p, m, s, r) for m in settings.methods for s in settings.seeds
            for p, r in zip(prompts, explicit, strict=True)]
    return Batch(rows, model, settings, dict(generate_kwargs), engine, record_excess=record_excess), ensembled


def decoded_rows(batch: Batch, streaming: bool = False, stop: threading.Event | None = None) -> Iterator[list[dict]]:
    """The batch's decoded rows: after every step when ``streaming`` (the last item is final), else once, at the end.
    Setting ``stop`` (from another thread) ends the work early with ``Cancelled``."""
    if streaming:
        yield from batch.stream(stop)
    else:
        yield batch.decode(batch.complete(stop))


def generate_with(prompts: Sequence[str], settings: SamplingSettings, model: Model | str | None = None,
                  rewordings: Sequence[Sequence[str]] | None = None, engine: EngineChoice = "transformers",
                  streaming: bool = False, stop: threading.Event | None = None,
                  **generate_kwargs) -> Iterator[list[str]]:
    """The core of ``generate`` and ``stream``: one response per row (method x seed x prompt) under ``settings``,
    after every step when ``streaming``, else once (``stop``: see ``decoded_rows``)."""
    check_stop(stop)
    batch, _ = prepare(prompts, check_settings(settings), model, rewordings, engine, **generate_kwargs)
    for rows in decoded_rows(batch, streaming, stop):
        yield [row["response"] for row in rows]


def compare_with(prompts: Sequence[str], settings: SamplingSettings, model: Model | str | None = None,
                 rewordings: Sequence[Sequence[str]] | None = None, engine: EngineChoice = "transformers",
                 streaming: bool = False, stop: threading.Event | None = None, record_excess: bool = False,
                 **generate_kwargs) -> Iterator[pd.DataFrame]:
    """The core of ``compare`` and ``stream_compare``: the tidy frame of every method x seed x prompt under
    ``settings``, after every step when ``streaming``, else once (``stop``: see ``decoded_rows``). With
    ``record_excess`` the final frame has one more column, "excess_surprise" (``Batch``; NaN until then)."""
    check_stop(stop)
    batch, ensembled = prepare(prompts, check_settings(settings), model, rewordings, engine, record_excess,
                               **generate_kwargs)
    for rows in decoded_rows(batch, streaming, stop):
        yield frame(batch, rows, ensembled)


def frame(batch: Batch, decoded: list[dict], ensembled: bool) -> pd.DataFrame:
    """``compare``'s tidy frame of a batch's decoded rows. ``ensemble``, one value for the whole frame as in a sweep's
    cell: the rewordings per prompt (those the model wrote, or the most given for a prompt; 0 where none)."""
    prompts = list(dict.fromkeys(row.prompt for row in batch.rows))
    settings = batch.settings
    rewordings = settings.ensemble or max((len(row.rewordings) for row in batch.rows), default=0) if ensembled else 0
    records = [
        {"prompt_index": prompts.index(row.prompt), "prompt": row.prompt, "method": row.method, "seed": row.seed,
         "temperature": settings.temperature, "top_k": settings.top_k, "top_p": settings.top_p,
         "ensemble": rewordings, **result}
        for row, result in zip(batch.rows, decoded, strict=True)
    ]
    table = pd.DataFrame.from_records(records, columns=list(FRAME_COLUMNS))
    if batch.record_excess:
        table["excess_surprise"] = [result.get("excess", math.nan) for result in decoded]
    return table
