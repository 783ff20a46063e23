"""bfloat16 weights packed once into oneDNN's layout for the row blocks, and ``RowBlockLinear``, the layer that
uses them.

``F.linear`` packs a bfloat16 weight again on every call, i.e. once per row block; a copy packed once gives the
same bits with fewer passes over the weight. Packing is a speed lever that never changes a token: it is used only
where a probe block gives ``F.linear``'s bits, and only while a packed copy leaves ``PACKING_HEADROOM`` of the
memory free.

>>> layer = RowBlockLinear(8, 3)
>>> x = torch.randn(5, 8)
>>> torch.equal(layer(x)[2], layer(x[2:3])[0])  # a row alone = the same row in a batch
True
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from pathlib import Path

import torch
from torch.nn import functional as F

from gcs.engines.invariance.row_blocks import ROW_BLOCK, _kernel_key, in_row_blocks
from gcs.runtime import internals

PACKING_HEADROOM = 0.25  # weights are packed only while this share of the machine's memory stays free
# weight elements compared on every call, so that an edit autograd does not see (``weight.data``) repacks: runs of
# consecutive elements, since the packed kernel never reads the weight itself and each run costs a read from memory
SAMPLED_RUNS, SAMPLED_RUN = 16, 16
SAMPLED = SAMPLED_RUNS * SAMPLED_RUN


def _packed_kernel(weight: torch.Tensor, bias: torch.Tensor | None = None) -> Callable | None:
    """A kernel ``(block, weight, bias)`` for ``ROW_BLOCK``-row blocks with a bfloat16 ``weight`` [out, in] packed
    once into oneDNN's own layout (``gcs.runtime.internals.packed_bf16_linear``), or None where that does not apply.

    ``F.linear`` packs the weight again on every call, i.e. once per block, which packing once saves. Used only if
    it gives ``F.linear``'s bits on a probe block (with ``bias``), so packing is a speed lever that never
    changes a token: where it would, or where the copy would not fit in memory, blocks call ``F.linear``.
    float32 is not packed: MKL's packed copies took more memory than the weights for a small gain on the LM head
    alone.
    """
    if weight.device.type != "cpu" or weight.dtype != torch.bfloat16 or weight.dim() != 2 \
            or not weight.is_contiguous():
        return None
    packed = internals.packed_bf16_linear(weight, ROW_BLOCK)
    if packed is None:
        return None

    packed_at = torch.get_num_threads()

    def kernel(block, weight, bias, packed_at=packed_at):  # in the kernel's key (_kernel_key): one call's
        return packed(block, bias)  # verdicts are kept per packing, which may differ by thread count

    if not _computes_as_f_linear(kernel, weight, bias):
        internals.warn_once("packed-bits", "packed bf16 weights round unlike F.linear here (torch %s): not packed; "
                            "generation is slower, with the same tokens", torch.__version__)
        return None
    return kernel


def _computes_as_f_linear(kernel: Callable, weight: torch.Tensor, bias: torch.Tensor | None) -> bool:
    """Whether ``kernel(block, weight, bias)`` gives ``F.linear``'s bits on a random block of ``ROW_BLOCK`` rows, at
    torch's thread count now."""
    probe = torch.randn(ROW_BLOCK, weight.shape[1], generator=torch.Generator().manual_seed(0)).to(weight.dtype)
    return torch.equal(kernel(probe, weight, bias), F.linear(probe, weight, bias))


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
    """What a packed copy of ``weight`` depends on besides the thread count (``_packed``): its address, layout and
    version; None for an inference tensor (no version counter). A new dtype or device means a new address: the
    cache holds the old weight, so no later tensor takes its address."""
    version = internals.version_counter(weight)
    if version is None:
        return None
    return weight.data_ptr(), weight.shape, weight.stride(), version


class _PackedWeight:
    """A layer's packed kernel (or None) and the widths it computes in one call (``in_row_blocks``), valid while
    the key and a sample of the weight's values hold."""

    def __init__(self, key: tuple, weight: torch.Tensor, bias: torch.Tensor | None):
        self.key = key
        self.kernel = _packed_kernel(weight, bias) if _room_for(weight) else None
        self.one_call: dict[bool, tuple] = {}  # with a bias or not -> (the kernel's key, its widths by row count)
        if self.kernel is not None:
            self.alias = weight.detach()  # holds the packed weight's memory, so no later tensor can take its address
            self.watched = self._sampled(self.alias)  # a view: an edit through weight.data shows in it
            self.sample = self.watched.clone()

    @staticmethod
    def _sampled(weight: torch.Tensor) -> torch.Tensor:
        """``SAMPLED`` elements of the (contiguous) weight as a view, in ``SAMPLED_RUNS`` evenly spaced runs of
        ``SAMPLED_RUN`` consecutive ones (all of a small weight).

        >>> _PackedWeight._sampled(torch.arange(40.0).reshape(4, 10))[:2].tolist()  # 40 elements: all
        [0.0, 1.0]
        >>> _PackedWeight._sampled(torch.arange(1000.0)).shape
        torch.Size([16, 16])
        """
        flat = weight.view(-1)
        size = flat.numel()
        if size <= SAMPLED:
            return flat
        return flat.as_strided((SAMPLED_RUNS, SAMPLED_RUN), ((size - SAMPLED_RUN) // (SAMPLED_RUNS - 1), 1))

    def current(self, key: tuple) -> bool:
        """Whether this packing still computes the layer's weight, whose ``_identity`` is ``key``: the same tensor,
        layout and version (then ``watched`` views it) and the same sampled values."""
        return key == self.key and (self.kernel is None or torch.equal(self.watched, self.sample))


class RowBlockLinear(torch.nn.Linear):
    """``nn.Linear`` computed ``in_row_blocks``. A drop-in class for an existing ``nn.Linear``
    (``make_row_invariant`` swaps the class; the weights stay where they are).

    In inference on CPU a bfloat16 weight is packed once for the blocks (``_packed_kernel``; the same bits
    as ``F.linear``) and packed again when it changes: another tensor, shape, dtype or device, an in-place
    update autograd sees (``weight.mul_``, ``load_state_dict``), or one through ``weight.data`` that
    changes any of ``SAMPLED`` sampled elements (a merged LoRA adapter does). Layers that accelerate
    loads on each call (offloading hooks) are never packed. A copy is kept per thread count (``_packed``).
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
        packed = _packed(self, key, weight, bias)
        kernel = packed.kernel or F.linear
        has_bias = bias is not None
        if has_bias not in packed.one_call:  # the bias is read at every call: it may come or go without a repack
            packed.one_call[has_bias] = _kernel_key(kernel, x, weight.shape[0], (weight, bias)), {}
        kernel_key, widths = packed.one_call[has_bias]
        return in_row_blocks(kernel, x, weight, bias, kernel=kernel_key, widths=widths)


# layer -> {thread count: its _PackedWeight}; kept beside the layers so that copying or pickling a model never meets
# oneDNN's opaque packed tensors
_PACKED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
THREAD_COUNTS_KEPT = 2  # thread counts a layer keeps packings for: torch's and one (gcs.engines.threads)


def _packed(layer: RowBlockLinear, key: tuple, weight: torch.Tensor, bias: torch.Tensor | None) -> _PackedWeight:
    """The layer's packing for its weight (``key``: ``_identity``) at torch's thread count now, made where it has none.

    oneDNN may lay a weight out, or round it, by the thread count, so a packing is kept per thread count: a packed
    copy made at another count is used here too where it gives ``F.linear``'s bits here (one copy in memory), else
    the weight is packed (or found unpackable) for this count, up to ``THREAD_COUNTS_KEPT`` copies (the oldest
    dropped). A changed weight drops them all. A generation moving between torch's count and one thread
    (``gcs.engines.threads``) never repacks."""
    copies = _PACKED.setdefault(layer, {})
    threads = torch.get_num_threads()
    packed = copies.get(threads)
    if packed is not None and packed.current(key):
        return packed
    if not all(other.current(key) for other in copies.values()):  # this count's copy among them
        copies.clear()  # the weight changed: every copy is stale (and holds the old weight's memory)
    for other in copies.values():
        if other.kernel is not None and _computes_as_f_linear(other.kernel, weight, bias):
            copies[threads] = other
            return other
    while len(copies) >= THREAD_COUNTS_KEPT:
        copies.pop(next(iter(copies)))
    packed = copies[threads] = _PackedWeight(key, weight, bias)
    return packed


def packing(layer: torch.nn.Module) -> _PackedWeight | None:
    """``layer``'s packing for torch's thread count now, if a call made one."""
    return _PACKED.get(layer, {}).get(torch.get_num_threads())
