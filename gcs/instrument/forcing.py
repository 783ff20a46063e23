"""An observed response as the model generated it: its token ids, and the logits that picked each of them.

A response is text (tokenized as the model reads it) or the token ids themselves (``reads_back`` says when only the
ids observe it exactly). ``forced_logits`` teacher-forces it through the very ``generate`` path a replay runs, one row
alone, so the logits it returns are the replay's to the bit: what hindsight's posterior and counterfactuals
condition on (``gcs.instrument.replay``, ``gcs.instrument.edits``).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

from gcs.engines.batch import Batch, Row, check_plain_text, stop_token_ids
from gcs.engines.models import Model
from gcs.runtime.arguments import ArgumentTypeError, is_integer
from gcs.runtime.quoting import quoted
from gcs.sampling.samplers import Sampler
from gcs.settings import SamplingSettings

MAX_RESPONSE_TOKENS = 1024


class _TeacherForcing(Sampler):
    """Emits fixed responses, one per row, and keeps every step's warped logits (float32): the logits that
    generation itself computes for those responses, step by step (``forced_logits``)."""

    method = "forced"

    def __init__(self, responses: Sequence[Sequence[int]]):
        self.responses = [list(r) for r in responses]
        self.logits: list[torch.Tensor] = []
        super().__init__(seed=0)

    def _start(self, seeds, streams, state=None):
        if self.batch_size != len(self.responses):
            raise ValueError(f"{len(self.responses)} responses to force but {self.batch_size} rows")

    def _peek(self):
        return torch.zeros(self.batch_size, dtype=torch.float32)

    def _draw(self, logits, row_max, active):
        step = int(self.steps.max())
        self.logits.append(logits.clone())
        self._advance(active)
        return torch.tensor([r[min(step, len(r) - 1)] for r in self.responses], device=logits.device)


Response = str | Sequence[int]  # text (tokenized as the model reads it) or the token ids themselves


def response_ids(response: Response, model: Model) -> list[int]:
    """The token ids of a response: text as the model tokenizes it, or token ids as given (a ``gcs.compare`` frame's
    ``token_ids``: text does not always read back as the tokens that wrote it, see ``reads_back``); a ValueError
    for what cannot be one.

    >>> response_ids(" ", model=None)
    Traceback (most recent call last):
    ...
    ValueError: response must be non-empty text or a list of token ids
    """
    tokenizer: Any  # a transformers tokenizer (gcs.Model types it as object), read once the text is checked
    if isinstance(response, str):
        if not response.strip():
            raise ValueError("response must be non-empty text or a list of token ids")
        check_plain_text(response, model, "the response")  # (ids are checked below for end-of-turn tokens alone)
        tokenizer = model.tokenizer
        ids = tokenizer.encode(response, add_special_tokens=False)
    else:
        tokenizer = model.tokenizer
        ids = _checked_ids(response, len(tokenizer))
    if len(ids) > MAX_RESPONSE_TOKENS:
        raise ValueError(f"the response is {len(ids):,} tokens; at most {MAX_RESPONSE_TOKENS:,}")
    return refuse_end_of_turn(ids, model, "the response", "give the text before it")


def refuse_end_of_turn(ids: Sequence[int], model: Model, what: str, advice: str) -> list[int]:
    """``ids`` if none is an end-of-turn token: a response holds none inside it (it ends there), whether observed
    or written in by a counterfactual edit."""
    ends = set(stop_token_ids(model))
    inside = [i for i, token in enumerate(ids) if token in ends]
    if inside:
        tokenizer: Any = model.tokenizer  # a transformers tokenizer (gcs.Model types it as object)
        raise ValueError(f"{what} holds an end-of-turn token at token {inside[0] + 1} "
                         f"({tokenizer.convert_ids_to_tokens(ids[inside[0]])!r}): {advice}")
    return list(ids)


def _checked_ids(response, vocab: int) -> list[int]:
    """Token ids given as a sequence (a list, a tuple, a 1-d tensor or array) of whole numbers in [0, ``vocab``)."""
    if hasattr(response, "tolist") and not isinstance(response, (list, tuple)):
        response = response.tolist()
    if not isinstance(response, Sequence) or not all(is_integer(i) for i in response):
        raise ArgumentTypeError(f"response must be non-empty text or a list of token ids, got "
                                f"{type(response).__name__} {quoted(response)}")
    if not response:
        raise ValueError("response must be non-empty text or a list of token ids")
    ids = [int(i) for i in response]
    outside = [i for i in ids if not 0 <= i < vocab]
    if outside:
        raise ValueError(f"response token ids must be in [0, {vocab}), got {quoted(outside[0])}")
    return ids


def reads_back(ids: Sequence[int], *, model: Model) -> bool:
    """Whether the text of ``ids`` tokenizes back to ``ids``.

    Not always: a "\\n", "\\n" pair reads back as one "\\n\\n" token, and half a character decodes to U+FFFD; then
    only the ids observe that response exactly.

    Args:
        ids: token ids.
        model: the loaded ``gcs.Model`` whose tokenizer reads them.

    Returns:
        True when decoding and encoding again gives ``ids``.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> model = gcs.load_model()
        >>> reads_back(model.tokenizer.encode("Blue.", add_special_tokens=False), model=model)
        True
    """
    tokenizer: Any = model.tokenizer  # a transformers tokenizer (gcs.Model types it as object)
    text = tokenizer.decode(list(ids), skip_special_tokens=True)
    return tokenizer.encode(text, add_special_tokens=False) == list(ids)


def forced_logits(prompt: str, ids: Sequence[int], model: Model, settings: SamplingSettings, finished: bool,
                  generate_kwargs: dict | None = None, stop: threading.Event | None = None) -> torch.Tensor:
    """The warped logits [1, n (+1 when finished), vocab] (float32) with which generation picks each token of
    the response ``ids`` to ``prompt``, and the end after it: ``ids`` teacher-forced through ``Batch`` (one row,
    the KV-cached ``generate`` path that the replay runs too), so they are the replay's logits to the bit."""
    return forced_rows([(prompt, ids, finished)], model, settings, generate_kwargs, stop)[0][None]


def forced_rows(rows: Sequence[tuple[str, Sequence[int], bool]], model: Model, settings: SamplingSettings,
                generate_kwargs: dict | None = None, stop: threading.Event | None = None) -> list[torch.Tensor]:
    """``forced_logits`` of several (prompt, ids, finished) responses in one batch: [n (+1), vocab] each.

    Each row's logits are those it gets alone only where the model computes rows apart
    (``gcs.engines.invariance``, on by default on CPU); ``forced_logits`` runs one row, which holds everywhere.
    """
    end = stop_token_ids(model)[0]
    forcing = _TeacherForcing([[*ids, end] if finished else ids for _, ids, finished in rows])
    steps = [len(ids) + finished for _, ids, finished in rows]
    batch = Batch([Row(prompt, settings.methods[0], settings.seeds[0]) for prompt, _, _ in rows], model,
                  settings.replace(max_new_tokens=max(steps)), dict(generate_kwargs or {}), sampler=forcing)
    batch.complete(stop)
    if len(forcing.logits) != max(steps):
        raise RuntimeError(f"teacher forcing stopped after {len(forcing.logits)} of {max(steps)} steps")
    logits = torch.stack(forcing.logits, dim=1).cpu()  # [rows, steps, vocab]
    return [logits[row, :n] for row, n in enumerate(steps)]
