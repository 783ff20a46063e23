"""Row-invariant kernels: a row's logits do not depend on the other rows of its batch.

"Same prompt, method and seed, same answer" needs more than counter-based noise
(``gcs.noise``): the sampler must also see the *same logits* for a row whether it runs
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
(``row_invariant_kernels``) and comes back as given. The transformers runner (``gcs.runner``) uses them on
CPU (``row_invariance``; ``GCS_ROW_INVARIANT`` = auto, on, off). The rest of a decoder (embeddings, norms,
rotary embeddings, activations) is row-wise already.

>>> import torch
>>> layer = RowBlockLinear(8, 3)
>>> x = torch.randn(5, 8)
>>> torch.equal(layer(x)[2], layer(x[2:3])[0])  # a row alone = the same row in a batch
True

On the vLLM engine (``gcs.vllm_engine``) the same blocks wrap vLLM's own CPU linear kernels, and
its CPU attention runs each sequence on its own (``VLLM_CPU_ATTN_SPLIT_KV=0``).
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Hashable

import torch
from torch.nn import functional as F

from . import internals

logger = logging.getLogger(__name__)

ROW_BLOCK = 16
ATTENTION = "gcs_row_invariant"
SETTING = "GCS_ROW_INVARIANT"  # auto (CPU only), on, off
_CONVERTING = threading.Lock()


def in_row_blocks(linear, x: torch.Tensor, *args, kernel: Hashable | None = None,
                  widths: dict | None = None) -> torch.Tensor:
    """``linear(x, *args)`` computed so that each row of ``x`` [..., in] gets the bits that fixed blocks of
    ``ROW_BLOCK`` rows give it (the last block padded with zeros): the kernel's rounding never sees the other
    rows, so each row's output is independent of them.

    Without ``kernel`` it is computed in those blocks. With ``kernel`` (what ``linear``'s rounding depends on
    besides the rows: its code and shapes, see ``_kernel_key``) up to ``WIDEST`` rows go in one call, padded
    to the narrowest width at which one call was shown to give every row the blocks' bits
    (``_width_for``): the same output, with one pass over the weight instead of one per block and few
    rows of zeros. More rows go in chunks of ``WIDEST``. ``widths`` caches the chosen widths for one layer.

    >>> w = torch.randn(3, 8)
    >>> x = torch.randn(5, 8)
    >>> torch.equal(in_row_blocks(F.linear, x, w)[2], in_row_blocks(F.linear, x[2:3], w)[0])
    True
    """
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    count = rows.shape[0]
    if kernel is None or not count or not ONE_CALL:
        out = _blocks(linear, rows, args)
    else:
        widths = {} if widths is None else widths
        out = _in_one_call(linear, kernel, widths, rows, args) if count <= WIDEST else \
            torch.cat([_in_one_call(linear, kernel, widths, chunk, args) for chunk in rows.split(WIDEST)])
    return out if x.dim() == 2 else out.reshape(*x.shape[:-1], out.shape[-1])


def _blocks(linear, rows: torch.Tensor, args: tuple) -> torch.Tensor:
    """``linear`` on ``rows`` [n, in] in blocks of ``ROW_BLOCK`` rows, the last one padded with zeros."""
    count = rows.shape[0]
    missing = -count % ROW_BLOCK if count else ROW_BLOCK  # no rows: one block of zeros gives the output's shape
    padded = F.pad(rows, (0, 0, 0, missing)) if missing else rows
    return torch.cat([linear(block, *args) for block in padded.split(ROW_BLOCK)])[:count]


ONE_CALL = True  # False: always blocks (what one call saves: bench/bench_invariance.py)
WIDEST = 64  # rows one call may take (more rows: chunks of this many)
# outputs on which one call of a width must give the blocks' bits before it stands in for them (256 rows of a
# 576-wide layer: oneDNN's one-row kernel for a 1536-wide layer rounded 1 row of 576 outputs in 10 otherwise),
# from at least PROBE_MIN_ROWS and at most PROBE_MAX_ROWS random rows
PROBE_ELEMENTS = 256 * 576
PROBE_MIN_ROWS, PROBE_MAX_ROWS = 32, 2048
_WIDTHS: dict[tuple, int | None] = {}  # (kernel, width, numerics) -> the width if one call computes like blocks


_MKLDNN_MATMUL = getattr(torch.backends.mkldnn, "matmul", None)  # its fp32_precision follows both precision APIs


def _numerics(x: torch.Tensor) -> tuple:
    """What else a kernel's rounding on ``x``'s device may depend on: the thread count and the float32 matmul
    precision settings (oneDNN's on CPU; TF32 and reduced-precision reductions on CUDA)."""
    try:
        if x.is_cuda:
            matmul = torch.backends.cuda.matmul
            return (torch.get_num_threads(), matmul.allow_tf32, matmul.allow_bf16_reduced_precision_reduction,
                    matmul.allow_fp16_reduced_precision_reduction)
        precision = _MKLDNN_MATMUL.fp32_precision if _MKLDNN_MATMUL else torch.get_float32_matmul_precision()
        return torch.get_num_threads(), torch.backends.mkldnn.enabled, precision
    except RuntimeError as error:  # torch refuses to read a precision set through both of its APIs
        return torch.get_num_threads(), str(error)


def _in_one_call(linear, kernel: Hashable, widths: dict, rows: torch.Tensor, args: tuple) -> torch.Tensor:
    """``rows`` (at most ``WIDEST``) through ``linear`` in one call at ``_width_for``'s width, else in blocks."""
    count, numerics = rows.shape[0], _numerics(rows)
    local = (count, numerics)
    if local not in widths:
        widths[local] = _width_for(linear, kernel, numerics, rows, args)
    width = widths[local]
    if width is None:
        return _blocks(linear, rows, args)
    if width == count:
        return linear(rows, *args)
    return linear(F.pad(rows, (0, 0, 0, width - count)), *args)[:count]


def _width_for(linear, kernel: Hashable, numerics: tuple, rows: torch.Tensor, args: tuple) -> int | None:
    """The narrowest width, of ``len(rows)`` itself, the next power of two (at least 2) and the next multiple of
    ``ROW_BLOCK``, at which one call of ``linear`` gives every row the bits of ``_blocks``; None if none does.

    A width's verdict is kept for every layer with the same kernel key and numerics; a probe that could not
    tell (``_rounds_like_blocks`` gives None) keeps the blocks for this layer only.
    """
    count = rows.shape[0]
    for width in sorted({count, max(2, 1 << (count - 1).bit_length()), -(-count // ROW_BLOCK) * ROW_BLOCK}):
        if width == ROW_BLOCK:  # one call of 16 rows is the block itself
            return width
        key = (kernel, width, numerics)
        if key not in _WIDTHS:
            verdict = _rounds_like_blocks(linear, width, rows, args)
            if verdict is None:
                return None
            _WIDTHS[key] = width if verdict else None
        if _WIDTHS[key] is not None:
            return width
    return None


def _rounds_like_blocks(linear, width: int, rows: torch.Tensor, args: tuple) -> bool | None:
    """Whether calls of ``linear`` on ``width`` rows give the blocks' bits on random rows; None if the probe
    cannot tell (most outputs ignore the input: a zero or pruned weight agrees at any width).

    A kernel's order of summation does not depend on the values, so a width that sums in another order shows
    as a different rounding somewhere: in every row, or in rare outputs only. The probe covers
    ``PROBE_ELEMENTS`` outputs (``PROBE_MIN_ROWS`` to ``PROBE_MAX_ROWS`` rows) and tells where that many, or
    half of them, differ from the output for a row of zeros (the bias); the rarest difference measured
    (oneDNN's one-row kernel for the embedded model's 1536-wide layer: 1 row of 576 outputs in 10) escapes
    ``PROBE_ELEMENTS`` outputs with a probability below 0.9^256.
    """
    generator = torch.Generator().manual_seed(width)
    in_features = rows.shape[1]
    try:
        with torch.no_grad():
            bias_only = _blocks(linear, rows.new_zeros(1, in_features), args)
            wanted = max(PROBE_MIN_ROWS, -(-PROBE_ELEMENTS // max(bias_only.shape[-1], 1)))
            count = -(-min(wanted, PROBE_MAX_ROWS) // width) * width
            probe = torch.randn(count, in_features, generator=generator).to(rows.device, rows.dtype)
            # a row's blocks do not depend on the other rows of the block: all probe rows' blocks at once
            reference = _blocks(linear, probe, args)
            one_call = torch.cat([linear(chunk, *args) for chunk in probe.split(width)])
            if not torch.equal(one_call, reference):
                return False
            informative = int((one_call != bias_only).sum())
    except Exception as error:  # noqa: BLE001 -- a speed lever only: any failure keeps the blocks
        logger.info("one call of %d rows not used (%s: %s)", width, type(error).__name__, error)
        return False
    return True if informative >= min(PROBE_ELEMENTS, one_call.numel() // 2) else None


def _described(value) -> Hashable:
    """A value as a kernel key sees it: a tensor's dtype, shape, strides and device (with its index); a plain
    value itself; anything else its type."""
    if isinstance(value, torch.Tensor):  # oneDNN's packed tensors have a layout of their own and no strides
        strides = value.stride() if value.layout == torch.strided else value.layout
        return value.dtype, tuple(value.shape), strides, value.device
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return type(value).__qualname__


def _contents(cell):
    try:
        return cell.cell_contents
    except ValueError:  # a closure variable not assigned yet
        return None


def _kernel_key(linear, x: torch.Tensor, out_features: int, args: tuple) -> tuple:
    """What the rounding of ``linear(x, *args)`` depends on besides the rows and ``_numerics``: the kernel's code
    with what its closure and defaults hold (layers dispatched alike share them), the input and output
    widths and dtype, and the arguments (tensors by dtype, shape, strides and device)."""
    function = getattr(linear, "__func__", linear)  # a bound method: its function, and its object's type below
    cells = tuple(_described(_contents(cell)) for cell in getattr(function, "__closure__", None) or ())
    defaults = tuple(_described(value) for value in getattr(function, "__defaults__", None) or ())
    owner = _described(getattr(linear, "__self__", None))
    return (getattr(function, "__code__", function), cells, defaults, owner, x.shape[-1], out_features, x.dtype,
            tuple(_described(arg) for arg in args))


class RowBlocks:
    """A layer's linear kernel ``linear(x, *args) -> [..., out]`` (e.g. vLLM's ``cpu_linear``) computed
    ``in_row_blocks``: blocks for its first call, which shows its output width; after that, one call
    wherever it computes like the blocks.

    >>> layer = RowBlocks(F.linear)
    >>> w, x = torch.randn(3, 8), torch.randn(5, 8)
    >>> torch.equal(layer(x, w)[2], layer(x[2:3], w)[0])
    True
    """

    def __init__(self, linear):
        self.linear = linear
        self.kernel: tuple | None = None
        self.widths: dict = {}

    def __call__(self, x: torch.Tensor, *args) -> torch.Tensor:
        out = in_row_blocks(self.linear, x, *args, kernel=self.kernel, widths=self.widths)
        if self.kernel is None:
            self.kernel = _kernel_key(self.linear, x, out.shape[-1], args)
        return out


PACKING_HEADROOM = 0.25  # weights are packed only while this share of the machine's memory stays free
SAMPLED = 256  # weight elements compared on every call: an edit autograd does not see (``weight.data``) repacks


def _packed_kernel(weight: torch.Tensor, bias: torch.Tensor | None = None) -> Callable | None:
    """A kernel ``(block, weight, bias)`` for ``ROW_BLOCK``-row blocks with a bfloat16 ``weight`` [out, in] packed
    once into oneDNN's own layout (``gcs.internals.packed_bf16_linear``), or None where that does not apply.

    ``F.linear`` packs the weight again on every call, i.e. once per block: at 144 rows the LM head of the
    embedded model took 47 ms in blocks against 27 ms packed once (22 ms stock, unblocked). Used only if
    it gives ``F.linear``'s bits on a probe block (with ``bias``), so packing is a speed lever that never
    changes a token: where it would, or where the copy would not fit in memory, blocks call ``F.linear``.
    float32 is not packed: MKL's packed copies took 1.5 times the weights' memory for about 10 % on the
    LM head alone.
    """
    if weight.device.type != "cpu" or weight.dtype != torch.bfloat16 or weight.dim() != 2 \
            or not weight.is_contiguous():
        return None
    packed = internals.packed_bf16_linear(weight, ROW_BLOCK)
    if packed is None:
        return None

    def kernel(block, weight, bias):
        return packed(block, bias)

    probe = torch.randn(ROW_BLOCK, weight.shape[1], generator=torch.Generator().manual_seed(0)).to(weight.dtype)
    if not torch.equal(kernel(probe, weight, bias), F.linear(probe, weight, bias)):
        internals.warn_once("packed-bits", "packed bf16 weights round unlike F.linear here (torch %s): not packed; "
                            "generation is slower, with the same tokens", torch.__version__)
        return None
    return kernel


def _room_for(weight: torch.Tensor) -> bool:
    """Whether a packed copy of ``weight`` (about its size) leaves ``PACKING_HEADROOM`` of the memory free: the
    machine's, or a container's (cgroup v2) where that is smaller."""
    import psutil  # accelerate's dependency: installed with gcs

    memory = psutil.virtual_memory()
    total, available = memory.total, memory.available
    try:
        limit = Path("/sys/fs/cgroup/memory.max").read_text().strip()
        if limit != "max":
            used = int(Path("/sys/fs/cgroup/memory.current").read_text())
            total, available = min(total, int(limit)), min(available, int(limit) - used)
    except (OSError, ValueError):
        pass
    return available - weight.nbytes >= PACKING_HEADROOM * total


def _identity(weight: torch.Tensor) -> tuple | None:
    """What a packed copy of ``weight`` depends on: its address, layout and version, and the thread count; None
    for an inference tensor (no version counter). A new dtype or device means a new address: the cache holds
    the old weight, so no later tensor takes its address."""
    version = internals.version_counter(weight)
    if version is None:
        return None
    return weight.data_ptr(), weight.shape, weight.stride(), version, torch.get_num_threads()


class _PackedWeight:
    """A layer's packed kernel (or None) and the widths it computes in one call (``in_row_blocks``), valid while
    the key and a sample of the weight's values hold."""

    def __init__(self, key: tuple, weight: torch.Tensor, bias: torch.Tensor | None):
        self.key = key
        self.kernel = _packed_kernel(weight, bias) if _room_for(weight) else None
        self.one_call: dict[bool, tuple] = {}  # with a bias or not -> (the kernel's key, its widths by row count)
        if self.kernel is not None:
            self.alias = weight.detach()  # holds the packed weight's memory, so no later tensor can take its address
            self.sample = self._sampled(weight).clone()

    @staticmethod
    def _sampled(weight: torch.Tensor) -> torch.Tensor:
        """``SAMPLED`` evenly spaced elements of the (contiguous) weight, as a view: cheap enough for every call."""
        size = weight.numel()
        step = max(size // SAMPLED, 1)
        return weight.detach().view(-1).as_strided((min(SAMPLED, size),), (step,))

    def current(self, key: tuple, weight: torch.Tensor) -> bool:
        return key == self.key and (self.kernel is None or torch.equal(self._sampled(weight), self.sample))


class RowBlockLinear(torch.nn.Linear):
    """``nn.Linear`` computed ``in_row_blocks``. A drop-in class for an existing ``nn.Linear``
    (``make_row_invariant`` swaps the class; the weights stay where they are).

    In inference on CPU a bfloat16 weight is packed once for the blocks (``_packed_kernel``; the same bits
    as ``F.linear``) and packed again when it changes: another tensor, shape, dtype or device, an in-place
    update autograd sees (``weight.mul_``, ``load_state_dict``), or one through ``weight.data`` that
    changes any of ``SAMPLED`` evenly spaced elements (a merged LoRA adapter does). Layers that accelerate
    loads on each call (offloading hooks) are never packed.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        weight, bias = self.weight, self.bias
        if (torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad)) or x.dtype != weight.dtype \
                or torch.is_autocast_enabled(x.device.type) or "_hf_hook" in self.__dict__:
            # the packed kernels have no backward, compute in the weight's dtype whatever autocast says, and
            # would be packed again at every call of an offloaded layer
            return in_row_blocks(F.linear, x, weight, bias)
        key = _identity(weight)  # the bias is never packed: it is read at every call
        if key is None:
            return in_row_blocks(F.linear, x, weight, bias)
        packed = _PACKED.get(self)
        if packed is None or not packed.current(key, weight):
            packed = _PACKED[self] = _PackedWeight(key, weight, bias)
        kernel = packed.kernel or F.linear
        has_bias = bias is not None
        if has_bias not in packed.one_call:  # the bias is read at every call: it may come or go without a repack
            packed.one_call[has_bias] = _kernel_key(kernel, x, weight.shape[0], (weight, bias)), {}
        kernel_key, widths = packed.one_call[has_bias]
        return in_row_blocks(kernel, x, weight, bias, kernel=kernel_key, widths=widths)


# layer -> its _PackedWeight; kept beside the layers so that copying or pickling a model never meets
# oneDNN's opaque packed tensors
_PACKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


_recent = threading.local()  # the last mask seen in this thread and its padding: every layer of a forward shares it


def _left_padding(mask: torch.Tensor | None, batch: int, kv_length: int) -> list[int]:
    """Keys before each row's first attended key (its left padding), from a [batch, 1, q, kv] mask.

    The mask is boolean (True = attend) or additive (0 = attend); None means no padding. Keys
    that a sliding window hides from every query count as padding too: no query sees them.
    """
    if mask is None:
        return [0] * batch
    recent = getattr(_recent, "value", None)
    if recent is not None and recent[0]() is mask:
        return recent[1]
    allowed = mask if mask.dtype == torch.bool else mask == 0
    seen = allowed[:, 0].any(dim=1).expand(batch, kv_length)
    padding = torch.where(seen.any(dim=-1), seen.int().argmax(dim=-1), kv_length).tolist()
    _recent.value = (weakref.ref(mask), padding)
    return padding


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
    padding = _left_padding(attention_mask, batch, kv_length)
    if len(set(padding)) == 1:  # one group: no gathering
        pad = padding[0]
        queries = min(q_length, kv_length - pad)  # the real queries are the last ones
        if queries <= 0:
            return query.new_zeros(batch, q_length, heads, dim), None
        output = attend(query[:, :, q_length - queries :], key[:, :, pad:], value[:, :, pad:], scale, window)
        if queries < q_length:
            output = F.pad(output, (0, 0, 0, 0, q_length - queries, 0))
        return output, None
    output = query.new_zeros(batch, q_length, heads, dim)
    for pad in sorted(set(padding)):
        rows = torch.tensor([i for i, p in enumerate(padding) if p == pad], device=query.device)
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


def refusal(model: torch.nn.Module) -> str | None:
    """Why row-invariant kernels cannot compute ``model`` (not a transformers model, logit soft-capping, attention
    sinks), or None when they can."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        return f"{type(model).__name__} is not a transformers model: row-invariant kernels need one"
    for name in ("attn_logit_softcapping", "attention_sinks", "use_sinks"):
        if getattr(config, name, None):
            return f"{type(model).__name__} uses {name}, which row-invariant attention does not compute"
    return None


def _install(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Row-invariant attention and linear layers on ``model``, in place; the layers whose class was swapped."""
    _register()
    model.set_attn_implementation(ATTENTION)
    swapped = [module for module in model.modules() if type(module) is torch.nn.Linear]
    for module in swapped:
        module.__class__ = RowBlockLinear
    return swapped


def make_row_invariant(model: torch.nn.Module) -> torch.nn.Module:
    """Give a transformers causal LM row-invariant kernels for good, in place (idempotent); returns the model.

    Every plain ``nn.Linear`` becomes a ``RowBlockLinear`` and attention runs through
    ``row_invariant_attention``. Refused with a ValueError naming the reason for a model this
    attention would compute wrongly (logit soft-capping, attention sinks) or cannot reach. gcs does this to
    the models it loads itself (``gcs.load_model``); a model of yours is converted only for the duration of
    each gcs call (``row_invariant_kernels``) unless you call this on it: then it keeps the kernels, and
    saves the conversion each call costs.
    """
    reason = refusal(model)
    if reason:
        raise ValueError(reason)
    with _CONVERTING:
        if not is_row_invariant(model):
            _install(model)
    return model


@contextmanager
def row_invariant_kernels(model: torch.nn.Module) -> Iterator[None]:
    """Row-invariant kernels on ``model`` inside the block only: its linear layers' classes and its attention
    implementation are put back as they were when it ends (an exception included), so a model the caller
    gave gcs comes back as given. Nothing is swapped for a model that already has them (``make_row_invariant``,
    or an enclosing block: nesting is free). Callers keep other threads off the model meanwhile
    (``gcs.runner.generating`` holds the model's lock).

    >>> import transformers
    >>> config = transformers.LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
    ...                                   num_attention_heads=2, attn_implementation="sdpa")
    >>> model = transformers.LlamaForCausalLM(config)
    >>> with row_invariant_kernels(model):
    ...     type(model.lm_head).__name__, model.config._attn_implementation
    ('RowBlockLinear', 'gcs_row_invariant')
    >>> type(model.lm_head).__name__, model.config._attn_implementation
    ('Linear', 'sdpa')
    """
    reason = refusal(model)
    if reason:
        raise ValueError(reason)
    if is_row_invariant(model):
        yield
        return
    attention = model.config._attn_implementation
    swapped = _install(model)
    try:
        yield
    finally:
        for module in swapped:
            module.__class__ = torch.nn.Linear
        model.set_attn_implementation(attention)


def is_row_invariant(model: torch.nn.Module) -> bool:
    """Whether ``model`` runs on row-invariant kernels now (``make_row_invariant``, or inside ``row_invariant_kernels``)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == ATTENTION


def wanted(device: torch.device | str) -> bool:
    """Whether models on ``device`` get row-invariant kernels: ``$GCS_ROW_INVARIANT`` (auto, on, off); auto means
    on CPU only (measured there; on CUDA the fused kernels are kept, see the promise table in docs/library.md)."""
    setting = os.environ.get(SETTING, "auto").strip().lower()
    if setting not in ("auto", "on", "off"):
        raise ValueError(f"{SETTING} must be auto, on or off, got {setting!r}")
    return setting == "on" or (setting == "auto" and torch.device(device).type == "cpu")


_WARNED: weakref.WeakSet = weakref.WeakSet()  # models already warned about (nothing is written onto them)


def row_invariance(model: torch.nn.Module) -> bool:
    """Whether gcs computes ``model``'s rows apart: it has row-invariant kernels already, or ``wanted`` says so for its
    device and they can compute it. A model they cannot compute keeps its own kernels, with one warning: it
    still samples exactly, but a row's tokens may then depend on the batch it ran in."""
    if is_row_invariant(model):
        return True
    if not wanted(next(model.parameters()).device):
        return False
    reason = refusal(model)
    if reason and model not in _WARNED:
        logger.warning("keeping the model's own kernels (%s): a row's tokens may depend on its batch", reason)
        _WARNED.add(model)
    return reason is None
