"""gcs inside real vLLM (its CPU build, V1 runner) with the embedded SmolLM2 model.

One engine for the module (vLLM starts in about a minute here). The processor's
bookkeeping under every kind of batch change is tested without an engine in
tests/test_vllm_plugin.py; here the real engine shows the coupling, the agreement with the
transformers path, the mixed-batch behaviour and the errors.
"""

from __future__ import annotations

import pytest
import torch
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError

import gcs
from gcs.batch import Batch, Row
from gcs.cli import main as cli_main
from gcs.models import load_model
from gcs.processor import make_warpers
from gcs.prompts import format_prompt
from gcs.samplers import make_sampler
from gcs.settings import SamplingSettings
from gcs.vllm import CPU_MAX_NUM_SEQS, engine, observe, plugin_registered, run_batch, sampling_params

PARAPHRASES = ["Why is the sky blue?", "What makes the sky look blue?", "Explain why the sky is blue during the day."]


@pytest.fixture(scope="module")
def model():
    return load_model(dtype=torch.float32)  # fp32 in both engines: the replay compares their logits


@pytest.fixture(scope="module")
def llm(model):
    llm, _ = engine(model)
    return llm


def prompt_ids(model, question: str) -> dict:
    text = format_prompt(question, model.tokenizer, model.is_chat)
    return {"prompt_token_ids": model.tokenizer(text, add_special_tokens=not model.is_chat)["input_ids"]}


def token_ids(outputs) -> list[list[int]]:
    return [list(o.outputs[0].token_ids) for o in outputs]


def test_the_plugin_is_registered_through_the_entry_point():
    assert plugin_registered()


@pytest.mark.parametrize("method", ["gcs", "gcswr"])
def test_identical_prompts_with_one_seed_give_identical_responses(llm, model, method):
    prompts = [prompt_ids(model, PARAPHRASES[0])] * 3
    outputs = token_ids(llm.generate(prompts, sampling_params(method, seed=3, temperature=1.0, max_tokens=24),
                                     use_tqdm=False))
    assert outputs[0] == outputs[1] == outputs[2] and len(outputs[0]) > 3


def test_independent_sampling_differs_between_streams_and_repeats_within_one(llm, model):
    prompt = prompt_ids(model, PARAPHRASES[0])
    params = [sampling_params("is", seed=s, stream=stream, temperature=1.0, max_tokens=24)
              for s in range(3) for stream in (1, 2, 1)]
    outputs = token_ids(llm.generate([prompt] * len(params), params, use_tqdm=False))
    triples = [outputs[i : i + 3] for i in range(0, len(outputs), 3)]
    assert all(a == c for a, _, c in triples)  # same seed and stream: the same draws
    assert any(a != b for a, b, _ in triples)  # another stream: independent draws


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
    for output, draws in zip(outputs, by_request):
        assert [index for _, _, index, _, _ in draws] == list(range(16))  # output indices, not positions
        sampler = make_sampler(method, seed=[11])
        replayed = [int(sampler.sample(warped[None])[0]) for _, _, _, warped, _ in draws]
        assert replayed == [token for *_, token in draws] == output
    # under position-keyed noise the second prompt's draws would use index + (length difference)
    shifted = make_sampler(method, seed=[11]).begin(1, len(by_request[1][0][3]), steps=torch.tensor([lengths[1]]))
    if method == "gcs":
        assert [int(shifted.sample(d[3][None])[0]) for d in by_request[1]] != outputs[1]


def replay_match(model, batch: Batch, tokens: torch.Tensor) -> tuple[int, int]:
    """Teacher-force vLLM's tokens through the transformers model and gcs's sampler: matched positions
    up to each row's first divergence, and all positions."""
    matched = total = 0
    warpers = make_warpers(*batch.settings.warping)
    mask = batch.inputs["attention_mask"].bool()
    for i, (ids, keep) in enumerate(zip(batch.inputs["input_ids"], mask)):
        response = batch._response(tokens[i].tolist())[0]
        response = tokens[i, : len(response) + (len(response) < tokens.shape[1])].tolist()  # with its stop token
        sequence = torch.cat([ids[keep], torch.tensor(response, dtype=torch.long)])[None]
        with torch.inference_mode():
            logits = model.model(sequence).logits[0, int(keep.sum()) - 1 : -1].float()
        sampler = make_sampler(batch.methods[i], seed=[batch.seeds[i]], streams=[batch.streams[i]])
        total += len(response)
        for step, token in enumerate(response):
            if int(sampler.sample(warpers(None, logits[step][None]))[0]) != token:
                break
            matched += 1
    return matched, total


def test_vllm_tokens_are_the_transformers_path_s_samples(model):
    settings = SamplingSettings(methods=("is", "gcs", "gcswr"), seeds=(0, 1), temperature=1.0, max_new_tokens=32)
    rows = [Row(p, m, s) for m in settings.methods for s in settings.seeds for p in PARAPHRASES]
    batch = Batch(rows, model, settings, engine="vllm")
    matched, total = replay_match(model, batch, run_batch(batch))
    print(f"vLLM vs transformers replay: {matched}/{total} positions match before the first divergence "
          f"({matched / total:.1%})")
    assert total > 100 and matched / total >= 0.95


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
    alone = [token_ids(llm.generate([p], [q.clone()], use_tqdm=False))[0] for p, q in zip(prompts, params)]
    differing = [i for i, (a, b) in enumerate(zip(together, alone)) if a != b]
    assert not differing, f"requests {differing} got other tokens in the mixed batch"


@pytest.mark.parametrize("extra, message", [
    ({"gcs_method": "nope"}, "unknown method"),
    ({"gcs_method": "gcs", "gcs_seed": -5}, "gcs_seed"),
    ({"gcs_method": "gcs", "gcs_mode": 1}, "unknown gcs argument"),
])
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


def test_the_library_and_the_cli_run_on_the_vllm_engine(model, capsys):
    frame = gcs.compare(PARAPHRASES[:2], methods=["gcs", "gcswr"], seeds=[0, 1], max_new_tokens=12, model=model,
                        engine="vllm")
    assert len(frame) == 8 and frame["response"].str.len().gt(0).all()
    assert gcs.generate(PARAPHRASES[:2], "gcswr", seed=0, max_new_tokens=12, model=model, engine="vllm") == list(
        frame[(frame.method == "gcswr") & (frame.seed == 0)]["response"])
    streamed = list(gcs.stream(PARAPHRASES[:1], "is", max_new_tokens=8, model=model, engine="vllm"))
    assert len(streamed) > 2  # one item per engine step, then the final responses
    assert all(streamed[-1][0].startswith(partial[0]) for partial in streamed)
    assert streamed[-1] == gcs.generate(PARAPHRASES[:1], "is", max_new_tokens=8, model=model, engine="vllm")
    with pytest.raises(ValueError, match="ensembling is not available on the vLLM engine"):
        gcs.compare(PARAPHRASES[:1], max_new_tokens=4, model=model, ensemble=[["Why does the sky look blue?"]],
                    engine="vllm")
    with pytest.raises(ValueError, match="unknown engine"):
        gcs.generate(PARAPHRASES[:1], model=model, engine="tensorrt")
    assert cli_main(["compare", *PARAPHRASES[:2], "--methods", "gcswr", "--max-new-tokens", "8", "--engine", "vllm"]) == 0
    assert "== gcswr" in capsys.readouterr().out


def test_a_sweep_runs_on_the_vllm_engine(model):
    frame = gcs.sweep([PARAPHRASES[:2]], temperatures=[0.0, 1.0], methods=["is", "gcswr"], seeds=2,
                      metrics=["jaccard"], model=model, max_new_tokens=8, engine="vllm")
    assert len(frame) == 2 * 2 * 2 and frame["consistency"].between(0, 1).all()
    greedy = frame[frame.temperature == 0.0]
    assert greedy["responses"].map(tuple).nunique() == 1  # temperature 0: every method and seed is greedy


def test_the_cli_sweeps_on_the_vllm_engine(model, tmp_path):
    out = tmp_path / "run"
    argv = ["run", "--data", "general", "--limit", "1", "--seeds", "2", "--temperatures", "1", "--methods", "is,gcswr",
            "--metrics", "jaccard", "--max-new-tokens", "8", "--out", str(out), "--quiet", "--engine", "vllm"]
    assert cli_main(argv) == 0
    assert (out / "results.csv").read_text().count("\n") == 1 + 2 * 2  # header + methods x seeds
