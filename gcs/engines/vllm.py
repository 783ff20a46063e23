"""vLLM as gcs's engine: one ``vllm.LLM`` per model (the plugin loaded), and the runner that decodes a batch on it.

    gcs.generate(["What is DNA?"], engine="vllm")   # a Batch whose runner is VLLMRunner

Needs vLLM; only ``gcs.generate(engine="vllm")`` and friends import this module (through
``gcs.engines.runner_for``), never a ``vllm serve`` process, which loads the plugin alone
(``gcs.vllm.plugin``). Every row of a batch is one vLLM request sampled by the plugin, so its tokens
are the ones ``gcs``'s own samplers draw from vLLM's logits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
import weakref
from collections import OrderedDict
from collections.abc import Iterator

import torch

from gcs.engines.invariance import RowBlocks, wanted
from gcs.engines.padding import padded
from gcs.runtime import internals
from gcs.vllm.excess import RECORDS, recorded_steps
from gcs.vllm.options import CPU_DEFAULTS, MAX_MODEL_LEN, plugin_registered
from gcs.vllm.plugin import GumbelSamplingProcessor
from gcs.vllm.requests import sampling_params

logger = logging.getLogger(__name__)

MAX_ENGINES = 2  # vLLM engines kept at once per process: each holds its weights and its KV cache (2 GiB on CPU)
_ENGINES: OrderedDict[tuple, tuple] = OrderedDict()  # options -> (LLM, its lock), the least recently used first
_ENGINES_LOCK = threading.Lock()
_CLOSED: weakref.WeakSet = weakref.WeakSet()  # engines shut down: a runner that fetched one before fetches again


def engine(model, **llm_kwargs):
    """A ``vllm.LLM`` for a ``gcs.Model`` (one per model, dtype and arguments per process), with the plugin loaded.

    The embedded default runs from its cached safetensors copy; other models by their
    name. Defaults: the model's dtype, at most 4,096 tokens of context, the model's
    ``generation_config`` ignored (no hidden penalties), and on CPU an in-process executor with
    ``gcs.vllm.options.CPU_DEFAULTS`` (eager, at most 48 requests at once in a 2 GiB KV cache).
    ``llm_kwargs`` (e.g. ``tensor_parallel_size=4``) override them.
    """
    from vllm import LLM

    from gcs.engines.models import DEFAULT_MODEL, embedded_model_path

    invariant = wanted(model.device)
    if model.device.type == "cpu":
        # vLLM's engine core in this process, not a worker process: start-up halves (set it yourself to override)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if invariant:
        # each sequence's attention on its own: split KV work depends on the batch (gcs.engines.invariance)
        os.environ["VLLM_CPU_ATTN_SPLIT_KV"] = "0"

    dtype = next(model.model.parameters()).dtype
    options = {
        "model": str(embedded_model_path()) if model.name == DEFAULT_MODEL else model.name,
        "dtype": str(dtype).removeprefix("torch."),
        **({**CPU_DEFAULTS, "distributed_executor_backend": "uni"} if model.device.type == "cpu" else {}),
        "max_model_len": min(model.context_window, MAX_MODEL_LEN),
        "generation_config": "vllm",
        **({} if plugin_registered() else {"logits_processors": [GumbelSamplingProcessor]}),
        **llm_kwargs,
    }
    key = (invariant, *sorted((k, repr(v)) for k, v in options.items()))
    with _ENGINES_LOCK:
        if key in _ENGINES:
            _ENGINES.move_to_end(key)
        else:
            _close_idle(keep=MAX_ENGINES - 1)
            # vLLM logs ~150 lines while it starts (a warning per weight cast to bf16): errors only, unless chosen
            os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
            llm = LLM(**options)
            if invariant:
                internals.check_wrapped(llm.apply_model(_linears_in_row_blocks))
            _ENGINES[key] = (llm, threading.Lock())
        return _ENGINES[key]


def close_engines() -> int:
    """Shut down every vLLM engine ``engine`` keeps that no run is using; how many are left (busy ones stay)."""
    with _ENGINES_LOCK:
        return _close_idle(keep=0)


def _close_idle(keep: int) -> int:
    """Shut down the least recently used idle engines until at most ``keep`` remain (under ``_ENGINES_LOCK``); an
    engine whose lock a run holds is skipped. How many remain."""
    for key in list(_ENGINES):
        if len(_ENGINES) <= keep:
            break
        llm, lock = _ENGINES[key]
        if lock.acquire(blocking=False):
            try:
                del _ENGINES[key]
                _CLOSED.add(llm)
                internals.shut_down_vllm(llm)
            finally:
                lock.release()
    return len(_ENGINES)


@contextlib.contextmanager
def _held_engine(model) -> Iterator:
    """``engine(model)``'s LLM with its lock held, fetched again if it was shut down before the lock was ours."""
    while True:
        llm, lock = engine(model)
        with lock:
            if llm not in _CLOSED:
                yield llm
                return


def _linears_in_row_blocks(model: torch.nn.Module) -> tuple[int, int]:
    """Wrap every CPU linear kernel of a vLLM model in ``RowBlocks`` (in the worker; once): (wrapped, expected)."""
    return internals.wrap_cpu_linears(model, RowBlocks, RowBlocks)


class VLLMRunner:
    """A ``gcs.engines.batch.Batch`` on vLLM: every row is one request; all are queued at once and vLLM batches them
    (continuous batching). A batch on this engine has no rewordings (``check_engine`` refuses them)."""

    def __init__(self, batch):
        self.batch = batch

    def requests(self, excess_keys: list[str] | None = None, **overrides) -> tuple[list[dict], list]:
        """Each row's vLLM prompt (its token ids) and ``SamplingParams``; ``excess_keys``: one per row, the key the
        plugin records its excess surprise under (``gcs.vllm.excess``); ``overrides`` are more ``SamplingParams``
        fields (a benchmark's ``ignore_eos=True``)."""
        batch = self.batch
        keys = excess_keys if excess_keys is not None else [None] * len(batch.methods)
        temperature, top_k, top_p = batch.settings.warping
        mask = batch.inputs["attention_mask"].bool().cpu()
        prompts = [{"prompt_token_ids": ids[keep].tolist()}
                   for ids, keep in zip(batch.inputs["input_ids"].cpu(), mask, strict=True)]
        params = [
            sampling_params(method, seed, stream if method == "is" else None,
                            context=batch.context if method == "ctx" else None, excess_key=key, **{
                "temperature": temperature, "top_k": top_k or 0, "top_p": top_p or 1.0,
                "max_tokens": batch.settings.max_new_tokens, "stop_token_ids": list(batch.stop_ids), **overrides})
            for method, seed, stream, key in zip(batch.methods, batch.seeds, batch.streams, keys, strict=True)
        ]
        return prompts, params

    def steps(self, stop: threading.Event | None = None) -> Iterator[list[list[int]]]:
        """Every row's token ids so far, after each engine step. With the batch's ``record_excess``, the plugin's
        records of the rows' excess surprise are the batch's ``excess_record`` before the last step is handed out,
        where they reach this process (vLLM's engine core and worker in it: the CPU defaults); else it stays None.

        Closing the iterator early, or setting ``stop``, aborts the unfinished requests.
        """
        names = [f"gcs-{uuid.uuid4().hex}-{i}" for i in range(len(self.batch.methods))]
        row_of = {name: i for i, name in enumerate(names)}
        tokens: list[list[int]] = [[] for _ in names]
        self.batch.excess_record = None
        recording = self.batch.record_excess
        prompts, params = self.requests(excess_keys=names if recording else None)
        with _held_engine(self.batch.model) as llm:  # one batch at a time per engine: vLLM's LLM is not thread-safe
            core, running = llm.llm_engine, set(names)
            try:
                if recording:
                    RECORDS.expect(names)
                for name, prompt, request_params in zip(names, prompts, params, strict=True):
                    core.add_request(name, prompt, request_params)
                while running and not (stop is not None and stop.is_set()):
                    for output in core.step():
                        tokens[row_of[output.request_id]] = list(output.outputs[0].token_ids)
                        if output.finished:
                            running.discard(output.request_id)
                    if recording and not running:
                        self.batch.excess_record = recorded_steps(RECORDS.take(name) for name in names)
                    yield tokens
            except GeneratorExit:
                logger.info("generation stopped early: its consumer went away")
                raise
            finally:
                if running:
                    core.abort_request(sorted(running))
                for name in names if recording else ():  # what a stopped run recorded: nobody reads it
                    RECORDS.take(name)

    def run(self, stop: threading.Event | None = None) -> torch.Tensor:
        """The last step: token ids [rows, new tokens], padded with a stop token like the transformers runner's."""
        last: list[list[int]] = []
        for token_ids in self.steps(stop):
            last = token_ids
        return padded(last, self.batch.stop_ids[0])
