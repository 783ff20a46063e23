"""gcs.ab, gcs.ab_report, gcs.parting: shared luck for A/B.

The exact tests run on tiny random models with one word-level tokenizer (two seeds of weights play two versions of
a model). Statistical tests use fixed seeds and thresholds chosen before running: chi-square p > 1e-3 for each
arm's law against its own model's, |z| < 4.5 for the coupling against Theorem 1, a binomial tail above 1e-3 for
the share of null runs that claim anything. The embedded model checks the integration and the command line.
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import scipy.stats
import torch

import gcs
from conftest import P_VALUE_THRESHOLD, Z_THRESHOLD, chi_square_p, tiny_gcs_model, z_score
from gcs.engines.batch import stop_token_ids

VOCAB = 8  # ids 0-2 special (</s> = 1 ends an answer), w3..w7: short answers have few categories


def peaked(seed: int):
    """A tiny model whose next-token distributions are as uneven as a trained model's and depend on the context
    (at their initial scale the weights let a system message move the answers' law by 2 % at most; 16x, by 12 %)."""
    model = tiny_gcs_model(vocab_size=VOCAB, seed=seed)
    with torch.no_grad():
        for name, weight in model.model.named_parameters():
            weight.mul_(1 if "norm" in name else 4 if "lm_head" in name else 16)
    return model


@pytest.fixture(scope="module")
def old():
    return peaked(0)


@pytest.fixture(scope="module")
def new():
    return peaked(1)  # "the next version": other weights, the same tokenizer


def next_token(model, variant: gcs.Variant, prompt: str, prefix=()) -> np.ndarray:
    """The arm's next-token distribution (float64) after ``prefix``, computed by one plain forward pass."""
    text = gcs.format_prompt(variant.text(prompt), tokenizer=model.tokenizer, is_chat=model.is_chat, examples=(),
                             system=variant.system)
    ids = model.tokenizer(text, add_special_tokens=not model.is_chat)["input_ids"] + list(prefix)
    with torch.no_grad():
        logits = model.model(torch.tensor([ids])).logits[0, -1].double()
    return torch.softmax(logits / variant.temperature, dim=-1).numpy()


def answer_law(model, variant: gcs.Variant, prompt: str) -> dict[tuple, float]:
    """The law of the arm's two-token answers: (token ids before the stop token, finished) -> probability."""
    stops, law = set(stop_token_ids(model)), Counter()
    first = next_token(model, variant, prompt)
    for a, pa in enumerate(first):
        if a in stops:
            law[((), True)] += pa
            continue
        for b, pb in enumerate(next_token(model, variant, prompt, [a])):
            law[((a,), True) if b in stops else ((a, b), False)] += pa * pb
    return dict(law)


def law_p(answers: pd.DataFrame, slot: str, law: dict[tuple, float]) -> float:
    """Chi-square p of the arm's answers against ``law``, categories expected fewer than 5 times pooled."""
    seen = Counter(zip(map(tuple, answers[f"token_ids_{slot}"]), answers[f"finished_{slot}"], strict=True))
    assert set(seen) <= set(law), "an answer the law gives no probability"
    n = len(answers)
    big = sorted((c for c in law if law[c] * n >= 5), key=law.get)
    counts, probabilities = [seen[c] for c in big], [law[c] for c in big]
    rest = n - sum(counts), max(0.0, 1 - sum(probabilities))
    if rest[1] * n >= 5:
        counts, probabilities = [*counts, rest[0]], [*probabilities, rest[1]]
    else:  # too rare to be a category of its own: pooled with the rarest one
        counts[0], probabilities[0] = counts[0] + rest[0], probabilities[0] + rest[1]
    return chi_square_p(counts, probabilities)


@pytest.fixture(autouse=True)
def one_thread_for_tiny_models(request):
    """Torch on one thread for the tiny models' tests: their many small matrix products run up to 7x slower on two
    threads of a busy 2-core machine (the threads wait on each other). The embedded model's tests keep the default."""
    if "embedded_model" in request.fixturenames:
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


# -- A = B: the same answers, no difference, no claim ----------------------------------------------------------
@pytest.mark.parametrize("method", ["gcs", "gcswr"])
def test_equal_arms_answer_alike_on_every_seed_and_claim_nothing(old, method):
    a, b = gcs.Variant(old, name="today"), gcs.Variant(old, name="tomorrow")  # a change that changes nothing
    frame = gcs.ab(["w5 w6", "w7", "w3 w4 w5"], a, b, seeds=8, method=method, max_new_tokens=4,
                   metrics=["length", "contains:w5", "aligned"], scorer=lambda answer: answer.count("w6"))
    shared = frame[frame["method"] == method]
    assert len(shared) == 24 and shared["identical"].all() and shared["parts_at"].isna().all()
    assert (shared["answer_a"] == shared["answer_b"]).all()
    # runs of 3 tokens or more count (gcs.scoring.metrics)
    assert (shared["aligned"][shared["n_tokens_a"] >= 3] == 1).all()
    report = gcs.ab_report(frame)
    assert (report.effects["diff"] == 0).all() and not report.effects["beyond_noise"].any()
    assert list(report.effects["metric"]) == ["length", "contains:w5", "scorer"]
    assert sum("no difference, and no claim" in line for line in report.lines) == 3
    assert report.names == ("today", "tomorrow") and "tomorrow against today" in report.lines[0]
    control = frame[frame["method"] == "is"]
    assert not control["identical"].all()  # under IS each arm draws its own stream: the control is independent


def test_an_arm_with_the_defaults_answers_as_generate_does(old):
    """A row's answer does not depend on its batch, its partner arm, or whether it runs under gcs.ab."""
    frame = gcs.ab(["w5 w6", "w7"], gcs.Variant(old), gcs.Variant(old, temperature=0.5), seeds=[3, 9],
                   metrics=["length"], max_new_tokens=5)
    plain = gcs.compare(["w5 w6", "w7"], methods=["gcswr"], seeds=[3, 9], max_new_tokens=5, model=old)
    shared = frame[frame["method"] == "gcswr"]
    assert list(shared["token_ids_a"]) == list(plain["token_ids"])


# -- each arm's law is its own model's; the arms' first tokens couple as Theorem 1 says --------------------------
DRAWS = 10_000
PROMPT = "w5 w6"


@pytest.fixture(scope="module")
def law_run(old, new):
    a = gcs.Variant(old)
    b = gcs.Variant(new, system="w4 w5", template="{prompt} w6", temperature=0.8)  # every arm setting exercised
    threads = torch.get_num_threads()  # a module fixture runs before the autouse one: one thread here too
    torch.set_num_threads(1)
    try:
        frame = gcs.ab([PROMPT], a, b, seeds=DRAWS, method="gcswr", metrics=["length"], max_new_tokens=2,
                       batch_rows=DRAWS)
    finally:
        torch.set_num_threads(threads)
    return a, b, frame


@pytest.mark.parametrize("method", ["gcswr", "is"])
def test_each_arm_answers_with_its_own_model_s_law(old, new, law_run, method):
    a, b, frame = law_run
    answers = frame[frame["method"] == method]
    assert len(answers) == DRAWS
    law_a, law_b = answer_law(old, a, PROMPT), answer_law(new, b, PROMPT)
    assert law_p(answers, "a", law_a) > P_VALUE_THRESHOLD
    assert law_p(answers, "b", law_b) > P_VALUE_THRESHOLD
    # the test sees an arm that samples another law: the other arm's, or its own without the system message, the
    # template or the temperature
    for wrong in (law_a, answer_law(new, gcs.Variant(new, template="{prompt} w6", temperature=0.8), PROMPT),
                  answer_law(new, gcs.Variant(new, system="w4 w5", temperature=0.8), PROMPT),
                  answer_law(new, gcs.Variant(new, system="w4 w5", template="{prompt} w6"), PROMPT)):
        assert law_p(answers, "b", wrong) < 1e-6


@pytest.mark.parametrize("method, rule", [("gcswr", "gcs"), ("is", "is")])
def test_the_arms_first_tokens_agree_as_theorem_1_says_and_independently_under_is(old, new, law_run, method, rule):
    a, b, frame = law_run
    answers = frame[frame["method"] == method]
    end = stop_token_ids(old)[0]  # an empty answer's first token was the stop token
    first = {slot: [ids[0] if ids else end for ids in answers[f"token_ids_{slot}"]] for slot in "ab"}
    agree = int(sum(x == y for x, y in zip(first["a"], first["b"], strict=True)))
    p = gcs.agreement_probability(torch.tensor(next_token(old, a, PROMPT)), torch.tensor(next_token(new, b, PROMPT)),
                                  method=rule)
    assert abs(z_score(agree, DRAWS, float(p))) < Z_THRESHOLD, (agree, float(p))


# -- statistics: a real effect is found, with fewer seeds than IS needs; a null claims at most at the error rate --
def test_a_real_effect_is_found_and_shared_luck_narrows_it():
    """At a lower temperature the most likely token only gains: under shared noise B writes it whenever A does."""
    model = peaked(0)
    mode = int(next_token(model, gcs.Variant(model), "w5 w6").argmax())
    assert mode >= 3  # a word (w5 here, with probability 0.22), not a special token that writes no text
    frame = gcs.ab(["w5 w6"], gcs.Variant(model), gcs.Variant(model, temperature=0.3), seeds=32, method="gcswr",
                   metrics=[f"contains:w{mode}"], max_new_tokens=1)
    shared = frame[frame["method"] == "gcswr"]
    assert (shared[f"contains:w{mode}_b"] >= shared[f"contains:w{mode}_a"]).all()
    report = gcs.ab_report(frame)
    effect = report.effects.iloc[0]
    assert effect["diff"] > 0 and effect["beyond_noise"] and effect["is_seeds"] > 32
    assert "more often than A's" in report.lines[1] and "beyond noise" in report.lines[1]
    assert "it would need about" in report.lines[2]


def test_a_change_that_does_nothing_is_claimed_at_most_at_the_stated_rate(old):
    """Two equal arms answering independently (IS): 200 runs of 8 seeds, two scores; any claim counts."""
    runs, seeds = 200, 8
    frame = gcs.ab(["w5 w6", "w7"], gcs.Variant(old, name="x"), gcs.Variant(old, name="y"), seeds=runs * seeds,
                   method="is", control=False, metrics=["length", "contains:w5"], max_new_tokens=3,
                   batch_rows=runs * seeds * 2)
    assert not frame["identical"].all()
    claims = sum(gcs.ab_report(frame[frame["seed"] // seeds == run]).effects["beyond_noise"].any()
                 for run in range(runs))
    assert scipy.stats.binom.sf(claims - 1, runs, 0.05) > P_VALUE_THRESHOLD, claims


def test_the_report_reads_files_back_and_handles_one_seed():
    frame = pd.DataFrame({"prompt_index": [0, 1, 0, 1], "method": ["gcswr", "gcswr", "is", "is"], "seed": 5,
                          "identical": [True, False, False, False], "parts_at": [math.nan, 2.0, 0.0, 1.0],
                          "length_a": [3, 4, 3, 5], "length_b": [3, 6, 2, 2]})
    report = gcs.ab_report(frame)
    assert "one seed is an anecdote" in report.lines[1] and report.effects.iloc[0]["diff"] == 1.0
    assert "part at token 2 (median)" in report.lines[0]


@pytest.mark.parametrize("identical, seeds", [(False, 8), (True, 8), (False, 3)])
def test_a_share_at_its_bound_on_every_seed_has_an_exact_interval_not_a_certainty(identical, seeds):
    """0 identical pairs of 32 read "share 0.00 (95 % CI 0.00 to 0.00)": a t interval of values with no spread. Every
    seed at one end of the range gets Clopper-Pearson's bound for 0 of n seeds: P(all n at 0) is alpha / 2 there."""
    frame = pd.DataFrame({"prompt_index": [0, 1, 2, 3] * seeds, "method": "gcswr", "seed": np.repeat(range(seeds), 4),
                          "identical": identical, "length_a": 3, "length_b": 4})
    pair = gcs.ab_report(frame).pairs.set_index("score").loc["identical"]
    far = 1 - (0.05 / 2) ** (1 / seeds)  # (1 - far) ** seeds == 0.025
    assert (pair["low"], pair["high"]) == pytest.approx((1 - far, 1.0) if identical else (0.0, far))
    assert (1 - far) ** seeds == pytest.approx(0.025) and far > 0.3
    share = "1.00" if identical else "0.00"
    assert f"identical answers: share {share} (95 % CI {pair['low']:.2f} to {pair['high']:.2f})" in \
        " ".join(gcs.ab_report(frame).lines)


def test_the_seeds_is_needs_come_with_their_f_interval():
    # 10 seeds: shared luck's differences spread 1 per seed, the IS control's 3 (normal), over 2 prompts each
    rng = np.random.default_rng(1)
    seeds, spread = np.repeat(np.arange(10), 2), {"gcs": 1.0, "is": 3.0}
    frame = pd.concat([pd.DataFrame({"prompt_index": [0, 1] * 10, "method": method, "seed": seeds, "identical": False,
                                     "length_a": 10.0, "length_b": 10.0 + rng.normal(0, s, 20)})
                       for method, s in spread.items()], ignore_index=True)
    report = gcs.ab_report(frame, confidence=0.9)
    effect = report.effects.iloc[0]
    ratio = (effect["control_sd"] / effect["sd"]) ** 2
    f_low, f_high = scipy.stats.f.ppf([0.05, 0.95], 9, 9)
    assert effect["is_seeds"] == pytest.approx(10 * ratio)
    assert (effect["is_seeds_low"], effect["is_seeds_high"]) == pytest.approx((10 * ratio / f_high, 10 * ratio / f_low))
    assert f"90 % F interval {effect['is_seeds_low']:.0f} to {effect['is_seeds_high']:.0f}" in report.lines[2]


def differences_frame(shared: list[float], control: list[float], label: str = "length") -> pd.DataFrame:
    """An A/B frame of one prompt whose per-seed differences B - A are ``shared`` (GCSwR) and ``control`` (IS)."""
    return pd.DataFrame([{"prompt_index": 0, "method": method, "seed": seed, "identical": d == 0,
                          f"{label}_a": 20.0, f"{label}_b": 20.0 + d}
                         for method, differences in (("gcswr", shared), ("is", control))
                         for seed, d in enumerate(differences)])


def test_an_interval_s_printed_ends_agree_with_its_verdict():
    """Within noise, 0 itself is not rejected: an end that bisection left at -7e-11 prints as 0.0, never "-0.0" (a
    reader sees an interval that excludes 0 beside "within noise"). Beyond noise, ends near 0 get more decimals
    rather than print as 0.0."""
    within = gcs.ab_report(differences_frame([-12, -6] + [0] * 8, [3, -3, 2, -2, 1, -1, 0, 4, 0, 0]))
    effect = within.effects.iloc[0]
    assert not effect["beyond_noise"] and -1e-9 < effect["high"] < 0  # the case as the sign-flip interval gives it
    assert "(95 % CI -4.5 to 0.0 tokens): within noise." in within.lines[1], within.lines[1]
    tiny = [0.0003, 0.0004, 0.0005, 0.0006, 0.0004, 0.0005, 0.0003, 0.0006]
    beyond = gcs.ab_report(differences_frame(tiny, tiny, label="contains:x"))
    assert beyond.effects.iloc[0]["beyond_noise"]
    interval = re.search(r"95 % CI (\S+) to (\S+) points\): beyond noise", beyond.lines[1])
    assert interval and float(interval[1]) > 0 and float(interval[2]) > 0, beyond.lines[1]


def test_the_report_says_plainly_when_shared_luck_saved_nothing():
    """Shared luck's differences spread more than the control's: no "would need about 1 seeds" (or 0), the words
    say it saved nothing, with the F interval of the seeds the control needs."""
    report = gcs.ab_report(differences_frame([-12, -6] + [0] * 8, [3, -3, 2, -2, 1, -1, 0, 4, 0, 0]))
    saving = report.lines[2]
    assert report.effects.iloc[0]["is_seeds"] < 10
    assert saving.startswith("length: shared luck saved nothing here") and "would need about" not in saving, saving
    assert "would have been as precise with these 10 seeds" in saving and "95 % F interval 1 to " in saving

# -- why they parted: the parting race is gcs.trace's ---------------------------------------------------------
@pytest.mark.parametrize("method", ["gcs", "gcswr"])
def test_the_parting_token_and_its_probabilities_are_gcs_trace_s(old, new, method):
    a, b = gcs.Variant(old), gcs.Variant(new, system="w4", temperature=0.9)
    frame = gcs.ab(["w5 w6", "w7"], a, b, seeds=6, method=method, metrics=["length"], max_new_tokens=6, control=False)
    row = frame[~frame["identical"]].iloc[0]
    why = gcs.parting(a, b, row["prompt"], seed=int(row["seed"]), method=method, max_new_tokens=6)
    k = why.position
    assert k == row["parts_at"] and why.names == ("A", "B")
    stop = stop_token_ids(old)[0]
    ends = [list(row[f"token_ids_{s}"]) + ([stop] if row[f"finished_{s}"] else []) for s in "ab"]
    assert why.tokens == (ends[0][k], ends[1][k]) and ends[0][:k] == ends[1][:k]
    for arm, (variant, model) in enumerate(((a, old), (b, new))):
        traced = gcs.trace([variant.text(row["prompt"])], method=method, seed=int(row["seed"]),
                           temperature=variant.temperature, max_new_tokens=k + 1, model=model, system=variant.system,
                           watch=list(why.tokens))
        assert list(traced.token_ids[0][:k]) == ends[arm][:k]  # the trace is the run ab made
        step = traced.steps[k][0]
        assert step.winner == why.tokens[arm] and step.winner == why.steps[arm].winner
        for token in why.tokens:
            mine = next(c for c in step.candidates if c.token_id == token)
            assert why.candidate(arm, token) == mine  # probability, noise, arrival: the same numbers
    table = why.frame()
    assert len(table) == 4 and table["won"].sum() == 2
    b_wins = why.candidate(1, why.tokens[1])
    assert "rose from" in why.sentence or "fell from" in why.sentence or "stayed from" in why.sentence
    assert f"{b_wins.probability:.2f}" in why.sentence and f"{b_wins.arrival:.3g}" in why.sentence
    identical = frame[frame["identical"]]
    if len(identical):
        same = identical.iloc[0]
        assert gcs.parting(a, b, same["prompt"], seed=int(same["seed"]), method=method, max_new_tokens=6) is None


def test_parting_refuses_independent_sampling(old):
    with pytest.raises(ValueError, match="under IS they share nothing"):
        gcs.parting(gcs.Variant(old), gcs.Variant(old, temperature=0.5), "w5", seed=0, method="is")


# -- bad input: clear errors naming the problem, before any answer is generated --------------------------------
@pytest.mark.parametrize("kwargs, message", [
    (dict(template="{question}"), r"exactly once and no other field, got '\{question\}'"),
    (dict(template="{prompt} and {prompt}"), "exactly once"),
    (dict(template="{prompt"), "not a valid str.format template"),
    (dict(template="{prompt!r}"), "exactly once"),
    (dict(temperature=-1), "temperature must be a finite number"),
    (dict(top_p=1.5), "top_p must be None or a number in"),
    (dict(dtype="int8"), "dtype must be one of"),
    (dict(system="  "), "system must be None or a non-blank string"),
    (dict(model=""), "model must be a gcs.Model"),
])
def test_bad_variants_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gcs.Variant(**kwargs)


@pytest.mark.parametrize("kwargs, message", [
    (dict(metrics=["regex:(unclosed"]), r"'\(unclosed' is not a valid regular expression"),
    (dict(metrics=["contains:"]), "names no contains argument"),
    (dict(metrics=["e5_to: "]), "names no reference answer"),
    (dict(metrics=["bleu"]), "unknown A/B metric 'bleu'"),
    (dict(metrics=["length:3"]), "length takes no argument"),
    (dict(metrics=[]), "at least one score"),
    (dict(scorer="length"), "scorer must be a function"),
    (dict(method="beam"), "unknown method 'beam'"),
    (dict(seeds=[]), "seeds must not be empty"),
    (dict(max_new_tokens=0), "max_new_tokens"),
    (dict(control="yes"), "control must be True or False"),
    (dict(prompts=["w5", "w6", "w5"]), r"prompts\[2\] repeats prompts\[0\]"),
])
def test_bad_arguments_are_refused_before_any_work(old, kwargs, message):
    arguments = {**dict(prompts=["w5"], a=gcs.Variant(old), b=gcs.Variant(old, temperature=0.5), seeds=2,
                        max_new_tokens=2), **kwargs}
    with pytest.raises(ValueError, match=message):
        gcs.ab(**arguments)


def test_variants_with_other_vocabularies_are_refused(old):
    other = tiny_gcs_model(vocab_size=16, seed=2)
    with pytest.raises(ValueError, match=r"'tiny-0' \(8 tokens\) and 'tiny-2' \(16 tokens\) have different vocab"):
        gcs.ab(["w5"], gcs.Variant(old), gcs.Variant(other), seeds=2)


def test_names_a_dtype_and_a_scorer_that_fails_are_refused_clearly(old):
    with pytest.raises(ValueError, match="need different names"):
        gcs.ab(["w5"], gcs.Variant(old, name="v"), gcs.Variant(old, name="v", temperature=0.5), seeds=2)
    with pytest.raises(ValueError, match="asks to convert the loaded model 'tiny-0'"):
        gcs.ab(["w5"], gcs.Variant(old), gcs.Variant(old, dtype="bfloat16"), seeds=2)
    with pytest.raises(ValueError, match=r"scorer returned nan for A's answer to prompt 0 under seed 0 \(gcswr\)"):
        gcs.ab(["w5"], gcs.Variant(old), gcs.Variant(old, temperature=0.5), seeds=2, max_new_tokens=2,
               metrics=["length"], scorer=lambda answer: math.nan)


def test_a_chat_template_that_refuses_a_system_message_is_named():
    chat = tiny_gcs_model(vocab_size=VOCAB, seed=3)
    chat.tokenizer.chat_template = ("{% for m in messages %}{% if m['role'] == 'system' %}"
                                    "{{ raise_exception('System role not supported') }}{% endif %}"
                                    "{{ m['content'] }} {% endfor %}")
    with pytest.raises(ValueError, match=r"variant B: the chat template of 'tiny-3' refuses a system message \(System "
                                         r"role not supported\)"):
        gcs.ab(["w5"], gcs.Variant(chat), gcs.Variant(chat, system="w4"), seeds=2)


def test_the_built_in_scores_and_their_labels():
    from gcs.abtest.scores import check_scores

    def polite(answer):
        return float("please" in answer)

    arm, pair = check_scores("length,contains:Paris,regex:^[A-Z],e5_between", scorer=polite)
    assert [score.label for score in arm] == ["length", "contains:Paris", "regex:^[A-Z]", "scorer:polite"]
    assert pair == ["e5_between"] and check_scores(["length"], scorer=lambda a: 1.0)[0][1].label == "scorer"
    answers = ["Paris, please.", "in paris", "the Parisian way"]
    assert [list(score.of(answers, [4, 2, 3])) for score in arm] == [[4, 2, 3], [1, 1, 0], [1, 0, 0], [1, 0, 0]]


def test_a_score_asked_twice_is_tested_once():
    """Each score is one test of the verdict's family (Bonferroni shares the error among them): "contains:DNA" and
    "contains:dna" count the same answers (contains is case-insensitive) and were two tests; a regex's case is its
    own."""
    from gcs.abtest.scores import check_scores

    arm, _ = check_scores("contains:DNA, contains:dna, length, length, regex:DNA, regex:dna")
    assert [score.label for score in arm] == ["contains:DNA", "length", "regex:DNA", "regex:dna"]


def test_ab_leaves_the_caller_s_models_and_frames_alone(old):
    before = {name: p.detach().clone() for name, p in old.model.named_parameters()}
    frame = gcs.ab(["w5"], gcs.Variant(old), gcs.Variant(old, temperature=0.5), seeds=3, max_new_tokens=2,
                   metrics=["length"])
    copy = frame.copy()
    gcs.ab_report(frame)
    pd.testing.assert_frame_equal(frame, copy)
    assert all(torch.equal(p, before[name]) for name, p in old.model.named_parameters())


# -- the embedded model: the integration, a dtype change, the command line -------------------------------------
@pytest.mark.slow
def test_ab_report_and_parting_on_the_embedded_model(embedded_model):
    a = gcs.Variant(embedded_model)
    b = gcs.Variant(embedded_model, system="Answer in one sentence.")
    prompts = ["What is DNA?", "Why is the sky blue?"]
    frame = gcs.ab(prompts, a, b, seeds=3, metrics=["length", "e5_between", "e5_to:DNA is a molecule."],
                   max_new_tokens=12)
    assert len(frame) == 2 * 3 * 2 and {"e5_between", "e5_to:DNA is a molecule._a"} <= set(frame.columns)
    assert frame["e5_between"].between(-1, 1).all()
    report = gcs.ab_report(frame)
    assert len(report.lines) == 1 + 2 * 2 + 3 and len(report.effects) == 2
    parted = frame[(frame["method"] == "gcswr") & ~frame["identical"]]
    if len(parted):
        row = parted.iloc[0]
        why = gcs.parting(a, b, row["prompt"], seed=int(row["seed"]), max_new_tokens=int(row["parts_at"]) + 1)
        assert why.position == row["parts_at"] and why.sentence.startswith(f"At token {why.position}")


@pytest.mark.slow
def test_a_dtype_change_runs_two_models_of_one_vocabulary(embedded_model):
    frame = gcs.ab(["What is DNA?"], gcs.Variant(dtype="float32"), gcs.Variant(dtype="bfloat16"), seeds=2,
                   metrics=["length"], max_new_tokens=6, control=False)
    assert len(frame) == 2 and frame["n_tokens_a"].ge(1).all()


@pytest.mark.slow
def test_the_ab_command_resumes_and_refuses_a_changed_arm(embedded_model, tmp_path):
    from test_cli import gcs_cli

    out = tmp_path / "ab"
    command = ["ab", "--data", "general", "--limit", "1", "--max-new-tokens", "4", "--quiet", "--b-system",
               "Answer in one sentence.", "--metrics", "length,aligned", "--out", str(out)]
    first = gcs_cli(*command, "--seeds", "2")
    assert first.returncode == 0, first.stderr
    rows = pd.read_csv(out / "results.csv")
    assert len(rows) == 3 * 2 * 2 and set(rows["method"]) == {"gcswr", "is"}
    before = (out / "results.csv").read_bytes()
    again = gcs_cli(*command, "--seeds", "3")
    assert again.returncode == 0 and (out / "results.csv").read_bytes().startswith(before)
    assert len(pd.read_csv(out / "results.csv")) == 3 * 3 * 2  # only the new seed's rows were added
    summary = (out / "summary.md").read_text()
    assert "B against A, 3 prompts x 3 seeds" in summary and "length:" in summary
    changed = gcs_cli(*command[:-4], "--b-system", "Answer briefly.", "--out", str(out))
    assert changed.returncode == 2 and "b_system: 'Answer in one sentence.' there, 'Answer briefly.' now" \
        in changed.stderr
    bad = gcs_cli("ab", "--data", "general", "--metrics", "regex:(", "--out", str(tmp_path / "bad"), "--quiet")
    assert bad.returncode == 2 and "not a valid regular expression" in bad.stderr


def test_the_report_says_when_the_seeds_are_too_few_and_when_every_answer_hit_the_cap():
    """Read by a new user: "length: B and A gave the same value on each of the 2 seeds: no difference, and no claim"
    said neither that 2 seeds could support no claim nor that every answer had stopped at max_new_tokens (the length
    was the cap's)."""
    def frame(seeds: int, finished: bool) -> pd.DataFrame:
        return pd.DataFrame({"prompt_index": 0, "method": "gcswr", "seed": range(seeds), "identical": True,
                             "length_a": 8, "length_b": 8, "finished_a": finished, "finished_b": False})

    few, capped = gcs.ab_report(frame(2, False)).lines[1], "Every answer stopped at max_new_tokens"
    assert few.startswith("length: B and A gave the same value on each of the 2 seeds: no difference, and no claim: "
                          "2 seeds are too few for any claim at 95 % (the exact sign-flip test needs at least 6).")
    assert capped in few
    enough = gcs.ab_report(frame(8, True)).lines[1]  # 8 seeds, and the A arm's answers ended by themselves
    assert enough == "length: B and A gave the same value on each of the 8 seeds: no difference, and no claim."
