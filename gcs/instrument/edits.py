"""Counterfactual edits: what would the model have said had it written something else at one point?

    gcs.counterfactual("Name a fruit.", "Apples are sweet.", at=0, replacement=" Lemons")
    # -> 'Lemons are sour ...': the same luck as the response, with its first token changed

The noise is drawn from its posterior given the response (``gcs.hindsight``), the response is
replayed up to token ``at`` (as the model tokenizes it), the replacement is forced there, and the
model goes on with the posterior noise. The forced step keeps the race: it runs as it did for the
response (its winner, the original token, is the one whose noise is renewed and every other
token keeps its recycled residual), and the forced token, when it is another one, renews its
noise too (``gcs.Sampler.force``). Averaged over responses, that state is iid Exp(1) whatever was
forced, so the continuation is an exact sample of the model given the edited prefix; with the
original token as the replacement nothing changes and the response comes back.

Under GCS later positions keep the response's posterior noise; under IS nothing is shared: the
response's prefix and the replacement are forced and the rest is an ordinary IS sample.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from gcs.checks import DEFAULT_MAX_NEW_TOKENS, quoted
from gcs.engines.batch import Batch, Row, check_plain_text, prompt_stream
from gcs.engines.models import Model, resolve_model
from gcs.instrument.forcing import Response, refuse_end_of_turn, response_ids
from gcs.instrument.replay import check_observation, observed_noise
from gcs.runtime.arguments import ArgumentTypeError, check_stop, is_integer
from gcs.runtime.keywords import keywords_checked
from gcs.sampling.samplers import make_sampler
from gcs.settings import SamplingSettings, one_or_built


def replacement_ids(replacement: str | int | Sequence[int], model: Model) -> list[int]:
    """The token ids to force: a token id, a list of them, or text (tokenized as it would follow earlier text)."""
    tokenizer: Any = model.tokenizer  # a transformers tokenizer (gcs.Model types it as object)
    vocab = len(tokenizer)
    if is_integer(replacement):
        replacement = [replacement]
    if isinstance(replacement, str):
        if not replacement:
            raise ValueError("replacement must be non-empty text or token ids")
        check_plain_text(replacement, model, "the replacement")
        ids = tokenizer.encode(replacement, add_special_tokens=False)
    elif isinstance(replacement, Sequence) and all(is_integer(i) for i in replacement):
        if not replacement:
            raise ValueError(f"replacement must be text, a token id or a list of token ids, got {quoted(replacement)}")
        ids = list(replacement)
    else:
        raise ArgumentTypeError(f"replacement must be text, a token id or a list of token ids, got "
                                f"{type(replacement).__name__} {quoted(replacement)}")
    if not ids or any(not 0 <= i < vocab for i in ids):
        raise ValueError(f"replacement token ids must be in [0, {vocab}), got {quoted(ids)}")
    return refuse_end_of_turn(ids, model, "the replacement", "a response holds none inside it (a finished "
                              "response's end is its last token, which can be replaced)")


def counterfactual_with(prompt: str, response: Response, at: int, replacement: str | int | Sequence[int],
                        settings: SamplingSettings, finished: bool = True, model: Model | str | None = None,
                        stop: threading.Event | None = None) -> str:
    """The core of ``counterfactual``: ``settings`` hold one method and one seed."""
    check_stop(stop)
    method, seed = check_observation(prompt, settings, finished)
    model = resolve_model(model)
    check_plain_text(prompt, model, "prompt")
    ids = response_ids(response, model)
    if not is_integer(at):
        raise ArgumentTypeError(f"at must index the response's {len(ids)} tokens (0 to {len(ids) - 1 + finished}), "
                                f"got {type(at).__name__} {quoted(at)}")
    if not 0 <= at < len(ids) + finished:
        raise ValueError(f"at must index the response's {len(ids)} tokens (0 to {len(ids) - 1 + finished}), "
                         f"got {quoted(at)}")
    forced = replacement_ids(replacement, model)
    if at + len(forced) >= settings.max_new_tokens:
        raise ValueError(f"max_new_tokens={settings.max_new_tokens} leaves no room after the replacement "
                         f"(it ends at token {at + len(forced)})")
    if method == "is":  # nothing shared: force the prefix too, then sample afresh
        sampler = make_sampler("is", seed=seed, streams=[prompt_stream(prompt)])  # the row's own stream, as generate's
        forced, at = [*ids[:at], *forced], 0
    else:
        sampler = observed_noise(prompt, ids, settings, finished, model, stop=stop).sampler()
    for offset, token in enumerate(forced):
        sampler.force(at + offset, [token])
    batch = Batch([Row(prompt, method, seed)], model, settings, sampler=sampler)
    tokens = batch.complete(stop)
    if method != "is" and tokens[0, :at].tolist() != ids[:at]:  # the premise: the replay follows the response
        raise RuntimeError("the replay parted from the response before the edit; please report this")
    return batch.decode(tokens)[0]["response"]


@keywords_checked
def counterfactual(prompt: str, response: Response, at: int, replacement: str | int | Sequence[int],
                   *, method: str = "gcswr", seed: int = 0, temperature: float = 1.0, top_p: float | None = None,
                   max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, finished: bool = True,
                   model: Model | str | None = None, stop: threading.Event | None = None,
                   settings: SamplingSettings | None = None) -> str:
    """The response to ``prompt`` had it written ``replacement`` at token ``at``, with the response's luck.

    The noise is drawn from its posterior given the response (as ``gcs.hindsight``), the response is replayed up to
    token ``at``, the replacement is forced there, and the model goes on with the posterior noise: an exact sample given
    the edited prefix. Replacing a token by itself gives the response back.

    Args:
        prompt: the prompt that got the response.
        response: text or token ids, as in ``gcs.hindsight``.
        at: the index of the token to replace (``gcs.response_tokens``); equal to their number, it replaces the end
            of a finished response.
        replacement: text, a token id or a list of ids, forced from ``at`` on.
        method: "gcswr", "gcs" or "is" ("ctx" with ``settings`` and its ``context``: docs/context.md).
        seed: picks the posterior draw.
        temperature: above 0.
        top_p: nucleus sampling's mass, in (0, 1] (None: off).
        max_new_tokens: bounds the whole counterfactual response.
        finished: the response ended there (its end of turn was observed).
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.
        stop: a ``threading.Event`` that ends the work after the current token with ``gcs.Cancelled``.
        settings: a ``gcs.SamplingSettings`` of one method and one seed, in place of method ... max_new_tokens.

    Returns:
        The counterfactual response as text: the tokens before ``at`` unchanged, the replacement, then the model's
        continuation.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: ``at`` out of range, a response the settings make impossible, or another bad value.

    Examples:
        On the embedded model (what follows an edit depends on the machine's kernels; replacing a token by itself
        does not):

        >>> import gcs
        >>> gcs.counterfactual("Name a fruit.", "Apples are sweet.", at=0, replacement=" Lemons",
        ...                    seed=1).startswith("Lemons")
        True
        >>> gcs.counterfactual("Name a fruit.", "Apples are sweet.", at=2, replacement=" are", seed=1)
        'Apples are sweet.'
    """
    settings = one_or_built(counterfactual, settings, method=method, seed=seed, temperature=temperature,
                            top_p=top_p, max_new_tokens=max_new_tokens, takes_top_k=False)
    return counterfactual_with(prompt, response, at, replacement, settings, finished, model, stop)


def response_tokens(response: Response, *, model: Model | str | None = None) -> list[str]:
    """The response's tokens as text pieces: what ``counterfactual``'s ``at`` indexes.

    Args:
        response: text (tokenized as the model reads it) or token ids.
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.

    Returns:
        One text piece per token.

    Examples:
        On the embedded model's tokenizer:

        >>> import gcs
        >>> gcs.response_tokens("Apples are sweet.")
        ['App', 'les', ' are', ' sweet', '.']
    """
    model = resolve_model(model)
    tokenizer: Any = model.tokenizer  # a transformers tokenizer (gcs.Model types it as object)
    return [tokenizer.decode([i]) for i in response_ids(response, model)]
