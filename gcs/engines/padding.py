"""Rows of token ids of different lengths, padded into one tensor: how a runner's steps become ``run``'s output."""

from __future__ import annotations

import torch


def padded(token_ids: list[list[int]], pad: int) -> torch.Tensor:
    """Rows of token ids as one long tensor, the short ones padded with ``pad``.

    >>> padded([[5, 6], [7]], 0).tolist()
    [[5, 6], [7, 0]]
    """
    width = max(1, max((len(ids) for ids in token_ids), default=1))
    return torch.tensor([ids + [pad] * (width - len(ids)) for ids in token_ids], dtype=torch.long)
