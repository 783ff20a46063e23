"""Row-invariant kernels: a row's logits do not depend on the other rows of its batch.

"Same prompt, method and seed, same answer" needs more than counter-based noise
(``gcs.sampling.noise``): the sampler must also see the *same logits* for a row whether it runs
alone or beside 47 others. Stock CPU kernels do not promise that. Measured on an AVX-512
CPU: a float32 ``linear`` gives row 0 three different roundings for 1, 2-3 and 4+ rows
(the BLAS picks its kernel by the number of rows), and a left-padded row attends over
its padding in different vector lanes than the same row alone (logits off by 4e-5 in
float32, 0.4 in bfloat16). Small as that is, it flips a token now and then (3 of 24
IS rows over 64 tokens), and GCSwR's recycling carries a flip to every later token.

Two changes make a row's computation a function of that row alone, bit for bit:

- ``RowBlockLinear``: every linear layer gives each row the bits that fixed blocks of
  ``ROW_BLOCK`` rows (the last one padded with zeros) give it, so the BLAS's choice of kernel by
  row count never reaches a row. One call stands in for the blocks at the widths where a probe
  showed it gives their bits (``in_row_blocks``), and a bfloat16 weight is packed once
  (``_packed_kernel``: the same bits, fewer passes over the weight); together they make a
  144-row side by side faster than the stock kernels and one row nearly as fast.
- ``row_invariant_attention``: each row attends over its own tokens only. Rows are
  grouped by how much left padding they carry, the padding is cut off, and each group's
  attention is computed from ``torch.bmm`` (``attend``), which computes every matrix of a
  batch alike; PyTorch's fused CPU attention does not (a row's output changed with its
  place in the batch).

``make_row_invariant(model)`` installs both on a transformers model for good (in place, once): gcs does it
to the models it loads itself. A model the caller passed in gets them for the duration of each gcs call only
(``row_invariant_kernels``) and comes back as given. The transformers runner (``gcs.engines.transformers``) uses them on
CPU (``row_invariance``; ``GCS_ROW_INVARIANT`` = auto, on, off). The rest of a decoder (embeddings, norms,
rotary embeddings, activations) is row-wise already.

>>> import torch
>>> layer = RowBlockLinear(8, 3)
>>> x = torch.randn(5, 8)
>>> torch.equal(layer(x)[2], layer(x[2:3])[0])  # a row alone = the same row in a batch
True

On the vLLM engine (``gcs.engines.vllm``) the same blocks wrap vLLM's own CPU linear kernels (``RowBlocks``), and
its CPU attention runs each sequence on its own (``VLLM_CPU_ATTN_SPLIT_KV=0``).

The package by job: ``row_blocks`` (a linear kernel in fixed row blocks, and the probe that lets one call stand in
for them), ``packed_weights`` (bf16 weights packed once, ``RowBlockLinear``), ``attention`` (each row over its own
tokens) and ``policy`` (where the kernels go: installed, for one call, or not wanted).
"""

from gcs.engines.invariance.attention import ATTENTION, attend, row_invariant_attention
from gcs.engines.invariance.packed_weights import RowBlockLinear
from gcs.engines.invariance.policy import (
    SETTING,
    is_row_invariant,
    make_row_invariant,
    refusal,
    row_invariance,
    row_invariant_kernels,
    wanted,
)
from gcs.engines.invariance.row_blocks import ROW_BLOCK, RowBlocks, in_row_blocks

__all__ = ["ATTENTION", "ROW_BLOCK", "SETTING", "RowBlockLinear", "RowBlocks", "attend", "in_row_blocks",
           "is_row_invariant", "make_row_invariant", "refusal", "row_invariance", "row_invariant_attention",
           "row_invariant_kernels", "wanted"]
