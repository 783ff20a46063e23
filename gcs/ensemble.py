"""Distributional ensembling over rewordings (section 5, Eq. 1).

The ensemble of next-token distributions P_1..P_n is their normalised geometric mean,
``Q ∝ prod_i P_i^(1/n)``: the distribution minimising the average KL(Q || P_i)
(appendix D). A token that any rewording rules out (-inf) stays ruled out.

>>> import torch
>>> q = geometric_ensemble(torch.tensor([[0.0, 0.0], [0.0, float("-inf")]]))
>>> q.exp().tolist()
[1.0, 0.0]
"""

from __future__ import annotations

import torch


def geometric_ensemble(logits: torch.Tensor) -> torch.Tensor:
    """Log-probabilities [..., vocab] of the normalised geometric mean of [..., n, vocab] logits.

    Each member is normalised first (``log_softmax``), so members with shifted logits
    count equally; the mean is taken over the second-to-last axis.
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise ValueError("logits must be a floating torch.Tensor")
    if logits.dim() < 2 or logits.shape[-2] == 0 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have shape [..., n, vocab] with n, vocab > 0, got {list(logits.shape)}")
    members = torch.log_softmax(logits.float(), dim=-1)
    if torch.isnan(members).any():
        raise ValueError("every member distribution needs at least one finite logit and no NaN")
    mean = members.mean(dim=-2)
    if torch.isneginf(mean).all(dim=-1).any():
        raise ValueError("the members share no token with non-zero probability; their geometric mean is empty")
    return torch.log_softmax(mean, dim=-1)
