"""Side-by-side generation's public entry points: ``generate``, ``stream``, ``compare``, ``stream_compare``.

    gcs.generate(["What is DNA?", "Explain what DNA is."], method="gcswr", seed=0)
    # -> ['DNA, or deoxyribonucleic acid, is ...', 'DNA, or deoxyribonucleic acid, is ...']

Each takes keyword arguments (or one ``SamplingSettings``), builds the settings and runs one core of
``gcs.generation.cores``: every prompt x method x seed in one batched ``model.generate`` call.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import cast

import pandas as pd
from typing_extensions import Unpack

from gcs.checks import DEFAULT_MAX_NEW_TOKENS, METHODS
from gcs.engines.endpoints import EngineChoice
from gcs.engines.models import Model
from gcs.generation.cores import compare_with, generate_with
from gcs.runtime.arguments import is_integer
from gcs.runtime.keywords import GenerateOptions
from gcs.settings import SamplingSettings, check_generate_kwargs, one_or_built, settings_for

__all__ = ["generate", "stream", "compare", "stream_compare"]

Ensemble = None | int | Sequence[Sequence[str]]


def _ensemble(ensemble: Ensemble) -> tuple[int | None, Sequence[Sequence[str]] | None]:
    """``ensemble`` as (the setting: rewordings the model writes per prompt, None when off or given; the explicit
    rewordings or None). Off and explicit rewordings are no setting: they stand beside ``settings``, as the default.

    >>> _ensemble(None), _ensemble(0), _ensemble(2), _ensemble([["Explain DNA."]])
    ((None, None), (None, None), (2, None), (None, [['Explain DNA.']]))
    """
    if ensemble is None or is_integer(ensemble):
        return ensemble or None, None
    return None, cast("Sequence[Sequence[str]]", ensemble)  # neither off nor a count: rewordings (prepare checks them)


def generate(prompts: Sequence[str], *, method: str = "gcswr", seed: int = 0, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
             model: Model | str | None = None, ensemble: Ensemble = None, engine: str = "transformers",
             settings: SamplingSettings | None = None, stop: threading.Event | None = None,
             **generate_kwargs: Unpack[GenerateOptions]) -> list[str]:
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
    check_generate_kwargs(generate, generate_kwargs)
    count, rewordings = _ensemble(ensemble)
    settings = one_or_built(generate, settings, method=method, seed=seed, temperature=temperature, top_k=top_k,
                            top_p=top_p, max_new_tokens=max_new_tokens, ensemble=count)
    (responses,) = generate_with(prompts, settings, model, rewordings, engine, stop=stop, **generate_kwargs)
    return responses


def stream(prompts: Sequence[str], *, method: str = "gcswr", seed: int = 0, temperature: float = 1.0,
           top_k: int | None = None, top_p: float | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
           model: Model | str | None = None, ensemble: Ensemble = None, engine: str = "transformers",
           settings: SamplingSettings | None = None, stop: threading.Event | None = None,
           **generate_kwargs: Unpack[GenerateOptions]) -> Iterator[list[str]]:
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
    check_generate_kwargs(stream, generate_kwargs)
    count, rewordings = _ensemble(ensemble)
    settings = one_or_built(stream, settings, method=method, seed=seed, temperature=temperature, top_k=top_k,
                            top_p=top_p, max_new_tokens=max_new_tokens, ensemble=count)
    yield from generate_with(prompts, settings, model, rewordings, engine, streaming=True, stop=stop,
                             **generate_kwargs)


def compare(prompts: Sequence[str], *, methods: Sequence[str] | str = METHODS, seeds: Iterable[int] | int = (0,),
            temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
            max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
            model: Model | str | None = None, ensemble: Ensemble = None, settings: SamplingSettings | None = None,
            engine: EngineChoice = "transformers", stop: threading.Event | None = None,
            **generate_kwargs: Unpack[GenerateOptions]) -> pd.DataFrame:
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
    check_generate_kwargs(compare, generate_kwargs)
    count, rewordings = _ensemble(ensemble)
    settings = settings_for(compare, settings, methods=methods, seeds=seeds, temperature=temperature, top_k=top_k,
                            top_p=top_p, max_new_tokens=max_new_tokens, ensemble=count)
    (table,) = compare_with(prompts, settings, model, rewordings, engine, stop=stop, **generate_kwargs)
    return table


def stream_compare(prompts: Sequence[str], *, methods: Sequence[str] | str = METHODS,
                   seeds: Iterable[int] | int = (0,), temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                   model: Model | str | None = None,
                   ensemble: Ensemble = None, settings: SamplingSettings | None = None,
                   engine: EngineChoice = "transformers", stop: threading.Event | None = None,
                   **generate_kwargs: Unpack[GenerateOptions]) -> Iterator[pd.DataFrame]:
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
    check_generate_kwargs(stream_compare, generate_kwargs)
    count, rewordings = _ensemble(ensemble)
    settings = settings_for(stream_compare, settings, methods=methods, seeds=seeds, temperature=temperature,
                            top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens, ensemble=count)
    yield from compare_with(prompts, settings, model, rewordings, engine, streaming=True, stop=stop, **generate_kwargs)
