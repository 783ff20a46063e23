"""Hindsight (gcs.hindsight): posterior noise given a response, checked against coupled forward sampling.

The statistical tests use a small synthetic model whose next-token distribution depends on the prompt
and on the token before (history-dependent, so GCSwR's recycling matters). "Sample Y for A, then
answer B with posterior noise" must give the same joint distribution of (Y, V) as sampling A and B
forward with one shared seed: a chi-square test of homogeneity on the (Y, V) counts. The same test
rejects a wrong posterior (fresh noise for B), so it can fail.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats
import torch

import gcs
from gcs.instrument.conditioning import draw_indices, posterior, race_posterior, replay
from gcs.sampling.noise import derive_seeds

VOCAB, STEPS, SAMPLES = 3, 3, 30_000
SIGNIFICANCE = 1e-3  # the chance that a correct sampler fails one test with these fixed seeds
SHARED = ["gcs", "gcswr", "ctx"]  # the methods with noise to infer
WINDOW = {"ctx": {"context": 1}}  # "ctx" keyed by the last token: a 3-token answer meets its windows again


def sampler_of(method: str, seed) -> gcs.Sampler:
    return gcs.make_sampler(method, seed=seed, **WINDOW.get(method, {}))


def synthetic_table(seed: int = 0) -> torch.Tensor:
    """Logits [prompt (A, B), step, previous token, vocab]; B is A nudged, so coupling shows."""
    generator = torch.Generator().manual_seed(seed)
    a = 1.2 * torch.randn(STEPS, VOCAB, VOCAB, generator=generator)
    b = a + 0.6 * torch.randn(STEPS, VOCAB, VOCAB, generator=generator)
    return torch.stack([a, b])


def step_logits(table: torch.Tensor, prompt: torch.Tensor, step: int, previous: torch.Tensor) -> torch.Tensor:
    return table[prompt, step, previous]


def run(table: torch.Tensor, sampler: gcs.Sampler, prompt: torch.Tensor) -> torch.Tensor:
    """Tokens [rows, STEPS] from the synthetic model, rows of the given prompts (0 = A, 1 = B)."""
    previous = torch.zeros(len(prompt), dtype=torch.long)
    tokens = []
    for step in range(STEPS):
        previous = sampler.sample(step_logits(table, prompt, step, previous))
        tokens.append(previous)
    return torch.stack(tokens, dim=1)


def along(table: torch.Tensor, prompt: int, response: torch.Tensor) -> torch.Tensor:
    """Teacher-forced logits [rows, STEPS, vocab] of ``response`` under ``prompt``."""
    previous = torch.cat([torch.zeros(len(response), 1, dtype=torch.long), response[:, :-1]], dim=1)
    steps = torch.arange(STEPS).expand_as(previous)
    return table[prompt, steps, previous]


def cells(y: torch.Tensor, v: torch.Tensor) -> np.ndarray:
    codes = torch.zeros(len(y), dtype=torch.long)
    for column in torch.cat([y, v], dim=1).T:
        codes = codes * VOCAB + column
    return np.bincount(codes.numpy(), minlength=VOCAB ** (2 * STEPS))


def homogeneity_p_value(first: np.ndarray, second: np.ndarray) -> float:
    """Chi-square test that two count vectors come from one distribution (cells expected under 5 pooled)."""
    table = np.stack([first, second]).astype(float)
    expected = table.sum(axis=0) * table.sum(axis=1, keepdims=True) / table.sum()
    small = (expected < 5).any(axis=0)
    pooled = np.column_stack([table[:, ~small], table[:, small].sum(axis=1)]) if small.any() else table
    pooled = pooled[:, pooled.sum(axis=0) > 0]
    return float(scipy.stats.chi2_contingency(pooled)[1])


def coupled_forward(table, method: str, seed: int) -> np.ndarray:
    seeds = derive_seeds(seed, torch.arange(SAMPLES)).tolist()
    prompts = torch.cat([torch.zeros(SAMPLES, dtype=torch.long), torch.ones(SAMPLES, dtype=torch.long)])
    tokens = run(table, sampler_of(method, seeds + seeds), prompts)
    return cells(tokens[:SAMPLES], tokens[SAMPLES:])


def hindsight_pairs(table, method: str, seed: int, fresh_for_b: bool = False) -> np.ndarray:
    """Y forward for A (by independent sampling: any exact sampler will do), then V for B from posterior noise."""
    y = run(table, gcs.make_sampler("is", seed=seed), torch.zeros(SAMPLES, dtype=torch.long))
    noise = posterior(method, along(table, 0, y), y, seed=seed + 1, **WINDOW.get(method, {}))
    if fresh_for_b:
        sampler = sampler_of(method, derive_seeds(seed + 2, torch.arange(SAMPLES)).tolist())
    else:
        sampler = noise.sampler()
    v = run(table, sampler, torch.ones(SAMPLES, dtype=torch.long))
    return cells(y, v)


@pytest.mark.parametrize("method", SHARED)
def test_hindsight_pairs_match_coupled_forward_sampling(method):
    table = synthetic_table()
    forward = coupled_forward(table, method, seed=11)
    backward = hindsight_pairs(table, method, seed=12)
    assert homogeneity_p_value(forward, backward) > SIGNIFICANCE


@pytest.mark.parametrize("method", SHARED)
def test_the_same_test_rejects_fresh_noise_for_the_paraphrase(method):
    """The chi-square test has the power to see a missing coupling: independent noise for B fails it."""
    table = synthetic_table()
    forward = coupled_forward(table, method, seed=11)
    wrong = hindsight_pairs(table, method, seed=12, fresh_for_b=True)
    assert homogeneity_p_value(forward, wrong) < 1e-6


@pytest.mark.parametrize("method", SHARED)
def test_replaying_the_prompt_with_posterior_noise_reproduces_the_response(method):
    table = synthetic_table(1)
    y = run(table, gcs.make_sampler("is", seed=4), torch.zeros(2000, dtype=torch.long))
    noise = posterior(method, along(table, 0, y), y, seed=5, **WINDOW.get(method, {}))
    assert torch.equal(replay(noise, along(table, 0, y)), y)
    assert torch.equal(run(table, noise.sampler(), torch.zeros(2000, dtype=torch.long)), y)


def test_race_posterior_gives_the_winner_and_exponential_residuals():
    """Forward race over posterior noise: the winner wins; the losers' residuals are Exp(1) (KS test)."""
    generator = torch.Generator().manual_seed(0)
    p = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64).expand(50_000, -1)
    winners = torch.full((50_000,), 3)
    after = torch.empty(50_000, 4, dtype=torch.float64).exponential_(generator=generator)
    noise = race_posterior(p, winners, after, generator)
    arrivals = noise / p
    assert torch.equal(arrivals.argmin(dim=1), winners)
    race_time = noise[:, 3] / p[:, 3]
    assert scipy.stats.kstest(race_time.numpy(), "expon").pvalue > SIGNIFICANCE  # T ~ Exp(1)
    residual = (noise[:, 0] - race_time * p[:, 0]).numpy()
    assert scipy.stats.kstest(residual, "expon").pvalue > SIGNIFICANCE


def test_draw_indices_count_each_tokens_wins():
    assert draw_indices(torch.tensor([[2, 2, 1, 2], [0, 1, 0, 1]])).tolist() == [[1, 2, 1, 3], [1, 1, 2, 2]]


def test_a_response_outside_the_support_is_refused():
    logits = torch.tensor([[[0.0, 1.0, float("-inf")]]])
    with pytest.raises(ValueError, match="impossible under these settings: its token 1"):
        posterior("gcswr", logits, torch.tensor([[2]]))
    with pytest.raises(ValueError, match="IS has no shared noise"):
        posterior("is", logits, torch.tensor([[1]]))


# -- finished responses: the end of turn is observed too ----------------------------------------------
END_VOCAB, ENDS = 4, (2, 3)  # tokens 2 and 3 end a response


def run_until_end(table: torch.Tensor, sampler: gcs.Sampler, prompt: torch.Tensor) -> torch.Tensor:
    """Tokens [rows, STEPS] of the synthetic model where an end token finishes a row (then -1)."""
    previous = torch.zeros(len(prompt), dtype=torch.long)
    active = torch.ones(len(prompt), dtype=torch.bool)
    tokens = []
    for step in range(STEPS):
        drawn = sampler.sample(step_logits(table, prompt, step, previous.clamp(min=0)), active=active)
        previous = torch.where(active, drawn, -1)
        tokens.append(previous)
        active &= ~torch.isin(drawn, torch.tensor(ENDS))
    return torch.stack(tokens, dim=1)


def end_cells(y: torch.Tensor, v: torch.Tensor) -> np.ndarray:
    """Counts of (Y, V) where Y's end token only says "ended" (hindsight is told that, not which one)."""
    y_codes = torch.where(torch.isin(y, torch.tensor(ENDS)), END_VOCAB, y) + 1  # 0: after the end
    codes = torch.zeros(len(y), dtype=torch.long)
    for column in y_codes.T:
        codes = codes * (END_VOCAB + 2) + column
    for column in (v + 1).T:
        codes = codes * (END_VOCAB + 1) + column
    return np.bincount(codes.numpy(), minlength=(END_VOCAB + 2) ** STEPS * (END_VOCAB + 1) ** STEPS)


def finished_hindsight_pairs(table, method: str, seed: int, observe_end: bool = True) -> np.ndarray:
    """Y forward for A until its end; for each group of Y with one length (and end or none), the posterior
    given Y and its end (``ends``), then V for B with that noise."""
    y = run_until_end(table, gcs.make_sampler("is", seed=seed), torch.zeros(SAMPLES, dtype=torch.long))
    ended = torch.isin(y, torch.tensor(ENDS))
    length = torch.where(ended.any(dim=1), ended.int().argmax(dim=1), STEPS)  # tokens before the end
    v = torch.empty_like(y)
    for n in range(STEPS + 1):
        for finished in (True, False):
            rows = ((length == n) & (ended.any(dim=1) == finished)).nonzero().squeeze(1)
            if len(rows) == 0 or (n == 0 and not (finished and observe_end)):
                continue
            steps = n + 1 if finished and observe_end else n
            observed = y[rows, :steps].clamp(min=0)
            logits = along(table, 0, torch.cat([observed, torch.zeros(len(rows), STEPS - steps, dtype=torch.long)],
                                               dim=1))[:, :steps]
            ends = ENDS if finished and observe_end else None
            noise = posterior(method, logits, observed[:, :n], seed=seed + 1 + n, ends=ends, **WINDOW.get(method, {}))
            v[rows] = run_until_end(table, noise.sampler(), torch.ones(len(rows), dtype=torch.long))
    missing = (length == 0) & ~observe_end  # an empty, unobserved response says nothing: B's answer is fresh
    if missing.any():
        rows = missing.nonzero().squeeze(1)
        fresh = sampler_of(method, derive_seeds(seed + 9, torch.arange(len(rows))).tolist())
        v[rows] = run_until_end(table, fresh, torch.ones(len(rows), dtype=torch.long))
    return end_cells(y, v)


def coupled_forward_until_end(table, method: str, seed: int) -> np.ndarray:
    seeds = derive_seeds(seed, torch.arange(SAMPLES)).tolist()
    prompts = torch.cat([torch.zeros(SAMPLES, dtype=torch.long), torch.ones(SAMPLES, dtype=torch.long)])
    tokens = run_until_end(table, sampler_of(method, seeds + seeds), prompts)
    return end_cells(tokens[:SAMPLES], tokens[SAMPLES:])


def end_table(seed: int = 2) -> torch.Tensor:
    """A synthetic model of 4 tokens where 2 and 3 end the response (likely enough that most responses end)."""
    generator = torch.Generator().manual_seed(seed)
    a = 1.2 * torch.randn(STEPS, END_VOCAB, END_VOCAB, generator=generator)
    return torch.stack([a, a + 0.6 * torch.randn(STEPS, END_VOCAB, END_VOCAB, generator=generator)])


@pytest.mark.parametrize("method", SHARED)
def test_finished_responses_condition_on_their_end(method):
    """(Y with its end, V) from hindsight matches coupled forward sampling; observing Y without its end
    (the old behaviour: "Y is a prefix") is rejected by the same test."""
    table = end_table()
    forward = coupled_forward_until_end(table, method, seed=21)
    assert homogeneity_p_value(forward, finished_hindsight_pairs(table, method, seed=22)) > SIGNIFICANCE
    assert homogeneity_p_value(forward, finished_hindsight_pairs(table, method, seed=22, observe_end=False)) < 1e-6


def test_the_end_token_is_drawn_in_proportion_to_its_probability():
    """Told only that the response ended, the posterior picks which end token won by its probability."""
    logits = torch.log(torch.tensor([[[0.5, 0.1, 0.3, 0.1]]])).expand(20_000, 1, 4)
    noise = posterior("gcs", logits, torch.empty(20_000, 0, dtype=torch.long), seed=3, ends=[1, 2, 3])
    counts = np.bincount(noise.response[:, 0].numpy(), minlength=4)
    assert counts[0] == 0
    assert scipy.stats.chisquare(counts[1:], np.array([0.2, 0.6, 0.2]) * 20_000).pvalue > SIGNIFICANCE
    with pytest.raises(ValueError, match="cannot end there"):
        posterior("gcs", torch.tensor([[[0.0, float("-inf")]]]), torch.empty(1, 0, dtype=torch.long), ends=[1])


# -- the real model --------------------------------------------------------------------------------
@pytest.mark.slow
def test_hindsight_on_the_prompt_itself_continues_an_unfinished_response(embedded_model):
    prompt = "Name three fruits."
    response = gcs.generate([prompt], method="gcswr", seed=3, max_new_tokens=12, model=embedded_model)[0]
    observed = response[: len(response) // 2].rstrip()  # half a response: hindsight must continue it
    (again,) = gcs.hindsight(prompt, observed, [prompt], seed=1, max_new_tokens=24, finished=False,
                             model=embedded_model)
    assert again.startswith(observed) and len(again) > len(observed)
    (ended,) = gcs.hindsight(prompt, observed, [prompt], seed=1, max_new_tokens=24, model=embedded_model)
    assert ended == observed  # finished (the default): the response ended there, and so does the replay


REPLAY_SEEDS = 30
HALVES = 10  # first halves replayed (unfinished prefixes): the 24-token test below replays 20 unfinished responses
LONG_REPLAY_SEEDS = 20  # the measurement: 20 seeds of 24 tokens (each replay is two 25-step generations)


@pytest.mark.slow
def test_every_response_taken_by_its_token_ids_replays_exactly_at_the_default_dtype(embedded_model):
    """The premise of hindsight, where users meet it: for 30 seeds of a yes/no prompt, each response taken by its token
    ids (a compare frame's ``token_ids``), the prompt replayed with the posterior noise gives back a finished
    response with its end, and the first half of a response (unfinished) as its beginning; so does a response
    whose text reads back as other tokens ('\n', '\n' is read as one '\n\n'), which as text would be another one.
    Halves of the first ``HALVES`` responses: the next test replays 20 long unfinished ones."""
    prompt = "Is fire hot? Reply yes or no."
    frame = gcs.compare([prompt], methods=["gcswr"], seeds=list(range(REPLAY_SEEDS)), max_new_tokens=8,
                        model=embedded_model)
    tokenizer = embedded_model.tokenizer
    assert all(tokenizer.decode(ids, skip_special_tokens=True) == text
               for ids, text in zip(frame.token_ids, frame.raw_response, strict=True))
    newline, = tokenizer.encode("\n", add_special_tokens=False)
    unreadable = [*tokenizer.encode("Yes", add_special_tokens=False), newline, newline]
    observations = [(int(seed), ids, bool(finished)) for seed, ids, finished
                    in zip(frame.seed, frame.token_ids, frame.finished, strict=True)]
    halves = [(int(seed), ids[: len(ids) // 2], False) for seed, ids, _ in observations if len(ids) >= 2]
    observations += halves[:HALVES]
    observations.append((0, unreadable, False))
    parted, not_read_back = [], 0
    for seed, ids, finished in observations:
        report = gcs.hindsight_report(prompt, ids, [prompt], seed=seed, max_new_tokens=8, finished=finished,
                                      model=embedded_model)
        not_read_back += not report.reads_back
        if not report.replayed:
            parted.append((seed, ids, report.parted_at))
    assert not parted, f"the replay parted from the response (seed, ids, token): {parted}"
    # both promises were put to the test, not only vacuously: some responses ended, some halves were real prefixes
    assert frame.finished.sum() >= 1, f"none of the {REPLAY_SEEDS} responses ended within 8 tokens"
    assert len(observations) > REPLAY_SEEDS + 1, "no response had a non-empty first half: no prefix was checked"
    assert not_read_back >= 1 and not gcs.reads_back(unreadable, model=embedded_model)
    by_text = gcs.hindsight_report(prompt, tokenizer.decode(unreadable), [prompt], seed=0, max_new_tokens=8,
                                   finished=False, model=embedded_model)
    assert len(by_text.response_tokens) == 2 and by_text.reads_back  # as text: 'Yes', '\n\n', another observation


@pytest.mark.slow
def test_responses_are_taken_by_ids_as_by_text_where_their_text_reads_back(embedded_model):
    ids = embedded_model.tokenizer.encode("Blue is a calm colour", add_special_tokens=False)
    arguments = dict(prompt="Name a colour.", paraphrases=["Tell me one colour."], seed=2, max_new_tokens=8,
                     model=embedded_model)
    assert gcs.hindsight(response=ids, **arguments) == gcs.hindsight(response="Blue is a calm colour", **arguments)
    assert gcs.hindsight(response=torch.tensor(ids), **arguments) == gcs.hindsight(response=ids, **arguments)
    assert gcs.counterfactual("Name a colour.", ids, 1, ids[1], seed=2, max_new_tokens=8, model=embedded_model) \
        == "Blue is a calm colour"


@pytest.mark.slow
def test_hindsight_answers_each_paraphrase_reproducibly(embedded_model):
    prompt, paraphrases = "Name a colour.", ["Tell me one colour.", "Which colour comes to mind?"]
    first = gcs.hindsight(prompt, "Blue is a calm colour", paraphrases, seed=0, max_new_tokens=8, model=embedded_model)
    again = gcs.hindsight(prompt, "Blue is a calm colour", paraphrases, seed=0, max_new_tokens=8, model=embedded_model)
    assert len(first) == 2 and all(first) and first == again


@pytest.mark.parametrize("kwargs, message", [
    (dict(response=""), "response must be non-empty"),
    (dict(response="x " * 1100), "at most 1,024"),
    (dict(temperature=0.0), "no luck to share"),
    (dict(paraphrases=[]), "paraphrases must not be empty"),
    (dict(method="beam"), "unknown method"),
    (dict(top_p=0.01, response="Zebra quantum marmalade"), "impossible under these settings"),
    (dict(response=[]), "non-empty text or a list of token ids"),
    (dict(response=[1.5, 2]), "non-empty text or a list of token ids"),
    (dict(response=[10**9]), r"token ids must be in \[0, 49152\)"),
    (dict(response=[2]), "end-of-turn token at token 1"),
])
@pytest.mark.slow
def test_hindsight_bad_input_names_the_problem(embedded_model, kwargs, message):
    arguments = dict(prompt="Name a colour.", response="Blue", paraphrases=["Tell me a colour."], model=embedded_model)
    with pytest.raises(ValueError, match=message):
        gcs.hindsight(**{**arguments, **kwargs})


@pytest.mark.slow
def test_the_replay_reproduces_24_token_unfinished_responses_at_the_default_dtype(embedded_model):
    """The issue's own measurement, where bf16 failed before (5/20): Y = 24 tokens of GCSwR at T = 1, cut by the
    token limit (unfinished); hindsight on the prompt itself must continue Y, for 20 seeds of 20."""
    prompt = "Why do leaves change color in autumn?"
    frame = gcs.compare([prompt], methods=["gcswr"], seeds=list(range(LONG_REPLAY_SEEDS)), max_new_tokens=24,
                        model=embedded_model)
    unfinished = [(int(seed), response) for seed, response, finished
                  in zip(frame.seed, frame.raw_response, frame.finished, strict=True) if not finished]
    assert len(unfinished) >= LONG_REPLAY_SEEDS // 2, "too few responses ran into the token limit to test the premise"
    parted = []
    for seed, response in unfinished:
        report = gcs.hindsight_report(prompt, response, [prompt], seed=seed, max_new_tokens=24, finished=False,
                                      model=embedded_model)
        assert len(report.response_tokens) >= 20  # a long observation, as the issue measured
        if not report.replayed:
            parted.append((seed, report.parted_at))
    assert not parted, f"the replay parted from Y (seed, token): {parted}"
