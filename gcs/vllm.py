"""IS / GCS / GCSwR inside vLLM: a logits-processor plugin, and vLLM as an engine for ``gcs``.

Needs vLLM (``requirements-vllm.txt`` installs the CPU build); ``gcs`` itself never imports
this module. Installing gcs registers the plugin under vLLM's ``vllm.logits_processors``
entry point, so every vLLM engine in the environment loads it; it can also be named
explicitly (``--logits-processors gcs.vllm:GumbelSamplingProcessor``). A request opts in
through ``SamplingParams.extra_args`` (``vllm_xargs`` over HTTP); requests without
``gcs_*`` keys are left untouched::

    from vllm import LLM, SamplingParams
    llm = LLM("meta-llama/Meta-Llama-3-8B-Instruct")
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=64,
                            extra_args={"gcs_method": "gcswr", "gcs_seed": 7})
    llm.generate(["What is DNA?", "Explain what DNA is."], params)  # coupled responses

Keys: ``gcs_method`` ("is", "gcs", "gcswr"; required), ``gcs_seed`` (0 to 2**63 - 1;
default 0; requests with one seed share their noise) and ``gcs_stream`` (IS only: the
source of independence between requests; default, a hash of the prompt's token ids).

How it samples. Noise is keyed by (seed, output index), never by absolute position, so
paraphrases of different lengths stay coupled. The processor applies the request's own
``temperature`` / ``top_k`` / ``top_p`` with the same transformers warpers as
``gcs.GumbelLogitsProcessor``, draws the token with the same ``gcs`` samplers, and returns
``-inf`` everywhere but that token, so vLLM's sampler can only emit it (vLLM's own
temperature and truncation leave a one-hot row unchanged). Temperature 0 is greedy: the
row is left to vLLM's argmax. GCSwR state (residual noise and draw counts) is kept per
request, not per batch slot, so it survives row moves, slot reuse and preemption; a draw
that vLLM discards (a chunked-prefill step) is redone from the state before it.

Refused with ``ValueError`` (HTTP 400 on the server) before any work: unknown ``gcs_*``
keys or bad values, and parameters that would change the distribution after gcs has
drawn (``presence_penalty``, ``frequency_penalty``, ``repetition_penalty``, ``min_p``) or
make several responses from one seed (``n > 1``: send one request per seed). Leave those
at their defaults. ``logit_bias``, ``allowed_token_ids``, ``bad_words``, ``min_tokens``
and structured outputs act before the processor and are part of the distribution it
samples. Speculative decoding is not supported (vLLM loads no custom processor with it).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import logging
import math
import os
import threading
import uuid
import weakref
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2LogitsProcessor

from .checks import check_method, check_sampling_settings, check_seed
from .invariance import in_row_blocks, wanted
from .processor import make_warpers
from .samplers import RecyclingGumbelSampler, make_sampler
from .serving import PLUGIN

logger = logging.getLogger(__name__)

METHOD_KEY, SEED_KEY, STREAM_KEY = "gcs_method", "gcs_seed", "gcs_stream"
KEYS = (METHOD_KEY, SEED_KEY, STREAM_KEY)
ENTRY_POINT = PLUGIN  # what pyproject.toml registers under vLLM's "vllm.logits_processors"


# -- request arguments -----------------------------------------------------------------------
@dataclass(frozen=True)
class RequestArgs:
    """What gcs needs from one request's ``SamplingParams``."""

    method: str
    seed: int
    stream: int | None
    temperature: float
    top_k: int | None
    top_p: float | None

    @property
    def warping(self) -> tuple[float, int | None, float | None]:
        return self.temperature, self.top_k, self.top_p


def request_args(params: SamplingParams) -> RequestArgs | None:
    """The request's gcs settings; None when it has no ``gcs_*`` key; ValueError naming a bad value.

    >>> request_args(SamplingParams(temperature=0.7, extra_args={"gcs_method": "GCSwR", "gcs_seed": 3}))
    RequestArgs(method='gcswr', seed=3, stream=None, temperature=0.7, top_k=None, top_p=None)
    >>> request_args(SamplingParams()) is None
    True
    """
    extra = params.extra_args or {}
    keys = [key for key in extra if isinstance(key, str) and key.startswith("gcs_")]
    if not keys:
        return None
    unknown = sorted(set(keys) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown gcs argument(s) {', '.join(unknown)}; expected {', '.join(KEYS)}")
    if METHOD_KEY not in extra:
        raise ValueError(f"{METHOD_KEY} is required with other gcs arguments (one of is, gcs, gcswr)")
    conflicts = {
        "presence_penalty": params.presence_penalty != 0,
        "frequency_penalty": params.frequency_penalty != 0,
        "repetition_penalty": params.repetition_penalty != 1,
        "min_p": params.min_p != 0,
        "n": params.n != 1,
    }
    named = [name for name, conflicting in conflicts.items() if conflicting]
    if named:
        raise ValueError(
            f"gcs sampling cannot be combined with {', '.join(f'{n}={getattr(params, n)!r}' for n in named)}: "
            "leave them at their defaults (for several coupled responses, send one request per gcs_seed)"
        )
    top_k = None if params.top_k in (None, 0, -1) else int(params.top_k)
    top_p = None if params.top_p is None or params.top_p >= 1 else float(params.top_p)
    temperature = float(params.temperature)
    check_sampling_settings(temperature, top_k, top_p)
    stream, method = extra.get(STREAM_KEY), check_method(extra[METHOD_KEY])
    if stream is not None and method != "is":
        raise ValueError(f"{STREAM_KEY} applies to IS only (it makes IS requests independent); {method} couples "
                         f"requests by {SEED_KEY}: leave {STREAM_KEY} out")
    return RequestArgs(
        method=method,
        seed=check_seed(extra.get(SEED_KEY, 0), SEED_KEY),
        stream=None if stream is None else check_seed(stream, STREAM_KEY),
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
    )


def sampling_params(method: str = "gcswr", seed: int = 0, stream: int | None = None, **kwargs) -> SamplingParams:
    """``vllm.SamplingParams(**kwargs)`` that sample with ``method`` under ``seed`` (validated now).

    >>> sampling_params("gcs", seed=5, temperature=0.8, max_tokens=16).extra_args
    {'gcs_method': 'gcs', 'gcs_seed': 5}
    """
    extra = dict(kwargs.pop("extra_args", None) or {})
    extra.update({METHOD_KEY: method, SEED_KEY: seed})
    if stream is not None:
        extra[STREAM_KEY] = stream
    params = SamplingParams(extra_args=extra, **kwargs)
    request_args(params)
    return params


def token_stream(token_ids: Sequence[int]) -> int:
    """A stable 63-bit id of a prompt's token ids: the default IS stream of a request."""
    data = b"".join(int(t).to_bytes(4, "little", signed=True) for t in token_ids)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


# -- per-request state -------------------------------------------------------------------------
class RequestState:
    """One request's sampler state, kept with the request rather than its batch slot.

    ``position`` is the output index the current GCSwR state (``residual``, ``draws``) draws
    next. The state one position back is kept too: vLLM may discard a draw (a row still in
    chunked prefill samples a token nobody keeps), and the next call then asks for the same
    index again.
    """

    def __init__(self, args: RequestArgs, stream: int | None = None):
        self.args = args
        self.stream = args.stream if args.stream is not None else stream
        self.position, self.state, self.chosen, self.previous = 0, None, None, None

    def state_for(self, index: int, last_token: int | None, vocab: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """GCSwR's ``(residual, draws)`` for drawing output token ``index``."""
        follows = last_token is None or last_token < 0 or last_token == self.chosen
        if self.state is not None and index == self.position and (index == 0 or follows):
            return self.state
        if self.previous is not None and index == self.position - 1:  # the last draw was discarded
            (self.state, self.chosen), self.previous = self.previous, None
            self.position -= 1
            return self.state
        if index > 0:
            # Exact still (given the history, residuals are iid Exp(1) like fresh noise), but this request
            # loses its coupling from here on.
            logger.warning("gcs: GCSwR state of a request was lost at output index %d (it restarts from fresh "
                           "noise); its tokens stay exact samples but are no longer coupled", index)
        self.position, self.previous, self.chosen = index, None, None
        self.state = RecyclingGumbelSampler.initial_state(self.args.seed, vocab, device)
        return self.state

    def advance(self, state: tuple[torch.Tensor, torch.Tensor], token: int) -> None:
        self.previous = (self.state, self.chosen)
        self.state, self.chosen, self.position = state, token, self.position + 1


class RequestRegistry:
    """Request states by request (its ``SamplingParams`` object, unique per request in vLLM's worker: vLLM's input
    processor clones the params of every request, "``params`` may be shared across prompts, requests and even
    engines by the caller", and a worker process receives its own copies).

    A preempted request leaves the batch and comes back later with the same params object:
    it gets its state back. A state is dropped when its params object is garbage collected
    (the request is gone for good).
    """

    def __init__(self):
        self._states: dict[int, tuple[weakref.ref, RequestState]] = {}

    def __len__(self) -> int:
        return len(self._states)

    def state(self, params: SamplingParams, args: RequestArgs, prompt_ids: Sequence[int] | None) -> RequestState:
        key = id(params)
        entry = self._states.get(key)
        if entry is not None and entry[0]() is params:
            return entry[1]
        state = RequestState(args, None if prompt_ids is None else token_stream(prompt_ids))
        forget = lambda _, key=key, states=self._states: states.pop(key, None)  # noqa: E731
        self._states[key] = (weakref.ref(params, forget), state)
        return state


@dataclass
class Pick:
    """One logits row to sample: its request's state, the output index, and the last token appended."""

    row: int
    request: RequestState
    index: int
    last_token: int | None = None


def draw(logits: torch.Tensor, picks: Sequence[Pick]) -> torch.Tensor:
    """Sample each picked row with its request's method and settings; the row becomes -inf but the chosen 0.

    Rows are batched by (method, temperature, top_k, top_p): one warp and one sampler call
    per group, the same code ``gcs.generate`` runs. Greedy rows (temperature 0) and rows
    not picked are left as they are.
    """
    groups: dict[tuple, list[Pick]] = defaultdict(list)
    for pick in picks:
        if pick.request.args.temperature > 0:
            groups[(pick.request.args.method, pick.request.args.warping)].append(pick)
    vocab, device = logits.shape[1], logits.device
    for (method, warping), members in groups.items():
        rows = torch.tensor([m.row for m in members], device=device)
        warped = make_warpers(*warping)(None, logits[rows].float())
        sampler = make_sampler(method, seed=[m.request.args.seed for m in members],
                               streams=[m.request.stream or 0 for m in members])
        indices = torch.tensor([m.index for m in members])
        if method == "gcswr":
            states = [m.request.state_for(m.index, m.last_token, vocab, device) for m in members]
            state = (torch.stack([s[0] for s in states]), torch.stack([s[1] for s in states]))
            sampler.begin(len(members), vocab, device, steps=indices, state=state)
        else:
            sampler.begin(len(members), vocab, device, steps=indices)
        tokens = sampler.sample(warped)
        for observer in _OBSERVERS:
            observer(method, [m.request.args.seed for m in members], indices.tolist(), warped, tokens)
        if method == "gcswr":
            for i, (member, token) in enumerate(zip(members, tokens.tolist())):  # own copies: a kept state (a
                # preempted request, the state one step back) must not hold the whole batch's tensors alive
                member.request.advance((sampler.residual[i].clone(), sampler.draws[i].clone()), token)
        chosen = torch.full((len(members), vocab), -math.inf, dtype=logits.dtype, device=device)
        logits[rows] = chosen.scatter_(1, tokens[:, None], 0.0)
    return logits


_OBSERVERS: list = []


@contextmanager
def observe():
    """Record every draw the plugin makes in this process while the block runs (tests, debugging).

    Yields a list that fills with ``(method, seed, output index, warped logits [vocab], token)``
    per sampled row. Sees an engine only when it runs in this process (vLLM's in-process
    executor, as ``engine`` sets up on CPU).
    """
    records = []

    def record(method, seeds, indices, warped, tokens):
        records.extend(zip([method] * len(seeds), seeds, indices, warped.cpu(), tokens.tolist()))

    _OBSERVERS.append(record)
    try:
        yield records
    finally:
        _OBSERVERS.remove(record)


def _check_config(vllm_config) -> None:
    if getattr(vllm_config, "speculative_config", None) is not None:
        raise ValueError("gcs sampling does not support speculative decoding: start vLLM without it")


# -- V1 model runner (vLLM's CPU backend, and GPUs without Model Runner V2) -------------------------
class GumbelSamplingV1(V1LogitsProcessor):
    """The plugin for vLLM's V1 logits-processor interface (``update_state`` + ``apply(logits)``)."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        _check_config(vllm_config)
        self.registry = RequestRegistry()
        # batch slot -> (request state, the request's live list of output token ids)
        self.slots: dict[int, tuple[RequestState, list[int]]] = {}

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        request_args(sampling_params)

    def is_argmax_invariant(self) -> bool:
        return False  # it picks the token: greedy rows at temperature 0 are skipped inside

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        # vLLM's order: removed, then added, then moved.
        for index in batch_update.removed:
            self.slots.pop(index, None)
        for index, params, prompt_ids, output_ids in batch_update.added:
            args = request_args(params)
            if args is None:
                self.slots.pop(index, None)
            else:
                self.slots[index] = (self.registry.state(params, args, prompt_ids), output_ids)
        for first, second, direction in batch_update.moved:
            a, b = self.slots.pop(first, None), self.slots.pop(second, None)
            if a is not None:
                self.slots[second] = a
            if direction == MoveDirectionality.SWAP and b is not None:
                self.slots[first] = b

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.slots:
            return logits
        picks = [Pick(row, request, len(output_ids), output_ids[-1] if output_ids else None)
                 for row, (request, output_ids) in sorted(self.slots.items()) if row < logits.shape[0]]
        return draw(logits, picks)


# -- Model Runner V2 (vLLM's default where Triton runs: GPUs) --------------------------------------
class GumbelSamplingV2(V2LogitsProcessor):
    """The plugin for Model Runner V2 (``add_request`` + ``apply(logits, ctx)``).

    A row's output index is ``pos + 1 - prompt_len``; rows still in chunked prefill
    (``pos + 1 < prefill_len``) produce no token and are skipped.
    """

    def __init__(self, vllm_config, req_states):
        _check_config(vllm_config)
        self.req_states = req_states
        self.registry = RequestRegistry()
        self.slots: dict[int, RequestState] = {}  # persistent request slot -> state

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        request_args(sampling_params)

    def add_request(self, req_idx: int, sampling_params: SamplingParams) -> bool:
        args = request_args(sampling_params)
        if args is None:
            self.slots.pop(req_idx, None)
            return False
        self.slots[req_idx] = self.registry.state(sampling_params, args, None)
        return True

    def apply(self, logits: torch.Tensor, ctx) -> torch.Tensor:
        # The runner never tells a processor that a request finished, so ``slots`` keeps finished ones until
        # their slot is reused: ask the host-side copy of this step's slots whether any row is ours before
        # touching a device tensor (reading ``pos`` waits for the device).
        slots = ctx.idx_mapping_np.tolist()
        if not any(slot in self.slots for slot in slots):
            return logits
        if ctx.expanded_idx_mapping.shape[0] != len(slots):
            raise RuntimeError("gcs sampling does not support speculative decoding (several rows per request)")
        positions = ctx.pos.tolist()
        prompt_len, prefill_len = self.req_states.prompt_len.np, self.req_states.prefill_len.np
        picks = []
        for row, (slot, position) in enumerate(zip(slots, positions)):
            request = self.slots.get(slot)
            if request is None or position + 1 < prefill_len[slot]:
                continue
            if request.stream is None:  # default IS stream: the prompt's token ids, read once
                length = int(prompt_len[slot])
                request.stream = token_stream(self.req_states.all_token_ids.gpu[slot, :length].tolist())
            picks.append(Pick(row, request, position + 1 - int(prompt_len[slot])))
        return draw(logits, picks)


# -- the class vLLM loads ------------------------------------------------------------------------
def _refuse_a_second_registration(vllm_config) -> None:
    """vLLM loads the installed entry point and ``--logits-processors`` / ``LLM(logits_processors=)`` side by side,
    without removing twins: two gcs processors would each draw a token (twice the work, the second draw wins)."""
    named = getattr(getattr(vllm_config, "model_config", None), "logits_processors", None) or ()
    ours = [item for item in named if item in (ENTRY_POINT, ENTRY_POINT.replace(":", "."))
            or (isinstance(item, type) and issubclass(item, (GumbelSamplingProcessor, GumbelSamplingV1,
                                                             GumbelSamplingV2)))]
    if len(ours) > 1 or (ours and plugin_registered()):
        raise ValueError(f"gcs's logits processor is registered twice in this engine: gcs is installed, so vLLM "
                         f"loads it from its entry point already; drop --logits-processors {ENTRY_POINT} "
                         "(or logits_processors=[...] in LLM(...))")


class GumbelSamplingProcessor(V1LogitsProcessor, V2LogitsProcessor):
    """The entry point: vLLM's V1 runner gets a ``GumbelSamplingV1``, Model Runner V2 a ``GumbelSamplingV2``.

    Both runners load the same ``vllm.logits_processors`` entry point; V1 constructs it with
    ``(vllm_config, device, is_pin_memory)``, V2 with ``(vllm_config, req_states)`` and checks
    it subclasses the V2 interface. So this class subclasses both and builds the right one.
    """

    def __new__(cls, vllm_config, *args, **kwargs):
        _refuse_a_second_registration(vllm_config)
        if len(args) + len(kwargs) == 2:
            return GumbelSamplingV1(vllm_config, *args, **kwargs)
        if len(args) + len(kwargs) == 1:
            return GumbelSamplingV2(vllm_config, *args, **kwargs)
        raise TypeError("GumbelSamplingProcessor takes (vllm_config, device, is_pin_memory) or (vllm_config, req_states)")

    @classmethod
    def validate_params(cls, sampling_params: SamplingParams) -> None:
        request_args(sampling_params)


# -- vLLM as gcs's engine ------------------------------------------------------------------------
CPU_MAX_NUM_SEQS = 48
CPU_KV_CACHE_BYTES = 2 << 30
_ENGINES: dict[tuple, object] = {}
_ENGINES_LOCK = threading.Lock()


def plugin_registered() -> bool:
    """Whether the installed gcs registers the plugin under vLLM's entry point (then every engine loads it)."""
    return any(e.value == ENTRY_POINT for e in importlib.metadata.entry_points(group="vllm.logits_processors"))


def engine(model, **llm_kwargs):
    """A ``vllm.LLM`` for a ``gcs.Model`` (one per model, dtype and arguments per process), with the plugin loaded.

    The embedded default runs from its cached safetensors copy; other models by their
    name. Defaults: the model's dtype, at most 4,096 tokens of context, the model's
    ``generation_config`` ignored (no hidden penalties), and on CPU an in-process, eager executor
    running at most ``CPU_MAX_NUM_SEQS`` requests at once (the transformers runner's CPU batch) in a
    ``CPU_KV_CACHE_BYTES`` (2 GiB) KV cache.
    ``llm_kwargs`` (e.g. ``tensor_parallel_size=4``) override them.
    """
    from vllm import LLM

    from .models import DEFAULT_MODEL, embedded_model_path

    invariant = wanted(model.device)
    if model.device.type == "cpu":
        # vLLM's engine core in this process, not a worker process: start-up halves (set it yourself to override)
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    if invariant:
        # each sequence's attention on its own: split KV work depends on the batch (gcs.invariance)
        os.environ["VLLM_CPU_ATTN_SPLIT_KV"] = "0"

    dtype = next(model.model.parameters()).dtype
    options = {
        "model": str(embedded_model_path()) if model.name == DEFAULT_MODEL else model.name,
        "dtype": str(dtype).removeprefix("torch."),
        "max_model_len": min(model.context_window, 4096),
        "generation_config": "vllm",
        # On CPU: in-process, and eager (eager starts in about 30 s here; compiling the graphs had not finished
        # after 3 minutes).
        # and a fixed KV cache (vLLM's CPU default reserves 92 % of memory and refuses to start on a busy machine).
        **({"distributed_executor_backend": "uni", "max_num_seqs": CPU_MAX_NUM_SEQS, "enforce_eager": True,
            "kv_cache_memory_bytes": CPU_KV_CACHE_BYTES} if model.device.type == "cpu" else {}),
        **({} if plugin_registered() else {"logits_processors": [GumbelSamplingProcessor]}),
        **llm_kwargs,
    }
    key = (invariant, *sorted((k, repr(v)) for k, v in options.items()))
    with _ENGINES_LOCK:
        if key not in _ENGINES:
            # vLLM logs ~150 lines while it starts (a warning per weight cast to bf16): errors only, unless chosen
            os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
            llm = LLM(**options)
            if invariant:
                llm.apply_model(_linears_in_row_blocks)
            _ENGINES[key] = (llm, threading.Lock())
        return _ENGINES[key]


def _linears_in_row_blocks(model: torch.nn.Module) -> int:
    """Wrap every CPU linear kernel of a vLLM model ``in_row_blocks`` (in the worker; once); how many were wrapped."""
    wrapped = 0
    for module in model.modules():
        linear = getattr(module, "cpu_linear", None)
        if linear is not None and not isinstance(linear, functools.partial):
            module.cpu_linear = functools.partial(in_row_blocks, linear)
            wrapped += 1
    return wrapped




def stream_batch(batch, stop: threading.Event | None = None) -> Iterator[list[list[int]]]:
    """Run a ``gcs.batch.Batch`` on vLLM: every row's token ids so far, after each engine step.

    Every row is one request; all are queued at once and vLLM batches them (continuous
    batching); a ``Batch`` on this engine has no rewordings (``check_engine`` refuses them).
    Closing the iterator early, or setting ``stop``, aborts the unfinished requests.
    """
    llm, lock = engine(batch.model)
    temperature, top_k, top_p = batch.settings.warping
    mask = batch.inputs["attention_mask"].bool().cpu()
    prompts = [{"prompt_token_ids": ids[keep].tolist()} for ids, keep in zip(batch.inputs["input_ids"].cpu(), mask)]
    params = [
        sampling_params(method, seed, stream if method == "is" else None, temperature=temperature, top_k=top_k or 0,
                        top_p=top_p or 1.0,
                        max_tokens=batch.settings.max_new_tokens, stop_token_ids=list(batch.stop_ids))
        for method, seed, stream in zip(batch.methods, batch.seeds, batch.streams)
    ]
    names = [f"gcs-{uuid.uuid4().hex}-{i}" for i in range(len(prompts))]
    row_of = {name: i for i, name in enumerate(names)}
    tokens: list[list[int]] = [[] for _ in prompts]
    with lock:  # one batch at a time per engine: vLLM's LLM is not thread-safe
        core, running = llm.llm_engine, set(names)
        try:
            for name, prompt, request_params in zip(names, prompts, params):
                core.add_request(name, prompt, request_params)
            while running and not (stop is not None and stop.is_set()):
                for output in core.step():
                    tokens[row_of[output.request_id]] = list(output.outputs[0].token_ids)
                    if output.finished:
                        running.discard(output.request_id)
                yield tokens
        finally:
            if running:
                core.abort_request(sorted(running))


def run_batch(batch, stop: threading.Event | None = None) -> torch.Tensor:
    """``stream_batch`` to the end: token ids [rows, new tokens], padded with a stop token like ``Batch.run``."""
    token_ids = []
    for token_ids in stream_batch(batch, stop):
        pass
    return padded(token_ids, batch.stop_ids[0])


def padded(token_ids: list[list[int]], pad: int) -> torch.Tensor:
    """Rows of token ids as one long tensor, the short ones padded with ``pad``.

    >>> padded([[5, 6], [7]], 0).tolist()
    [[5, 6], [7, 0]]
    """
    width = max(1, max((len(ids) for ids in token_ids), default=1))
    return torch.tensor([ids + [pad] * (width - len(ids)) for ids in token_ids], dtype=torch.long)
