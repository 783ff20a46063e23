"""Row blocks: a linear kernel computed so that each row gets the bits fixed blocks of ``ROW_BLOCK`` rows give it.

The BLAS picks its kernel by the number of rows, so a row's rounding depends on how many rows share its call.
``in_row_blocks`` computes every row in blocks of ``ROW_BLOCK`` (the last one padded with zeros), or in one call at a
width a probe showed to give the blocks' bits (``_width_for``); ``RowBlocks`` wraps any kernel that way (vLLM's
``cpu_linear`` on the vLLM engine).

>>> w, x = torch.randn(3, 8), torch.randn(5, 8)
>>> torch.equal(in_row_blocks(F.linear, x, w)[2], in_row_blocks(F.linear, x[2:3], w)[0])
True
"""

from __future__ import annotations

import logging
from collections.abc import Hashable

import torch
from torch.nn import functional as F

logger = logging.getLogger(__name__)

ROW_BLOCK = 16


def in_row_blocks(linear, x: torch.Tensor, *args, kernel: Hashable | None = None,
                  widths: dict | None = None) -> torch.Tensor:
    """``linear(x, *args)`` computed so that each row of ``x`` [..., in] gets the bits that fixed blocks of
    ``ROW_BLOCK`` rows give it (the last block padded with zeros): the kernel's rounding never sees the other
    rows, so each row's output is independent of them.

    Without ``kernel`` it is computed in those blocks. With ``kernel`` (what ``linear``'s rounding depends on
    besides the rows: its code and shapes, see ``_kernel_key``) up to ``WIDEST`` rows go in one call, padded
    to the narrowest width at which one call was shown to give every row the blocks' bits
    (``_width_for``): the same output, with one pass over the weight instead of one per block and few
    rows of zeros; where one call of more than ``FALLBACK_CHUNK`` rows rounds otherwise, chunks of that many. More
    rows go in chunks of ``WIDEST``. ``widths`` caches the chosen widths for one layer.

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
WIDEST = 256  # rows one call may take (more rows: chunks of this many)
# rows a call falls back to where one call of more rounds otherwise (oneDNN may change its kernel above some width)
FALLBACK_CHUNK = 64
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
    """``rows`` (at most ``WIDEST``) through ``linear`` in one call at ``_width_for``'s width, else in chunks of
    ``FALLBACK_CHUNK`` rows (each in one call where it can be), else in blocks."""
    count, numerics = rows.shape[0], _numerics(rows)
    local = (count, numerics)
    if local not in widths:
        widths[local] = _width_for(linear, kernel, numerics, rows, args)
    width = widths[local]
    if width is None:
        if count > FALLBACK_CHUNK:
            chunks = rows.split(FALLBACK_CHUNK)
            return torch.cat([_in_one_call(linear, kernel, widths, chunk, args) for chunk in chunks])
        return _blocks(linear, rows, args)
    if width == count:
        return linear(rows, *args)
    return linear(F.pad(rows, (0, 0, 0, width - count)), *args)[:count]


def _width_for(linear, kernel: Hashable, numerics: tuple, rows: torch.Tensor, args: tuple) -> int | None:
    """The narrowest width, of ``len(rows)`` itself, the powers of two from the next one (at least 2) up to
    ``ROW_BLOCK`` and the next multiple of ``ROW_BLOCK``, at which one call of ``linear`` gives every row the bits of
    ``_blocks``; None if none does.

    The powers of two below ``ROW_BLOCK`` matter to a row alone (hindsight, counterfactuals, the step-through): a
    BLAS whose one-row kernel rounds otherwise often gives the blocks' bits from 4 rows on, and a 4-row call
    costs less than a 16-row one. A width's verdict is kept for every layer with the same kernel key and
    numerics; a probe that could not tell (``_rounds_like_blocks`` gives None) keeps the blocks for this layer
    only.

    >>> sorted(_candidate_widths(1)), sorted(_candidate_widths(5)), sorted(_candidate_widths(17))
    ([1, 2, 4, 8, 16], [5, 8, 16], [17, 32])
    """
    count = rows.shape[0]
    for width in sorted(_candidate_widths(count)):
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


def _candidate_widths(count: int) -> set[int]:
    """The widths ``_width_for`` tries for ``count`` rows (see there)."""
    next_power = max(2, 1 << (count - 1).bit_length())
    below_block = {next_power << shift for shift in range(ROW_BLOCK.bit_length()) if next_power << shift < ROW_BLOCK}
    return {count, next_power, *below_block, -(-count // ROW_BLOCK) * ROW_BLOCK}


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
