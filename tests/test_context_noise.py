"""Method "ctx" (context-keyed noise, docs/context.md): the literal reference, exactness with repeated contexts and
its control, batch invariance, pauses and forcing, and the re-coupling of answers that part and write the same
tokens again.
"""

import itertools
import math

import numpy as np
import pytest
import torch

import gcs
from conftest import (
    P_VALUE_THRESHOLD,
    Z_THRESHOLD,
    all_sequences,
    chi_square_p,
    sequence_probability,
    tiny_gcs_model,
    z_score,
)
from gcs.sampling import noise, reference


def markov_model(history: torch.Tensor, vocab: int = 3) -> torch.Tensor:
    """Synthetic LM whose next token depends mostly on the last one (so a short answer meets a context again and
    again) and a little on the length (so the law is not a plain Markov chain)."""
    rows, length = history.shape
    tokens = torch.arange(vocab, dtype=torch.float64)
    if length == 0:
        return (0.3 * tokens).expand(rows, -1).float()
    last = history[:, -1:].double()
    return (0.6 * torch.cos(2.1 * last + 1.3 * tokens) + 0.2 * length * (tokens == 0)).float()


def answer_counts(history: torch.Tensor, vocab: int) -> np.ndarray:
    """How often each whole answer was drawn, by its base-``vocab`` code (first token least significant)."""
    length = history.shape[1]
    codes = (history * torch.tensor([vocab**i for i in range(length)])).sum(dim=1)
    return torch.bincount(codes, minlength=vocab**length).numpy()


def uncounted_answers(seeds: torch.Tensor, context: int, length: int, vocab: int) -> torch.Tensor:
    """The control: "ctx" without the count, so a repeated context reuses its noise (Aaronson's keyed scheme)."""
    keys = noise.row_keys(seeds, noise.DOMAIN_CONTEXT)
    window = torch.full((len(seeds), context), noise.CONTEXT_PAD, dtype=torch.int64)
    history = torch.zeros(len(seeds), 0, dtype=torch.long)
    for _ in range(length):
        draws = noise.context_draws(noise.context_words(window), torch.zeros(len(seeds), dtype=torch.int64))
        race = noise.vocabulary_noise(keys, draws, vocab).log() - markov_model(history, vocab)
        tokens = race.argmin(dim=-1)
        history = torch.cat([history, tokens[:, None]], dim=1)
        window = torch.cat([window[:, 1:], tokens[:, None]], dim=1)
    return history


def sampled(sampler, steps: int, vocab: int, rows: int, model=markov_model) -> torch.Tensor:
    history = torch.zeros(rows, 0, dtype=torch.long)
    for _ in range(steps):
        history = torch.cat([history, sampler.sample(model(history, vocab))[:, None]], dim=1)
    return history


@pytest.mark.parametrize("context", [1, 2, 3])
@pytest.mark.parametrize("seed", [0, 5])
def test_matches_the_literal_reference_token_for_token(seed, context):
    steps, vocab = 80, 4  # four tokens, 80 steps: every window of one or two tokens comes back many times
    state = reference.ContextState(seed, context)
    history, expected = torch.zeros(1, 0, dtype=torch.long), []
    for _ in range(steps):
        log_h = torch.log_softmax(markov_model(history, vocab).double(), dim=-1)[0].numpy()
        expected.append(reference.context_step(state, log_h))
        history = torch.cat([history, torch.tensor([[expected[-1]]])], dim=1)
    got = sampled(gcs.make_sampler("ctx", seed=seed, context=context), steps, vocab, 1)
    assert got[0].tolist() == expected
    assert max(state.seen.values()) > 3  # the count, not only the window, picked the noise


def test_answers_follow_the_model_exactly_where_contexts_repeat():
    """Each answer's joint law is the model's although its five steps revisit three one-token contexts; without the
    count (the control) the same check rejects by a wide margin."""
    rows, length, vocab, context = 30_000, 5, 3, 1
    expected = [sequence_probability(s, markov_model, vocab) for s in all_sequences(vocab, length)]
    answers = sampled(gcs.make_sampler("ctx", seed=list(range(rows)), context=context), length, vocab, rows)
    assert chi_square_p(answer_counts(answers, vocab), expected) > P_VALUE_THRESHOLD
    control = uncounted_answers(torch.arange(rows), context, length, vocab)
    assert chi_square_p(answer_counts(control, vocab), expected) < 1e-30


@pytest.mark.parametrize("context", [2, 8])
def test_single_steps_are_exact_for_longer_contexts(context):
    # With k = 8 a 5-token answer never leaves its padded first steps: each step is keyed by its position
    rows, length, vocab = 20_000, 5, 3
    answers = sampled(gcs.make_sampler("ctx", seed=list(range(rows)), context=context), length, vocab, rows)
    for step in range(length):
        given = answers[:, step - 1] == 0 if step else torch.ones(rows, dtype=torch.bool)
        history = torch.zeros(1, step, dtype=torch.long)
        probabilities = torch.softmax(markov_model(history, vocab).double(), dim=-1)[0].numpy()
        counts = torch.bincount(answers[given, step], minlength=vocab).numpy()
        assert chi_square_p(counts, probabilities) > P_VALUE_THRESHOLD


def test_same_seed_same_answer_whatever_the_batch():
    generator = torch.Generator().manual_seed(3)
    steps = [torch.randn(4, 6, generator=generator) for _ in range(40)]
    batch = gcs.make_sampler(["ctx", "gcs", "ctx", "is"], seed=[10, 11, 12, 13], context=2)
    alone = gcs.make_sampler("ctx", seed=[12], context=2)
    for logits in steps:
        assert batch.sample(logits)[2] == alone.sample(logits[2:3])[0]


def test_a_forced_token_enters_the_window():
    # Row 0 is forced to write 3 first; row 1 writes 3 by itself (only 3 is allowed): the same window from then on
    logits = torch.zeros(2, 5)
    first = torch.tensor([[0.0, 0.0, 0.0, 0.0, 0.0], [-math.inf, -math.inf, -math.inf, 0.0, -math.inf]])
    sampler = gcs.make_sampler("ctx", seed=[7, 7], context=1).force(0, [3, -1])
    assert sampler.sample(first).tolist() == [3, 3]
    later = torch.stack([sampler.sample(logits) for _ in range(20)])
    assert torch.equal(later[:, 0], later[:, 1])


def test_answers_that_part_meet_their_noise_again():
    """Two prompts (p and q) with one seed part: one inserts a token the other does not. Once both write the same
    token again (k = 1) they share their context, so the next tokens agree as often as Theorem 1 says for p and q;
    under GCS the positions stay shifted by one: no shared noise, and agreement near independent draws' sum p q."""
    p = torch.tensor([0.05, 0.15, 0.3, 0.5, 0.0, 0.0])
    q = torch.tensor([0.1, 0.3, 0.25, 0.35, 0.0, 0.0])
    pairs, steps = 10_000, 4
    agreement = {}
    for method in ("ctx", "gcs"):
        options = {"context": 1} if method == "ctx" else {}
        sampler = gcs.make_sampler(method, seed=np.repeat(np.arange(pairs), 2), **options)
        sampler.force(0, [4, 4] * pairs).force(1, [-1, 5] * pairs)  # row 2j+1 inserts token 5 after the shared 4
        logits = torch.stack([p.log(), q.log()]).repeat(pairs, 1)
        tokens = torch.stack([sampler.sample(logits) for _ in range(steps + 1)], dim=1).view(pairs, 2, -1)
        first, second = tokens[:, 0, 1:-1], tokens[:, 1, 2:]  # aligned by content: the second answer is one behind
        rejoined = first[:, 0] == second[:, 0]  # both wrote the same token right after parting
        agreement[method] = (int((first[rejoined, 1] == second[rejoined, 1]).sum()), int(rejoined.sum()))
    theory, independent = gcs.agreement_probability(p[:4], q[:4]), float((p * q).sum())
    assert abs(z_score(*agreement["ctx"], theory)) < Z_THRESHOLD
    assert theory > independent + 0.3
    gcs_rate = agreement["gcs"][0] / agreement["gcs"][1]
    assert agreement["ctx"][0] / agreement["ctx"][1] > gcs_rate + 0.2


def test_an_answer_resumes_from_the_tokens_it_wrote():
    """What the vLLM plugin does each step: rebuild the window and counts from the written tokens and go on."""
    generator = torch.Generator().manual_seed(5)
    steps = [torch.randn(2, 3, generator=generator) for _ in range(30)]
    whole = gcs.make_sampler("ctx", seed=[4, 9], context=2)
    written = torch.stack([whole.sample(logits) for logits in steps], dim=1)
    for cut in (0, 1, 7, 29):
        state = gcs.ContextGumbelSampler.state_of(written[:, :cut].tolist(), 2)
        resumed = gcs.make_sampler("ctx", seed=[4, 9], context=2).begin(2, 3, steps=torch.tensor([cut, cut]),
                                                                         state=state)
        assert torch.equal(torch.stack([resumed.sample(s) for s in steps[cut:]], dim=1), written[:, cut:])
    with pytest.raises(ValueError, match="see ContextGumbelSampler.state_of"):
        gcs.make_sampler("ctx", context=3).begin(2, 3, steps=torch.tensor([1, 1]), state=state)


def test_context_is_checked_up_front():
    with pytest.raises(TypeError, match="context must be an integer"):
        gcs.make_sampler("ctx", context=2.0)
    with pytest.raises(ValueError, match=r"context must be an integer in \[1, 64\]"):
        gcs.make_sampler("ctx", context=0)
    with pytest.raises(ValueError, match="context keys the noise of method 'ctx' only"):
        gcs.make_sampler("gcs", context=2)
    with pytest.raises(ValueError, match="ctx cannot resume from an output index alone"):
        gcs.make_sampler("ctx").begin(1, 5, steps=torch.tensor([3]))


def test_ctx_is_accepted_but_never_a_default():
    assert "ctx" not in gcs.METHODS and "ctx" in gcs.EXTENDED_METHODS
    assert gcs.SamplingSettings().methods == gcs.METHODS and gcs.SamplingSettings().context is None
    settings = gcs.SamplingSettings(methods="gcs,ctx", context=2)
    assert settings.methods == ("gcs", "ctx") and settings.context == 2
    with pytest.raises(ValueError, match="context keys the noise of method 'ctx' only"):
        gcs.SamplingSettings(methods="gcs", context=2)
    with pytest.raises(TypeError, match="context must be an integer"):
        gcs.SamplingSettings(methods="ctx", context="2")


def test_windows_and_counts_key_distinct_noise():
    # The noise of (window, count) pairs: equal pairs equal, any difference a different vector
    windows = torch.tensor(list(itertools.product([noise.CONTEXT_PAD, 0, 1], repeat=2)))
    words = noise.context_words(windows)
    draws = torch.cat([noise.context_draws(words, torch.full_like(words, c)) for c in range(3)])
    assert len(set(draws.tolist())) == 3 * len(windows)


@pytest.fixture(scope="module")
def tiny():
    return tiny_gcs_model()


def test_generate_and_compare_carry_the_context(tiny):
    """Settings reach the sampler: the answer is the one a "ctx" sampler with that window writes, and another
    window writes another answer."""
    prompts = ["w5 w6 w7", "w9 w10"]
    settings = gcs.SamplingSettings(methods="ctx", seeds=[3], context=1, max_new_tokens=12)
    answers = {k: gcs.generate(prompts, settings=settings.replace(context=k), model=tiny) for k in (1, 2, 8)}
    assert answers[1] == gcs.generate(prompts, settings=settings, model=tiny)
    assert answers[1] != answers[2] != answers[8]
    frame = gcs.compare(prompts, settings=settings.replace(methods="gcs,ctx", seeds=2), model=tiny)
    assert list(dict.fromkeys(frame["method"])) == ["gcs", "ctx"]
    report = gcs.compare_report(frame, metrics=["jaccard"], tokenizer=tiny.tokenizer)
    assert list(report.table["method"]) == ["gcs", "ctx"]


def test_hindsight_and_counterfactuals_run_on_ctx_s_posterior(tiny):
    """The posterior keyed by context reaches the entry points with the settings' window: hindsight on the prompt
    itself gives the response back for windows of 1 and 3 tokens (a posterior keyed with another window than the
    sampler's would meet fresh noise and part), and replacing a token by itself gives the response back. (The
    exactness of both: the chi-square tests of test_hindsight.py and test_counterfactual.py.)"""
    from gcs.instrument.replay import observed_noise

    prompt = "w5 w6"
    for window in (1, 3):
        settings = gcs.SamplingSettings.single("ctx", 3, max_new_tokens=12).replace(context=window)
        frame = gcs.compare([prompt], settings=settings, model=tiny)
        ids, finished = [int(i) for i in frame["token_ids"][0]], bool(frame["finished"][0])
        report = gcs.hindsight_report(prompt, ids, [prompt, "w7 w8"], settings=settings, finished=finished,
                                      model=tiny)
        assert report.replayed, (window, report)
        # (a replay on the prompt itself succeeds with any window the posterior and its sampler share: the window
        # must be the settings', or a paraphrase would meet another answer's keys)
        noise = observed_noise(prompt, ids, settings, finished, tiny)
        assert noise.context == window and noise.sampler().context == window
        middle = len(ids) // 2
        same = gcs.counterfactual(prompt, ids, middle, ids[middle], settings=settings, finished=finished, model=tiny)
        assert same == frame["raw_response"][0], window


def test_the_vllm_engine_asks_the_plugin_for_ctx_with_its_window(tiny):
    # the requests engine="vllm" sends (the plugin's side is tests/test_vllm_plugin.py)
    from gcs.engines.batch import Batch, Row

    settings = gcs.SamplingSettings(methods="gcs,ctx", context=2, max_new_tokens=4)
    batch = Batch([Row("w5", "ctx", 3), Row("w6", "gcs", 3)], tiny, settings, engine="vllm")
    _, params = batch.runner.requests()
    assert [p.extra_args for p in params] == [{"gcs_method": "ctx", "gcs_seed": 3, "gcs_context": 2},
                                              {"gcs_method": "gcs", "gcs_seed": 3}]


def test_ab_shares_ctx_between_the_arms(tiny):
    """Equal arms under "ctx" (window 2, from the settings) answer alike on every seed; the IS control does not."""
    settings = gcs.SamplingSettings(methods="ctx", seeds=4, max_new_tokens=6, context=2)
    frame = gcs.ab(["w5 w6", "w7"], gcs.Variant(tiny, name="x"), gcs.Variant(tiny, name="y"), metrics=["length"],
                   settings=settings)
    shared = frame[frame["method"] == "ctx"]
    assert len(shared) == 8 and shared["identical"].all()
    assert not frame[frame["method"] == "is"]["identical"].all()
    assert gcs.ab_report(frame).method == "ctx"
