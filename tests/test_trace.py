"""gcs.trace: the step-through record is the race that generate runs, token for token."""

from __future__ import annotations

import math

import pytest

import gcs

PROMPTS = ["Why is the sky blue?", "What makes the sky look blue?"]


@pytest.mark.parametrize("method", ["is", "gcs", "gcswr"])
def test_trace_winners_are_generates_tokens(embedded_model, method):
    trace = gcs.trace(PROMPTS, method, seed=5, temperature=0.9, top_p=0.95, max_new_tokens=12, model=embedded_model)
    generated = gcs.generate(PROMPTS, method, seed=5, temperature=0.9, top_p=0.95, max_new_tokens=12,
                             model=embedded_model)
    assert list(trace.responses) == generated
    for row, ids in enumerate(trace.token_ids):
        assert [trace.steps[t][row].winner for t in range(len(ids))] == list(ids)
    assert len(trace.steps) <= 12 and all(len(step) == 2 for step in trace.steps)


@pytest.mark.parametrize("method", ["gcs", "gcswr"])
def test_the_winner_is_the_first_arrival(embedded_model, method):
    trace = gcs.trace(PROMPTS, method, seed=2, max_new_tokens=8, top=50, model=embedded_model)
    for step in (s for position in trace.steps for s in position if not s.finished):
        first = min(step.candidates, key=lambda c: c.arrival)
        assert first.token_id == step.winner
        probabilities = [c.probability for c in step.candidates]
        assert probabilities[:-1] == sorted(probabilities[:-1], reverse=True)


def test_gcswr_losers_keep_their_residual_and_the_winner_is_redrawn(embedded_model):
    """E_i after = E_i - T p_i for every loser (T: the winner's arrival); the winner's noise is new."""
    trace = gcs.trace(PROMPTS, "gcswr", seed=9, max_new_tokens=6, model=embedded_model)
    for step in (s for position in trace.steps for s in position if not s.finished):
        race_time = next(c.arrival for c in step.candidates if c.token_id == step.winner)
        for c in step.candidates:
            if c.token_id == step.winner:
                assert c.noise_after != c.noise
            else:
                assert c.noise_after == pytest.approx(max(c.noise - race_time * c.probability, 0), rel=1e-3, abs=1e-6)


def test_gcs_rows_race_with_one_noise_vector_and_is_rows_draw_apart(embedded_model):
    gcs_trace = gcs.trace(PROMPTS, "gcs", seed=4, max_new_tokens=4, top=50, model=embedded_model)
    compared = 0
    for first, second in gcs_trace.steps:
        shared = {c.token_id: c.noise for c in first.candidates}
        common = [c for c in second.candidates if c.token_id in shared]
        assert all(c.noise == shared[c.token_id] for c in common)
        compared += len(common)
    assert compared > 0
    is_trace = gcs.trace(PROMPTS, "is", seed=4, max_new_tokens=4, model=embedded_model)
    assert all(first.uniform != second.uniform for first, second in is_trace.steps)
    assert all(c.noise is None for step in is_trace.steps[0] for c in step.candidates)


def test_trace_frame_and_gumbel_form(embedded_model):
    trace = gcs.trace(PROMPTS, "gcswr", seed=1, max_new_tokens=3, top=5, model=embedded_model)
    frame = trace.frame()
    assert {"position", "row", "token_id", "probability", "noise", "gumbel", "arrival", "won"} <= set(frame.columns)
    assert frame.groupby(["position", "row"])["won"].sum().eq(1).all()
    candidate = trace.steps[0][0].candidates[0]
    assert candidate.gumbel == pytest.approx(-math.log(candidate.noise))


@pytest.mark.parametrize("kwargs, message", [
    (dict(temperature=0.0), "no noise to trace"),
    (dict(top=0), "top must be an integer"),
    (dict(method="beam"), "unknown method"),
    (dict(prompts=[]), "prompts must not be empty"),
    (dict(max_new_tokens=5000), "max_new_tokens"),
])
def test_trace_bad_input(embedded_model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        gcs.trace(**{"prompts": PROMPTS, "model": embedded_model, **kwargs})


@pytest.mark.parametrize("method", ["is", "gcswr"])
def test_forcing_a_token_branches_the_trace_there(embedded_model, method):
    plain = gcs.trace(PROMPTS, method, seed=4, max_new_tokens=10, model=embedded_model)
    other = next(c.token_id for c in plain.steps[3][1].candidates if c.token_id != plain.steps[3][1].winner)
    branch = gcs.trace(PROMPTS, method, seed=4, max_new_tokens=10, model=embedded_model, forced=[(3, 1, other)])
    assert branch.token_ids[1][:3] == plain.token_ids[1][:3] and branch.token_ids[1][3] == other
    assert branch.token_ids[0] == plain.token_ids[0]  # the other paraphrase is untouched
    assert branch.steps[3][1].forced and not branch.steps[3][0].forced and branch.forced == ((3, 1, other),)
    assert branch.frame()["forced"].sum() == len(branch.steps[3][1].candidates)


@pytest.mark.parametrize("forced, message", [([(99, 0, 5)], "forced position"), ([(0, 2, 5)], "forced row"),
                                             ([(0, 0, -3)], "forced token id"), ([(0, 0)], "triples"),
                                             ("0,0,5", "list of")])
def test_bad_forcing_names_the_problem(embedded_model, forced, message):
    with pytest.raises(ValueError, match=message):
        gcs.trace(PROMPTS, "gcs", max_new_tokens=4, model=embedded_model, forced=forced)
