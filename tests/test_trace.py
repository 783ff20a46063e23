"""gcs.trace: the step-through record is the race that generate runs, token for token."""

from __future__ import annotations

import math

import pytest

import gcs

PROMPTS = ["Why is the sky blue?", "What makes the sky look blue?"]


@pytest.mark.slow
@pytest.mark.parametrize("method", ["is", "gcs", "gcswr"])
def test_trace_winners_are_generates_tokens(embedded_model, method):
    trace = gcs.trace(PROMPTS, method=method, seed=5, temperature=0.9, top_p=0.95, max_new_tokens=12,
                      model=embedded_model)
    generated = gcs.generate(PROMPTS, method=method, seed=5, temperature=0.9, top_p=0.95, max_new_tokens=12,
                             model=embedded_model)
    assert list(trace.responses) == generated
    for row, ids in enumerate(trace.token_ids):
        assert [trace.steps[t][row].winner for t in range(len(ids))] == list(ids)
    assert len(trace.steps) <= 12 and all(len(step) == 2 for step in trace.steps)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["gcs", "gcswr"])
def test_the_winner_is_the_first_arrival(embedded_model, method):
    trace = gcs.trace(PROMPTS, method=method, seed=2, max_new_tokens=8, top=50, model=embedded_model)
    for step in (s for position in trace.steps for s in position if not s.finished):
        first = min(step.candidates, key=lambda c: c.arrival)
        assert first.token_id == step.winner
        probabilities = [c.probability for c in step.candidates]
        assert probabilities[:-1] == sorted(probabilities[:-1], reverse=True)


@pytest.mark.slow
def test_gcswr_losers_keep_their_residual_and_the_winner_is_redrawn(embedded_model):
    """E_i after = E_i - T p_i for every loser (T: the winner's arrival); the winner's noise is new."""
    trace = gcs.trace(PROMPTS, method="gcswr", seed=9, max_new_tokens=6, model=embedded_model)
    for step in (s for position in trace.steps for s in position if not s.finished):
        race_time = next(c.arrival for c in step.candidates if c.token_id == step.winner)
        for c in step.candidates:
            if c.token_id == step.winner:
                assert c.noise_after != c.noise
            else:
                assert c.noise_after == pytest.approx(max(c.noise - race_time * c.probability, 0), rel=1e-3, abs=1e-6)


@pytest.mark.slow
def test_gcs_rows_race_with_one_noise_vector_and_is_rows_draw_apart(embedded_model):
    gcs_trace = gcs.trace(PROMPTS, method="gcs", seed=4, max_new_tokens=4, top=50, model=embedded_model)
    compared = 0
    for first, second in gcs_trace.steps:
        shared = {c.token_id: c.noise for c in first.candidates}
        common = [c for c in second.candidates if c.token_id in shared]
        assert all(c.noise == shared[c.token_id] for c in common)
        compared += len(common)
    assert compared > 0
    is_trace = gcs.trace(PROMPTS, method="is", seed=4, max_new_tokens=4, model=embedded_model)
    assert all(first.uniform != second.uniform for first, second in is_trace.steps)
    assert all(c.noise is None for step in is_trace.steps[0] for c in step.candidates)


@pytest.mark.slow
def test_trace_frame_and_gumbel_form(embedded_model):
    trace = gcs.trace(PROMPTS, method="gcswr", seed=1, max_new_tokens=3, top=5, model=embedded_model)
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
@pytest.mark.slow
def test_trace_bad_input(embedded_model, kwargs, message):
    with pytest.raises(ValueError, match=message):
        gcs.trace(**{"prompts": PROMPTS, "model": embedded_model, **kwargs})


@pytest.mark.slow
@pytest.mark.parametrize("method", ["is", "gcswr"])
def test_forcing_a_token_branches_the_trace_there(embedded_model, method):
    plain = gcs.trace(PROMPTS, method=method, seed=4, max_new_tokens=10, model=embedded_model)
    other = next(c.token_id for c in plain.steps[3][1].candidates if c.token_id != plain.steps[3][1].winner)
    branch = gcs.trace(PROMPTS, method=method, seed=4, max_new_tokens=10, model=embedded_model, forced=[(3, 1, other)])
    assert branch.token_ids[1][:3] == plain.token_ids[1][:3] and branch.token_ids[1][3] == other
    assert branch.token_ids[0] == plain.token_ids[0]  # the other paraphrase is untouched
    assert branch.steps[3][1].forced and not branch.steps[3][0].forced and branch.forced == ((3, 1, other),)
    assert branch.frame()["forced"].sum() == len(branch.steps[3][1].candidates)


@pytest.mark.parametrize("forced, message", [([(99, 0, 5)], "forced position"), ([(0, 2, 5)], "forced row"),
                                             ([(0, 0, -3)], "forced token id"), ([(0, 0)], "triples"),
                                             ("0,0,5", "list of")])
@pytest.mark.slow
def test_bad_forcing_names_the_problem(embedded_model, forced, message):
    with pytest.raises(ValueError, match=message):
        gcs.trace(PROMPTS, method="gcs", max_new_tokens=4, model=embedded_model, forced=forced)


# -- carried_win: a clock that won one paraphrase's race wins the other's later ---------------------------
SKY = ["Why is the sky blue?", "What makes the sky look blue?"]


@pytest.mark.slow
def test_drawn_clock_is_the_noise_the_sampler_starts_with(embedded_model):
    """``drawn_clock`` is the sampler's own noise: draw 0 is its start state, and the trace's first race shows it."""
    from gcs.instrument.carrying import drawn_clock

    trace = gcs.trace(SKY, method="gcswr", seed=3, max_new_tokens=1, model=embedded_model)
    start, _ = gcs.sampling.samplers.RecyclingGumbelSampler.initial_state(3, len(embedded_model.tokenizer))
    for step in trace.steps[0]:
        for c in step.candidates:
            assert c.noise == drawn_clock(3, c.token_id, 0) == float(start[c.token_id])
        winner = next(c for c in step.candidates if c.token_id == step.winner)
        assert winner.noise_after == drawn_clock(3, step.winner, 1)  # the winner's fresh clock: its next draw


def emitted_before(trace, position, row, token):
    return sum(trace.steps[t][row].winner == token for t in range(position))


@pytest.mark.slow
def test_carried_wins_on_a_real_trace_are_exactly_the_shared_clocks_that_win_again(embedded_model):
    from gcs.instrument.carrying import drawn_clock

    trace = gcs.trace(SKY, method="gcswr", seed=0, max_new_tokens=16, model=embedded_model)
    found = 0
    for position, steps in enumerate(trace.steps):
        for step in steps:
            carried = gcs.carried_win(trace, position, step.row)
            draw = emitted_before(trace, position, step.row, step.winner)
            # brute force: an earlier race of the other paraphrase won by the same token's same draw
            earlier = [(t, other.row) for t in range(position) for other in trace.steps[t]
                       if other.row != step.row and other.winner == step.winner and not other.finished
                       and emitted_before(trace, t, other.row, step.winner) == draw]
            assert (carried is not None) == (bool(earlier) and not step.finished), (position, step.row)
            if carried is None:
                continue
            found += 1
            assert (carried.earlier_position, carried.earlier_row) == max(earlier)  # the latest
            assert carried.token_id == step.winner and carried.draw == draw
            assert carried.drawn == drawn_clock(0, step.winner, draw)
            winner = next(c for c in step.candidates if c.token_id == step.winner)
            assert carried.clock == winner.noise <= carried.drawn and carried.earlier_clock <= carried.drawn
    assert found > 0  # which races these are depends on the machine's kernels, as the tokens do


def synthetic(winners, clocks, method="gcswr", forced=()):
    """A two-row trace whose races are ``winners[t][r]`` (the only candidate) with ``clocks[t][r]``, seed 0."""
    steps = tuple(tuple(gcs.TraceStep(t, r, (gcs.Candidate(w, f"t{w}", 0.5, clocks[t][r], 1.0, 2 * clocks[t][r]),),
                                      w, f"t{w}", None, False, (t, r) in {(f[0], f[1]) for f in forced})
                        for r, w in enumerate(row)) for t, row in enumerate(winners))
    return gcs.Trace(("a", "b"), method, 0, 1.0, None, steps, ((), ()), ("", ""), tuple(forced))


def test_carried_win_needs_the_same_token_the_same_draw_and_a_worn_down_clock():
    from gcs.instrument.carrying import drawn_clock

    start = drawn_clock(0, 5, 0)
    below = start * 0.9
    carried = gcs.carried_win(synthetic([[5, 7], [8, 5]], [[start, 0.1], [0.1, below]]), 1, 1)
    assert (carried.token_id, carried.earlier_position, carried.earlier_row, carried.draw, carried.clock,
            carried.earlier_clock, carried.drawn) == (5, 0, 0, 0, below, start, start)
    # the same token, but row 2 had emitted it before: its clock is the next draw, not the one row 1 won with
    assert gcs.carried_win(synthetic([[5, 5], [8, 5]], [[start, start], [0.1, below]]), 1, 1) is None
    # a value above the drawn clock is not that clock worn down by recycling
    assert gcs.carried_win(synthetic([[5, 7], [8, 5]], [[start, 0.1], [0.1, start * 1.1]]), 1, 1) is None
    assert gcs.carried_win(synthetic([[5, 7], [8, 5]], [[start, 0.1], [0.1, below]], "gcs"), 1, 1) is None
    # a forced step redraws clocks the trace need not show: that row is left out from there on
    assert gcs.carried_win(synthetic([[5, 7], [8, 5]], [[start, 0.1], [0.1, below]], forced=[(0, 1, 7)]), 1, 1) is None
    assert gcs.carried_win(synthetic([[5, 7], [8, 5]], [[start, 0.1], [0.1, below]], forced=[(0, 0, 5)]), 1, 1) is None
