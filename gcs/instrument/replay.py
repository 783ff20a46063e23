"""Hindsight: what would the model have said to a paraphrase, with the same luck?

    gcs.hindsight("Why is the sky blue?", "The sky looks blue because", ["What makes the sky blue?"])
    # -> one answer per paraphrase, generated with noise drawn from its posterior given the response

A response ``Y`` to prompt ``A`` says something about the noise that produced it. Hindsight
samples the shared noise from its posterior given that ``A`` produced ``Y`` (``gcs.posterior``, from
the teacher-forced probabilities of ``Y`` under ``A``), then answers each paraphrase ``B`` with that
noise: a draw of what coupled sampling would have answered to ``B`` in a world where ``A`` got ``Y``.
Under IS the responses' randomness is independent, so ``B``'s answer is independent of ``Y``.

A finished response (``finished=True``, the default) is observed with its end: the model emitted
one of its end-of-turn tokens right after ``Y``.

The posterior is computed from the very logits generation uses: ``Y`` is teacher-forced through the
same ``generate`` path, one row alone, as the replay then runs (``forced_logits``). A replay of ``A``
with posterior noise therefore reproduces ``Y`` exactly, at any dtype and on any device (checked on
every draw; ``hindsight_report`` shows it).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from typing_extensions import Unpack

from gcs.checks import DEFAULT_MAX_NEW_TOKENS
from gcs.engines.batch import Batch, Row, check_plain_text, stop_token_ids
from gcs.engines.models import Model, resolve_model
from gcs.instrument.conditioning import Posterior, posterior
from gcs.instrument.forcing import Response, forced_logits, reads_back, response_ids
from gcs.runtime.arguments import ArgumentTypeError, check_prompts, check_stop
from gcs.runtime.keywords import GenerateOptions
from gcs.runtime.quoting import quoted
from gcs.settings import SamplingSettings, check_generate_kwargs, one_or_built


@dataclass(frozen=True)
class HindsightReport:
    """``hindsight_report``'s answer.

    Attributes:
        answers: one per paraphrase.
        method: the method.
        finished: whether the response was observed ending.
        response_tokens: the response's tokens as text pieces.
        replay: the prompt itself answered with the same posterior noise (None under IS, whose answers are independent
            of the response): it reproduces the response, end included when ``finished``.
        replay_finished: whether the replay ended.
        parted_at: None when the replay reproduces the response, else the index of the first token where it differs
            (it never should: the premise of hindsight).
        reads_back: whether the response's text tokenizes back to the observed tokens (False only for token ids that
            its text cannot give).
    """

    answers: list[str]
    method: str
    finished: bool
    response_tokens: list[str]
    replay: str | None = None
    replay_finished: bool | None = None
    parted_at: int | None = None
    reads_back: bool = True

    @property
    def replayed(self) -> bool | None:
        """Whether the replay reproduced the response exactly (None under IS)."""
        return None if self.replay is None else self.parted_at is None


def _first_difference(expected: Sequence[int], got: Sequence[int]) -> int | None:
    """The first index where two token lists differ (a shorter list differs at its end), or None.

    >>> _first_difference([1, 2, 3], [1, 2, 3]), _first_difference([1, 2, 3], [1, 5]), _first_difference([1], [1, 2])
    (None, 1, 1)
    """
    for i, (a, b) in enumerate(zip(expected, got, strict=False)):  # up to the shorter list's end
        if a != b:
            return i
    return None if len(expected) == len(got) else min(len(expected), len(got))


def check_observation(prompt: str, settings: SamplingSettings, finished: bool) -> tuple[str, int]:
    """The method and seed of an observed response's settings, after checking what hindsight and counterfactuals
    need: a prompt, ``finished`` a bool, one method and one seed, and a temperature above 0 (luck to share)."""
    if not isinstance(prompt, str):
        raise ArgumentTypeError(f"prompt must be non-blank text, got {type(prompt).__name__}")
    if not prompt.strip():
        raise ValueError("prompt must be non-blank text")
    if not isinstance(finished, bool):
        raise ArgumentTypeError(f"finished must be True or False, got {type(finished).__name__} {quoted(finished)}")
    method_and_seed = settings.method_and_seed()
    if settings.temperature == 0:
        raise ValueError("at temperature 0 every method is greedy: there is no luck to share; use a temperature "
                         "above 0")
    return method_and_seed


def observed_noise(prompt: str, ids: Sequence[int], settings: SamplingSettings, finished: bool,
                   model: Model, generate_kwargs: dict | None = None, stop: threading.Event | None = None) -> Posterior:
    """The posterior of the noise given that ``prompt`` got the response ``ids`` (then ended, when ``finished``)."""
    logits = forced_logits(prompt, ids, model, settings, finished, generate_kwargs, stop)
    ends = stop_token_ids(model) if finished else None
    return posterior(settings.methods[0], logits, torch.tensor([list(ids)], dtype=torch.long), seed=settings.seeds[0],
                     ends=ends, context=settings.context)


def hindsight_with(prompt: str, response: Response, paraphrases: Sequence[str], settings: SamplingSettings,
                   finished: bool = True, model: Model | str | None = None, stop: threading.Event | None = None,
                   **generate_kwargs) -> HindsightReport:
    """The core of ``hindsight`` and ``hindsight_report``: ``settings`` hold one method and one seed."""
    check_stop(stop)
    method, seed = check_observation(prompt, settings, finished)
    paraphrases = check_prompts(paraphrases, "paraphrases")
    model = resolve_model(model)
    check_plain_text(prompt, model, "prompt")
    check_plain_text(paraphrases, model, "paraphrases")
    ids = response_ids(response, model)
    tokenizer: Any = model.tokenizer  # a transformers tokenizer (gcs.Model types it as object)
    tokens = [tokenizer.decode([i]) for i in ids]
    read_back = isinstance(response, str) or reads_back(ids, model=model)
    if method == "is":  # nothing shared: an ordinary IS sample for each paraphrase
        batch = Batch([Row(b, method, seed) for b in paraphrases], model, settings, dict(generate_kwargs))
        return HindsightReport([r["response"] for r in batch.decode(batch.complete(stop))], method, finished, tokens,
                               reads_back=read_back)
    noise = observed_noise(prompt, ids, settings, finished, model, generate_kwargs, stop)
    questions = [prompt, *paraphrases]
    batch = Batch([Row(q, method, seed) for q in questions], model, settings, dict(generate_kwargs),
                  sampler=noise.select([0] * len(questions)).sampler())
    if batch.runner.row_invariant:
        decoded = batch.decode(tokens_out := batch.complete(stop))
        replay_ids = batch.until_stop(tokens_out[batch.main[0]].tolist())[0]
    else:  # the replay alone, as the posterior's logits were computed; the paraphrases apart
        alone = Batch(batch.rows[:1], model, settings, dict(generate_kwargs), sampler=noise.sampler())
        replay_tokens = alone.complete(stop)
        replay_ids = alone.until_stop(replay_tokens[0].tolist())[0]
        rest = Batch(batch.rows[1:], model, settings, dict(generate_kwargs),
                     sampler=noise.select([0] * len(paraphrases)).sampler())
        decoded = alone.decode(replay_tokens) + rest.decode(rest.complete(stop))
    replay, answers = decoded[0], [row["response"] for row in decoded[1:]]
    shown = min(len(ids), settings.max_new_tokens)  # the replay runs under the answers' token limit
    parted = _first_difference(list(ids[:shown]), replay_ids[:shown])
    if parted is None and finished and len(ids) < settings.max_new_tokens and (
            len(replay_ids) != len(ids) or not replay["finished"]):
        parted = len(ids)  # it should have ended here
    return HindsightReport(answers, method, finished, tokens, replay["response"], replay["finished"], parted, read_back)


def hindsight_report(prompt: str, response: Response, paraphrases: Sequence[str], *, method: str = "gcswr",
                     seed: int = 0, temperature: float = 1.0, top_p: float | None = None,
                     max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, finished: bool = True,
                     model: Model | str | None = None, stop: threading.Event | None = None,
                     settings: SamplingSettings | None = None,
                     **generate_kwargs: Unpack[GenerateOptions]) -> HindsightReport:
    """``hindsight``'s answers with the replay check: the prompt answered with the same posterior noise.

    The replay runs through the path the posterior was computed on (the prompt alone, or in the same batch as the
    paraphrases where the model's rows are computed independently, ``gcs.engines.invariance``).

    Args:
        prompt: the prompt that got the response.
        response: text (typed in), tokenized with the model's tokenizer, or token ids (a ``gcs.compare`` frame's
            ``token_ids``: exactly the tokens that were generated, which text does not always give back, see
            ``reads_back``).
        paraphrases: the prompts to answer with that noise.
        method: "gcswr" or "gcs" share noise with the response (so does "ctx", given with ``settings`` and its
            ``context``: docs/context.md); under "is" a paraphrase's answer is independent of it (an ordinary IS
            sample).
        seed: picks the posterior draw.
        temperature: above 0 (no luck to share at 0).
        top_p: nucleus sampling's mass, in (0, 1] (None: off).
        max_new_tokens: at most ``MAX_NEW_TOKENS``.
        finished: the response ended there (the model's end-of-turn token is part of what was observed); False: it
            is the beginning of a longer answer.
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.
        stop: a ``threading.Event`` that ends the work after the current token with ``gcs.Cancelled``.
        settings: a ``gcs.SamplingSettings`` of one method and one seed, in place of method ... max_new_tokens.
        **generate_kwargs: passed to transformers' ``generate`` (hindsight runs on the transformers engine).

    Returns:
        A ``HindsightReport``: the answers, the replay and whether it reproduced the response.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a response the settings make impossible (top-p), an end-of-turn token inside it, an empty one,
            more than 1,024 tokens, or a temperature of 0.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> report = gcs.hindsight_report("Name a colour.", "Blue.", ["Tell me a colour."], seed=3)
        >>> report.replay, report.parted_at
        ('Blue.', None)
    """
    check_generate_kwargs(hindsight_report, generate_kwargs)
    settings = one_or_built(hindsight_report, settings, method=method, seed=seed, temperature=temperature,
                            top_p=top_p, max_new_tokens=max_new_tokens, takes_top_k=False)
    return hindsight_with(prompt, response, paraphrases, settings, finished, model, stop, **generate_kwargs)


def hindsight(prompt: str, response: Response, paraphrases: Sequence[str], *, method: str = "gcswr", seed: int = 0,
              temperature: float = 1.0, top_p: float | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
              finished: bool = True,
              model: Model | str | None = None, stop: threading.Event | None = None,
              settings: SamplingSettings | None = None, **generate_kwargs: Unpack[GenerateOptions]) -> list[str]:
    """One answer per paraphrase, with the noise drawn from its posterior given that ``prompt`` got ``response``.

    Replaying the prompt itself (``paraphrases=[prompt]``) gives the response back, end included when finished, to the
    token (``hindsight_report`` checks it).

    Args:
        prompt: the prompt that got the response.
        response: text (typed in), tokenized with the model's tokenizer, or token ids (a ``gcs.compare`` frame's
            ``token_ids``: exactly the tokens that were generated, which text does not always give back, see
            ``reads_back``).
        paraphrases: the prompts to answer with that noise.
        method: "gcswr" or "gcs" share noise with the response (so does "ctx", given with ``settings`` and its
            ``context``: docs/context.md); under "is" a paraphrase's answer is independent of it (an ordinary IS
            sample).
        seed: picks the posterior draw.
        temperature: above 0 (no luck to share at 0).
        top_p: nucleus sampling's mass, in (0, 1] (None: off).
        max_new_tokens: at most ``MAX_NEW_TOKENS``.
        finished: the response ended there (the model's end-of-turn token is part of what was observed); False: it
            is the beginning of a longer answer.
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.
        stop: a ``threading.Event`` that ends the work after the current token with ``gcs.Cancelled``.
        settings: a ``gcs.SamplingSettings`` of one method and one seed, in place of method ... max_new_tokens.
        **generate_kwargs: passed to transformers' ``generate`` (hindsight runs on the transformers engine).

    Returns:
        One answer per paraphrase.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a response the settings make impossible (top-p), an end-of-turn token inside it, an empty one,
            more than 1,024 tokens, or a temperature of 0.

    Examples:
        On the embedded model (the answers depend on the machine's kernels; the replay of the prompt itself does not):

        >>> import gcs
        >>> gcs.hindsight("Name a colour.", "Blue.", ["Name a colour.", "Tell me a colour."], seed=3)[0]
        'Blue.'
        >>> ids = gcs.load_model().tokenizer.encode("Blue.", add_special_tokens=False)
        >>> gcs.hindsight("Name a colour.", ids, ["Name a colour."], seed=3)  # the response as its token ids
        ['Blue.']
    """
    check_generate_kwargs(hindsight, generate_kwargs)
    settings = one_or_built(hindsight, settings, method=method, seed=seed, temperature=temperature,
                            top_p=top_p, max_new_tokens=max_new_tokens, takes_top_k=False)
    return hindsight_with(prompt, response, paraphrases, settings, finished, model, stop, **generate_kwargs).answers
