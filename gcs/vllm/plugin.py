"""IS / GCS / GCSwR (and "ctx") inside vLLM: the logits-processor plugin, what a ``vllm serve`` process loads.

Needs vLLM (``requirements-vllm.txt`` installs the CPU build); ``import gcs`` does not import this module: only
``engine="vllm"`` does (``gcs.engines.vllm`` builds its processor from here), and ``gcs vllm-serve`` names it to
vLLM. It loads only what serving needs: the samplers, the warpers, and the request arguments and per-request state
(``gcs.vllm.requests``); vLLM as the engine of ``gcs.generate(engine="vllm")`` is ``gcs.engines.vllm``, which a
serving process never loads. Installing gcs registers the plugin under vLLM's ``vllm.logits_processors``
entry point, so every vLLM engine in the environment loads it; it can also be named
explicitly (``--logits-processors gcs.vllm.plugin:GumbelSamplingProcessor``). A request opts in
through ``SamplingParams.extra_args`` (``vllm_xargs`` over HTTP); requests without
``gcs_*`` keys are left untouched::

    from vllm import LLM, SamplingParams
    llm = LLM("meta-llama/Meta-Llama-3-8B-Instruct")
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=64,
                            extra_args={"gcs_method": "gcswr", "gcs_seed": 7})
    llm.generate(["What is DNA?", "Explain what DNA is."], params)  # coupled responses

Keys: ``gcs_method`` ("is", "gcs", "gcswr", "ctx"; required), ``gcs_seed`` (0 to 2**63 - 1;
default 0; requests with one seed share their noise), ``gcs_stream`` (IS only: the
source of independence between requests; default, a hash of the prompt's token ids), ``gcs_context``
("ctx" only: its window, 1 to 64, default 4; docs/context.md) and ``gcs_excess_key`` (a string, one per request:
record the request's excess surprise token by token under it, for a reader in the process that runs the model that
expects the key; ``gcs.vllm.excess``).

How it samples. Noise is keyed by (seed, output index), never by absolute position, so
paraphrases of different lengths stay coupled. The processor applies the request's own
``temperature`` / ``top_k`` / ``top_p`` with the same transformers warpers as
``gcs.GumbelLogitsProcessor``, draws the token with the same ``gcs`` samplers, and returns
``-inf`` everywhere but that token, so vLLM's sampler can only emit it (vLLM's own
temperature and truncation leave a one-hot row unchanged). Temperature 0 is greedy: the
row is left to vLLM's argmax. GCSwR state (residual noise and draw counts) is kept in rows of
persistent tensors (``gcs.vllm.slots``) mapped from the requests' batch slots: the mapping
follows row moves, a preempted request takes a copy of its rows along and brings it back in
whatever slot it resumes, and a draw that vLLM discards (a chunked-prefill step) is redone from
the state before it. "ctx" keeps no state of its own: its window and context counts are a function of the tokens
the request has written (``ContextGumbelSampler.state_of``), read each step from V1's output ids or V2's committed
``all_token_ids``, so preemption and discarded draws need nothing more.

Refused with ``ValueError`` (HTTP 400 on the server) before any work: unknown ``gcs_*``
keys or bad values, and parameters that would change the distribution after gcs has
drawn (``presence_penalty``, ``frequency_penalty``, ``repetition_penalty``, ``min_p``) or
make several responses from one seed (``n > 1``: send one request per seed). Leave those
at their defaults. ``logit_bias``, ``allowed_token_ids``, ``bad_words``, ``min_tokens``
and structured outputs act before the processor and are part of the distribution it
samples. Speculative decoding is not supported (vLLM loads no custom processor with it).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import cast

import torch
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2LogitsProcessor

from gcs.sampling.processor import expected_logit, make_warpers
from gcs.sampling.samplers import ContextGumbelSampler, RecyclingGumbelSampler, make_sampler
from gcs.vllm.excess import RECORDS
from gcs.vllm.options import PLUGIN, plugin_registered
from gcs.vllm.requests import (  # noqa: F401 (the request API is gcs.vllm.plugin's too: sampling_params, request_args, ...)
    EXCESS_KEY,
    KEYS,
    METHOD_KEY,
    SEED_KEY,
    STREAM_KEY,
    RequestArgs,
    RequestRegistry,
    RequestState,
    request_args,
    sampling_params,
    token_stream,
)
from gcs.vllm.slots import SlotStates, as_slice


class _GcsRequests:
    """What every face of the plugin says about a request before it runs: ``request_args`` or a ValueError
    (HTTP 400)."""

    @classmethod
    def validate_params(cls, params: SamplingParams) -> None:
        request_args(params)


@dataclass
class Pick:
    """One logits row to sample: its batch slot (the row of its GCSwR state), its request's state, the output
    index, the last token appended, and (for "ctx") the tokens written so far."""

    row: int
    slot: int
    request: RequestState
    index: int
    last_token: int | None = None
    written: Sequence[int] = ()


def draw(logits: torch.Tensor, picks: Sequence[Pick], slots: SlotStates) -> torch.Tensor:
    """Sample each picked row with its request's method and settings; the row becomes -inf but the chosen 0.

    Rows are batched by (method, temperature, top_k, top_p, context): one warp and one sampler call
    per group, the same code ``gcs.generate`` runs. GCSwR rows draw from, and update, their
    slots' state in ``slots``; "ctx" rows start from the tokens they wrote. Greedy rows (temperature 0) and rows
    not picked are left as they are. Rows whose request names an excess key that a reader in this process expects have
    the step's excess surprise recorded under it (``gcs.vllm.excess``; one read of the values per step, for those rows
    only).
    """
    recorded = [(pick, key) for pick in picks
                if (key := pick.request.args.excess_key) is not None and RECORDS.expects(key)]
    if recorded:  # the untempered logits before any row is sampled (a copy: sampling overwrites rows in place)
        recorded_rows = torch.tensor([pick.row for pick, _ in recorded], device=logits.device)
        raw = logits[recorded_rows].float()
        expected = expected_logit(raw)
    groups: dict[tuple, list[Pick]] = defaultdict(list)
    for pick in picks:
        args = pick.request.args
        if args.temperature > 0:
            groups[(args.method, args.warping, args.context)].append(pick)
    vocab, device = logits.shape[1], logits.device
    for (method, warping, context), members in groups.items():
        # consecutive rows (V1's batch when one setting fills it) as a view: no gather, no scatter
        run = as_slice([m.row for m in members])
        rows = run if run is not None else torch.tensor([m.row for m in members], device=device)
        # the warpers read the scores only (no input ids)
        warped = make_warpers(*warping)(None, logits[rows].float())
        sampler = make_sampler(method, seed=[m.request.args.seed for m in members],
                               streams=[m.request.stream or 0 for m in members], context=context)
        indices = torch.tensor([m.index for m in members])
        if method == "gcswr":
            taken = [(m.slot, m.index, m.last_token) for m in members]
            state, state_rows = slots.take(taken, vocab, device)
            sampler.begin(len(members), vocab, device, steps=indices, state=state)
        elif method == "ctx":
            written = ContextGumbelSampler.state_of([m.written for m in members], context, device)
            sampler.begin(len(members), vocab, device, steps=indices, state=written)
        else:
            sampler.begin(len(members), vocab, device, steps=indices)
        tokens = sampler.sample(warped)
        if method == "gcswr":
            recycling = cast(RecyclingGumbelSampler, sampler)  # what make_sampler("gcswr", ...) makes
            slots.drew(taken, tokens.tolist(), (recycling.residual, recycling.draws), state_rows)
        if isinstance(rows, slice):
            logits[rows].fill_(-math.inf).scatter_(1, tokens[:, None], 0.0)
        else:
            logits.index_fill_(0, rows, -math.inf)
            logits[rows, tokens] = 0.0
    if recorded:  # each row's token: the one finite entry of a sampled row, the argmax of a greedy one
        drawn = raw.gather(1, logits[recorded_rows].argmax(dim=-1, keepdim=True)).squeeze(1)
        RECORDS.record_many([key for _, key in recorded], [pick.index for pick, _ in recorded],
                            (expected - drawn).tolist())
    return logits


def _check_config(vllm_config) -> None:
    if getattr(vllm_config, "speculative_config", None) is not None:
        raise ValueError("gcs sampling does not support speculative decoding: start vLLM without it")


# -- V1 model runner (vLLM's CPU backend, and GPUs without Model Runner V2) -------------------------
class GumbelSamplingV1(_GcsRequests, V1LogitsProcessor):
    """The plugin for vLLM's V1 logits-processor interface (``update_state`` + ``apply(logits)``)."""

    def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool):
        _check_config(vllm_config)
        self.registry = RequestRegistry()
        # batch slot -> (request state, the request's live list of output token ids)
        self.slots: dict[int, tuple[RequestState, list[int]]] = {}
        self.states = SlotStates()  # GCSwR state by batch slot

    def is_argmax_invariant(self) -> bool:
        return False  # it picks the token: greedy rows at temperature 0 are skipped inside

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        if batch_update is None:
            return
        # vLLM's order: removed, then added, then moved.
        for index in batch_update.removed:
            self.slots.pop(index, None)
            self.states.leave(index)
        for index, params, prompt_ids, output_ids in batch_update.added:
            args = request_args(params)
            if args is None:
                self.slots.pop(index, None)
                self.states.leave(index)
            else:
                request = self.registry.state(params, args, prompt_ids)
                self.slots[index] = (request, output_ids)
                self.states.enter(index, request)
        for first, second, direction in batch_update.moved:
            swap = direction == MoveDirectionality.SWAP
            a, b = self.slots.pop(first, None), self.slots.pop(second, None)
            if a is not None:
                self.slots[second] = a
            if swap and b is not None:
                self.slots[first] = b
            self.states.move(first, second, swap)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.slots:
            return logits
        picks = [Pick(row, row, request, len(output_ids), output_ids[-1] if output_ids else None,
                      output_ids if request.args.method == "ctx" else ())
                 for row, (request, output_ids) in sorted(self.slots.items()) if row < logits.shape[0]]
        return draw(logits, picks, self.states)


# -- Model Runner V2 (vLLM's default where Triton runs: GPUs) --------------------------------------
class GumbelSamplingV2(_GcsRequests, V2LogitsProcessor):
    """The plugin for Model Runner V2 (``add_request`` + ``apply(logits, ctx)``).

    A row's output index is ``pos + 1 - prompt_len``; rows still in chunked prefill
    (``pos + 1 < prefill_len``) produce no token and are skipped.
    """

    def __init__(self, vllm_config, req_states):
        _check_config(vllm_config)
        self.req_states = req_states
        self.registry = RequestRegistry()
        self.slots: dict[int, RequestState] = {}  # persistent request slot -> state
        self.states = SlotStates()  # GCSwR state by request slot

    def add_request(self, req_idx: int, params: SamplingParams) -> bool:
        args = request_args(params)
        if args is None:
            self.slots.pop(req_idx, None)
            self.states.leave(req_idx)
            return False
        request = self.slots[req_idx] = self.registry.state(params, args, None)
        self.states.enter(req_idx, request)
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
        for row, (slot, position) in enumerate(zip(slots, positions, strict=False)):
            request = self.slots.get(slot)
            if request is None or position + 1 < prefill_len[slot]:
                continue
            if request.stream is None:  # default IS stream: the prompt's token ids, read once
                length = int(prompt_len[slot])
                request.stream = token_stream(self.req_states.all_token_ids.gpu[slot, :length].tolist())
            start = int(prompt_len[slot])
            # "ctx" reads the tokens it wrote: committed in all_token_ids up to this row's position (a device read)
            written = self.req_states.all_token_ids.gpu[slot, start : position + 1].tolist() \
                if request.args.method == "ctx" else ()
            picks.append(Pick(row, slot, request, position + 1 - start, written=written))
        return draw(logits, picks, self.states)


# -- the class vLLM loads ------------------------------------------------------------------------
def _refuse_a_second_registration(vllm_config) -> None:
    """vLLM loads the installed entry point and ``--logits-processors`` / ``LLM(logits_processors=)`` side by side,
    without removing twins: two gcs processors would each draw a token (twice the work, the second draw wins)."""
    named = getattr(getattr(vllm_config, "model_config", None), "logits_processors", None) or ()
    ours = [item for item in named if item in (PLUGIN, PLUGIN.replace(":", "."))
            or (isinstance(item, type) and issubclass(item, (GumbelSamplingProcessor, GumbelSamplingV1,
                                                             GumbelSamplingV2)))]
    if len(ours) > 1 or (ours and plugin_registered()):
        raise ValueError(f"gcs's logits processor is registered twice in this engine: gcs is installed, so vLLM "
                         f"loads it from its entry point already; drop --logits-processors {PLUGIN} "
                         "(or logits_processors=[...] in LLM(...))")


# The two interfaces' ``apply`` differ: this class only picks one (``__new__``), and is never an instance itself.
class GumbelSamplingProcessor(_GcsRequests, V1LogitsProcessor, V2LogitsProcessor):
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
        raise TypeError("GumbelSamplingProcessor takes (vllm_config, device, is_pin_memory) or "
                        "(vllm_config, req_states)")
