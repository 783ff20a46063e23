"""gcs inside real vLLM (its CPU build, V1 runner) with the embedded SmolLM2 model.

One engine for the module (vLLM starts in about a minute here). The processor's
bookkeeping under every kind of batch change is tested without an engine in
tests/test_vllm_plugin.py; here the real engine shows the coupling, the agreement with the
transformers path, the mixed-batch behaviour and the errors.
"""

from __future__ import annotations

import logging
import math
import threading
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError

import gcs
import gcs.vllm.plugin
from gcs.cli.commands import main as cli_main
from gcs.engines.batch import Batch, Row
from gcs.engines.models import load_model
from gcs.engines.prompts import format_prompt
from gcs.engines.vllm import VLLMRunner, engine
from gcs.generation.cores import compare_with
from gcs.instrument.forcing import forced_rows
from gcs.runtime.stage_timing import parse
from gcs.sampling.samplers import make_sampler
from gcs.settings import SamplingSettings
from gcs.stats.paired import degenerate
from gcs.vllm.excess import RECORDS
from gcs.vllm.options import CPU_MAX_NUM_SEQS, plugin_registered
from gcs.vllm.plugin import sampling_params

pytestmark = pytest.mark.slow  # a real vLLM engine

@contextmanager
def observe():
    """Every draw the plugin makes in this process while the block runs: ``(method, seed, output index, warped
    logits [vocab], token)`` per sampled row. It wraps the plugin's ``make_sampler``, so the plugin carries no
    hook for tests; it sees an engine that runs in this process (the in-process executor ``engine`` sets up on CPU).
    """
    records, make_sampler_here = [], gcs.vllm.plugin.make_sampler

    class Recording:
        def __init__(self, method, seed, **kwargs):
            self.sampler, self.method, self.seeds = make_sampler_here(method, seed=seed, **kwargs), method, list(seed)

        def begin(self, *args, steps, **kwargs):
            self.indices = steps.tolist()
            return self.sampler.begin(*args, steps=steps, **kwargs)

        def sample(self, warped):
            tokens = self.sampler.sample(warped)
            records.extend(zip([self.method] * len(self.seeds), self.seeds, self.indices, warped.clone().cpu(),
                               tokens.tolist(), strict=True))  # a copy: the plugin then overwrites a view of its logits
            return tokens

        def __getattr__(self, name):  # the sampler's state (GCSwR's residual and draws)
            return getattr(self.sampler, name)

    gcs.vllm.plugin.make_sampler = Recording
    try:
        yield records
    finally:
        gcs.vllm.plugin.make_sampler = make_sampler_here


def run_batch(batch) -> torch.Tensor:
    return VLLMRunner(batch).run()


PARAPHRASES = ["Why is the sky blue?", "What makes the sky look blue?", "Explain why the sky is blue during the day."]


@pytest.fixture(scope="module")
def model(embedded_model):
    """The embedded model at the default dtype: its vLLM engine is the one the rest of the suite uses too (the UI's
    in-process handlers, the profile of /compare on vLLM); only the agreement with transformers runs in fp32."""
    return embedded_model


@pytest.fixture
def llm(model):
    """The model's engine, fetched for each test: the fp32 test below shuts it down while its own engine runs (two
    at once held 7.5 GiB), and the next test that needs it starts it again."""
    llm, _ = engine(model)
    return llm


def prompt_ids(model, question: str) -> dict:
    text = format_prompt(question, tokenizer=model.tokenizer, is_chat=model.is_chat)
    return {"prompt_token_ids": model.tokenizer(text, add_special_tokens=not model.is_chat)["input_ids"]}


def token_ids(outputs) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in outputs]


@pytest.mark.slow
def test_the_plugin_is_registered_through_the_entry_point():
    assert plugin_registered()


@pytest.mark.slow
def test_every_linear_layer_of_the_pinned_vllm_runs_in_row_blocks(llm):
    """vLLM's cpu_linear is a private hook (gcs.runtime.internals): on the version we pin, every layer that computes a
    linear
    product on CPU has one, and the engine wrapped each (a second pass finds them wrapped)."""
    import vllm

    from gcs.engines.invariance import RowBlocks
    from gcs.runtime import internals

    assert internals.in_tested_range(vllm.__version__, internals.TESTED_VLLM), vllm.__version__
    [(wrapped, expected)] = llm.apply_model(lambda m: internals.wrap_cpu_linears(m, RowBlocks, RowBlocks))
    assert wrapped == expected >= 30 * 4 + 1, (wrapped, expected)  # SmolLM2-135M: 30 layers x 4 + the LM head
    assert llm.apply_model(lambda m: all(isinstance(x.cpu_linear, RowBlocks) for x in m.modules()
                                         if hasattr(x, "cpu_linear")))


@pytest.mark.slow
@pytest.mark.parametrize("method", ["gcs", "gcswr", "ctx"])
def test_identical_prompts_with_one_seed_give_identical_responses(llm, model, method):
    prompts = [prompt_ids(model, PARAPHRASES[0])] * 3
    outputs = token_ids(llm.generate(prompts, sampling_params(method, seed=3, temperature=1.0, max_tokens=24),
                                     use_tqdm=False))
    assert outputs[0] == outputs[1] == outputs[2] and len(outputs[0]) > 3


@pytest.mark.slow
def test_independent_sampling_differs_between_streams_and_repeats_within_one(llm, model):
    prompt = prompt_ids(model, PARAPHRASES[0])
    params = [sampling_params("is", seed=s, stream=stream, temperature=1.0, max_tokens=24)
              for s in range(3) for stream in (1, 2, 1)]
    outputs = token_ids(llm.generate([prompt] * len(params), params, use_tqdm=False))
    triples = [outputs[i : i + 3] for i in range(0, len(outputs), 3)]
    assert all(a == c for a, _, c in triples)  # same seed and stream: the same draws
    assert any(a != b for a, b, _ in triples)  # another stream: independent draws


@pytest.mark.slow
@pytest.mark.parametrize("method", ["gcs", "gcswr"])
def test_noise_is_keyed_by_output_index_not_absolute_position(llm, model, method):
    """Two requests with one seed and prompts of different token lengths: every draw the plugin made
    (watched through ``observe``) is what gcs's sampler draws from the same warped logits when it is
    keyed by the output index 0, 1, 2, ... alone; noise keyed by absolute position would not be."""
    prompts = [prompt_ids(model, "Hi"), prompt_ids(model, "Please tell me, at some length, why the sky is blue.")]
    lengths = [len(p["prompt_token_ids"]) for p in prompts]
    assert lengths[0] != lengths[1]
    params = sampling_params(method, seed=11, temperature=1.5, max_tokens=16, ignore_eos=True)
    with observe() as records:
        outputs = token_ids(llm.generate(prompts, [params, params.clone()], use_tqdm=False))
    assert len(records) == 32
    by_request = [records[i::2] for i in range(2)]  # one step draws both rows, in slot order
    for output, draws in zip(outputs, by_request, strict=True):
        assert [index for _, _, index, _, _ in draws] == list(range(16))  # output indices, not positions
        sampler = make_sampler(method, seed=[11])
        replayed = [int(sampler.sample(warped[None])[0]) for _, _, _, warped, _ in draws]
        assert replayed == [token for *_, token in draws] == output
    # under position-keyed noise the second prompt's draws would use index + (length difference)
    shifted = make_sampler(method, seed=[11]).begin(1, len(by_request[1][0][3]), steps=torch.tensor([lengths[1]]))
    if method == "gcs":
        assert [int(shifted.sample(d[3][None])[0]) for d in by_request[1]] != outputs[1]


def decision_margin(method: str, sampler, logits: torch.Tensor) -> float:
    """How far the sampler's next decision on ``logits`` [vocab] is from flipping, in units that bound the effect
    of logit errors: GCS and GCSwR, the gap between the two best scores (log-noise minus log-probability);
    IS, the distance of its uniform from the nearest edge of the chosen token's CDF interval."""
    log_p = torch.log_softmax(logits.double(), dim=-1)
    if method == "is":
        u = float(sampler.peek()[0])
        cdf = log_p.exp().cumsum(0)
        k = int(torch.searchsorted(cdf, torch.tensor([u], dtype=torch.float64)))
        return min(u - (float(cdf[k - 1]) if k else 0.0), float(cdf[k]) - u)
    scores = sampler.peek()[0].double().log() - log_p
    two = scores.topk(2, largest=False).values
    return float(two[1] - two[0])


@pytest.mark.slow
def test_vllm_tokens_are_the_transformers_path_s_samples():
    """Requests on vLLM (their draws and warped logits watched through ``observe``; a seed per request tells
    them apart) against gcs's sampler on the transformers path's logits for the same tokens (``forced_rows``).
    Where the two engines' logits (and, for GCSwR, the recycled states they lead to) differ by less than the
    decision's margin, the sampler must pick vLLM's token: a bound from the measured differences, not a
    rate, so a near-tie never fails it. A row is followed up to its first step too close to call. fp32 in both
    engines (an engine of its own, alone: the default dtype's is shut down first and this one at the end, so that a
    worker never holds both): their bf16 kernels round differently, which would leave few steps to check."""
    gcs.engines.vllm.close_engines()
    try:
        agreement_of_the_engines()
    finally:
        gcs.engines.vllm.close_engines()


def agreement_of_the_engines() -> None:
    model = load_model(dtype=torch.float32)
    settings = SamplingSettings(temperature=1.0, max_new_tokens=24)
    rows = [Row(prompt, method, seed) for seed, (method, prompt) in
            enumerate((m, p) for m in gcs.METHODS for p in PARAPHRASES)]
    batch = Batch(rows, model, settings, engine="vllm", record_excess=True)
    with observe() as records:
        tokens = run_batch(batch)
    forced = []
    for i, row in enumerate(rows):
        response, finished = batch.until_stop(tokens[i].tolist())
        forced.append((row.prompt, response, finished))
    ours_all = forced_rows(forced, model, settings)
    excess = batch.excess_record.means([len(response) for _, response, _ in forced])
    decided = 0
    for i, row in enumerate(rows):
        prompt, response, finished = forced[i]
        steps = [*response, int(tokens[i, len(response)])] if finished else response
        mine = sorted((r for r in records if r[0] == row.method and r[1] == row.seed), key=lambda r: r[2])
        theirs, ours = torch.stack([r[3] for r in mine])[: len(steps)].float(), ours_all[i]
        assert theirs.shape == ours.shape and [r[4] for r in mine][: len(steps)] == steps
        drift = (theirs - ours).abs().nan_to_num(0.0).amax(dim=-1)  # equal -inf entries give nan
        assert drift.max() < 1e-2, "the engines' fp32 logits should agree closely"
        if response:  # the plugin's record (gcs.vllm.excess): -log p(y) - H(p) of its own logits (T = 1: unwarped)
            log_p = torch.log_softmax(theirs[: len(response)].double(), dim=-1)
            terms = -log_p[torch.arange(len(response)), response] + (log_p.exp() * log_p).sum(dim=-1)
            assert excess[i] == pytest.approx(float(terms.mean()), abs=3e-4)  # float32: ~1e-4 a token at most
        ours_sampler, theirs_sampler = (make_sampler(row.method, seed=[row.seed], streams=[batch.streams[i]])
                                        .begin(1, ours.shape[1]) for _ in range(2))
        for step, token in enumerate(steps):
            state_gap = 0.0
            if row.method == "gcswr" and step:  # the states the two engines' logits led to
                state_gap = float((ours_sampler.peek().log() - theirs_sampler.peek().log()).abs().max())
            bound = {"gcswr": 2 * (state_gap + 2 * float(drift[step])), "gcs": 2 * float(drift[step]),
                     "is": math.expm1(2 * float(drift[step]))}[row.method]
            if decision_margin(row.method, ours_sampler, ours[step]) <= bound:
                break
            assert int(ours_sampler.sample(ours[step][None])[0]) == token, (row, step)
            assert int(theirs_sampler.sample(theirs[step][None])[0]) == token  # the plugin is gcs's sampler
            decided += 1
    assert decided >= 80  # of 9 rows x up to 25 steps (about 150 measured): most decisions are checked


@pytest.mark.slow
def test_the_engine_records_the_answers_excess_surprise_instead_of_a_second_pass(model, caplog):
    """At the default dtype, in process (the CPU default): a frame's "excess_surprise" comes from the plugin's records,
    streamed or not, with the tokens drawn without recording and nothing left in the store, also after a stopped
    run; a run in rounds flags degenerate answers with no pass of the model ("surprise" never timed); in float32 the
    records also equal a transformers pass over the tokens drawn (the test above checks them against vLLM's own
    logits, in float32)."""
    settings = SamplingSettings(methods=["is", "gcswr", "ctx"], seeds=[0, 1], temperature=1.3, max_new_tokens=10)
    plain = gcs.compare(PARAPHRASES, settings=settings, model=model, engine="vllm")
    stored = len(RECORDS)
    for streaming in (False, True):
        *_, recorded = compare_with(PARAPHRASES, settings, model, engine="vllm", streaming=streaming,
                                    record_excess=True)
        assert recorded["token_ids"].tolist() == plain["token_ids"].tolist()
        answered = recorded["n_tokens"] > 0
        assert recorded["excess_surprise"][answered].notna().all() and len(RECORDS) == stored
        if next(model.model.parameters()).dtype == torch.float32:
            passed = gcs.excess_surprise(list(recorded["prompt"]), list(recorded["token_ids"]), model=model)
            np.testing.assert_allclose(recorded["excess_surprise"], passed, atol=5e-3)
    stop = threading.Event()
    frames = compare_with(PARAPHRASES, settings, model, engine="vllm", streaming=True, record_excess=True, stop=stop)
    next(frames)
    stop.set()
    with pytest.raises(gcs.Cancelled):
        list(frames)
    assert len(RECORDS) == stored
    with caplog.at_level(logging.DEBUG, logger="gcs.timing"):
        first = next(gcs.compare_rounds(PARAPHRASES, seeds=4, rounds=[2, 2], temperature=2.0, max_new_tokens=16,
                                        model=model, engine="vllm"))
    stages = [record["stage"] for record in map(parse, caplog.messages) if record is not None]
    assert "generate" in stages and "surprise" not in stages
    assert len(first.excess) == len(first.frame) and degenerate(first.excess)
    assert gcs.verdict(first)[0].startswith("These answers are not language the model stands behind")


@pytest.mark.slow
def test_at_the_default_dtype_a_row_gets_the_same_tokens_alone_beside_2_and_beside_47_rows(embedded_model):
    """The same seed gives the same answer on the vLLM engine (row-blocked linear kernels, each sequence's
    attention on its own), whatever else vLLM batches with it, and whether its prompt was cached or not."""
    settings = SamplingSettings(temperature=1.0, max_new_tokens=24)
    mine = [Row(PARAPHRASES[2], method, seed) for method in gcs.METHODS for seed in (3, 11)]
    alone = [run_batch(Batch([row], embedded_model, settings, engine="vllm"))[0] for row in mine]
    beside_two = run_batch(Batch([mine[0], Row("Hi", "gcswr", 3), Row(PARAPHRASES[0], "is", 5)], embedded_model,
                                 settings, engine="vllm"))
    others = ["Hi", "Explain photosynthesis to a ten year old child, with an example.", "What is DNA?",
              PARAPHRASES[1]]
    crowd = [Row(others[i % 4], gcs.METHODS[i % 3], i) for i in range(42)]
    beside_47 = run_batch(Batch(crowd[:20] + mine + crowd[20:], embedded_model, settings, engine="vllm"))
    assert torch.equal(beside_two[0, : len(alone[0])], alone[0][: beside_two.shape[1]])
    for i, tokens in enumerate(alone):
        assert torch.equal(beside_47[20 + i, : len(tokens)], tokens[: beside_47.shape[1]]), mine[i]


@pytest.mark.slow
def test_long_prompts_get_the_same_tokens_whether_prefilled_in_chunks_or_from_the_prefix_cache(embedded_model):
    """16 prompts of about 300 tokens sharing a long beginning: together they exceed vLLM's 4,096-token step
    budget (prompts are prefilled in chunks over several steps) and hit its prefix cache (128-token blocks);
    alone, the first is prefilled whole and cold. Same tokens."""
    shared = "Read this list. " + " ".join(f"Box {i} is {('red', 'blue', 'green')[i % 3]}." for i in range(45))
    rows = [Row(f"{shared} Question {k}: which boxes are blue?", gcs.METHODS[k % 3], k) for k in range(16)]
    settings = SamplingSettings(temperature=1.0, max_new_tokens=12)
    assert len(embedded_model.tokenizer(rows[0].prompt)["input_ids"]) > 256
    alone = [run_batch(Batch([row], embedded_model, settings, engine="vllm"))[0] for row in rows[:2]]
    together = run_batch(Batch(rows, embedded_model, settings, engine="vllm"))
    for i, tokens in enumerate(alone):
        assert torch.equal(together[i, : len(tokens)], tokens[: together.shape[1]]), rows[i]


@pytest.mark.slow
def test_a_mixed_batch_gives_each_request_the_tokens_it_gets_alone(llm, model):
    """More requests than vLLM's slots, different lengths, with and without gcs arguments: rows are
    moved and slots reused, and every request still gets the tokens it gets on its own."""
    prompts, params = [], []
    for i in range(CPU_MAX_NUM_SEQS + 8):
        prompts.append(prompt_ids(model, PARAPHRASES[i % 3]))
        if i % 4 == 3:  # plain greedy requests, untouched by gcs
            params.append(SamplingParams(temperature=0.0, max_tokens=4 + i % 9))
        else:
            params.append(sampling_params(("is", "gcs", "gcswr")[i % 3], seed=i % 5, temperature=1.0,
                                          top_p=(1.0, 0.9)[i % 2], max_tokens=4 + i % 9))
    together = token_ids(llm.generate(prompts, params, use_tqdm=False))
    alone = [token_ids(llm.generate([p], [q.clone()], use_tqdm=False))[0] for p, q in zip(prompts, params, strict=True)]
    differing = [i for i, (a, b) in enumerate(zip(together, alone, strict=True)) if a != b]
    assert not differing, f"requests {differing} got other tokens in the mixed batch"


@pytest.mark.parametrize("extra, message", [
    ({"gcs_method": "nope"}, "unknown method"),
    ({"gcs_method": "gcs", "gcs_seed": -5}, "gcs_seed"),
    ({"gcs_method": "gcs", "gcs_mode": 1}, "unknown gcs argument"),
])
@pytest.mark.slow
def test_bad_arguments_are_refused_and_the_engine_keeps_serving(llm, model, extra, message):
    """vLLM turns the plugin's ValueError into its VLLMValidationError (an HTTP 400 on the server)."""
    prompt = prompt_ids(model, PARAPHRASES[0])
    with pytest.raises(VLLMValidationError, match=message):
        llm.generate([prompt], SamplingParams(max_tokens=4, extra_args=extra), use_tqdm=False)
    with pytest.raises(VLLMValidationError, match="repetition_penalty"):
        llm.generate([prompt], SamplingParams(max_tokens=4, repetition_penalty=1.3, extra_args={"gcs_method": "gcs"}),
                     use_tqdm=False)
    ok = token_ids(llm.generate([prompt], sampling_params("gcswr", seed=0, max_tokens=4), use_tqdm=False))
    assert len(ok[0]) >= 1


@pytest.mark.slow
def test_the_library_and_the_cli_run_on_the_vllm_engine(model, capsys):
    frame = gcs.compare(PARAPHRASES[:2], methods=["gcs", "gcswr"], seeds=[0, 1], max_new_tokens=12, model=model,
                        engine="vllm")
    assert len(frame) == 8 and frame["response"].str.len().gt(0).all()
    assert gcs.generate(PARAPHRASES[:2], method="gcswr", seed=0, max_new_tokens=12, model=model, engine="vllm") == list(
        frame[(frame.method == "gcswr") & (frame.seed == 0)]["response"])
    streamed = list(gcs.stream(PARAPHRASES[:1], method="is", max_new_tokens=8, model=model, engine="vllm"))
    assert len(streamed) > 2  # one item per engine step, then the final responses
    assert all(streamed[-1][0].startswith(partial[0]) for partial in streamed)
    assert streamed[-1] == gcs.generate(PARAPHRASES[:1], method="is", max_new_tokens=8, model=model, engine="vllm")
    with pytest.raises(ValueError, match="ensembling is not available on the vLLM engine"):
        gcs.compare(PARAPHRASES[:1], max_new_tokens=4, model=model, ensemble=[["Why does the sky look blue?"]],
                    engine="vllm")
    with pytest.raises(ValueError, match="unknown engine"):
        gcs.generate(PARAPHRASES[:1], model=model, engine="tensorrt")
    assert cli_main(["compare", *PARAPHRASES[:2], "--methods", "gcswr", "--max-new-tokens", "8",
                     "--engine", "vllm"]) == 0
    assert "== gcswr" in capsys.readouterr().out


@pytest.mark.slow
def test_a_sweep_runs_on_the_vllm_engine(model):
    frame = gcs.sweep([PARAPHRASES[:2]], temperatures=[0.0, 1.0], methods=["is", "gcswr"], seeds=2,
                      metrics=["jaccard"], model=model, max_new_tokens=8, engine="vllm")
    assert len(frame) == 2 * 2 * 2 and frame["consistency"].between(0, 1).all()
    greedy = frame[frame.temperature == 0.0]
    assert greedy["responses"].map(tuple).nunique() == 1  # temperature 0: every method and seed is greedy


@pytest.mark.slow
def test_the_cli_sweeps_on_the_vllm_engine(model, tmp_path):
    out = tmp_path / "run"
    argv = ["run", "--data", "general", "--limit", "1", "--seeds", "2", "--temperatures", "1", "--methods", "is,gcswr",
            "--metrics", "jaccard", "--max-new-tokens", "8", "--out", str(out), "--quiet", "--engine", "vllm"]
    assert cli_main(argv) == 0
    assert (out / "results.csv").read_text().count("\n") == 1 + 2 * 2  # header + methods x seeds
