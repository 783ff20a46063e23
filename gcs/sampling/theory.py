"""Closed forms from the paper: Theorem 1 (agreement under shared noise) and appendix C (p_repeat).

>>> round(agreement_probability([0.5, 0.5], [0.5, 0.5]), 6)
1.0
>>> round(agreement_probability([0.5, 0.5], [0.5, 0.5], method="is"), 6)
0.5
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from gcs.checks import check_method
from gcs.runtime.arguments import ArgumentTypeError
from gcs.runtime.quoting import quoted

PROBABILITY_TOLERANCE = 1e-4


def _probabilities(values, name: str) -> torch.Tensor:
    try:
        p = torch.as_tensor(np.asarray(values, dtype=np.float64) if not isinstance(values, torch.Tensor) else values)
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"{name} must be probabilities (numbers), got {type(values).__name__} "
                                f"{quoted(values)}") from None
    p = p.to(torch.float64)
    if p.dim() == 0 or p.shape[-1] == 0:
        raise ValueError(f"{name} must have at least one category, got shape {list(p.shape)}")
    if not torch.isfinite(p).all() or (p < 0).any():
        raise ValueError(f"{name} must contain finite, non-negative probabilities")
    sums = p.sum(dim=-1)
    if ((sums - 1).abs() > PROBABILITY_TOLERANCE).any():
        raise ValueError(f"{name} must sum to 1 along the last axis (got sums {sums.flatten()[:4].tolist()})")
    return p / sums[..., None]


def agreement_probability(p, q, *, method: str = "gcs") -> float | torch.Tensor:
    r"""Probability that two draws, one from ``p`` and one from ``q``, are the same category.

    ``method="gcs"`` (or "gcswr"; they coincide for a single draw from a fresh noise vector) is Theorem 1 summed over
    the categories $k$:

    $$P(\text{same}) = \sum_k \frac{p_k q_k}{p_k q_k + \sum_{i \ne k} \max(p_i q_k,\ q_i p_k)}$$

    evaluated in O(vocab log vocab): for a fixed $k$, $\max(p_i q_k, q_i p_k)$ is $p_i q_k$ exactly when
    $p_i / q_i \ge p_k / q_k$, so sorting by that ratio turns the inner sum into two prefix sums. ``method="is"`` is
    independent sampling: $\sum_k p_k q_k$.

    Args:
        p: a probability vector [vocab] or a batch [..., vocab].
        q: the same shape as ``p``.
        method: "gcs", "gcswr" or "is".

    Returns:
        The probability: a float for vectors, a tensor [...] for batches.

    Raises:
        ValueError: an unknown method, or inputs that are not probability vectors of one shape.

    Examples:
        >>> round(agreement_probability([0.9, 0.1], [0.1, 0.9]), 4)
        0.2
        >>> round(agreement_probability([0.9, 0.1], [0.1, 0.9], method="is"), 4)
        0.18
    """
    p, q = _probabilities(p, "p"), _probabilities(q, "q")
    if p.shape != q.shape:
        raise ValueError(f"p and q must have the same shape, got {list(p.shape)} and {list(q.shape)}")
    if check_method(method) == "is":
        result = (p * q).sum(dim=-1)
    else:
        both_zero = (p == 0) & (q == 0)
        ratio = torch.where(both_zero, torch.zeros_like(p), p / q)  # +inf where only q is 0
        order = torch.argsort(ratio, dim=-1, descending=True, stable=True)
        ps, qs = p.gather(-1, order), q.gather(-1, order)
        # Ties in the ratio give equal values on both branches, so an inclusive split is exact.
        p_at_or_above = ps.cumsum(dim=-1)
        q_below = qs.sum(dim=-1, keepdim=True) - qs.cumsum(dim=-1)
        denominator = qs * p_at_or_above + ps * q_below
        numerator = ps * qs
        terms = torch.where(numerator > 0, numerator / denominator.clamp(min=torch.finfo(torch.float64).tiny), 0.0)
        result = terms.sum(dim=-1)
    return result.item() if result.dim() == 0 else result


def p_repeat(labels: Sequence[bool]) -> float:
    r"""Unbiased estimate of $p^2 + (1 - p)^2$ from $N$ Bernoulli labels (appendix C).

    The plug-in $\hat p^2 + (1 - \hat p)^2$ is biased upwards; the paper's correction is
    $\frac{N}{N - 1} \left(\hat p^2 + (1 - \hat p)^2\right) - \frac{1}{N - 1}$.

    Args:
        labels: N boolean labels, N >= 2.

    Returns:
        The estimate.

    Raises:
        ValueError: fewer than two labels.

    Examples:
        >>> p_repeat([True, False])
        0.0
        >>> p_repeat([True, True, True])
        1.0
    """
    values = np.asarray(labels)
    if values.ndim != 1:
        raise ValueError(f"labels must be one-dimensional, got shape {values.shape}")
    if values.size < 2:
        raise ValueError(f"p_repeat needs at least 2 labels, got {values.size}")
    if values.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"labels must be booleans (or 0/1), got {values.dtype} values")
    if values.dtype != bool:
        if not np.isin(values, (0, 1)).all():
            raise ValueError("labels must be booleans (or 0/1)")
        values = values.astype(bool)
    n = values.size
    p_hat = values.mean()
    return float(n / (n - 1) * (p_hat**2 + (1 - p_hat) ** 2) - 1 / (n - 1))
