"""The private APIs of torch and vLLM that gcs relies on, each behind one function here, checked where it is used.

When one is missing, or behaves otherwise (a new release renamed or changed it), gcs falls back to what does not
need it and logs one WARNING that names what is lost: a guarantee, or speed only. Their versions are checked too:
outside the range gcs was tested on, one WARNING says so. ``tests/test_internals.py`` fails on the versions we pin
if any of them is gone (Gradio's and the mcp package's, for the app, are in ``ui/server/internals.py``).

| private API | what gcs does with it | without it |
| --- | --- | --- |
| ``torch.ops.mkldnn._reorder_linear_weight``, ``_linear_pointwise``, ``_is_mkldnn_bf16_supported`` | packs a bf16 weight once for the row blocks (``gcs.engines.invariance``) | speed only: plain ``F.linear`` blocks, the same tokens |
| ``torch.cpu._is_avx512_bf16_supported``, ``_is_amx_tile_supported`` | bf16 by default on CPUs that multiply it in hardware | speed only: float32 by default (about 2x slower there) |
| ``Tensor._version`` | notices an in-place change of a packed weight | speed only: weights are not packed |
| the OpenMP runtime torch loaded (``omp_set_num_threads``, found in ``/proc/self/maps``) | sets one thread's OpenMP thread count alone (``gcs.engines.threads``) | speed only: decode steps keep torch's threads beside a busy job |
| GNU OpenMP's ``omp_pause_resource_all`` (a public OpenMP 5.0 call, used where torch runs on libgomp) | lets a thread's idle OpenMP team go before it hands model work to another thread (``release_openmp_threads``) | speed only: generation in a worker thread slower beside other threads' idle teams |
| vLLM's per-layer ``cpu_linear`` (``vllm.model_executor.layers.utils``) | row-invariant linears on vLLM's CPU engine (``gcs.engines.vllm``) | the guarantee: on ``engine="vllm"`` a row's tokens may depend on its batch |
| ``LLM.llm_engine.engine_core.shutdown`` (what vLLM's own finalizer calls) | frees an engine when ``gcs.close()`` or the engine bound drops it (``gcs.engines.vllm``) | memory only: the engine is freed when the garbage collector runs |
"""  # noqa: E501 (a table's rows cannot wrap)

from __future__ import annotations

import ctypes
import functools
import logging
import re
from collections.abc import Callable
from pathlib import Path

import torch

logger = logging.getLogger(__name__)

TESTED_TORCH = ((2, 5), (2, 14))  # [from, to): the floor in pyproject.toml to the newest release tested
TESTED_VLLM = ((0, 32), (0, 33))
# torch.ops.mkldnn's ops by their role (a new release may rename them: then weights are not packed, with a warning)
MKLDNN_OPS = {"supported": "_is_mkldnn_bf16_supported", "pack": "_reorder_linear_weight",
              "linear": "_linear_pointwise"}
CPU_BF16_PROBES = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")  # in torch.cpu

_SAID: set[str] = set()


def warn_once(key: str, message: str, *args) -> None:
    """Log ``message`` as a WARNING the first time ``key`` is met in this process."""
    if key not in _SAID:
        _SAID.add(key)
        logger.warning(message, *args)


def in_tested_range(version: str, tested_range: tuple[tuple[int, int], tuple[int, int]]) -> bool:
    """Whether ``version``'s major.minor lies in ``tested_range`` ([from, to)).

    >>> in_tested_range("2.13.0+cpu", TESTED_TORCH), in_tested_range("2.14.1", TESTED_TORCH)
    (True, False)
    """
    major_minor = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    return tested_range[0] <= major_minor < tested_range[1]


def check_version(package: str, version: str, tested_range, depends: str) -> None:
    """One WARNING per process when ``package``'s ``version`` is outside the range gcs was tested on."""
    if not in_tested_range(version, tested_range):
        (low, high) = tested_range
        warn_once(f"version:{package}", "%s %s is outside the versions gcs was tested on (%d.%d to below %d.%d): %s "
                  "relies on its private APIs, which are checked as they are used", package, version, *low, *high,
                  depends)


def _mkldnn_op(role: str):
    return getattr(torch.ops.mkldnn, MKLDNN_OPS[role])


def packed_bf16_linear(weight: torch.Tensor, block_rows: int) -> Callable | None:
    """``kernel(block, bias)``: ``F.linear(block, weight, bias)`` with the bf16 ``weight`` [out, in] packed once into
    oneDNN's layout for blocks of ``block_rows`` rows; None where oneDNN has no bf16 on this CPU, or (with one
    WARNING) where the private ops are missing or fail. Callers check its bits against ``F.linear`` themselves."""
    check_version("torch", torch.__version__, TESTED_TORCH, "packing bf16 weights for the row blocks")
    try:
        if not _mkldnn_op("supported")():
            return None
        packed = _mkldnn_op("pack")(weight, block_rows)
        linear = _mkldnn_op("linear")

        def kernel(block, bias):
            return linear(block, packed, bias, "none", [None], "")

        kernel(weight.new_zeros(block_rows, weight.shape[1]), None)  # a call that fails, fails here
    except (AttributeError, RuntimeError, TypeError) as error:
        warn_once("mkldnn", "torch %s: packed bf16 weights unavailable (torch.ops.mkldnn: %s: %s); generation is "
                  "slower, with the same tokens", torch.__version__, type(error).__name__, error)
        return None
    return kernel


OPENMP_RUNTIMES = ("libgomp", "libomp", "libiomp")  # GNU (torch's Linux wheels), LLVM, Intel


@functools.cache
def openmp_runtime() -> tuple[str, ctypes.CDLL] | None:
    """(path, library) of the OpenMP runtime torch loaded (found in ``/proc/self/maps``); None, with one WARNING,
    where it cannot be found (no ``/proc``), and without one where torch was not built with OpenMP."""
    if "OpenMP" not in torch.__config__.parallel_info():
        return None
    torch_lib = Path(torch.__file__).parent
    try:
        loaded = [line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                  if any(name in line.rsplit("/", 1)[-1] for name in OPENMP_RUNTIMES)]
        path = min(dict.fromkeys(loaded), key=lambda candidate: not candidate.startswith(str(torch_lib)))
        return path, ctypes.CDLL(path)
    except (OSError, ValueError) as error:
        warn_once("openmp", "torch %s: its OpenMP runtime was not found (%s: %s): decode steps keep torch's thread "
                  "count beside a busy job, and generation in a worker thread may be slower (the same tokens)",
                  torch.__version__, type(error).__name__, error)
        return None


@functools.cache
def openmp_threads_setter() -> Callable[[int], None] | None:
    """``set(n)``: the OpenMP thread count of the calling thread alone (``omp_set_num_threads`` of the OpenMP runtime
    torch loaded: torch's operations, oneDNN and MKL read it there), leaving torch's process-wide count, which
    threads read when they first use torch, as it is (``torch.set_num_threads`` sets both). None where that runtime
    cannot be found (``openmp_runtime``)."""
    runtime = openmp_runtime()
    if runtime is None:
        return None
    setter = runtime[1].omp_set_num_threads
    setter.argtypes, setter.restype = [ctypes.c_int], None
    return setter


OMP_PAUSE_SOFT = 1  # omp_pause_resource_t (OpenMP 5.0)


@functools.cache
def _gnu_openmp_pause() -> Callable[[int], int] | None:
    runtime = openmp_runtime()
    if runtime is None or "libgomp" not in runtime[0].rsplit("/", 1)[-1]:
        return None
    try:
        pause = runtime[1].omp_pause_resource_all
    except AttributeError:  # GNU OpenMP before GCC 10
        warn_once("openmp-pause", "torch's OpenMP runtime (%s) has no omp_pause_resource_all: generation in a worker "
                  "thread may be slower (the same tokens)", runtime[0])
        return None
    pause.argtypes, pause.restype = [ctypes.c_int], ctypes.c_int
    return pause


def release_openmp_threads() -> None:
    """Let the OpenMP worker threads of the calling thread go (``omp_pause_resource_all(omp_pause_soft)``: the
    runtime starts them again at its next parallel region), where torch runs on GNU OpenMP.

    GNU OpenMP keeps a team of worker threads for every thread that ran a parallel region, and while it manages more
    threads than the machine has cores, the workers of *every* team stop spinning between regions and sleep: each of
    a decode step's hundreds of regions then waits for a wake-up. A thread that hands its model work to another and
    waits (``gcs.runtime.background.Background``'s caller) calls this first, so the worker's team runs as the only one
    (docs/benchmarks.md: generation in a worker thread 1.4x slower beside the idle team of the thread that loaded the
    model). In GNU OpenMP it touches the calling thread's team only; other runtimes pause all of theirs, so it does
    nothing there."""
    pause = _gnu_openmp_pause()
    if pause is not None:
        pause(OMP_PAUSE_SOFT)


def cpu_multiplies_bf16() -> bool:
    """Whether this CPU multiplies bf16 in hardware (AVX512-BF16 or AMX); False, with one WARNING, where torch has
    neither probe (then float32 is the default dtype: slower, and ``GCS_DTYPE=bfloat16`` chooses bf16)."""
    probes = [getattr(torch.cpu, name, None) for name in CPU_BF16_PROBES]
    if not any(probes):
        warn_once("cpu-bf16", "torch %s has no torch.cpu.%s: gcs cannot tell whether this CPU multiplies bf16 in "
                  "hardware and uses float32 by default (slower; GCS_DTYPE=bfloat16 chooses bf16)", torch.__version__,
                  " / ".join(CPU_BF16_PROBES))
        return False
    for probe in probes:
        try:
            if probe is not None and probe():
                return True
        except RuntimeError:  # a build without the CPU capability query: no
            pass
    return False


def version_counter(tensor: torch.Tensor) -> int | None:
    """``tensor._version`` (bumped by every in-place change autograd sees); None for an inference tensor (it has
    none) and, with one WARNING, where torch has no such attribute."""
    try:
        return tensor._version
    except RuntimeError:
        return None
    except AttributeError:
        warn_once("version", "torch %s: tensors have no _version: weights are not packed (generation is slower, "
                  "with the same tokens)", torch.__version__)
        return None


def wrap_cpu_linears(model: torch.nn.Module, wrap: Callable, wrapped_type: type) -> tuple[int, int]:
    """Replace the ``cpu_linear`` kernel of every vLLM layer that computes a linear product on CPU by
    ``wrap(kernel)`` (once; a kernel of ``wrapped_type`` is kept); returns (layers wrapped or already so, layers
    that should be). Such layers are the ones whose ``quant_method`` is vLLM's unquantized linear or embedding
    method (the LM head); vLLM sets their ``cpu_linear`` after loading the weights."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.vocab_parallel_embedding import UnquantizedEmbeddingMethod

    done = expected = 0
    for module in model.modules():
        if isinstance(getattr(module, "quant_method", None), (UnquantizedLinearMethod, UnquantizedEmbeddingMethod)):
            expected += 1
            kernel = getattr(module, "cpu_linear", None)
            if kernel is not None:
                if not isinstance(kernel, wrapped_type):
                    module.cpu_linear = wrap(kernel)
                done += 1
    return done, expected


def check_wrapped(counts: list[tuple[int, int]]) -> bool:
    """Whether every worker wrapped every layer it should have (``wrap_cpu_linears``'s counts, one per worker); if
    not, one WARNING that row invariance is lost on the vLLM engine."""
    import vllm

    check_version("vLLM", vllm.__version__, TESTED_VLLM, "row invariance on engine=\"vllm\" (its layers' cpu_linear)")
    done, expected = sum(c[0] for c in counts), sum(c[1] for c in counts)
    if expected and done == expected:
        return True
    warn_once("cpu_linear", "vLLM %s: %d of %d linear layers have no cpu_linear kernel to run in row blocks: on "
              "engine=\"vllm\" a row's tokens may depend on the other requests in its batch (same seed, same answer "
              "is lost there; every answer is still an exact sample)", vllm.__version__, expected - done, expected)
    return False


def shut_down_vllm(llm) -> bool:
    """Stop a ``vllm.LLM``'s engine core now (its workers, its KV cache) rather than when the garbage collector gets
    to it; whether it was stopped. vLLM's ``LLM`` has no public close: its engine core's ``shutdown`` is what its own
    finalizer calls."""
    try:
        llm.llm_engine.engine_core.shutdown()
        return True
    except AttributeError as error:
        warn_once("vllm-shutdown", "vLLM: an engine cannot be shut down here (%s): it is dropped and freed when the "
                  "garbage collector runs", error)
        return False
