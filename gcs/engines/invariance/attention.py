"""Row-invariant attention: each row of a left-padded batch attends over its own tokens only.

Rows are grouped by how much left padding they carry, the padding is cut off, and each group's attention is
computed from ``torch.bmm`` (``attend``), which computes every matrix of a batch alike; PyTorch's fused CPU
attention does not (a row's output changed with its place in the batch). Registered with transformers as
``ATTENTION``.
"""

from __future__ import annotations

import threading
import weakref

import torch
from torch.nn import functional as F

ATTENTION = "gcs_row_invariant"

_recent = threading.local()  # the last mask seen in this thread and its groups: every layer of a forward shares it


def _padding_groups(mask: torch.Tensor | None, batch: int, kv_length: int) -> list[tuple[int, slice | torch.Tensor]]:
    """The rows of each left padding (keys before a row's first attended key), from a [batch, 1, q, kv] mask:
    ``_groups`` of the rows' paddings.

    The mask is boolean (True = attend) or additive (0 = attend); None means no padding. Keys
    that a sliding window hides from every query count as padding too: no query sees them.
    """
    if mask is None:
        return [(0, slice(0, batch))]
    recent = getattr(_recent, "value", None)
    if recent is not None and recent[0]() is mask:
        return recent[1]
    allowed = mask if mask.dtype == torch.bool else mask == 0
    seen = allowed[:, 0].any(dim=1).expand(batch, kv_length)
    groups = _groups(torch.where(seen.any(dim=-1), seen.int().argmax(dim=-1), kv_length).tolist())
    _recent.value = (weakref.ref(mask), groups)
    return groups


def _groups(padding: list[int]) -> list[tuple[int, slice | torch.Tensor]]:
    """The rows of each left padding: a slice where they are consecutive (a view of the cache, no copy: batches
    put rows of one length together, ``gcs.engines.batch``), else their indices (a gathered copy).

    >>> _groups([0, 0, 3, 3, 3])
    [(0, slice(0, 2, None)), (3, slice(2, 5, None))]
    >>> _groups([0, 3, 0])
    [(0, tensor([0, 2])), (3, tensor([1]))]
    """
    starts = [i for i in range(len(padding)) if i == 0 or padding[i] != padding[i - 1]]
    if len(starts) == len(set(padding)):  # each padding in one run
        ends = [*starts[1:], len(padding)]
        return [(padding[start], slice(start, end)) for start, end in zip(starts, ends, strict=True)]
    return [(pad, torch.tensor([i for i, p in enumerate(padding) if p == pad])) for pad in sorted(set(padding))]


def attend(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, scale: float,
           window: int | None = None) -> torch.Tensor:
    """Causal attention of one group of unpadded rows, from batched matrix products only.

    ``query`` [rows, heads, q, dim] holds the *last* q positions of ``key``/``value`` [rows, kv_heads, kv, dim]
    (q <= kv; the query heads that share a key head are consecutive, as in ``repeat_kv``); ``window``: a
    sliding window's size (a query sees itself and the ``window - 1`` keys before it). Returns
    [rows, q, heads, dim]. ``torch.bmm`` computes every matrix of its batch with one kernel whatever the
    batch holds (tested), so each row's result is a function of that row alone; the fused
    ``scaled_dot_product_attention`` on CPU is not (a row's output changes with its place in the batch).
    """
    rows, heads, q_length, dim = query.shape
    kv_heads, kv_length = key.shape[1], key.shape[2]
    shared = heads // kv_heads
    # [rows * kv_heads, shared * q, dim]: the query heads of one key head form one matrix
    q = query.reshape(rows * kv_heads, shared * q_length, dim)
    k = key.reshape(rows * kv_heads, kv_length, dim)
    scores = torch.bmm(q, k.transpose(1, 2)).float().mul_(scale)
    offset = kv_length - q_length  # query t sits at key position offset + t
    if q_length > 1 or (window is not None and kv_length > window):
        allowed = torch.ones(q_length, kv_length, dtype=torch.bool, device=query.device).tril(offset)
        if window is not None:
            allowed &= ~allowed.tril(offset - window)
        scores.masked_fill_(~allowed.repeat(shared, 1), float("-inf"))
    weights = scores.softmax(dim=-1).to(value.dtype)
    out = torch.bmm(weights, value.reshape(rows * kv_heads, kv_length, dim))
    return out.view(rows, heads, q_length, dim).transpose(1, 2)


def row_invariant_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None,
                            is_causal=None, **kwargs):
    """Causal attention with each row cut to its own tokens (transformers' attention-function contract).

    ``query`` [batch, heads, q, dim], ``key``/``value`` [batch, kv_heads, kv, dim], left padding only.
    Returns ``(output [batch, q, heads, dim], None)``; outputs at padding positions are zero. Rows with
    the same padding run together through ``attend``.
    """
    if dropout:
        raise ValueError("row-invariant attention is for inference: dropout must be 0")
    batch, heads, q_length, dim = query.shape
    kv_length = key.shape[2]
    scale = scaling if scaling is not None else dim**-0.5
    window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
    groups = _padding_groups(attention_mask, batch, kv_length)
    if len(groups) == 1:  # one group: no gathering
        pad = groups[0][0]
        queries = min(q_length, kv_length - pad)  # the real queries are the last ones
        if queries <= 0:
            return query.new_zeros(batch, q_length, heads, dim), None
        output = attend(query[:, :, q_length - queries :], key[:, :, pad:], value[:, :, pad:], scale, window)
        if queries < q_length:
            output = F.pad(output, (0, 0, 0, 0, q_length - queries, 0))
        return output, None
    output = query.new_zeros(batch, q_length, heads, dim)
    for pad, rows in groups:
        rows = rows.to(query.device) if isinstance(rows, torch.Tensor) else rows
        queries = min(q_length, kv_length - pad)
        if queries <= 0:
            continue
        output[rows, q_length - queries :] = attend(query[rows, :, q_length - queries :], key[rows, :, pad:],
                                                    value[rows, :, pad:], scale, window)
    return output, None


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(ATTENTION, row_invariant_attention)
    AttentionMaskInterface.register(ATTENTION, sdpa_mask)
