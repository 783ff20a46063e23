"""Counterfactual edits (gcs.counterfactual, gcs.Sampler.force).

Exactness: on the synthetic history-dependent model of test_hindsight, "sample Y for A, draw the noise
from its posterior, force token X at step 1 and go on" must give the model's own distribution of the
edited response (Y's first token, X, then a continuation given that prefix), when Y is averaged over:
a chi-square test of homogeneity against forward sampling with X forced. Two wrong rules are rejected
by the same test: conditioning the posterior on the edited response as if X had been observed, and
keeping the state from before the forced step when X is not the race's winner (the tempting rule,
which mixes two different laws).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from test_hindsight import (
    SHARED,
    SIGNIFICANCE,
    STEPS,
    VOCAB,
    WINDOW,
    along,
    homogeneity_p_value,
    run,
    synthetic_table,
)

import gcs
from gcs.instrument.conditioning import posterior

SAMPLES = 100_000
AT, FORCED = 1, 2


def edited_cells(tokens: torch.Tensor) -> np.ndarray:
    assert (tokens[:, AT] == FORCED).all()
    return np.bincount((tokens[:, 0] * VOCAB + tokens[:, 2]).numpy(), minlength=VOCAB * VOCAB)


def forward_with_the_edit(table, seed: int) -> np.ndarray:
    """The model's law of the edited response: IS (fresh randomness every step) with the token forced."""
    sampler = gcs.make_sampler("is", seed=seed).force(AT, [FORCED] * SAMPLES)
    return edited_cells(run(table, sampler, torch.zeros(SAMPLES, dtype=torch.long)))


def counterfactual_cells(table, method: str, seed: int, rule: str = "library") -> np.ndarray:
    y = run(table, gcs.make_sampler("is", seed=seed), torch.zeros(SAMPLES, dtype=torch.long))
    observed = y.clone()
    if rule == "edited-observed":
        observed[:, AT] = FORCED
    sampler = posterior(method, along(table, 0, observed), observed, seed=seed + 1, **WINDOW.get(method, {})).sampler()
    if rule != "keep-the-state-before":
        return edited_cells(run(table, sampler.force(AT, [FORCED] * SAMPLES), torch.zeros(SAMPLES, dtype=torch.long)))
    previous, tokens = torch.zeros(SAMPLES, dtype=torch.long), []
    for step in range(STEPS):
        logits = table[0, step, previous]
        if step == AT:  # the race's state only where the race picked the forced token; the state before elsewhere
            saved = sampler.residual.clone(), sampler.draws.clone()
            other = sampler.sample(logits) != FORCED
            sampler.residual[other], sampler.draws[other] = saved[0][other], saved[1][other]
            rows = other.nonzero().squeeze(1)
            sampler._renew(rows, torch.full_like(rows, FORCED))
            previous = torch.full((SAMPLES,), FORCED)
        else:
            previous = sampler.sample(logits)
        tokens.append(previous)
    return edited_cells(torch.stack(tokens, dim=1))


@pytest.mark.parametrize("method", SHARED)
def test_a_counterfactual_continuation_is_an_exact_sample_given_the_edit(method):
    table = synthetic_table()
    assert homogeneity_p_value(forward_with_the_edit(table, 100), counterfactual_cells(table, method, 8)) > SIGNIFICANCE


@pytest.mark.parametrize("method, rule", [("gcs", "edited-observed"), ("gcswr", "edited-observed"),
                                          ("ctx", "edited-observed"), ("gcswr", "keep-the-state-before")])
def test_the_same_test_rejects_wrong_rules(method, rule):
    table = synthetic_table()
    wrong = counterfactual_cells(table, method, 8, rule)
    assert homogeneity_p_value(forward_with_the_edit(table, 100), wrong) < 1e-6


def test_forcing_the_winner_changes_nothing():
    logits = torch.randn(6, 4, 50)
    plain = gcs.make_sampler("gcswr", seed=[1, 1, 2, 2, 3, 3])
    tokens = torch.stack([plain.sample(logits[:, t]) for t in range(4)], dim=1)
    forced = gcs.make_sampler("gcswr", seed=[1, 1, 2, 2, 3, 3]).force(2, tokens[:, 2])
    assert torch.equal(torch.stack([forced.sample(logits[:, t]) for t in range(4)], dim=1), tokens)


def test_a_forced_token_takes_a_fresh_draw_and_the_others_keep_the_race():
    sampler = gcs.make_sampler("gcswr", seed=[4]).force(0, [7])
    logits = torch.zeros(1, 10)
    before = sampler.begin(1, 10).peek()
    winner = int((before / torch.ones(10)).argmin())
    assert winner != 7 and int(sampler.sample(logits)[0]) == 7
    after = sampler.peek()[0]
    assert sampler.draws[0, 7] == 1 and sampler.draws[0, winner] == 1  # both renewed: the winner and the forced
    race_time = before[0, winner]  # p_i = 1/10 for every token: E_i - T p_i with T = E_k / p_k
    losers = [i for i in range(10) if i not in (winner, 7)]
    assert torch.allclose(after[losers], before[0, losers] - race_time)


@pytest.mark.parametrize("bad, message", [(-1, "output index"), (1.5, "output index")])
def test_force_refuses_a_bad_index(bad, message):
    with pytest.raises(ValueError, match=message):
        gcs.make_sampler("gcs").force(bad, [1])


# -- the real model ----------------------------------------------------------------------------------
PROMPT = "Name a fruit and say one thing about it."


@pytest.mark.slow
@pytest.mark.parametrize("method", ["gcs", "gcswr", "is"])
def test_replacing_a_token_by_itself_gives_the_response_back(embedded_model, method):
    frame = gcs.compare([PROMPT], methods=[method], seeds=[5], max_new_tokens=16, model=embedded_model)
    response, finished = frame.raw_response[0], bool(frame.finished[0])
    tokens = gcs.response_tokens(response, model=embedded_model)
    for at in (0, len(tokens) // 2):
        same = gcs.counterfactual(PROMPT, response, at, tokens[at], method=method, seed=2, max_new_tokens=16,
                                  finished=finished, model=embedded_model)
        if method == "is":  # nothing is shared: only the prefix and the forced token are the response's
            assert same.startswith("".join(tokens[: at + 1]).strip())
        else:
            assert same == response


@pytest.mark.slow
def test_an_edit_keeps_the_prefix_and_forces_the_replacement(embedded_model):
    response = "Apples are sweet and crunchy."
    edited = gcs.counterfactual(PROMPT, response, 0, " Lemons", seed=1, max_new_tokens=16, model=embedded_model)
    assert edited.startswith("Lemons")
    tokens = gcs.response_tokens(response, model=embedded_model)
    later = gcs.counterfactual(PROMPT, response, 2, " sour", seed=1, max_new_tokens=16, model=embedded_model)
    assert later.startswith("".join(tokens[:2]) + " sour")


@pytest.mark.parametrize("kwargs, message", [
    (dict(at=99), "at must index the response"),
    (dict(at=-1), "at must index the response"),
    (dict(replacement=""), "replacement must be non-empty"),
    (dict(replacement=10**9), "replacement token ids must be in"),
    (dict(replacement=[1.5]), "replacement must be text"),
    (dict(max_new_tokens=2, at=1), "leaves no room"),
    (dict(temperature=0.0), "no luck to share"),
    (dict(response="Hi <|im_end|> there"), "end-of-turn token"),
    (dict(finished="yes"), "finished must be True or False"),
])
@pytest.mark.slow
def test_bad_counterfactual_input_names_the_problem(embedded_model, kwargs, message):
    arguments = dict(prompt=PROMPT, response="Apples are sweet.", at=0, replacement=" Pears", model=embedded_model)
    with pytest.raises(ValueError, match=message):
        gcs.counterfactual(**{**arguments, **kwargs})
