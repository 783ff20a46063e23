"""GCSwR in the paper's own notation, and context-keyed GCS ("ctx"), one sequence, float64: the specs the fast
samplers are tested against.

``gcs.sampling.samplers.RecyclingGumbelSampler`` (and its fused CPU kernel) compute the same steps
in race form, batched, in float32; ``tests/test_samplers.py`` checks them token for token
against ``recycling_step`` below. Read this one; run the fast one.

>>> import numpy as np
>>> state = RecyclingState.start(seed=0, vocab=3)
>>> token = recycling_step(state, np.log([0.2, 0.5, 0.3]))
>>> token in (0, 1, 2), int(state.draws.sum())
(True, 1)

``context_step`` is the literal "ctx" step (``gcs.sampling.samplers.ContextGumbelSampler`` batches it):

>>> state = ContextState(seed=0, context=1)
>>> [context_step(state, np.log([0.2, 0.5, 0.3])) in (0, 1, 2) for _ in range(3)], sum(state.seen.values())
([True, True, True], 3)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from gcs.sampling.noise import (
    CONTEXT_PAD,
    DOMAIN_CONTEXT,
    DOMAIN_GUMBEL,
    context_draws,
    context_words,
    exponential_noise,
    row_keys,
    vocabulary_noise,
)


def gumbel_quantile(u):
    """Q: the Gumbel(0, 1) quantile function."""
    return -np.log(-np.log(u))


def gumbel_cdf(g):
    """Q^-1: the Gumbel(0, 1) distribution function."""
    return np.exp(-np.exp(-g))


@dataclass
class RecyclingState:
    """One sequence's Gumbel vector ``g`` and how often each token has been drawn (its noise's draw index)."""

    key: torch.Tensor
    g: np.ndarray
    draws: np.ndarray

    @classmethod
    def start(cls, seed: int, vocab: int) -> RecyclingState:
        key = row_keys(torch.tensor([seed]), DOMAIN_GUMBEL)  # the same counter-based noise as the samplers
        exponential = vocabulary_noise(key, torch.tensor([0]), vocab)[0].double().numpy()
        return cls(key, -np.log(exponential), np.zeros(vocab, dtype=np.int64))

    def fresh_gumbel(self, token: int) -> float:
        """The next unused Gumbel value of ``token`` (draw index ``draws[token]``)."""
        draw = torch.tensor([int(self.draws[token])])
        return float(-np.log(exponential_noise(self.key, draw, torch.tensor([token])).item()))


def recycling_step(state: RecyclingState, log_h: np.ndarray) -> int:
    """Algorithm 1, one step: pick ``k = argmax(g + log h)``, recycle every loser's noise, redraw the winner's.

    Theorem 2's update for a loser ``i``: ``g_i <- Q(Q^-1(g_i) / Q^-1(g_k + log h_k - log h_i))``,
    the Gumbel noise of ``i`` conditioned on having lost to ``k``, mapped back to a fresh Gumbel.
    """
    k = int(np.argmax(state.g + log_h))  # Gumbel-max: an exact draw from softmax(log h)
    losers = np.arange(len(state.g)) != k
    with np.errstate(divide="ignore"):  # masked losers (log h = -inf) keep g: Q^-1(+inf) = 1
        state.g[losers] = gumbel_quantile(gumbel_cdf(state.g[losers])
                                          / gumbel_cdf(state.g[k] + log_h[k] - log_h[losers]))
    state.draws[k] += 1
    state.g[k] = state.fresh_gumbel(k)  # the winner's noise was used up: a fresh draw
    return k


@dataclass
class ContextState:
    """One answer of method "ctx": its seed, its last ``context`` generated tokens, and how often each window was seen.

    ``counted=False`` drops the count: every step at a repeated window reuses that window's noise (Aaronson's keyed
    scheme, as a watermark uses it). That is *not* exact; the tests keep it as the control their check must reject.
    """

    seed: int
    context: int
    counted: bool = True
    window: list[int] = field(default_factory=list)
    seen: dict[tuple[int, ...], int] = field(default_factory=dict)

    def __post_init__(self):
        self.window = self.window or [CONTEXT_PAD] * self.context  # an answer's first steps: padded, never the prompt
        self.key = row_keys(torch.tensor([self.seed]), DOMAIN_CONTEXT)

    def gumbel(self, vocab: int) -> np.ndarray:
        """This step's Gumbel vector: a pure function of (seed, window, earlier steps at that window)."""
        count = self.seen.get(tuple(self.window), 0) if self.counted else 0
        draw = context_draws(context_words(torch.tensor([self.window])), torch.tensor([count]))
        return -np.log(vocabulary_noise(self.key, draw, vocab)[0].double().numpy())


def context_step(state: ContextState, log_h: np.ndarray) -> int:
    """One "ctx" step: ``k = argmax(g + log h)`` with the vector of this (window, count), then count the window and
    slide it over ``k``. Each (window, count) is used once per answer and depends on the past only, so given the
    past the vector is fresh: ``k`` is an exact draw from ``softmax(log h)`` (docs/context.md)."""
    k = int(np.argmax(state.gumbel(len(log_h)) + log_h))
    window = tuple(state.window)
    state.seen[window] = state.seen.get(window, 0) + 1
    state.window = [*state.window[1:], k]
    return k
