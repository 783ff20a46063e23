"""The posterior of the shared noise given a response: what luck made prompt ``A`` answer ``Y``.

    noise = posterior("gcswr", logits, response, seed=0)   # logits [rows, n, vocab], response [rows, n]
    replay(noise, logits)                                   # -> response, to the token
    noise.sampler()                                         # draws with that noise (gcs.hindsight's paraphrases)

Exactly, in the race form of ``gcs.sampling.samplers`` (noise ``E ~ Exp(1)``, token ``i`` arrives at
``E_i / p_i``, the first arrival wins). Given that token ``k`` won a race over iid Exp(1)
noise, the race time ``T`` is Exp(1), and every loser's residual ``E_i - T p_i`` is a fresh Exp(1),
independent of ``T``, of ``k`` and of each other (memorylessness). So, for one race:
``E_k = T p_k`` and ``E_i = R_i + T p_i`` with ``T, R_i`` iid Exp(1) (``race_posterior``).

- GCS: every position has its own noise vector, independent of the others: each position's
  posterior is one race posterior, and positions after ``Y`` keep fresh noise.
- "ctx" (docs/context.md): the same, with the position replaced by the step's key (its window of
  generated tokens and how often the answer met that window before): the keys of ``Y`` are distinct
  and each depends on ``Y``'s past only, so the vector at each key is one race posterior, and every
  other key keeps fresh noise. A paraphrase whose answer reaches one of ``Y``'s keys meets its
  posterior vector there, wherever that happens.
- GCSwR (Theorem 2): the state after the last step is iid Exp(1) given the whole history, and the
  state before a step is the race posterior of the state after it (the losers' residuals ``R_i``
  *are* the state after; the winner's entry after is its freshly drawn noise). Walking backward
  from iid Exp(1) gives the initial noise and every noise value ``Y`` drew; values ``Y`` never
  drew stay fresh.
- IS: the responses' randomness is independent: there is no noise to infer.

A finished response is observed with its end (``ends``): the last race is conditioned on "some
end token won": which one is drawn in proportion to its probability, then it is conditioned on
like any other token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gcs.checks import DEFAULT_CONTEXT, check_context, check_method, check_seed
from gcs.runtime.arguments import ArgumentTypeError
from gcs.sampling.noise import DOMAIN_CONTEXT, HashedNoise, context_keys, derive_seed, derive_seeds
from gcs.sampling.samplers import (
    ContextGumbelSampler,
    GumbelSampler,
    RecyclingGumbelSampler,
    Sampler,
    relative_rates,
)

REPLAY_ATTEMPTS = 20  # a posterior draw whose float32 replay differs from Y (a near-tie) is drawn again


def race_posterior(probabilities: torch.Tensor, winners: torch.Tensor, after: torch.Tensor,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """Exp(1) noise before a race [rows, vocab], given its winners [rows] and the losers' residuals ``after``.

    ``probabilities`` [rows, vocab] (float64, rows sum to 1). ``after`` holds each loser's residual
    ``R_i`` (iid Exp(1)); the winner's entry of ``after`` is not used. Returns ``E`` with ``E_k = T p_k``
    and ``E_i = R_i + T p_i``, ``T ~ Exp(1)``: then ``argmin E / p`` is ``k``.

    >>> p = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    >>> e = race_posterior(p, torch.tensor([2]), torch.ones(1, 3, dtype=torch.float64))
    >>> int((e / p).argmin())
    2
    """
    rows = torch.arange(len(winners))
    race_time = torch.empty(len(winners), dtype=torch.float64).exponential_(generator=generator)
    noise = after + race_time[:, None] * probabilities
    noise[rows, winners] = race_time * probabilities[rows, winners]
    return noise


def _exponentials(shape, generator) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.float64).exponential_(generator=generator)


@dataclass(frozen=True)
class Posterior:
    """Noise drawn from its posterior given responses, one row per response (``posterior``).

    Attributes:
        method: "gcs", "gcswr" or "ctx".
        response: the token ids [rows, n].
        seeds: the noise the response never used is fresh, from these seeds.
        positions: GCS and "ctx": the noise of each of the response's steps [rows, n, vocab].
        initial: GCSwR: the state before the first token [rows, vocab].
        fresh: GCSwR: the noise drawn for the winner after each step [rows, n].
        draw_index: GCSwR: which draw of its token each ``fresh`` value is.
        keys: "ctx": the key of each step's vector [rows, n] (``gcs.sampling.noise.context_keys``).
        context: "ctx": the window the keys were made with.
    """

    method: str
    response: torch.Tensor
    seeds: tuple[int, ...]
    positions: torch.Tensor | None = None
    initial: torch.Tensor | None = None
    fresh: torch.Tensor | None = None
    draw_index: torch.Tensor | None = None
    keys: torch.Tensor | None = None
    context: int | None = None

    def select(self, rows: Sequence[int]) -> Posterior:
        """The posterior rows ``rows`` (repeats allowed: paraphrases that share one response's luck)."""
        index = torch.as_tensor(list(rows), dtype=torch.long)
        pick = lambda x: None if x is None else x[index]  # noqa: E731
        return Posterior(self.method, self.response[index], tuple(self.seeds[i] for i in index.tolist()),
                         pick(self.positions), pick(self.initial), pick(self.fresh), pick(self.draw_index),
                         pick(self.keys), self.context)

    def sampler(self) -> Sampler:
        """A sampler for ``len(response)`` rows that draws with this noise (``sample`` as any ``gcs.Sampler``)."""
        if self.method == "gcs":
            return GumbelSampler(seed=list(self.seeds), noise=PositionPosterior(self))
        if self.method == "ctx":
            return ContextGumbelSampler(seed=list(self.seeds), context=self.context, noise=KeyedPosterior(self))
        return RecyclingGumbelSampler(seed=list(self.seeds), noise=RecycledPosterior(self))


def draw_indices(response: torch.Tensor) -> torch.Tensor:
    """For each step, how often its token has won up to and including it: the draw index of its new noise.

    >>> draw_indices(torch.tensor([[5, 7, 5, 5]])).tolist()
    [[1, 1, 2, 3]]
    """
    same = response[:, :, None] == response[:, None, :]  # [rows, t, s]: step s picked step t's token
    return torch.tril(same).sum(dim=-1)


def rates_to_probabilities(logits: torch.Tensor) -> torch.Tensor:
    """The exact distribution the samplers race over: ``relative_rates`` (float32), normalised in float64.

    A token whose float32 rate underflows to 0 has probability 0, as it has in every sampler.
    """
    flat = logits.reshape(-1, logits.shape[-1]).float()
    rates = relative_rates(flat, flat.max(dim=-1).values).double()
    return (rates / rates.sum(dim=-1, keepdim=True)).reshape(logits.shape)


def posterior(method: str, logits: torch.Tensor, response: torch.Tensor, *, seed: int = 0,
              ends: Sequence[int] | None = None, context: int | None = None) -> Posterior:
    """Noise drawn from its posterior given that rows with these logits produced ``response``.

    Every row's replay reproduces its response; a draw whose float32 replay would not (a near-tie rounded the other
    way) is drawn again.

    Args:
        method: "gcs", "gcswr" or "ctx".
        logits: the warped logits [rows, n, vocab] (one step more with ``ends``).
        response: the token ids [rows, n].
        seed: picks the draw (a different seed, another draw).
        ends: the responses ended right after ``response`` with one of these token ids (end of turn); ``logits`` then
            has one step more, the race that an end token won. Which one won is drawn in proportion to its
            probability, and ``Posterior.response`` includes it.
        context: "ctx"'s window (None: ``DEFAULT_CONTEXT``); only with "ctx".

    Returns:
        The ``Posterior``; its ``sampler()`` draws with that noise.

    Raises:
        ValueError: a response token of probability 0, an unknown method, a context without "ctx", or shapes that do
            not match.

    Examples:
        >>> import torch
        >>> logits = torch.log_softmax(torch.tensor([[[2.0, 1.0, 0.0], [0.0, 2.0, 1.0]]]), dim=-1)
        >>> sampler = posterior("gcswr", logits, torch.tensor([[0, 1]]), seed=0).sampler()
        >>> [int(sampler.sample(logits[:, i])[0]) for i in range(2)]  # the replay gives the response back
        [0, 1]
    """
    method = check_method(method)
    if method == "is":
        raise ValueError("IS has no shared noise to infer: a paraphrase's answer is independent of the response")
    context = check_context(context, [method])
    for name, tensor in (("logits", logits), ("response", response)):
        if not isinstance(tensor, torch.Tensor):
            raise ArgumentTypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    steps = response.shape[1] + (ends is not None) if response.dim() == 2 else -1
    if logits.dim() != 3 or response.shape[0] != logits.shape[0] or logits.shape[1] != steps or steps == 0:
        raise ValueError(f"logits must be [rows, n{' + 1' if ends is not None else ''}, vocab] and response [rows, n] "
                         f"with a step to observe, got {list(logits.shape)} and {list(response.shape)}")
    probabilities = rates_to_probabilities(logits)
    response = response.long().cpu()
    chosen = probabilities[:, : response.shape[1]].gather(-1, response[:, :, None]).squeeze(-1)
    if (chosen <= 0).any():
        row, step = (chosen <= 0).nonzero()[0].tolist()
        raise ValueError(f"the response is impossible under these settings: its token {step + 1} (id "
                         f"{int(response[row, step])}) has probability 0 (a lower temperature or top-p cut it)")
    generator = torch.Generator().manual_seed(derive_seed(check_seed(seed), 1))
    if ends is not None:
        response = torch.cat([response, _draw_end(probabilities[:, -1], ends, generator)[:, None]], dim=1)
    seeds = tuple(derive_seeds(seed, 2 + torch.arange(len(response))).tolist())
    keys = context_keys(response, DEFAULT_CONTEXT if context is None else context) if method == "ctx" else None

    def draw(rows: torch.Tensor) -> Posterior:
        picked = probabilities[rows], response[rows], tuple(seeds[i] for i in rows.tolist()), generator
        if keys is not None:
            return _ctx_posterior(*picked, keys=keys[rows], context=context)
        return (_gcs_posterior if method == "gcs" else _gcswr_posterior)(*picked)

    result = draw(torch.arange(len(response)))
    for _ in range(REPLAY_ATTEMPTS):
        wrong = (replay(result, logits) != response).any(dim=1).nonzero().squeeze(1)
        if len(wrong) == 0:
            return result
        result = _replace_rows(result, wrong, draw(wrong))
    raise RuntimeError(f"no posterior draw replays the response exactly after {REPLAY_ATTEMPTS} attempts")


def _draw_end(last: torch.Tensor, ends: Sequence[int], generator: torch.Generator) -> torch.Tensor:
    """Which end token won each row's last race [rows]: drawn in proportion to its probability in ``last``
    [rows, vocab]; a ValueError where no end token can win."""
    tokens = torch.as_tensor(list(ends), dtype=torch.long)
    weights = last[:, tokens]
    if (weights.sum(dim=1) <= 0).any():
        raise ValueError("the response cannot end there under these settings: every end-of-turn token has "
                         "probability 0 after it (use finished=False if it goes on)")
    return tokens[torch.multinomial(weights, 1, generator=generator).squeeze(1)]


def _gcs_posterior(probabilities, response, seeds, generator) -> Posterior:
    rows, n, vocab = probabilities.shape
    flat = race_posterior(probabilities.reshape(-1, vocab), response.reshape(-1),
                          _exponentials((rows * n, vocab), generator), generator)
    return Posterior("gcs", response, seeds, positions=flat.reshape(rows, n, vocab).float())


def _ctx_posterior(probabilities, response, seeds, generator, *, keys, context) -> Posterior:
    flat = _gcs_posterior(probabilities, response, seeds, generator)
    return Posterior("ctx", response, seeds, positions=flat.positions, keys=keys, context=context)


def _gcswr_posterior(probabilities, response, seeds, generator) -> Posterior:
    rows, n, vocab = probabilities.shape
    state = _exponentials((rows, vocab), generator)  # after the last step: iid Exp(1) given the history
    fresh = torch.empty(rows, n, dtype=torch.float64)
    index = torch.arange(rows)
    for step in reversed(range(n)):
        fresh[:, step] = state[index, response[:, step]]  # the winner's entry after a step is its new draw
        state = race_posterior(probabilities[:, step], response[:, step], state, generator)
    return Posterior("gcswr", response, seeds, initial=state.float(), fresh=fresh.float(),
                     draw_index=draw_indices(response))


def _replace_rows(result: Posterior, rows: torch.Tensor, redrawn: Posterior) -> Posterior:
    def put(old, new):
        if old is None:
            return None
        old = old.clone()
        old[rows] = new
        return old

    return Posterior(result.method, result.response, result.seeds, put(result.positions, redrawn.positions),
                     put(result.initial, redrawn.initial), put(result.fresh, redrawn.fresh), result.draw_index,
                     result.keys, result.context)


def replay(noise: Posterior, logits: torch.Tensor) -> torch.Tensor:
    """The tokens [rows, n] the posterior's sampler picks from teacher-forced ``logits`` [rows, n, vocab]."""
    sampler = noise.sampler()
    return torch.stack([sampler.sample(logits[:, step].float()) for step in range(logits.shape[1])], dim=1)


class PositionPosterior(HashedNoise):
    """GCS's noise source for a ``Posterior``: positions that ``Y`` covers take their posterior vector,
    later positions fresh hashed noise. The posterior is moved to the sampler's device once, in ``start``."""

    hashed = False

    def __init__(self, noise: Posterior):
        self.positions = noise.positions

    def start(self, seeds, vocab):
        super().start(seeds, vocab)
        self.positions = self.positions.to(seeds.device)
        if self.positions.shape[0] != len(seeds) or self.positions.shape[2] != vocab:
            raise ValueError(f"the posterior covers {self.positions.shape[0]} rows of {self.positions.shape[2]} "
                             f"tokens, not {len(seeds)} of {vocab}")
        return self

    def vector(self, draws):
        values = super().vector(draws)
        known = (draws < self.positions.shape[1]).nonzero().squeeze(1)
        values[known] = self.positions[known, draws[known]]
        return values


class RecycledPosterior(HashedNoise):
    """GCSwR's noise source for a ``Posterior``: its initial state, and for every (token, draw index) that
    ``Y`` drew, the value it drew; fresh hashed noise for the rest."""

    hashed = False

    def __init__(self, noise: Posterior):
        self.initial, self.known = noise.initial, (noise.response, noise.draw_index, noise.fresh)

    def start(self, seeds, vocab):
        super().start(seeds, vocab)
        self.initial = self.initial.to(seeds.device)
        self.known = tuple(x.to(seeds.device) for x in self.known)
        if self.initial.shape != (len(seeds), vocab):
            raise ValueError(f"the posterior covers {list(self.initial.shape)} (rows, tokens), "
                             f"not {[len(seeds), vocab]}")
        return self

    def vector(self, draws):
        if (draws != 0).any():
            raise ValueError("a recycled posterior holds the initial state (draw 0) only")
        return self.initial.clone()

    def token(self, rows, tokens, draws):
        values = super().token(rows, tokens, draws)
        response, draw_index, fresh = (x[rows] for x in self.known)
        match = (response == tokens[:, None]) & (draw_index == draws[:, None])  # at most one step per row
        found = match.any(dim=1)
        values[found] = fresh[found, match[found].int().argmax(dim=1)]
        return values


class KeyedPosterior(PositionPosterior):
    """"ctx"'s noise source for a ``Posterior``: a step whose key is one of ``Y``'s keys (the same window of generated
    tokens, met as often before) takes that key's posterior vector; every other key fresh hashed noise."""

    domain = DOMAIN_CONTEXT

    def __init__(self, noise: Posterior):
        super().__init__(noise)
        self.observed = noise.keys

    def start(self, seeds, vocab):
        super().start(seeds, vocab)
        self.observed = self.observed.to(seeds.device)
        return self

    def vector(self, draws):
        values = HashedNoise.vector(self, draws)  # fresh noise at every key Y never used
        match = self.observed == draws[:, None]  # [rows, n]: at most one step per row (Y's keys are distinct)
        known = match.any(dim=1).nonzero().squeeze(1)
        values[known] = self.positions[known, match[known].int().argmax(dim=1)]
        return values
