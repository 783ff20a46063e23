"""gcs.vllm.plugin's processors driven the way vLLM's runners drive them, on a synthetic history-dependent model.

No engine here (tests/test_vllm.py runs real vLLM): these simulate V1's persistent batch
(removed -> added -> moved, condensing, swaps, slot reuse, preemption, discarded draws)
and Model Runner V2's slots and reordered rows, and check that each request gets exactly
the tokens it gets alone, which are the tokens gcs's own samplers draw.
"""

from __future__ import annotations

import hashlib
import logging
import math
import random
import uuid
from collections import Counter
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from scipy import stats
from vllm import SamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, MoveDirectionality
from vllm.v1.sample.logits_processor import LogitsProcessor as V1LogitsProcessor
from vllm.v1.worker.gpu.sample.logits_processor import LogitsProcessor as V2LogitsProcessor

from gcs.sampling.processor import make_warpers
from gcs.sampling.samplers import make_sampler
from gcs.vllm.excess import RECORDS, ExcessRecords, RecordedSteps, recorded_steps
from gcs.vllm.plugin import (
    EXCESS_KEY,
    GumbelSamplingProcessor,
    GumbelSamplingV1,
    GumbelSamplingV2,
    RequestRegistry,
    request_args,
    sampling_params,
    token_stream,
)

VOCAB = 40
CONFIG = SimpleNamespace(speculative_config=None)


def model_logits(prompt: tuple[int, ...], output: list[int]) -> torch.Tensor:
    """A deterministic next-token distribution that depends on the whole history."""
    digest = hashlib.blake2b(repr((prompt, tuple(output))).encode(), digest_size=8).digest()
    generator = torch.Generator().manual_seed(int.from_bytes(digest, "little") >> 1)
    return torch.randn(VOCAB, generator=generator) * 2.0


class Request:
    def __init__(self, prompt, params, max_tokens):
        self.prompt, self.params, self.max_tokens, self.output = tuple(prompt), params, max_tokens, []

    @property
    def done(self):
        return len(self.output) >= self.max_tokens


def make_requests(seed=0) -> list[Request]:
    """Mixed requests: every method (ctx too), shared and distinct seeds, warping, plain ones, different lengths."""
    rng = random.Random(seed)
    requests = []
    for i in range(14):
        prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(2, 6))]
        if i % 5 == 4:
            params = SamplingParams(temperature=1.0, max_tokens=9)  # no gcs args: greedy here, untouched
        elif i % 7 == 3:  # "ctx" with two tokens left by top_k: its windows come back, so its counts matter
            params = sampling_params("ctx", seed=i % 2, context=1 + i % 2, temperature=1.0, top_k=2, max_tokens=9)
        else:
            method = ("is", "gcs", "gcswr")[i % 3]
            params = sampling_params(method, seed=i % 2, temperature=(0.7, 1.0, 1.3)[i % 3],
                                     top_k=[0, 12][i % 2], top_p=[1.0, 0.9][(i // 2) % 2], max_tokens=9)
        requests.append(Request(prompt, params, rng.randint(3, 9)))
    return requests


def emitted(row_logits: torch.Tensor) -> int:
    """What vLLM's sampler can emit from a processed row (one finite entry after gcs; argmax otherwise)."""
    return int(row_logits.argmax())


def run_v1(requests, capacity, swaps=False, discard_first=False, preempt=False, seed=0):
    """Drive a GumbelSamplingV1 like vLLM's V1 persistent batch; returns each request's output ids."""
    rng = random.Random(seed)
    processor = GumbelSamplingProcessor(CONFIG, torch.device("cpu"), False)
    batch: list[Request | None] = []
    waiting = list(requests)
    started = set()
    preempted = False
    while waiting or any(r is not None for r in batch):
        removed, added, moved = [], [], []
        for i, r in enumerate(batch):
            if r is not None and r.done:
                removed.append(i)
                batch[i] = None
        if preempt and not preempted and len(started) >= 3:  # preempt one running request: it comes back later
            victim = next(i for i, r in enumerate(batch) if r is not None and not r.done)
            waiting.append(batch[victim])
            removed.append(victim)
            batch[victim] = None
            preempted = True
        for i in range(capacity):
            if not waiting:
                break
            if i >= len(batch):
                batch.append(None)
            if batch[i] is None:
                r = batch[i] = waiting.pop(0)
                added.append((i, r.params, list(r.prompt), r.output))
        # condense: move the last occupied rows into holes (vLLM's UNIDIRECTIONAL moves)
        while None in batch:
            hole = batch.index(None)
            last = max((i for i, r in enumerate(batch) if r is not None), default=-1)
            if last < hole:
                batch = batch[:hole]
                break
            batch[hole], batch[last] = batch[last], None
            moved.append((last, hole, MoveDirectionality.UNIDIRECTIONAL))
        if swaps and len(batch) >= 2:
            a, b = rng.sample(range(len(batch)), 2)
            batch[a], batch[b] = batch[b], batch[a]
            moved.append((a, b, MoveDirectionality.SWAP))
        if removed or added or moved:
            processor.update_state(BatchUpdate(batch_size=len(batch), removed=removed, added=added, moved=moved))
        else:
            processor.update_state(None)
        if not batch:
            continue
        fresh = any(id(r) not in started for r in batch)
        for attempt in range(2 if discard_first and fresh else 1):
            logits = torch.stack([model_logits(r.prompt, r.output) for r in batch])
            out = processor.apply(logits.clone())
            if attempt == 0 and discard_first and fresh:
                continue  # a chunked-prefill step: every row's draw is thrown away and redone
            for r, row in zip(batch, out, strict=True):
                r.output.append(emitted(row))
                started.add(id(r))
    return [r.output for r in requests]


def alone(request: Request) -> list[int]:
    """The reference: gcs's own sampler on the same history-dependent logits."""
    args = request_args(request.params)
    output = []
    if args is None or args.temperature == 0:
        for _ in range(request.max_tokens):
            output.append(int(model_logits(request.prompt, output).argmax()))
        return output
    stream = args.stream if args.stream is not None else token_stream(request.prompt)
    sampler = make_sampler(args.method, seed=[args.seed], streams=[stream], context=args.context)
    warpers = make_warpers(*args.warping)
    for _ in range(request.max_tokens):
        warped = warpers(None, model_logits(request.prompt, output)[None])
        output.append(int(sampler.sample(warped)[0]))
    return output


@pytest.mark.parametrize("capacity, swaps, discard_first, preempt", [
    (1, False, False, False),
    (4, False, False, False),   # more requests than slots: slots are reused, rows condensed
    (4, True, False, False),    # plus swaps
    (16, True, True, False),    # plus discarded first draws (chunked prefill)
    (3, True, True, True),      # plus a preempted request that resumes
])
def test_v1_batch_bookkeeping_gives_each_request_its_own_tokens(capacity, swaps, discard_first, preempt):
    requests = make_requests()
    expected = [alone(Request(r.prompt, r.params, r.max_tokens)) for r in requests]
    assert run_v1(requests, capacity, swaps, discard_first, preempt) == expected


@pytest.mark.parametrize("capacity, swaps, discard_first, preempt", [(4, True, True, True), (16, False, True, False)])
def test_gcswr_rows_in_consecutive_slots_draw_in_place_and_keep_their_own_state(capacity, swaps, discard_first,
                                                                                preempt):
    """Every request GCSwR with one warping: a step's rows are consecutive slots, and the state is updated through a
    view of the slot tensors (no gather); rows still move, swap, are redone and preempted."""
    rng = random.Random(3)
    requests = [Request([rng.randrange(VOCAB) for _ in range(rng.randint(2, 6))],
                        sampling_params("gcswr", seed=i % 3, temperature=1.2, max_tokens=9), rng.randint(3, 9))
                for i in range(12)]
    expected = [alone(Request(r.prompt, r.params, r.max_tokens)) for r in requests]
    assert run_v1(requests, capacity, swaps, discard_first, preempt) == expected


def test_shared_seeds_couple_requests_and_plain_requests_are_untouched():
    prompt = (3, 1, 4)
    requests = [Request(prompt, sampling_params(m, seed=5, max_tokens=8), 8) for m in ("gcs", "gcswr")] * 2
    requests = [Request(r.prompt, r.params.clone(), 8) for r in requests]
    out = run_v1(requests, capacity=4)
    assert out[0] == out[2] and out[1] == out[3]  # same method, seed and prompt: same response
    processor = GumbelSamplingV1(CONFIG, torch.device("cpu"), False)
    plain = SamplingParams(temperature=0.8)
    processor.update_state(BatchUpdate(1, [], [(0, plain, [1], [])], []))
    logits = torch.randn(1, VOCAB)
    assert torch.equal(processor.apply(logits.clone()), logits)


@pytest.mark.parametrize("seed", range(4))
def test_discarded_gcswr_draws_are_redone_from_the_state_before_them(seed):
    request = Request((7, 7), sampling_params("gcswr", seed=seed, temperature=1.5), 16)
    processor = GumbelSamplingV1(CONFIG, torch.device("cpu"), False)
    processor.update_state(BatchUpdate(1, [], [(0, request.params, list(request.prompt), request.output)], []))
    for step in range(request.max_tokens):
        for _ in range(3 if step in (0, 2, 5, 9) else 1):  # these steps are drawn three times, kept once
            token = emitted(processor.apply(model_logits(request.prompt, request.output)[None])[0])
        request.output.append(token)
    assert request.output == alone(Request(request.prompt, request.params, 16))


def test_registry_drops_a_state_once_its_request_is_gone():
    registry = RequestRegistry()
    params = sampling_params("gcswr", seed=1)
    args = request_args(params)
    state = registry.state(params, args, [1, 2])
    assert registry.state(params, args, [1, 2]) is state and len(registry) == 1
    del params
    import gc

    gc.collect()
    assert len(registry) == 0


class FakeTensor:
    def __init__(self, array):
        self.np = array


def run_v2(requests, capacity, partial_prefill=True, seed=0, preempt=False):
    """Drive a GumbelSamplingV2 like Model Runner V2: free-list slots (``list(range(capacity))``, taken from the end,
    as vLLM's ``free_indices``), rows reordered every step, never a word about finished or preempted requests. With
    ``preempt``, one running request is preempted once and resumes in another free slot (its prefill recomputed)."""
    rng = random.Random(seed)
    max_len = 64
    req_states = SimpleNamespace(prompt_len=FakeTensor(np.zeros(capacity, np.int32)),
                                 prefill_len=FakeTensor(np.zeros(capacity, np.int32)),
                                 all_token_ids=SimpleNamespace(gpu=torch.zeros(capacity, max_len, dtype=torch.int32)))
    processor = GumbelSamplingProcessor(CONFIG, req_states)
    free, running, waiting = list(range(capacity)), {}, list(requests)
    chunks, preempted, resumed_in = {}, None, None
    while waiting or running:
        for slot, r in list(running.items()):
            if r.done:
                del running[slot]
                free.append(slot)
        if preempt and preempted is None and free and any(r.output and not r.done for r in running.values()):
            slot = next(s for s, r in running.items() if r.output and not r.done)
            preempted = (running.pop(slot), slot)
            waiting.insert(0, preempted[0])
            free.insert(0, slot)  # taken last: the request resumes in the other slot free now
        while waiting and free:
            r, slot = waiting.pop(0), free.pop()
            if preempted is not None and r is preempted[0] and resumed_in is None:
                resumed_in = slot
            running[slot] = r
            req_states.prompt_len.np[slot] = len(r.prompt)
            req_states.prefill_len.np[slot] = len(r.prompt) + len(r.output)  # a resumed request recomputes both
            req_states.all_token_ids.gpu[slot, : len(r.prompt) + len(r.output)] = torch.tensor([*r.prompt, *r.output])
            processor.add_request(slot, r.params)
            chunks[slot] = 1 if partial_prefill and len(r.prompt) > 2 else 0  # one unfinished prefill chunk first
        if not running:
            continue
        slots = list(running)
        rng.shuffle(slots)
        positions = []
        for slot in slots:
            r = running[slot]
            end = len(r.prompt) + len(r.output)
            positions.append(end - 1 - (1 if chunks[slot] else 0))  # mid-prefill rows end before the prompt does
        logits = torch.stack([model_logits(running[s].prompt, running[s].output) for s in slots])
        ctx = SimpleNamespace(expanded_idx_mapping=torch.tensor(slots), idx_mapping_np=np.array(slots),
                              pos=torch.tensor(positions))
        out = processor.apply(logits.clone(), ctx)
        for slot, row in zip(slots, out, strict=True):
            if chunks[slot]:
                chunks[slot] = 0  # this step only prefilled: no token
                continue
            r = running[slot]
            r.output.append(emitted(row))
            req_states.all_token_ids.gpu[slot, len(r.prompt) + len(r.output) - 1] = r.output[-1]  # committed
    if preempt:
        assert preempted is not None and resumed_in is not None and resumed_in != preempted[1], (preempted, resumed_in)
    return [r.output for r in requests]


class DeviceOnly:
    """A device tensor whose host copy must not be needed (reading it would make the runner wait for the GPU)."""

    def __init__(self, rows: int):
        self.shape = (rows,)

    def tolist(self):
        raise AssertionError("a step without gcs requests read a device tensor")


def test_v2_steps_without_gcs_requests_never_wait_for_the_device():
    """Model Runner V2 never reports finished requests: after a gcs request ends, later steps of plain requests
    must return at once, judged from the host-side slot list alone."""
    req_states = SimpleNamespace(prompt_len=FakeTensor(np.array([3, 3, 3], np.int32)),
                                 prefill_len=FakeTensor(np.array([3, 3, 3], np.int32)),
                                 all_token_ids=SimpleNamespace(gpu=torch.zeros(3, 8, dtype=torch.int32)))
    processor = GumbelSamplingProcessor(CONFIG, req_states)
    assert processor.add_request(0, sampling_params("gcswr", seed=1, max_tokens=2))  # slot 0: gcs, then finished
    assert not processor.add_request(1, SamplingParams(max_tokens=2))  # plain requests in slots 1 and 2
    assert not processor.add_request(2, SamplingParams(max_tokens=2))
    logits = torch.randn(2, VOCAB)
    ctx = SimpleNamespace(idx_mapping_np=np.array([2, 1]), expanded_idx_mapping=DeviceOnly(2), pos=DeviceOnly(2))
    assert processor.apply(logits, ctx) is logits


@pytest.mark.parametrize("capacity, preempt", [(1, False), (4, False), (16, False), (4, True), (16, True)])
def test_v2_slots_and_reordered_rows_give_each_request_its_own_tokens(capacity, preempt, caplog):
    """Including a preempted request that resumes in another slot: its state comes along (it used to be lost when
    the state lived by slot)."""
    requests = make_requests(seed=1)
    expected = [alone(Request(r.prompt, r.params, r.max_tokens)) for r in requests]
    with caplog.at_level(logging.WARNING, logger="gcs.vllm.plugin"):
        assert run_v2(requests, capacity, preempt=preempt) == expected
    assert "was lost" not in caplog.text


def test_v2_state_tensors_hold_the_running_gcswr_requests_not_every_slot():
    """vLLM gives the first request its last slot: the state tensors still grow with the requests, not the slots."""
    slots = 1024
    req_states = SimpleNamespace(prompt_len=FakeTensor(np.full(slots, 2, np.int32)),
                                 prefill_len=FakeTensor(np.full(slots, 2, np.int32)),
                                 all_token_ids=SimpleNamespace(gpu=torch.zeros(slots, 4, dtype=torch.int32)))
    processor = GumbelSamplingProcessor(CONFIG, req_states)
    processor.add_request(slots - 1, sampling_params("gcswr", seed=1))
    ctx = SimpleNamespace(expanded_idx_mapping=torch.tensor([slots - 1]), idx_mapping_np=np.array([slots - 1]),
                          pos=torch.tensor([1]))
    processor.apply(torch.randn(1, VOCAB), ctx)
    assert processor.states.residual.shape == (8, VOCAB)


def keyed(requests: list[Request]) -> dict[str, Request]:
    """The gcs requests of ``requests`` given an excess key each (plain ones stay as they are), and a greedy gcs
    request added (no draw of the plugin's: vLLM's argmax picks its token, and the record must follow it)."""
    requests.append(Request((5, 1, 2), sampling_params("gcs", seed=0, temperature=0.0, max_tokens=9), 6))
    keys = {}
    for i, request in enumerate(requests):
        if request_args(request.params) is not None:
            keys[f"test-{uuid.uuid4().hex}-{i}"] = request
            request.params = request.params.clone()
            request.params.extra_args = {**request.params.extra_args, EXCESS_KEY: list(keys)[-1]}
    RECORDS.expect(list(keys)[1:])  # the first key is expected by nobody (a server's client naming one)
    return keys


def excess_by_definition(request: Request) -> list[float]:
    """Each token's surprise minus its step's entropy, at temperature 1, from the synthetic model's logits."""
    values = []
    for t, token in enumerate(request.output):
        log_p = torch.log_softmax(model_logits(request.prompt, request.output[:t]).double(), dim=-1)
        values.append(float(-log_p[token] + (log_p.exp() * log_p).sum()))
    return values


def check_records(keys: dict[str, Request]) -> None:
    unexpected, *expected = keys
    assert RECORDS.take(unexpected) is None and not RECORDS.expects(unexpected)
    for key in expected:
        request = keys[key]
        recorded = RECORDS.take(key)
        assert recorded is not None and len(recorded) == len(request.output), (key, recorded, request.output)
        np.testing.assert_allclose(recorded, excess_by_definition(request), atol=1e-4)


@pytest.mark.parametrize("capacity, swaps, discard_first, preempt", [
    (1, False, False, False), (4, True, True, True), (16, True, True, False)])
def test_v1_records_each_keyed_request_s_excess_surprise_and_draws_the_same_tokens(capacity, swaps, discard_first,
                                                                                  preempt):
    """Under moves, swaps, discarded (redone) draws and preemption: one value per token kept, each ``-log p(y) -
    H(p)`` of the untempered logits; nothing recorded for requests without a key or with a key nobody expects; the
    tokens are those drawn without recording."""
    requests = make_requests(seed=2)
    before = len(RECORDS)
    keys = keyed(requests)
    expected = [alone(Request(r.prompt, r.params, r.max_tokens)) for r in requests]
    assert run_v1(requests, capacity, swaps, discard_first, preempt) == expected
    assert len(RECORDS) == before + len(keys) - 1
    check_records(keys)
    assert len(RECORDS) == before


@pytest.mark.parametrize("capacity, preempt", [(4, True), (16, False)])
def test_v2_records_each_keyed_request_s_excess_surprise(capacity, preempt):
    """Model Runner V2's rows: reordered, mid-prefill (skipped: no token), preempted and resumed elsewhere."""
    requests = make_requests(seed=3)
    keys = keyed(requests)
    expected = [alone(Request(r.prompt, r.params, r.max_tokens)) for r in requests]
    assert run_v2(requests, capacity, preempt=preempt) == expected
    check_records(keys)


def test_the_records_keep_the_expected_keys_only_and_a_redrawn_index_replaces_what_followed():
    records = ExcessRecords()
    records.expect("bcd")
    for key in "abcd":
        records.record(key, 0, 1.0)
    assert len(records) == 3 and records.take("a") is None  # expected by nobody: nothing kept
    records.record("b", 1, 2.0)
    records.record("b", 2, 3.0)
    records.record("b", 1, 5.0)  # index 1 drawn again (a discarded draw): 2.0 and 3.0 go
    records.record("c", 2, 4.0)  # an index never seen before it: NaN there, so a mean cannot hide it
    assert records.take("b") == [1.0, 5.0] and records.take("b") is None
    c = records.take("c")
    assert c[0] == 1.0 and math.isnan(c[1]) and c[2] == 4.0 and records.take("d") == [1.0]
    assert recorded_steps([[1.0, 5.0], None]) is None
    np.testing.assert_equal(RecordedSteps([[1.0, 5.0], [2.0], []]).means([2, 2, 0]), [3.0, math.nan, math.nan])


def test_the_entry_point_class_builds_the_runner_s_processor():
    assert issubclass(GumbelSamplingProcessor, V1LogitsProcessor)
    assert issubclass(GumbelSamplingProcessor, V2LogitsProcessor)
    assert isinstance(GumbelSamplingProcessor(CONFIG, torch.device("cpu"), False), GumbelSamplingV1)
    assert isinstance(GumbelSamplingProcessor(CONFIG, SimpleNamespace()), GumbelSamplingV2)
    with pytest.raises(ValueError, match="speculative decoding"):
        GumbelSamplingProcessor(SimpleNamespace(speculative_config=object()), torch.device("cpu"), False)


@pytest.mark.parametrize("named", [
    ["gcs.vllm.plugin:GumbelSamplingProcessor"],  # --logits-processors beside the installed entry point
    [GumbelSamplingProcessor],  # LLM(logits_processors=[...]) beside it
    ["gcs.vllm.plugin.GumbelSamplingProcessor"],
])
def test_a_second_registration_in_one_engine_is_refused(named):
    """gcs is installed here, so its entry point loads the plugin: naming it again would run it twice."""
    config = SimpleNamespace(speculative_config=None, model_config=SimpleNamespace(logits_processors=named))
    with pytest.raises(ValueError, match="registered twice in this engine.*drop --logits-processors"):
        GumbelSamplingProcessor(config, torch.device("cpu"), False)
    plain = SimpleNamespace(speculative_config=None, model_config=SimpleNamespace(logits_processors=["x.y:Other"]))
    assert isinstance(GumbelSamplingProcessor(plain, torch.device("cpu"), False), GumbelSamplingV1)


@pytest.mark.parametrize("extra, changes, message", [
    ({"gcs_method": "gumbel"}, {}, "unknown method 'gumbel'"),
    ({"gcs_method": "gcs", "gcs_seed": -1}, {}, "gcs_seed"),
    ({"gcs_method": "gcs", "gcs_seed": "7"}, {}, "gcs_seed must be an integer"),
    ({"gcs_method": "is", "gcs_stream": 1.5}, {}, "gcs_stream must be an integer"),
    ({"gcs_method": "gcswr", "gcs_stream": 3}, {}, "gcs_stream applies to IS only"),  # was silently ignored
    ({"gcs_method": "gcs", "gcs_context": 2}, {}, "gcs_context applies to ctx only"),
    ({"gcs_method": "ctx", "gcs_context": 0}, {}, r"gcs_context must be an integer in \[1, 64\]"),
    ({"gcs_seed": 3}, {}, "gcs_method is required"),
    ({"gcs_method": "gcs", "gcs_temperature": 2}, {}, "unknown gcs argument"),
    ({"gcs_method": "gcs"}, {"repetition_penalty": 1.2}, "repetition_penalty=1.2"),
    ({"gcs_method": "gcs"}, {"presence_penalty": 0.5}, "presence_penalty"),
    ({"gcs_method": "gcs"}, {"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"gcs_method": "gcs"}, {"min_p": 0.1}, "min_p"),
    ({"gcs_method": "gcswr"}, {"n": 2}, "one request per gcs_seed"),
    ({"gcs_method": "gcs", "gcs_excess_key": 5}, {}, "gcs_excess_key must be a string"),
    ({"gcs_method": "gcs", "gcs_excess_key": ""}, {}, "gcs_excess_key must be 1 to 200 characters, got 0"),
    ({"gcs_method": "gcs", "gcs_excess_key": "k" * 201}, {}, "gcs_excess_key must be 1 to 200 characters, got 201"),
])
def test_bad_arguments_are_refused_before_any_work(extra, changes, message):
    params = SamplingParams(extra_args=extra, **changes)
    for cls in (GumbelSamplingProcessor, GumbelSamplingV1, GumbelSamplingV2):
        with pytest.raises(ValueError, match=message):
            cls.validate_params(params)


@pytest.mark.parametrize("method", ["is", "gcs", "gcswr", "ctx"])
def test_chi_square_two_token_responses_through_the_processor(method):
    """Many requests with distinct seeds: the joint law of (token 1, token 2) is the model's, exactly."""
    vocab, n = 4, 4000
    first = torch.tensor([0.0, 1.0, -0.5, 0.3])

    def logits(output):
        if not output:
            return first
        return torch.roll(first, output[0]) * 1.5  # the second token depends on the first

    processor = GumbelSamplingV1(CONFIG, torch.device("cpu"), False)
    outputs = [[] for _ in range(n)]
    added = [(i, sampling_params(method, seed=i, temperature=1.0), [i % 7], outputs[i]) for i in range(n)]
    processor.update_state(BatchUpdate(n, [], added, []))
    for _ in range(2):
        out = processor.apply(torch.stack([logits(o) for o in outputs]))
        for o, row in zip(outputs, out, strict=True):
            o.append(int(row.argmax()))
    counts = Counter((a, b) for a, b in outputs)
    p1 = torch.softmax(first.double(), 0)
    expected = [float(p1[a] * torch.softmax(logits([a]).double(), 0)[b]) * n
                for a in range(vocab) for b in range(vocab)]
    observed = [counts[(a, b)] for a in range(vocab) for b in range(vocab)]
    assert sum(observed) == n
    assert stats.chisquare(observed, expected).pvalue > 1e-3
