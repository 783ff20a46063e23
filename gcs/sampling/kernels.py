"""The fused CPU kernel of GCSwR: optional, compiled on first use, bit-identical to eager torch.

In eager torch a GCSwR step is seven passes over the ``[batch, vocab]`` state (rates,
arrivals, their minimum, the update, the clamp, ...), each streaming megabytes through
memory. ``recycling_kernel.cpp`` makes two passes per row while the row sits in cache,
and redraws the winner's noise in the same call, faster than the eager path at large
vocabularies (``python bench/bench_sampler.py``; docs/benchmarks.md, "Samplers").

It uses torch's own vectorised functions (Sleef's ``exp2``), so it picks the same tokens
and leaves the same state, bit for bit, as the eager path wherever torch's kernels take
their vectorised path, which is every vocabulary that is a multiple of 32 (tested at
49,152 and 128,256; the tests also check vocabularies that are not).

Whether it is used is set by the environment variable ``GCS_CPU_KERNEL``:

- ``auto`` (default): compile it the first time GCSwR runs on CPU (once: ~25 s on a quiet 2-core
  machine, minutes on a busy one; cached
  by torch under ``TORCH_EXTENSIONS_DIR``); without a C++ compiler, warn once and use eager torch.
- ``on``: the same, but an error if it cannot be built.
- ``off``: always eager torch.

>>> kernel_mode({"GCS_CPU_KERNEL": "OFF"}), kernel_mode({})
('off', 'auto')
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from gcs.environment import setting

KERNEL_ENV = "GCS_CPU_KERNEL"
SOURCE = Path(__file__).with_name("recycling_kernel.cpp")

# The instruction sets torch dispatches its own CPU kernels to; the kernel is compiled for the same one.
_CAPABILITY_FLAGS = {
    "AVX512": ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512dq", "-mfma", "-DCPU_CAPABILITY_AVX512"],
    "AVX2": ["-mavx2", "-mfma", "-mf16c", "-DCPU_CAPABILITY_AVX2"],
}

logger = logging.getLogger(__name__)
_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # "module": the extension or None, "reason": why it is None


def kernel_mode(environ: Mapping[str, str] = os.environ) -> str:
    """The ``GCS_CPU_KERNEL`` setting, lower-cased; a ValueError naming the valid ones otherwise."""
    return setting(KERNEL_ENV, environ)


def build_directory(name: str) -> Path:
    """Where the kernel called ``name`` is built and cached: ``TORCH_EXTENSIONS_DIR/name`` where that is set, else under
    torch's default root for extensions (``torch.utils.cpp_extension.get_default_build_root``)."""
    from torch.utils import cpp_extension  # imported late: it pulls in setuptools

    return Path(os.environ.get("TORCH_EXTENSIONS_DIR") or cpp_extension.get_default_build_root()) / name


@contextlib.contextmanager
def build_lock(folder: Path):
    """Build in ``folder`` alone: hold the operating system's lock on it (``flock``), which another process building
    there waits for and which goes when its holder dies, however it dies. While it is held no build of ours runs there,
    so torch's own lock file, if one is there, was left by a build killed mid-way (and torch would wait for it
    forever): it is removed, with a WARNING. Where ``flock`` does not exist (Windows), torch's lock alone."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        import fcntl
    except ImportError:  # Windows
        yield
        return
    with open(folder / "gcs-build.lock", "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        left = folder / "lock"  # torch's FileBaton
        if left.exists():
            logger.warning("removing the build lock a killed compile left behind: %s", left)
            left.unlink(missing_ok=True)
        yield


def _build():
    from torch.utils import cpp_extension  # imported late: it pulls in setuptools

    capability = torch.backends.cpu.get_cpu_capability()
    # ATen's vec headers name their namespace after the capability: AVX512, AVX2, or DEFAULT (generic code).
    namespace = capability if capability in _CAPABILITY_FLAGS else "DEFAULT"
    flags = [*_CAPABILITY_FLAGS.get(capability, []), f"-DCPU_CAPABILITY={namespace}"]
    # One build per torch installation and checkout: two environments (or clones) sharing TORCH_EXTENSIONS_DIR
    # would otherwise overwrite each other's build (include paths, source path) and recompile on every switch.
    installation = hashlib.sha256(f"{torch.__file__}|{torch.__version__}|{SOURCE}".encode()).hexdigest()[:8]
    name = f"gcs_recycling_{capability.lower().replace(' ', '_')}_{installation}"
    folder = build_directory(name)
    with build_lock(folder):
        logger.info("loading gcs's fused GCSwR kernel for %s (compiled once per machine, then cached in %s)",
                    capability, folder)
        return cpp_extension.load(
            name=name,
            sources=[str(SOURCE)],
            extra_cflags=["-O3", "-fopenmp", *flags],  # OpenMP: at::parallel_for spreads the rows over torch's threads
            extra_ldflags=["-fopenmp"],
            build_directory=str(folder),
        )


def _first_error_line(error: Exception) -> str:
    """The compiler's first "error:" line if there is one (a build log runs to pages), else the message."""
    lines = str(error).splitlines() or [""]
    return next((line.strip() for line in lines if "error:" in line), f"{type(error).__name__}: {lines[0]}")


def cpu_kernel():
    """GCSwR's fused CPU kernel, compiled on first use.

    Built once per process (and cached on disk by torch); thread-safe. ``GCS_CPU_KERNEL`` chooses: ``auto`` (build it
    where a compiler is, else warn once), ``on`` (an error if it cannot be built), ``off``.

    Returns:
        The compiled extension module, or None when ``GCS_CPU_KERNEL=off`` or (under ``auto``) it cannot be built.

    Raises:
        RuntimeError: under ``GCS_CPU_KERNEL=on``, a kernel that cannot be built.

    Examples:
        >>> import types
        >>> kernel = cpu_kernel()
        >>> kernel is None or isinstance(kernel, types.ModuleType)
        True
    """
    mode = kernel_mode()
    if mode == "off":
        return None
    with _lock:
        if "module" not in _loaded:
            try:
                _loaded["module"] = _build()
            except Exception as error:  # no compiler, no ninja, a failed build: all mean "use eager torch"
                _loaded["module"], _loaded["reason"] = None, _first_error_line(error)
                if mode == "auto":
                    warnings.warn(
                        f"gcs: the fused GCSwR CPU kernel could not be built ({_loaded['reason'][:300]}); "
                        f"GCSwR runs in eager torch instead (same tokens, slower). {KERNEL_ENV}=off silences this.",
                        RuntimeWarning,
                        stacklevel=2,
                    )
        if _loaded["module"] is None and mode == "on":
            raise RuntimeError(f"{KERNEL_ENV}=on but the fused GCSwR kernel could not be built: {_loaded['reason']}")
        return _loaded["module"]


def kernel_status() -> str:
    """One line on the fused kernel, for logs and the app.

    Returns:
        Whether it is on, off, not built yet, or why it is unavailable.

    Examples:
        >>> kernel_status().startswith("fused GCSwR CPU kernel")
        True
    """
    mode = kernel_mode()
    if mode == "off":
        return f"fused GCSwR CPU kernel: off ({KERNEL_ENV}=off)"
    if "module" not in _loaded:
        return "fused GCSwR CPU kernel: not built yet (built on first use)"
    if _loaded["module"] is None:
        return f"fused GCSwR CPU kernel: unavailable ({_loaded['reason'][:200]}); GCSwR runs in eager torch"
    return f"fused GCSwR CPU kernel: on ({torch.backends.cpu.get_cpu_capability()})"
