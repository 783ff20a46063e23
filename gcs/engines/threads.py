"""CPU threads per decode step: all of torch's threads while the cores are free, one while another job keeps them busy.

A decode step split over torch's threads meets them at each of its many parallel regions. Beside another job that
keeps the cores busy, the scheduler sets one of them aside at almost every meeting and the others wait for it, so a
step on all threads can take several times as long as on one (docs/benchmarks.md, "Threads":
``python bench/bench_threads.py``). ``StepThreads`` watches each step and moves between torch's thread count and one
thread when the other is faster now (``ThreadChoice``); it sets the generating thread's OpenMP count alone
(``gcs.runtime.internals.openmp_threads_setter``), never torch's process-wide count.

A token never depends on the thread count: one thread is used only after a probe (``threads_agree``) showed that a
decode step of the batch's rows gives the same logits on it as on all threads, bit for bit (once per model, row
count, thread counts, dtype and kernels in a process; the tokens' equality at the defaults is tested).
``$GCS_THREADS``: ``auto`` (default: on CPU) or ``fixed`` (torch's thread count throughout).

>>> choice = ThreadChoice(ceiling=2)
>>> [choice.observe(0.040, 0.039) for _ in range(6)]  # quiet: each step has its cores
[2, 2, 2, 2, 2, 2]
>>> [choice.observe(0.300, 0.120) for _ in range(4)]  # another job takes the cores: one thread is tried
[2, 2, 2, 1]
>>> choice.observe(0.090, 0.060)  # faster on it: kept
1
"""

from __future__ import annotations

import inspect
import logging
import statistics
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any, cast

import torch
from transformers import StoppingCriteria

from gcs.engines.invariance import is_row_invariant
from gcs.environment import setting
from gcs.runtime import internals
from gcs.runtime.arguments import ArgumentTypeError

logger = logging.getLogger(__name__)

SETTING = "GCS_THREADS"  # auto (adapt on CPU), fixed
WINDOW = 4  # steps whose CPU share suggests trying one thread, and whose fastest a try is compared with
CONTENDED = 0.8  # on all threads, a CPU share below this in each of WINDOW steps says another job takes the cores (a
# burst, such as a browser drawing the page on the same cores, leaves some steps their cores: no try then)
# on one thread, a mean CPU share above FREE over FREE_WINDOW steps suggests the cores are free again: try all threads.
# Longer and stricter: a wrong try of all threads beside a busy job took 4 s where a step on one thread took 0.1 s
FREE, FREE_WINDOW = 0.95, 16
GAIN = 0.85  # a try (one step: the probe packed and probed its shapes already) is kept under this share of the
# fastest of the WINDOW steps before it
FIRST_WAIT, LONGEST_WAIT = WINDOW, 64  # steps between tries: doubled after each try that was not kept
TRIES_NOT_KEPT = 3  # a generation makes no more tries after this many were not kept (a wrong try costs a slow step)


class ThreadChoice:
    """The thread count of each next step, from the last ones' times: ``observe(seconds, cpu_seconds)`` records a step
    (its wall time and the generating thread's CPU time) run on ``threads`` and returns the count for the next.

    A step's CPU share (CPU time / wall time) says whether the scheduler gave the generating thread its core; where it
    did not in each of ``WINDOW`` steps on all threads (or did, on average over ``FREE_WINDOW`` steps on one), the
    other count is tried for one step and kept if that step took under ``GAIN`` of the fastest of the last ``WINDOW``
    steps before it. A try not kept doubles the wait before the next (up to ``LONGEST_WAIT``), and after
    ``TRIES_NOT_KEPT`` of them no more are made.
    """

    def __init__(self, ceiling: int):
        if not isinstance(ceiling, int):
            raise ArgumentTypeError(f"ceiling must be a thread count of at least 1, got {type(ceiling).__name__} "
                                    f"{ceiling!r}")
        if ceiling < 1:
            raise ValueError(f"ceiling must be a thread count of at least 1, got {ceiling!r}")
        self.ceiling = self.threads = ceiling
        self.times: dict[int, deque[float]] = {ceiling: deque(maxlen=WINDOW), 1: deque(maxlen=WINDOW)}
        self.shares: deque = deque(maxlen=FREE_WINDOW)
        self.trying = False
        self.wait = self.backoff = FIRST_WAIT
        self.not_kept = 0

    def observe(self, seconds: float, cpu_seconds: float) -> int:
        self.times[self.threads].append(seconds)
        if self.trying:
            self._decide()
            return self.threads
        self.shares.append(cpu_seconds / seconds if seconds > 0 else 1.0)
        self.wait -= 1
        if self.wait <= 0 and self.ceiling > 1 and self.not_kept < TRIES_NOT_KEPT:
            on_all = self.threads == self.ceiling
            window = list(self.shares)[-WINDOW:] if on_all else self.shares
            if len(window) == (WINDOW if on_all else FREE_WINDOW) and \
                    ((max(window) < CONTENDED) if on_all else (statistics.fmean(window) > FREE)):
                self.threads = 1 if on_all else self.ceiling
                self.times[self.threads].clear()
                self.trying = True
        return self.threads

    @property
    def home(self) -> int:
        """The count a try left (during a try; the other of the two counts)."""
        return self.ceiling if self.threads == 1 else 1

    def refuse(self) -> None:
        """The try of one thread cannot run (the probe found other bits there): stay on all, and never try again."""
        self.threads, self.trying, self.not_kept = self.ceiling, False, TRIES_NOT_KEPT

    def _decide(self) -> None:
        home = self.home
        tried, before = self.times[self.threads][-1], min(self.times[home])
        kept = tried < GAIN * before
        logger.info("%d threads tried: a step in %.1f ms against %.1f ms on %d: %s", self.threads, tried * 1e3,
                    before * 1e3, home, "kept" if kept else "back")
        if not kept:
            self.threads = home
            self.not_kept += 1
        self.backoff = FIRST_WAIT if kept else min(2 * self.backoff, LONGEST_WAIT)
        self.wait, self.trying = self.backoff, False
        self.shares.clear()


def adapting(device: torch.device) -> bool:
    """Whether decode steps on ``device`` choose their threads: ``$GCS_THREADS`` is ``auto`` (the default), the model
    is on CPU, torch has more than one thread here and gcs can set one thread's count alone
    (``gcs.runtime.internals.openmp_threads_setter``)."""
    return setting(SETTING) == "auto" and device.type == "cpu" and torch.get_num_threads() > 1 \
        and internals.openmp_threads_setter() is not None


_AGREE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # module -> {what a verdict covers: verdict}
_AGREE_LOCK = threading.Lock()
PROBE_TOKENS = 2  # the probe's prefill (every other row left-padded by one): a wider prefill means other widths
# for the linear layers to probe (gcs.engines.invariance), which beside a busy job cost seconds


def threads_agree(module: torch.nn.Module, rows: int, ceiling: int, threads: int) -> bool:
    """Whether ``module`` (a causal LM) computes a decode step of ``rows`` rows to the same bits on ``threads`` as on
    ``ceiling`` threads: a prefill of ``PROBE_TOKENS`` random tokens (every other row left-padded by one) and one cached
    step, all their logits compared. Kept per module, row count, thread counts, dtype and kernels (row-invariant or
    not); a probe that fails says no (one WARNING). Call it from the generating thread, under the model's lock."""
    key = (rows, ceiling, threads, next(module.parameters()).dtype, is_row_invariant(module))
    with _AGREE_LOCK:
        verdicts = _AGREE.setdefault(module, {})
    if key not in verdicts:
        start = time.perf_counter()
        try:
            verdicts[key] = _decode_logits(module, rows, threads) == _decode_logits(module, rows, ceiling)
        except Exception as error:  # noqa: BLE001 -- a speed lever only: any failure keeps every thread
            internals.warn_once(f"threads-probe:{type(module).__name__}", "%s: the thread probe failed (%s: %s): "
                                "decode steps keep every thread", type(module).__name__, type(error).__name__, error)
            verdicts[key] = False
        logger.info("%d threads give %s logits as %d for %d rows (checked in %.2f s)", threads,
                    "the same" if verdicts[key] else "OTHER", ceiling, rows, time.perf_counter() - start)
    return verdicts[key]


def _decode_logits(module: torch.nn.Module, rows: int, threads: int) -> list[bytes]:
    """The logits of a short prefill and of one cached step of ``rows`` random rows, computed on ``threads``."""
    generator = torch.Generator().manual_seed(rows)
    device = next(module.parameters()).device
    config: Any = module.config  # a transformers config (``module`` is a causal LM)
    ids = torch.randint(config.vocab_size, (rows, PROBE_TOKENS), generator=generator).to(device)
    mask = (torch.arange(PROBE_TOKENS) >= (torch.arange(rows) % 2)[:, None]).long().to(device)
    last = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(module.forward).parameters else {}
    # probed only where decode steps choose their threads (``adapting``): a setter was found
    set_threads = cast("Callable[[int], None]", internals.openmp_threads_setter())
    before = torch.get_num_threads()
    set_threads(threads)
    try:
        with torch.inference_mode():
            prefilled = module(input_ids=ids, attention_mask=mask, use_cache=True, **last)
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
            step = module(input_ids=ids[:, -1:], attention_mask=mask, past_key_values=prefilled.past_key_values,
                          use_cache=True, **last)
    finally:
        set_threads(before)
    return [logits[:, -1].float().numpy().tobytes() for logits in (prefilled.logits, step.logits)]


class StepThreads(StoppingCriteria):
    """A transformers stopping criterion that never stops a row: after each decode step it sets the threads of the
    next one (``ThreadChoice``; this thread's OpenMP count alone), one thread only where ``threads_agree``.
    ``close()`` puts the count back. Nothing is done once ``stop`` is set (the generation ends after this step).

    Called by ``generate`` in the thread that generates, after each step: the time between calls is a step's.
    """

    def __init__(self, module: torch.nn.Module, rows: int, stop: threading.Event | None = None):
        self.module, self.rows, self.stop = module, rows, stop
        self.choice = ThreadChoice(torch.get_num_threads())
        # made only where decode steps choose their threads (``adapting``): a setter was found
        self.set_threads = cast("Callable[[int], None]", internals.openmp_threads_setter())
        self._clock()

    def _clock(self) -> None:
        self.wall, self.cpu = time.perf_counter(), time.thread_time()

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        if self.stop is None or not self.stop.is_set():
            wall, cpu = time.perf_counter(), time.thread_time()
            current = self.choice.threads
            wanted = self.choice.observe(wall - self.wall, cpu - self.cpu)
            if wanted != current:
                if wanted == self.choice.ceiling or threads_agree(self.module, self.rows, self.choice.ceiling, wanted):
                    self.set_threads(wanted)
                else:
                    self.choice.refuse()
            self._clock()  # a probe's time is no step's
        go_on = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
        return cast(torch.BoolTensor, go_on)  # StoppingCriteria's legacy type: torch's ops return Tensor

    def close(self) -> None:
        if torch.get_num_threads() != self.choice.ceiling:
            self.set_threads(self.choice.ceiling)
