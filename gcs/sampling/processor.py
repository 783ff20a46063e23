"""A transformers logits processor that makes ``model.generate`` decode with IS, GCS or GCSwR (or "ctx").

transformers runs processors passed to ``generate`` *before* its own temperature /
top-k / top-p warpers, and applies those only when ``do_sample=True``. So this
processor owns the warping: it applies transformers' own warpers, draws the token with
a gcs sampler, and returns scores that are ``-inf`` everywhere but the chosen token.
Use it with ``do_sample=False`` (greedy then takes exactly that token)::

    processor = GumbelLogitsProcessor("gcswr", seed=0, temperature=0.7, top_p=0.9)
    model.generate(**inputs, do_sample=False, max_new_tokens=50,
                   logits_processor=LogitsProcessorList([processor]))

With ``do_sample=True`` the result is the same token (warping and sampling a one-hot
distribution keep it), at the cost of transformers' own multinomial draw.

One instance may be reused across ``generate`` calls: a call whose ``input_ids`` do not
extend the previous call's by exactly one token starts new responses (``reset()`` does
it explicitly). Rows whose appended token is not the one chosen here (finished rows,
which transformers pads) stop advancing their noise state.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import cast

import torch
from transformers import (
    LogitsProcessor,
    LogitsProcessorList,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from gcs.checks import check_sampling_settings
from gcs.runtime.arguments import ArgumentTypeError
from gcs.sampling.ensembling import grouped_geometric_ensemble
from gcs.sampling.samplers import Sampler, SeedLike, make_sampler


def make_warpers(temperature: float, top_k: int | None, top_p: float | None) -> LogitsProcessorList:
    """transformers' own warpers for these settings (an empty list for plain sampling or greedy)."""
    check_sampling_settings(temperature, top_k, top_p)
    warpers = LogitsProcessorList()
    if temperature not in (0, 1):
        warpers.append(TemperatureLogitsWarper(float(temperature)))
    if top_k is not None:
        warpers.append(TopKLogitsWarper(top_k=top_k))
    if top_p is not None and top_p < 1:
        warpers.append(TopPLogitsWarper(top_p=float(top_p)))
    return warpers


class GumbelLogitsProcessor(LogitsProcessor):
    """Choose every next token with ``method`` ("is", "gcs", "gcswr", "ctx") under temperature/top-k/top-p.

    Args:
        method: sampling method, or one per row; see ``gcs.make_sampler``.
        seed: one int, or one int per batch row; rows with equal seeds are coupled.
        temperature: softmax temperature; 0 means greedy (all methods agree).
        top_k: optional top-k truncation, applied after temperature as in transformers.
        top_p: optional nucleus (top-p) truncation, applied after temperature as in transformers.
        streams: optional per-row ints that make "is" draws independent of batch position.
        sampler: a started-fresh ``gcs.Sampler`` to use instead of ``make_sampler(method, seed=seed, streams=streams)``
            (``gcs.hindsight`` passes one that draws from posterior noise).
        observer: optional ``observer(warped, tokens, before, after)`` called after each sampled step with
            the warped scores, the chosen tokens and ``sampler.peek()`` before and after the draw
            (``gcs.trace`` records the race with it; costs a copy of the noise per step).
        context: how many generated tokens key the noise of "ctx" rows (None: ``DEFAULT_CONTEXT``); a
            keyword, and only where a row runs "ctx".

    Each token is an exact draw from the warped distribution of its row.
    """

    # None between responses (``reset``); set together by each call
    _previous_ids: torch.Tensor | None
    _chosen: torch.Tensor | None
    finished: torch.Tensor | None

    def __init__(
        self,
        method: str | Sequence[str] = "gcswr",
        seed: SeedLike = 0,
        temperature: float = 1.0,
        top_k: int | None = None,
        top_p: float | None = None,
        streams: Sequence[int] | None = None,
        sampler: Sampler | None = None,
        observer: Callable | None = None,
        *,
        context: int | None = None,
    ):
        self.warpers = make_warpers(temperature, top_k, top_p)
        self.temperature = temperature
        if sampler is not None and not isinstance(sampler, Sampler):
            raise ArgumentTypeError(f"sampler must be a gcs.Sampler, got {type(sampler).__name__}")
        if observer is not None and not callable(observer):
            raise ArgumentTypeError(f"observer must be callable: observer(warped, tokens, before, after), got "
                                    f"{type(observer).__name__}")
        self.sampler = sampler if sampler is not None \
            else make_sampler(method, seed=seed, streams=streams, context=context)
        self.observer = observer
        self.reset()

    @property
    def method(self) -> str:
        return self.sampler.method

    def reset(self) -> None:
        """Start new responses on the next call."""
        self.sampler.reset()
        self._previous_ids = self._chosen = self.finished = None

    def _continues(self, input_ids: torch.Tensor) -> bool:
        previous = self._previous_ids
        return (
            previous is not None
            and input_ids.shape == (previous.shape[0], previous.shape[1] + 1)
            and torch.equal(input_ids[:, :-1], previous)
        )

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._continues(input_ids):
            finished = cast(torch.Tensor, self.finished)  # set by the call that set ``_previous_ids``
            finished |= input_ids[:, -1] != self._chosen
        else:
            self.reset()
            self.finished = finished = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        warped = self.warpers(input_ids, scores)
        if self.temperature == 0:
            tokens = warped.argmax(dim=-1)
        elif self.observer is None:
            tokens = self.sampler.sample(warped, active=~finished)
        else:
            if self.sampler.batch_size is None:
                self.sampler.begin(warped.shape[0], warped.shape[1], warped.device)
            before = self.sampler.peek()
            tokens = self.sampler.sample(warped, active=~finished)
            self.observer(warped, tokens, before, self.sampler.peek())
        self._previous_ids, self._chosen = input_ids.clone(), tokens
        chosen_only = torch.full_like(scores, -math.inf).scatter_(1, tokens[:, None], 0.0)
        return cast(torch.FloatTensor, chosen_only)  # LogitsProcessor's legacy type: torch's ops return Tensor


class EnsembleLogitsProcessor(LogitsProcessor):
    """Replace each row's scores by its group's geometric-mean distribution (section 5).

    Placed before a ``GumbelLogitsProcessor`` whose rows of one group share seed, method and stream, every row of a
    group then draws the same token, so the group's rows share one response prefix while each conditions on its own
    wording. Rows alone in their group keep their scores untouched (no ensembling = plain generation, bit for bit).

    Args:
        groups: a group id per batch row: a prompt and its rewordings form one group.

    Examples:
        >>> processor = EnsembleLogitsProcessor([0, 0, 1])
        >>> scores = processor(torch.zeros(3, 1), torch.tensor([[0.0, 0.0], [0.0, -2.0], [1.0, 0.0]]))
        >>> bool(torch.equal(scores[0], scores[1])), scores[2].tolist()
        (True, [1.0, 0.0])
    """

    def __init__(self, groups: Sequence[int]):
        self.groups = torch.as_tensor(list(groups), dtype=torch.long)
        if self.groups.dim() != 1 or len(self.groups) == 0 or self.groups.min() < 0:
            raise ValueError("groups must be a non-empty sequence of non-negative group ids, one per row")
        _, self.groups, sizes = torch.unique(self.groups, return_inverse=True, return_counts=True)
        self.ensembled_rows = sizes[self.groups] > 1

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if len(self.groups) != scores.shape[0]:
            raise ValueError(f"{len(self.groups)} group ids but {scores.shape[0]} rows")
        if not self.ensembled_rows.any():
            return scores
        groups = self.groups.to(scores.device)
        ensembled = grouped_geometric_ensemble(scores, groups)[groups]
        mixed = torch.where(self.ensembled_rows.to(scores.device)[:, None], ensembled.to(scores.dtype), scores)
        return cast(torch.FloatTensor, mixed)  # LogitsProcessor's legacy type: torch's ops return Tensor


def expected_logit(logits: torch.Tensor) -> torch.Tensor:
    """``E_p[z]`` per row for ``p = softmax(z)``: a step's excess surprise is this minus the drawn token's logit.

    Taken about each row's largest logit: float32 sums of 49,152 probabilities stray by about 2e-5 from 1, which
    the embedded model's logits (up to about 40) turned into errors of up to 6e-4 nats; about the largest, under 1e-4.

    >>> expected_logit(torch.tensor([[0.0, 0.0], [40.0, -math.inf]]))  # a -inf logit adds nothing
    tensor([ 0., 40.])
    """
    largest = logits.amax(dim=-1, keepdim=True)
    shifted = logits - largest
    return (torch.softmax(shifted, dim=-1) * shifted).nan_to_num(0.0).sum(dim=-1) + largest.squeeze(-1)


class ExcessRecorder:
    """Each row's excess surprise (``gcs.excess_surprise``) token by token, from the logits generation computes anyway.

    Two processors around the sampling ones: ``raw`` (first) sees the model's untempered logits z, ``chosen`` (last)
    the one-hot scores of the token y each row drew. A step's excess is ``-log p(y) - H(p)`` at temperature 1, which
    for ``p = softmax(z)`` is ``E_p[z] - z_y`` (the log-normaliser cancels). No forward pass over the answers
    afterwards, no host sync per step: ``means`` reads the steps once, when the batch is decoded. Scores pass through
    both unchanged, so recording never changes a token.

        recorder = ExcessRecorder()
        processors = LogitsProcessorList([recorder.raw, GumbelLogitsProcessor(...), recorder.chosen])
        ...   # model.generate(..., logits_processor=processors)
        recorder.means([12, 0])   # -> [-0.31, nan]: each row's mean over its first n tokens
    """

    def __init__(self):
        self._logits = self._expected = None
        self._steps: list[torch.Tensor] = []  # one [rows] tensor per step
        self.raw, self.chosen = _Tap(self._see_raw), _Tap(self._see_chosen)

    def _see_raw(self, scores: torch.Tensor) -> None:
        logits = scores.float()
        self._logits, self._expected = logits.clone(), expected_logit(logits)

    def _see_chosen(self, scores: torch.Tensor) -> None:
        drawn = self._logits.gather(1, scores.argmax(dim=-1, keepdim=True)).squeeze(1)
        self._steps.append(self._expected - drawn)
        self._logits = self._expected = None

    def means(self, lengths: Sequence[int]) -> list[float]:
        """Per row, its mean excess over its first ``lengths[row]`` steps (NaN for none: an empty answer)."""
        rows = torch.stack(self._steps, dim=1).tolist() if self._steps else [[] for _ in lengths]  # [rows, steps]
        return RecordedSteps(rows).means(lengths)


class RecordedSteps:
    """Rows' recorded excess, step by step: ``ExcessRecorder``'s, or the vLLM plugin's records (``gcs.vllm.excess``),
    read through ``means`` (``gcs.engines.batch.Batch.decode``).

    >>> RecordedSteps([[1.0, 2.0, 9.0], []]).means([2, 0])  # each row's mean over its first n tokens
    [1.5, nan]
    """

    def __init__(self, rows: Sequence[Sequence[float]]):
        self.rows = [list(row) for row in rows]

    def means(self, lengths: Sequence[int]) -> list[float]:
        """Per row, its mean over its first ``lengths[row]`` steps (NaN for none, or for fewer steps recorded)."""
        return [math.fsum(row[:n]) / n if 0 < n <= len(row) else math.nan
                for row, n in zip(self.rows, lengths, strict=True)]


class _Tap(LogitsProcessor):
    """A processor that shows each step's scores to ``see`` and passes them on unchanged."""

    def __init__(self, see: Callable[[torch.Tensor], None]):
        self.see = see

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self.see(scores)
        return scores
