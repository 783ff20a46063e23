"""Side-by-side generation: many prompts x methods x seeds in one batched ``model.generate`` call.

    gcs.generate(["What is DNA?", "Explain what DNA is."], method="gcswr", seed=0)
    # -> ['DNA, or deoxyribonucleic acid, is ...', 'DNA, or deoxyribonucleic acid, is ...']

Every row is one response (``gcs.engines.batch``). With ensembling, a prompt's rewordings join
the batch as extra rows of its group; an ``EnsembleLogitsProcessor`` gives the group the
geometric mean of their next-token distributions, and all rows of the group append the
same token, sharing the response prefix.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import cast

import pandas as pd

from gcs.checks import (
    DEFAULT_MAX_NEW_TOKENS,
    MAX_NEW_TOKENS,
    METHODS,
    ArgumentTypeError,
    check_engine,
    check_prompts,
    check_stop,
    is_integer,
)
from gcs.engines.batch import Batch, Row, check_plain_text
from gcs.engines.endpoints import EngineChoice
from gcs.engines.models import Model, resolve_model
from gcs.rewording import reword
from gcs.settings import SamplingSettings, check_settings, one_or_built, refuse_beside

__all__ = ["MAX_NEW_TOKENS", "generate", "stream", "compare", "stream_compare", "generate_with", "compare_with",
           "prepare"]

Ensemble = None | int | Sequence[Sequence[str]]
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


def _ensemble(ensemble: Ensemble) -> tuple[int, Sequence[Sequence[str]] | None]:
    """``ensemble`` as (rewordings the model writes per prompt, explicit rewordings or None).

    >>> _ensemble(None), _ensemble(2), _ensemble([["Explain DNA."]])
    ((0, None), (2, None), (0, [['Explain DNA.']]))
    """
    if ensemble is None or is_integer(ensemble):
        return (ensemble if is_integer(ensemble) else 0), None
    return 0, cast("Sequence[Sequence[str]]", ensemble)  # neither off nor a count: rewordings (prepare checks them)


def _many(settings, caller: str, methods, seeds, temperature, top_k, top_p, max_new_tokens, count) -> SamplingSettings:
    """``compare``'s settings: ``settings`` (refused beside an argument it replaces), else the arguments'."""
    refuse_beside(settings, caller, methods=(methods, METHODS), seeds=(seeds, (0,)), temperature=(temperature, 1.0),
                  top_k=(top_k, None), top_p=(top_p, None), max_new_tokens=(max_new_tokens, DEFAULT_MAX_NEW_TOKENS),
                  ensemble=(count, 0))
    return SamplingSettings(methods, seeds, temperature, top_k, top_p, max_new_tokens, count) if settings is None \
        else settings


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


def generate(prompts: Sequence[str], *, method: str = "gcswr", seed: int = 0, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
             model: Model | str | None = None, ensemble: Ensemble = None, engine: str = "transformers",
             settings: SamplingSettings | None = None, stop: threading.Event | None = None,
             **generate_kwargs) -> list[str]:
    """One response per prompt, all rows in one batched ``generate`` (KV cache, left padding).

    Follow-up turns the model invents after its answer are removed (``compare`` keeps the raw text).

    Args:
        prompts: the prompts, each a user question.
        method: "is", "gcs", "gcswr" or "ctx"; responses generated with one ``seed`` share their noise.
        seed: the seed, in [0, 2**63 - 1].
        temperature: 0 is greedy (all methods agree); else at least ``MIN_TEMPERATURE``.
        top_k: keep the k likeliest tokens (None: all).
        top_p: nucleus sampling's mass, in (0, 1] (None: off).
        max_new_tokens: at most ``MAX_NEW_TOKENS`` (1024).
        model: a loaded ``gcs.Model``, a transformers id or local path, or None for the embedded default.
        ensemble: None (off), one list of rewordings per prompt, or a number of rewordings for the model to write
            itself (section 5).
        engine: "transformers", or "vllm" to run the same samplers inside vLLM (``gcs.vllm.plugin``; no ensembling
            there).
        settings: a ``gcs.SamplingSettings`` of one method and one seed, in place of method ... max_new_tokens and a
            count of rewordings.
        stop: a ``threading.Event``; setting it (from another thread) ends the work after its current step with
            ``gcs.Cancelled``.
        **generate_kwargs: passed to transformers' ``generate`` (e.g. ``min_new_tokens``).

    Returns:
        One response per prompt.

    Raises:
        TypeError: an argument of the wrong type, naming it.
        ValueError: a bad value (an empty prompt list, a special token in a prompt, a prompt too long for the context
            window after making room for ``max_new_tokens``, ...), before any model work.
        gcs.Cancelled: ``stop`` was set.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> answers = gcs.generate(["What is DNA?", "Explain what DNA is."], seed=0, max_new_tokens=8)
        >>> len(answers), all(isinstance(answer, str) for answer in answers)
        (2, True)
    """
    count, rewordings = _ensemble(ensemble)
    settings = one_or_built(settings, caller="gcs.generate", method=method, seed=seed, temperature=temperature,
                            top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens, ensemble=count)
    (responses,) = generate_with(prompts, settings, model, rewordings, engine, stop=stop, **generate_kwargs)
    return responses


def stream(prompts: Sequence[str], *, method: str = "gcswr", seed: int = 0, temperature: float = 1.0,
           top_k: int | None = None, top_p: float | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
           model: Model | str | None = None, ensemble: Ensemble = None, engine: str = "transformers",
           settings: SamplingSettings | None = None, stop: threading.Event | None = None,
           **generate_kwargs) -> Iterator[list[str]]:
    """Like ``generate``, but yields all partial responses after every token; the last is final.

    Args:
        prompts: the prompts, each a user question.
        method: "is", "gcs", "gcswr" or "ctx"; responses generated with one ``seed`` share their noise.
        seed: the seed, in [0, 2**63 - 1].
        temperature: 0 is greedy (all methods agree); else at least ``MIN_TEMPERATURE``.
        top_k: keep the k likeliest tokens (None: all).
        top_p: nucleus sampling's mass, in (0, 1] (None: off).
        max_new_tokens: at most ``MAX_NEW_TOKENS`` (1024).
        model: a loaded ``gcs.Model``, a transformers id or local path, or None for the embedded default.
        ensemble: None (off), one list of rewordings per prompt, or a number of rewordings for the model to write
            itself (section 5).
        engine: "transformers", or "vllm" to run the same samplers inside vLLM (``gcs.vllm.plugin``; no ensembling
            there).
        settings: a ``gcs.SamplingSettings`` of one method and one seed, in place of method ... max_new_tokens and a
            count of rewordings.
        stop: a ``threading.Event``; setting it (from another thread) ends the work after its current step with
            ``gcs.Cancelled``.
        **generate_kwargs: passed to transformers' ``generate`` (e.g. ``min_new_tokens``).

    Yields:
        The responses so far, one per prompt.

    Raises:
        TypeError: an argument of the wrong type, naming it.
        ValueError: a bad value (an empty prompt list, a special token in a prompt, a prompt too long for the context
            window after making room for ``max_new_tokens``, ...), before any model work.
        gcs.Cancelled: ``stop`` was set.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> *_, final = gcs.stream(["What is DNA?"], seed=0, max_new_tokens=4)
        >>> final == gcs.generate(["What is DNA?"], seed=0, max_new_tokens=4)
        True
    """
    count, rewordings = _ensemble(ensemble)
    settings = one_or_built(settings, caller="gcs.stream", method=method, seed=seed, temperature=temperature,
                            top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens, ensemble=count)
    yield from generate_with(prompts, settings, model, rewordings, engine, streaming=True, stop=stop,
                             **generate_kwargs)


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


def compare(prompts: Sequence[str], *, methods: Sequence[str] | str = METHODS, seeds: Iterable[int] | int = (0,),
            temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
            max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
            model: Model | str | None = None, ensemble: Ensemble = None, settings: SamplingSettings | None = None,
            engine: EngineChoice = "transformers", stop: threading.Event | None = None,
            **generate_kwargs) -> pd.DataFrame:
    """Every method x seed x prompt, generated in one batch, as a tidy DataFrame.

    Args:
        prompts: the prompts (paraphrases of one question, say).
        methods: a list or a comma-separated string of methods; repeated methods run once.
        seeds: a count n (seeds 0 to n - 1) or a list of seeds; repeated seeds run once.
        temperature: 0 is greedy (all methods agree); else at least ``MIN_TEMPERATURE``.
        top_k: keep the k likeliest tokens (None: all).
        top_p: nucleus sampling's mass, in (0, 1] (None: off).
        max_new_tokens: at most ``MAX_NEW_TOKENS`` (1024).
        model: a loaded ``gcs.Model``, a transformers id or local path, or None for the embedded default.
        ensemble: None (off), one list of rewordings per prompt, or a number of rewordings for the model to write.
        settings: a ``gcs.SamplingSettings`` in place of methods ... max_new_tokens and a count of rewordings.
        engine: "transformers", "vllm" (``gcs.vllm.plugin``) or served endpoints (a ``gcs.Endpoint`` or a list of
            them: several servers, one engine).
        stop: a ``threading.Event``; setting it (from another thread) ends the work after its current step with
            ``gcs.Cancelled``.
        **generate_kwargs: passed to transformers' ``generate``.

    Returns:
        One row per response, with columns prompt_index, prompt, method, seed, temperature, top_k, top_p, ensemble
        (the rewordings per prompt, 0 without ensembling), raw_response, response (follow-ups stripped), n_tokens,
        token_ids (the response's tokens, before the stop token: what ``gcs.hindsight`` and ``gcs.counterfactual``
        take to observe exactly this response), finished (ended with a stop token).

    Raises:
        TypeError: an argument of the wrong type, naming it.
        ValueError: a bad value (an empty prompt list, a special token in a prompt, a prompt too long for the context
            window after making room for ``max_new_tokens``, ...), before any model work.
        gcs.Cancelled: ``stop`` was set.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> frame = gcs.compare(["What is DNA?", "Explain what DNA is."], methods="is,gcswr", seeds=2, max_new_tokens=4)
        >>> len(frame), sorted(set(frame["method"]))
        (8, ['gcswr', 'is'])
    """
    count, rewordings = _ensemble(ensemble)
    settings = _many(settings, "gcs.compare", methods, seeds, temperature, top_k, top_p, max_new_tokens, count)
    (table,) = compare_with(prompts, settings, model, rewordings, engine, stop=stop, **generate_kwargs)
    return table


def stream_compare(prompts: Sequence[str], *, methods: Sequence[str] | str = METHODS,
                   seeds: Iterable[int] | int = (0,), temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                   model: Model | str | None = None,
                   ensemble: Ensemble = None, settings: SamplingSettings | None = None,
                   engine: EngineChoice = "transformers", stop: threading.Event | None = None,
                   **generate_kwargs) -> Iterator[pd.DataFrame]:
    """Like ``compare``, but yields the frame of partial responses after every token; the last is final.

    Args:
        prompts: the prompts (paraphrases of one question, say).
        methods: a list or a comma-separated string of methods; repeated methods run once.
        seeds: a count n (seeds 0 to n - 1) or a list of seeds; repeated seeds run once.
        temperature: 0 is greedy (all methods agree); else at least ``MIN_TEMPERATURE``.
        top_k: keep the k likeliest tokens (None: all).
        top_p: nucleus sampling's mass, in (0, 1] (None: off).
        max_new_tokens: at most ``MAX_NEW_TOKENS`` (1024).
        model: a loaded ``gcs.Model``, a transformers id or local path, or None for the embedded default.
        ensemble: None (off), one list of rewordings per prompt, or a number of rewordings for the model to write.
        settings: a ``gcs.SamplingSettings`` in place of methods ... max_new_tokens and a count of rewordings.
        engine: "transformers", "vllm" (``gcs.vllm.plugin``) or served endpoints (a ``gcs.Endpoint`` or a list of
            them: several servers, one engine).
        stop: a ``threading.Event``; setting it (from another thread) ends the work after its current step with
            ``gcs.Cancelled``.
        **generate_kwargs: passed to transformers' ``generate``.

    Yields:
        The frame so far, with ``compare``'s columns.

    Raises:
        TypeError: an argument of the wrong type, naming it.
        ValueError: a bad value (an empty prompt list, a special token in a prompt, a prompt too long for the context
            window after making room for ``max_new_tokens``, ...), before any model work.
        gcs.Cancelled: ``stop`` was set.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> *_, final = gcs.stream_compare(["What is DNA?"], methods="gcs", max_new_tokens=4)
        >>> list(final["response"]) == list(gcs.compare(["What is DNA?"], methods="gcs", max_new_tokens=4)["response"])
        True
    """
    count, rewordings = _ensemble(ensemble)
    settings = _many(settings, "gcs.stream_compare", methods, seeds, temperature, top_k, top_p, max_new_tokens, count)
    yield from compare_with(prompts, settings, model, rewordings, engine, streaming=True, stop=stop, **generate_kwargs)
