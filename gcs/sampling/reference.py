"""GCSwR in the paper's own notation, one sequence, float64: the spec the fast samplers are tested against.

``gcs.sampling.samplers.RecyclingGumbelSampler`` (and its fused CPU kernel) compute the same steps
in race form, batched, in float32; ``tests/test_samplers.py`` checks them token for token
against ``recycling_step`` below. Read this one; run the fast one.

>>> import numpy as np
>>> state = RecyclingState.start(seed=0, vocab=3)
>>> token = recycling_step(state, np.log([0.2, 0.5, 0.3]))
>>> token in (0, 1, 2), int(state.draws.sum())
(True, 1)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from gcs.sampling.noise import DOMAIN_GUMBEL, exponential_noise, row_keys, vocabulary_noise


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
