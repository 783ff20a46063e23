"""Inside the sampler: every step of a generation, candidate by candidate (the app's step-through tab).

    t = gcs.trace(["Why is the sky blue?", "What makes the sky blue?"], method="gcswr", seed=0, max_new_tokens=8)
    step = t.steps[0][1]                  # position 0, second paraphrase
    step.winner_text, step.candidates[0]  # the token it chose; the most likely candidate's race
    t.frame()                             # one row per position x paraphrase x candidate

The trace is recorded while ``generate``'s own batch runs, through the processor's observer
hook, so its winners are ``gcs.generate``'s tokens for the same settings. In the race form
of ``gcs.sampling.samplers`` every token ``i`` holds Exp(1) noise ``E_i`` (the Gumbel value is
``g_i = -log E_i``) and arrives at ``E_i / p_i``; the first arrival wins:

- IS draws with an inverse CDF instead: one fresh uniform per row and step, independent between rows.
- GCS: ``E`` is the position's own noise vector, the same for every row with the seed.
- GCSwR: ``E`` is the recycled state; after the race every loser keeps ``E_i - T p_i`` (``T`` the
  winner's arrival) and the winner's noise is redrawn: ``noise_after``. ``carried_win``
  (``gcs.instrument.carrying``) finds a race won by a clock that had already won another row's race at an
  earlier position (the same token's same draw, carried along by recycling in both rows).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch

from gcs.checks import DEFAULT_MAX_NEW_TOKENS
from gcs.engines.batch import Batch, Row, check_plain_text
from gcs.engines.models import Model, resolve_model
from gcs.runtime.arguments import ArgumentTypeError, check_count, check_prompts, check_stop
from gcs.runtime.keywords import keywords_checked
from gcs.runtime.quoting import quoted
from gcs.sampling.samplers import make_sampler
from gcs.settings import SamplingSettings, one_or_built

DEFAULT_TOP = 10


@dataclass(frozen=True)
class Candidate:
    """One token in one step's race.

    Attributes:
        token_id: the token id.
        text: its text.
        probability: its probability under the warped distribution.
        noise: its Exp(1) value ``E`` before the draw (None for IS).
        noise_after: GCSwR's value after recycling (None otherwise).
        arrival: ``E / p`` (inf if p = 0; None for IS).
    """

    token_id: int
    text: str
    probability: float
    noise: float | None
    noise_after: float | None
    arrival: float | None

    @property
    def gumbel(self) -> float | None:
        """The Gumbel form of the noise, ``g = -log E``."""
        return None if self.noise is None else -math.log(self.noise)


@dataclass(frozen=True)
class TraceStep:
    """One position of one row of a ``Trace``.

    Attributes:
        position: the token position.
        row: the prompt's row.
        candidates: ``Candidate`` objects, most likely first, then the winner and any watched token not among them.
        winner: the winning token id.
        winner_text: its text.
        uniform: IS's uniform (None for the Gumbel methods).
        finished: whether the row had already finished.
        forced: whether the token was forced (``gcs.trace(forced=...)``).
    """

    position: int
    row: int
    candidates: tuple[Candidate, ...]
    winner: int
    winner_text: str
    uniform: float | None
    finished: bool
    forced: bool = False  # the token was forced here (``trace(forced=...)``), not the race's winner

    @property
    def winning(self) -> Candidate:
        """The winner's candidate: its probability, clock and arrival."""
        return next(c for c in self.candidates if c.token_id == self.winner)


@dataclass(frozen=True)
class Trace:
    """What ``gcs.trace`` returns.

    Attributes:
        prompts: the prompts, one row each.
        method: the method.
        seed: the seed.
        temperature: the temperature.
        top_p: the nucleus mass, or None.
        steps: ``steps[position][row]``, each a ``TraceStep``.
        token_ids: each row's response as token ids.
        responses: each row's response as text.
        forced: the (position, row, token id) steps that were forced.
        system: the system message, or None.
    """

    prompts: tuple[str, ...]
    method: str
    seed: int
    temperature: float
    top_p: float | None
    steps: tuple[tuple[TraceStep, ...], ...]
    token_ids: tuple[tuple[int, ...], ...]  # per row, up to (not including) its stop token
    responses: tuple[str, ...]
    forced: tuple[tuple[int, int, int], ...] = ()  # (position, row, token id) forced, as passed to ``trace``
    system: str | None = None  # the system message the prompts were asked with (``trace(system=...)``)

    def frame(self) -> pd.DataFrame:
        """One row per position x paraphrase x candidate; ``won`` marks the winner."""
        records = [
            {"position": step.position, "row": step.row, "token_id": c.token_id, "text": c.text,
             "probability": c.probability, "noise": c.noise, "gumbel": c.gumbel, "noise_after": c.noise_after,
             "arrival": c.arrival, "won": c.token_id == step.winner, "uniform": step.uniform,
             "finished": step.finished, "forced": step.forced}
            for row_steps in self.steps for step in row_steps for c in step.candidates
        ]
        return pd.DataFrame.from_records(records)


class _Recorder:
    """The processor's observer: keeps each step's top candidates, their noise and the winners."""

    def __init__(self, method: str, top: int, decode, watch: Sequence[int] = ()):
        self.method, self.top, self.decode, self.watch = method, top, decode, tuple(watch)
        self.steps: list[tuple[TraceStep, ...]] = []

    def __call__(self, warped: torch.Tensor, tokens: torch.Tensor, before: torch.Tensor, after: torch.Tensor):
        probabilities = torch.softmax(warped.float(), dim=-1).cpu()
        tokens, before, after = tokens.cpu(), before.cpu(), after.cpu()
        top = probabilities.topk(min(self.top, probabilities.shape[1]), dim=-1).indices
        row_steps = []
        for row, winner in enumerate(tokens.tolist()):
            ids = top[row].tolist()
            for token in (winner, *self.watch):  # an unlikely winner is part of the story; watched tokens are asked for
                if token not in ids:
                    ids.append(token)
            row_steps.append(TraceStep(len(self.steps), row, tuple(self._candidate(row, i, probabilities, before, after)
                                                                     for i in ids),
                                       winner, self.decode(winner), float(before[row]) if self.method == "is" else None,
                                       finished=False))  # set afterwards, from where each row stopped
        self.steps.append(tuple(row_steps))

    def _candidate(self, row: int, token: int, probabilities, before, after) -> Candidate:
        p = float(probabilities[row, token])
        if self.method == "is":
            return Candidate(token, self.decode(token), p, None, None, None)
        noise = float(before[row, token])
        noise_after = float(after[row, token]) if self.method == "gcswr" else None
        return Candidate(token, self.decode(token), p, noise, noise_after, noise / p if p > 0 else math.inf)


def trace_with(prompts: Sequence[str], settings: SamplingSettings, top: int = DEFAULT_TOP,
               model: Model | str | None = None, forced: Sequence[tuple[int, int, int]] = (),
               stop: threading.Event | None = None, system: str | None = None, watch: Sequence[int] = ()) -> Trace:
    """The core of ``trace``: ``settings`` hold one method and one seed, and a temperature above 0."""
    check_stop(stop)
    prompts = check_prompts(prompts)
    method, seed = settings.method_and_seed()
    if settings.temperature == 0:
        raise ValueError("temperature 0 is greedy decoding: there is no noise to trace; use a temperature above 0")
    top = check_count(top, "top", 1, 100)
    if system is not None and not isinstance(system, str):
        raise ArgumentTypeError(f"system must be None or a string, got {type(system).__name__}")
    model = resolve_model(model)
    check_plain_text(prompts, model, "prompts")
    if system is not None:
        check_plain_text(system, model, "system")
    tokenizer: Any = model.tokenizer  # a transformers tokenizer (gcs.Model types it as object)
    forced = _checked_forced(forced, len(prompts), settings.max_new_tokens, len(tokenizer))
    if isinstance(watch, (str, bytes)) or not isinstance(watch, Sequence):
        raise ArgumentTypeError(f"watch must be a list of token ids, got {type(watch).__name__}")
    watch = [check_count(token, "a watched token id", 0, len(tokenizer) - 1) for token in watch]
    recorder = _Recorder(method, top, lambda token: tokenizer.decode([token]), watch)
    batch = Batch([Row(p, method, seed, system=system) for p in prompts], model, settings, observer=recorder)
    if forced:  # the batch's own sampler, with the interventions scheduled
        batch.sampler = make_sampler(batch.methods, seed=batch.seeds, streams=batch.streams,
                                     context=batch.context)
        for position in sorted({f[0] for f in forced}):
            tokens = [-1] * len(prompts)
            for where, row, token in forced:
                if where == position:
                    tokens[row] = token
            batch.sampler.force(position, tokens)
    new_tokens = batch.complete(stop)
    token_ids, responses = [], []
    for row, record in zip(new_tokens.tolist(), batch.decode(new_tokens), strict=True):
        ids, _ = batch.until_stop(row)
        token_ids.append(tuple(ids))
        responses.append(record["response"])
    steps = _mark(recorder.steps, token_ids, {(position, row) for position, row, _ in forced})
    return Trace(tuple(prompts), method, seed, settings.temperature, settings.top_p, steps, tuple(token_ids),
                 tuple(responses), tuple(forced), system)


@keywords_checked
def trace(prompts: Sequence[str], *, method: str = "gcswr", seed: int = 0, temperature: float = 1.0,
          top_p: float | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, top: int = DEFAULT_TOP,
          model: Model | str | None = None, forced: Sequence[tuple[int, int, int]] = (),
          stop: threading.Event | None = None, system: str | None = None, watch: Sequence[int] = (),
          settings: SamplingSettings | None = None) -> Trace:
    """Generate one response per prompt as ``gcs.generate`` does, recording every step's race.

    Per step and row: the ``top`` most likely candidates (and the winner), their probabilities under the warped
    distribution, their noise before (and, for GCSwR, after) the draw, their arrival times and the winner.

    Args:
        prompts: the prompts.
        method: "is", "gcs" or "gcswr".
        seed: the seed the prompts share.
        temperature: above 0 (greedy has no noise to show).
        top_p: nucleus sampling's mass, in (0, 1] (None: off).
        max_new_tokens: at most ``MAX_NEW_TOKENS``.
        top: candidates recorded per step and row.
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.
        forced: (position, row, token id) triples: that row emits that token there instead of its race's winner
            (``gcs.Sampler.force``), so the trace branches at that step and the steps before it stay as they were.
        stop: a ``threading.Event`` that ends the work after the current token with ``gcs.Cancelled``.
        system: a system message for every prompt (``gcs.format_prompt``).
        watch: token ids recorded at every step besides the candidates (after them, when not among them):
            ``gcs.parting`` asks for the other arm's token.
        settings: a ``gcs.SamplingSettings`` of one method and one seed, in place of method ... max_new_tokens.

    Returns:
        The ``Trace``: its responses and, per position, one ``TraceStep`` per prompt.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a temperature of 0, a top_k in ``settings``, a bad forced step, or another bad value.

    Examples:
        On the embedded model (which tokens win depends on the machine's kernels; that the trace is the same
        generation does not):

        >>> import gcs
        >>> t = gcs.trace(["2+2?", "What is 2 plus 2?"], method="gcs", seed=1, max_new_tokens=4)
        >>> len(t.steps[0])  # the first position: one race per prompt
        2
        >>> list(t.responses) == gcs.generate(["2+2?", "What is 2 plus 2?"], method="gcs", seed=1, max_new_tokens=4)
        True
    """
    settings = one_or_built(trace, settings, method=method, seed=seed, temperature=temperature,
                            top_p=top_p, max_new_tokens=max_new_tokens, takes_top_k=False)
    return trace_with(prompts, settings, top, model, forced, stop, system, watch)


def _checked_forced(forced, rows: int, positions: int, vocab: int) -> tuple[tuple[int, int, int], ...]:
    """``forced`` as a tuple of (position, row, token id) with each in range, one per (position, row)."""
    if isinstance(forced, (str, bytes)) or not isinstance(forced, Sequence):
        raise ArgumentTypeError(f"forced must be a list of (position, row, token id) triples, got "
                                f"{type(forced).__name__}")
    checked = {}
    for entry in forced:
        if not isinstance(entry, Sequence):
            raise ArgumentTypeError(f"forced entries are (position, row, token id) triples, got "
                                    f"{type(entry).__name__} {quoted(entry)}")
        if len(entry) != 3:
            raise ValueError(f"forced entries are (position, row, token id) triples, got {quoted(entry)}")
        position = check_count(entry[0], "forced position", 0, positions - 1)
        row = check_count(entry[1], "forced row", 0, rows - 1)
        checked[(position, row)] = check_count(entry[2], "forced token id", 0, vocab - 1)
    return tuple((position, row, token) for (position, row), token in sorted(checked.items()))


def _mark(steps: list[tuple[TraceStep, ...]], token_ids: list[tuple[int, ...]], forced: set[tuple[int, int]]):
    """Steps past a row's stop token are padding (finished); forced steps say so."""
    return tuple(
        tuple(TraceStep(s.position, s.row, s.candidates, s.winner, s.winner_text, s.uniform,
                        s.position > len(token_ids[s.row]), (s.position, s.row) in forced) for s in row_steps)
        for row_steps in steps
    )
