"""Does the model stand behind these answers? Excess surprise: how much more its tokens surprise the model than
the model's own samples would.

    gcs.excess_surprise(["Why is the sky blue?"], ["Because air scatters blue light."])  # -> array([-0.4])

For each token ``y_t`` of a response, under the model at temperature 1 (no truncation): its surprise
``-log p(y_t)`` minus the entropy ``H(p_t)`` of that step's distribution. For the model's own samples
at temperature 1 each term has mean 0 (the entropy *is* the expected surprise), so a response's mean
excess is near 0; at low temperatures it is negative (the likeliest words); text the model would not
write (high temperatures, shared noise forcing unlikely tokens everywhere) is far above 0. Agreement
between such answers is agreement between noise, not consistency: ``degenerate`` flags a run whose
median excess is above ``DEGENERATE_EXCESS`` nats per token (calibrated on the built-in sets,
``bench/bench_surprise.py``; docs/experiments.md, *The verdict*).

Generation can record the same quantity as it goes, from the logits it computes anyway (``gcs.sampling.processor.
ExcessRecorder``, a frame's "excess_surprise" column from ``gcs.generation.cores.compare_with(record_excess=True)``):
``gcs.compare_rounds`` does, so the flag costs no second pass over the answers (on vLLM too, where its engine runs
in this process: the plugin records it, ``gcs.vllm.excess``). ``excess_surprise`` is that pass,
for answers from elsewhere (texts, or the token ids a frame holds: exactly the tokens drawn).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np
import torch

from gcs.engines.models import Model, resolve_model
from gcs.engines.prompts import format_prompt
from gcs.engines.transformers import generating
from gcs.runtime.arguments import ArgumentTypeError, check_prompts, check_texts, is_integer
from gcs.runtime.stage_timing import timed
from gcs.stats.paired import DEGENERATE_EXCESS, degenerate  # noqa: F401  (the rule, kept where the verdict reads it)

ROWS_PER_PASS = 8  # responses scored per forward pass (the [rows, length, vocab] logits stay small)


def excess_surprise(prompts: Sequence[str], responses: Sequence[str] | Sequence[Sequence[int]],
                    *, model: Model | str | None = None) -> np.ndarray:
    """Each response's mean excess surprise under the model, in nats: the degenerate-output rule's measure.

    Args:
        prompts: the prompts.
        responses: one per prompt (at the same index): texts, or token id lists (a frame's token_ids: the tokens
            drawn, which a text need not encode back to).
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.

    Returns:
        One value per response (NaN for an empty one).

    Examples:
        On the embedded model:

        >>> excess_surprise(["What is DNA?"], ["DNA is a molecule."]).shape
        (1,)
    """
    prompts = check_prompts(prompts)
    given_ids = isinstance(responses, Sequence) and not isinstance(responses, str) and len(responses) > 0 and \
        all(not isinstance(r, str) and isinstance(r, Sequence) for r in responses)
    if not given_ids:  # then texts (check_texts refuses anything else)
        responses = check_texts(cast("Sequence[str]", responses), "responses")
    if len(prompts) != len(responses):
        raise ValueError(f"{len(prompts)} prompts but {len(responses)} responses: give one prompt per response")
    model = resolve_model(model)
    tokenizer: Any = model.tokenizer  # a transformers tokenizer (gcs.Model types it as object)
    given = [_token_ids(r, len(tokenizer), f"responses[{i}]") for i, r in enumerate(responses)] if given_ids else []
    pairs: list[tuple[list[int], list[int]]] = []
    for i, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        context = tokenizer(format_prompt(prompt, tokenizer=tokenizer, is_chat=model.is_chat),
                            add_special_tokens=not model.is_chat)["input_ids"]
        pairs.append((list(context), given[i] if given_ids else tokenizer.encode(response, add_special_tokens=False)))
    excess = np.full(len(pairs), np.nan)
    for start in range(0, len(pairs), ROWS_PER_PASS):
        chunk = pairs[start : start + ROWS_PER_PASS]
        excess[start : start + len(chunk)] = _mean_excess(chunk, model)
    return excess


def _token_ids(response: Sequence[Any], vocab: int, name: str) -> list[int]:  # as given: checked here
    if not all(is_integer(i) for i in response):
        raise ArgumentTypeError(f"{name} must be token ids: whole numbers in [0, {vocab})")
    if not all(0 <= i < vocab for i in response):
        raise ValueError(f"{name} must be token ids: whole numbers in [0, {vocab})")
    return [int(i) for i in response]


@torch.inference_mode()
def _mean_excess(pairs: list[tuple[list[int], list[int]]], model: Model) -> list[float]:
    width = max(len(c) + len(r) for c, r in pairs)
    tokenizer: Any = model.tokenizer  # a transformers tokenizer (gcs.Model types it as object)
    pad = tokenizer.pad_token_id
    ids = torch.tensor([[pad] * (width - len(c) - len(r)) + c + r for c, r in pairs], device=model.device)
    mask = torch.tensor([[0] * (width - len(c) - len(r)) + [1] * (len(c) + len(r)) for c, r in pairs],
                        device=model.device)
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)
    keep = 1 + max(len(r) for _, r in pairs)  # the vocabulary projection only where a response token is chosen
    with generating(model, row_invariant=False):  # eval mode (no dropout) for the call; the model left as given
        logits = model.model(input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=keep).logits
    means = []
    for row, (_, response) in enumerate(pairs):
        if not response:
            means.append(float("nan"))
            continue
        steps = logits[row, keep - len(response) - 1 : keep - 1].float()  # the distributions that chose each token
        log_p = torch.log_softmax(steps, dim=-1)
        entropy = -(log_p.exp() * log_p).sum(dim=-1)
        surprise = -log_p.gather(-1, torch.tensor(response, device=log_p.device)[:, None]).squeeze(-1)
        means.append(float((surprise - entropy).mean()))
    return means


def frame_excess(frame, model: Model) -> tuple[float, ...]:
    """The excess surprise of a ``gcs.compare`` frame's answers: its "excess_surprise" column where generation
    recorded it (``compare_with(record_excess=True)`` on transformers, or on vLLM in this process), else a pass of the
    model over the tokens drawn (its token_ids: served endpoints, vLLM in worker processes, a frame from elsewhere)."""
    recorded = frame["excess_surprise"] if "excess_surprise" in frame else None
    if recorded is not None and (recorded.notna().any() or (frame["n_tokens"] == 0).all()):
        return tuple(float(x) for x in recorded)
    with timed("surprise", answers=len(frame)):
        return tuple(float(x) for x in excess_surprise(list(frame["prompt"]), list(frame["token_ids"]), model=model))
