"""The coupling explorer's computations: Theorem 1 vs Monte Carlo, and recycling over many steps.

    >>> import torch
    >>> p = torch.tensor([0.5, 0.3, 0.2])
    >>> curve = coupling_curve(p, epsilons=[0.0, 1.0], trials=2000, seed=0)
    >>> float(curve.loc[0, "theorem1"]), round(float(curve.loc[0, "independent"]), 2)  # q = p: shared noise agrees
    (1.0, 0.38)

All Monte Carlo draws use the library's own samplers (``make_sampler``), so the explorer
shows what generation does, not a separate re-implementation.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch

from gcs.checks import check_seed
from gcs.runtime.arguments import ArgumentTypeError, check_count
from gcs.runtime.quoting import quoted
from gcs.sampling.noise import derive_seed, derive_seeds
from gcs.sampling.samplers import make_sampler
from gcs.sampling.theory import agreement_probability

MAX_CATEGORIES = 64
MAX_TRIALS = 200_000
MAX_STEPS = 200_000


def check_distribution(values, name: str = "p") -> torch.Tensor:
    """A probability vector (non-negative weights, normalised here) of 2 to 64 categories, float64."""
    try:
        p = torch.as_tensor(values, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise ArgumentTypeError(f"{name} must be a list of numbers, got {type(values).__name__} {quoted(values)}") \
            from None
    if p.dim() != 1 or not 2 <= len(p) <= MAX_CATEGORIES:
        got = f"{len(p)}" if p.dim() == 1 else f"an array of shape {tuple(p.shape)}"
        raise ValueError(f"{name} must list 2 to {MAX_CATEGORIES} probabilities, got {got}")
    if not torch.isfinite(p).all() or (p < 0).any():
        raise ValueError(f"{name} must contain finite, non-negative numbers")
    if p.max() <= 0:
        raise ValueError(f"{name} must have a positive entry")
    p = p / p.max()  # first to 1 at most, so huge weights (1e308, 1e308) sum without overflowing
    return p / p.sum()


def perturb(p, *, epsilon: float, seed: int = 0) -> torch.Tensor:
    """A distribution near ``p``: ``softmax(log p + epsilon * z)`` for a fixed standard normal direction z.

    Args:
        p: a probability vector.
        epsilon: how far to move; 0 gives ``p``.
        seed: picks the direction z.

    Returns:
        The perturbed probabilities, a tensor.

    Examples:
        >>> perturb([0.5, 0.5], epsilon=0.0).tolist()
        [0.5, 0.5]
    """
    p = check_distribution(p)
    if isinstance(epsilon, bool) or not isinstance(epsilon, numbers.Real):
        raise ArgumentTypeError(f"epsilon must be a finite number >= 0, got {type(epsilon).__name__} "
                                f"{quoted(epsilon)}")
    if not np.isfinite(epsilon) or epsilon < 0:
        raise ValueError(f"epsilon must be a finite number >= 0, got {quoted(epsilon)}")
    direction = torch.randn(len(p), generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return torch.softmax(p.log() + epsilon * direction, dim=0)


def _agreement_rate(p: torch.Tensor, q: torch.Tensor, method: str, trials: int, seed: int) -> tuple[float, float]:
    """Fraction of trials in which a row of p and a row of q draw the same category, and its std.err."""
    seeds = derive_seeds(seed, torch.arange(trials)).tolist()  # hashed: no overflow, no overlap between seeds
    logits = torch.cat([p.log().expand(trials, -1), q.log().expand(trials, -1)]).float()
    if method == "is":  # independent draws: every row its own stream
        sampler = make_sampler("is", seed=seeds + seeds, streams=list(range(2 * trials)))
    else:  # the pair shares a seed, so shares its noise
        sampler = make_sampler(method, seed=seeds + seeds)
    tokens = sampler.sample(logits)
    rate = (tokens[:trials] == tokens[trials:]).double().mean().item()
    return rate, (rate * (1 - rate) / trials) ** 0.5


def coupling_curve(p, q=None, *, epsilons: Sequence[float] = tuple(np.linspace(0, 3, 13)), trials: int = 4000,
                   seed: int = 0) -> pd.DataFrame:
    """Agreement probability of one draw from p and one from q, as q moves away from p.

    Args:
        p: a probability vector.
        q: None: q = ``perturb(p, epsilon=ε, seed=seed)`` for each ε; a given ``q`` is blended as
            q_ε = (1 − w) p + w q with w = ε / max(ε), so the last point is the given q.
        epsilons: the points of the curve.
        trials: draws per point for the Monte Carlo columns (with gcs's samplers).
        seed: seeds the perturbation direction and the draws.

    Returns:
        A frame with columns epsilon, theorem1 (shared noise, exact), independent (Σ p·q), monte_carlo_shared,
        stderr_shared, monte_carlo_independent and stderr_independent.

    Examples:
        >>> curve = coupling_curve([0.6, 0.3, 0.1], epsilons=[0.0, 1.0], trials=200)
        >>> curve["theorem1"].round(3).tolist()
        [1.0, 0.676]
    """
    p, seed = check_distribution(p), check_seed(seed)
    if q is not None:
        q = check_distribution(q, "q")
        if len(q) != len(p):
            raise ValueError(f"p and q must have the same number of categories, got {len(p)} and {len(q)}")
    try:
        epsilons = [float(e) for e in epsilons]
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"epsilons must be 1 to 101 finite numbers >= 0, got {type(epsilons).__name__} "
                                f"{quoted(epsilons)}") from None
    if not epsilons or len(epsilons) > 101 or any(not np.isfinite(e) or e < 0 for e in epsilons):
        raise ValueError("epsilons must be 1 to 101 finite numbers >= 0")
    check_count(trials, "trials", 1, MAX_TRIALS)
    records = []
    for i, epsilon in enumerate(epsilons):
        if q is None:
            q_eps = perturb(p, epsilon=epsilon, seed=seed)
        else:
            weight = epsilon / max(epsilons) if max(epsilons) > 0 else 1.0
            q_eps = (1 - weight) * p + weight * q
        shared, shared_err = _agreement_rate(p, q_eps, "gcs", trials, derive_seed(seed, i))
        independent, independent_err = _agreement_rate(p, q_eps, "is", trials, derive_seed(seed, i))
        records.append({
            "epsilon": epsilon,
            "theorem1": float(agreement_probability(p, q_eps, method="gcs")),
            "independent": float(agreement_probability(p, q_eps, method="is")),
            "monte_carlo_shared": shared, "stderr_shared": shared_err,
            "monte_carlo_independent": independent, "stderr_independent": independent_err,
        })
    return pd.DataFrame.from_records(records)


def recycling_histogram(p, *, steps: int = 5000, seed: int = 0) -> tuple[pd.DataFrame, float]:
    """Draw ``steps`` tokens from one fixed distribution with GCSwR (one row, recycled noise).

    "reuse" keeps the first step's Gumbel vector without recycling: argmax never changes, so one token takes every
    step; recycling is what keeps the draws exact.

    Args:
        p: a probability vector.
        steps: how many tokens to draw.
        seed: the sampler's seed.

    Returns:
        A frame (token, target, gcswr, reuse) of frequencies, and the chi-square p-value of the GCSwR counts against
        the target (Theorem 2: each step is an exact draw).

    Examples:
        >>> frame, p_value = recycling_histogram([0.6, 0.3, 0.1], steps=300)
        >>> frame.columns.tolist(), float(frame["reuse"].max())
        (['token', 'target', 'gcswr', 'reuse'], 1.0)
    """
    p, seed = check_distribution(p), check_seed(seed)
    check_count(steps, "steps", 1, MAX_STEPS)
    logits = p.log().float()[None]
    sampler = make_sampler("gcswr", seed=seed)
    counts = torch.zeros(len(p), dtype=torch.float64)
    for _ in range(steps):
        counts[sampler.sample(logits)] += 1
    first = int(make_sampler("gcs", seed=seed).sample(logits)[0])
    reuse = torch.zeros(len(p), dtype=torch.float64)
    reuse[first] = 1.0
    expected = p * steps
    live = expected > 0
    statistic = (((counts - expected) ** 2)[live] / expected[live]).sum()
    dof = int(live.sum()) - 1
    p_value = (float(torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64), statistic / 2))
               if dof > 0 else 1.0)
    frame = pd.DataFrame({"token": range(len(p)), "target": p.numpy(), "gcswr": (counts / steps).numpy(),
                          "reuse": reuse.numpy()})
    return frame, p_value
