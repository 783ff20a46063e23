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

from gcs.runtime.arguments import ArgumentTypeError


def geometric_ensemble(logits: torch.Tensor) -> torch.Tensor:
    """The normalised geometric mean of several next-token distributions (Eq. 1).

    Each member is normalised first (``log_softmax``), so members with shifted logits count equally; the mean is taken
    over the second-to-last axis.

    Args:
        logits: the members' logits, [..., n, vocab].

    Returns:
        Log-probabilities [..., vocab].

    Raises:
        ValueError: a bad shape, a member with no finite logit or a NaN, or members that share no token.

    Examples:
        >>> [round(p, 4) for p in geometric_ensemble(torch.tensor([[0.0, 0.0], [0.0, -2.0]])).exp().tolist()]
        [0.7311, 0.2689]
    """
    if not isinstance(logits, torch.Tensor) or not logits.is_floating_point():
        raise ArgumentTypeError(f"logits must be a floating torch.Tensor, got "
                                f"{getattr(logits, 'dtype', None) or type(logits).__name__}")
    if logits.dim() < 2 or logits.shape[-2] == 0 or logits.shape[-1] == 0:
        raise ValueError(f"logits must have shape [..., n, vocab] with n, vocab > 0, got {list(logits.shape)}")
    members = torch.log_softmax(logits.float(), dim=-1)
    if torch.isnan(members).any():
        raise ValueError("every member distribution needs at least one finite logit and no NaN")
    mean = members.mean(dim=-2)
    if torch.isneginf(mean).all(dim=-1).any():
        raise ValueError("the members share no token with non-zero probability; their geometric mean is empty")
    return torch.log_softmax(mean, dim=-1)


def grouped_geometric_ensemble(logits: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """Eq. 1 for variable-size groups: the geometric mean of each group's next-token distributions.

    Args:
        logits: one row per member, [rows, vocab].
        groups: each row's group id, [rows]; ids are 0 to n_groups - 1.

    Returns:
        Log-probabilities [n_groups, vocab], one normalised distribution per group.

    Examples:
        >>> x = torch.tensor([[0.0, 0.0], [0.0, -1.0], [0.0, -2.0]])
        >>> ensembled = grouped_geometric_ensemble(x, torch.tensor([0, 1, 1])).exp().tolist()
        >>> [[round(v, 3) for v in row] for row in ensembled]
        [[0.5, 0.5], [0.818, 0.182]]
    """
    members = torch.log_softmax(logits.float(), dim=-1)
    n_groups = int(groups.max()) + 1
    sizes = torch.bincount(groups, minlength=n_groups).to(members.dtype)
    sums = torch.zeros(n_groups, logits.shape[-1], dtype=members.dtype, device=logits.device)
    return torch.log_softmax(sums.index_add_(0, groups, members) / sizes[:, None], dim=-1)
