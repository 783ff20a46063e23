"""Samplers: exactness (marginals, Theorems 1-2), coupling, determinism, numerics, validation.

GCSwR runs on its fused CPU kernel, the path users get on CPU; eager torch (the CUDA path) draws the same bits,
which tests/test_kernels.py checks, so the statistics are not run twice.
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
    require_fused_kernel,
    sequence_probability,
    z_score,
)
from gcs.sampling import reference, samplers

METHODS = gcs.METHODS


@pytest.fixture(autouse=True, scope="module")
def fused_kernel():
    require_fused_kernel()

DISTRIBUTIONS = {
    "uniform": [0.25, 0.25, 0.25, 0.25],
    "skewed": [0.02, 0.08, 0.2, 0.7],
    "masked": [0.3, 0.0, 0.5, 0.0, 0.2],
}


def logits_of(probabilities, rows, dtype=torch.float32):
    return torch.tensor(probabilities, dtype=torch.float64).log().to(dtype).expand(rows, -1).clone()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("name", DISTRIBUTIONS)
def test_single_step_marginals(method, name):
    probabilities = DISTRIBUTIONS[name]
    rows = 20_000
    tokens = gcs.make_sampler(method, seed=list(range(rows))).sample(logits_of(probabilities, rows))
    counts = torch.bincount(tokens, minlength=len(probabilities)).numpy()
    assert chi_square_p(counts, probabilities) > P_VALUE_THRESHOLD


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_marginals_for_low_and_high_precision_logits(method, dtype):
    probabilities = [0.1, 0.6, 0.3]
    logits = logits_of(probabilities, 20_000, dtype)
    expected = torch.softmax(logits.double(), dim=-1)[0].numpy()  # what the rounded logits mean
    tokens = gcs.make_sampler(method, seed=list(range(20_000))).sample(logits)
    assert chi_square_p(torch.bincount(tokens, minlength=3).numpy(), expected) > P_VALUE_THRESHOLD


def history_model(history: torch.Tensor, vocab: int = 3) -> torch.Tensor:
    """Synthetic LM: next-token logits depend on the whole history (its length, last token and token sum)."""
    rows, length = history.shape
    base = torch.linspace(-0.4, 0.4, vocab)
    if length == 0:
        return base.expand(rows, -1).clone()
    last = history[:, -1:].double()
    total = history.sum(dim=1, keepdim=True).double()
    tokens = torch.arange(vocab, dtype=torch.float64)
    logits = base - 0.5 * (tokens == last) + 0.3 * torch.cos(total * (tokens + 1) + length)
    return logits.float()


@pytest.mark.parametrize("method", METHODS)
def test_sequences_follow_the_model_exactly(method):
    """Theorem 2 (and its analogues for IS/GCS): the joint law of whole responses is the model's."""
    rows, length, vocab = 30_000, 4, 3
    sampler = gcs.make_sampler(method, seed=list(range(rows)))
    history = torch.zeros(rows, 0, dtype=torch.long)
    for _ in range(length):
        history = torch.cat([history, sampler.sample(history_model(history, vocab))[:, None]], dim=1)
    codes = (history * torch.tensor([vocab**i for i in range(length)])).sum(dim=1)
    counts = torch.bincount(codes, minlength=vocab**length).numpy()
    expected = [sequence_probability(s, history_model, vocab) for s in all_sequences(vocab, length)]
    assert chi_square_p(counts, expected) > P_VALUE_THRESHOLD


def paper_recycling_reference(seed: int, steps: int, vocab: int) -> tuple[list[int], np.ndarray]:
    """``gcs.sampling.reference``'s literal float64 Theorem 2 step, run on the history-dependent model."""
    state = reference.RecyclingState.start(seed, vocab)
    history, tokens = torch.zeros(1, 0, dtype=torch.long), []
    for _ in range(steps):
        log_h = torch.log_softmax(history_model(history, vocab).double(), dim=-1)[0].numpy()
        tokens.append(reference.recycling_step(state, log_h))
        history = torch.cat([history, torch.tensor([[tokens[-1]]])], dim=1)
    return tokens, state.g


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_gcswr_matches_the_papers_update_token_for_token(seed):
    """Our race form (float32, E_i <- E_i - T_k p_i) against Theorem 2's update (float64, literal)."""
    steps, vocab = 200, 12
    expected_tokens, expected_gumbel = paper_recycling_reference(seed, steps, vocab)
    sampler = gcs.make_sampler("gcswr", seed=seed)
    history = torch.zeros(1, 0, dtype=torch.long)
    for _ in range(steps):
        history = torch.cat([history, sampler.sample(history_model(history, vocab))[:, None]], dim=1)
    assert history[0].tolist() == expected_tokens
    np.testing.assert_allclose(-np.log(sampler.residual[0].double().numpy()), expected_gumbel, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("method", ["gcs", "gcswr"])
def test_theorem1_agreement_by_monte_carlo(method):
    p = torch.tensor([0.05, 0.15, 0.3, 0.5])
    q = torch.tensor([0.1, 0.3, 0.25, 0.35])
    pairs = 40_000
    seeds = np.repeat(np.arange(pairs), 2)  # rows 2j and 2j+1 share seed j
    logits = torch.stack([p.log(), q.log()]).repeat(pairs, 1)
    tokens = gcs.make_sampler(method, seed=seeds).sample(logits).view(pairs, 2)
    agree = int((tokens[:, 0] == tokens[:, 1]).sum())
    theory = gcs.agreement_probability(p, q)
    assert theory > gcs.agreement_probability(p, q, method="is") + 0.2
    assert abs(z_score(agree, pairs, theory)) < Z_THRESHOLD


def test_independent_sampling_agreement_is_sum_p_q():
    p = torch.tensor([0.05, 0.15, 0.3, 0.5])
    q = torch.tensor([0.1, 0.3, 0.25, 0.35])
    pairs = 40_000
    logits = torch.stack([p.log(), q.log()]).repeat(pairs, 1)
    tokens = gcs.make_sampler("is", seed=0).sample(logits).view(pairs, 2)
    agree = int((tokens[:, 0] == tokens[:, 1]).sum())
    assert abs(z_score(agree, pairs, float((p * q).sum()))) < Z_THRESHOLD


@pytest.mark.parametrize("method", METHODS)
def test_ten_thousand_steps_on_two_tokens(method):
    """The paper's listing fails once a token is drawn 100 times; counter-based noise never runs out."""
    probabilities = [0.3, 0.7]
    sampler = gcs.make_sampler(method, seed=[0, 1, 2, 3])
    logits = logits_of(probabilities, 4)
    tokens = torch.stack([sampler.sample(logits) for _ in range(10_000)])
    counts = torch.bincount(tokens.flatten(), minlength=2).numpy()
    # Given any history the next token is Cat(p), so every row is an i.i.d. sequence.
    assert chi_square_p(counts, probabilities) > P_VALUE_THRESHOLD
    if method == "gcswr":
        assert torch.isfinite(sampler.residual).all() and (sampler.residual > 0).all()
        assert int(sampler.draws.max()) > 1000


@pytest.mark.parametrize("method", METHODS)
def test_extreme_logits_stay_finite(method):
    """Huge gaps, -inf masks, exact ties and half-precision logits: no NaN/inf in state or output."""
    sampler = gcs.make_sampler(method, seed=[0, 0, 1, 2])
    logits = torch.tensor(
        [
            [0.0, -1e4, -math.inf, -30.0],
            [0.0, 0.0, 0.0, 0.0],
            [1e4, -1e4, 0.0, -math.inf],
            [-math.inf, -math.inf, 5.0, -math.inf],
        ]
    )
    for dtype in (torch.float16, torch.bfloat16, torch.float32) * 300:
        tokens = sampler.sample(logits.to(dtype))
        assert tokens[2] == 0 and tokens[3] == 2  # the only tokens with any probability
        assert tokens[0] != 2
    if method == "gcswr":
        assert torch.isfinite(sampler.residual).all() and (sampler.residual > 0).all()


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("scale", [1e6, 1e11, 1e30])
def test_huge_gaps_pick_the_argmax(method, scale):
    """Temperatures near 0 scale logits by 1/T: every method must then equal greedy, exactly.

    With the gap taken after scaling by log2 e, 1e11 * log2 e rounds by thousands and the top
    token's rate became 0 or inf (IS: index errors; GCSwR: token 0 on half the rows).
    """
    generator = torch.Generator().manual_seed(5)
    logits = torch.randn(200, 50, generator=generator) * scale
    sampler = gcs.make_sampler(method, seed=list(range(200)))
    for _ in range(3):  # GCSwR: the recycled state stays valid after such steps too
        assert torch.equal(sampler.sample(logits), logits.argmax(dim=-1))
    assert torch.equal(samplers.relative_rates(logits, logits.amax(dim=-1)).amax(dim=-1), torch.ones(200))


def test_relative_rates_match_float64_exp():
    # exp2(x * log2 e) adds a rounding of relative 2**-24 to the exponent: < 1e-5 down to 85 nats below
    # the top (further down float32 itself turns subnormal and loses relative precision).
    generator = torch.Generator().manual_seed(3)
    logits = torch.cat([torch.rand(4, 10_000, generator=generator) * -85, torch.zeros(4, 1)], dim=1) + 7.0
    logits[:, :10] = -math.inf
    rates = samplers.relative_rates(logits, logits.amax(dim=-1)).double()
    exact = (logits.double() - logits.amax(dim=-1, keepdim=True).double()).exp()
    assert torch.equal(rates[:, :10], torch.zeros(4, 10))
    assert ((rates[:, 10:] - exact[:, 10:]).abs() / exact[:, 10:]).max() < 1e-5
    assert (rates <= 1 + 1e-6).all()


@pytest.mark.parametrize("vocab", [1, 7, 512, 1000, 49_152, 50_257, 128_256, 151_936])
def test_block_argmin_is_first_argmin(vocab):
    # Block sizes from divisors (aligned or not) or padding; ties must resolve to the first index like min().
    generator = torch.Generator().manual_seed(vocab)
    x = torch.randint(0, 50, (5, vocab), generator=generator).float()  # many exact ties
    x[1] = float("inf")
    x[2, -1] = -1.0
    value, index = samplers._first_argmin(x, samplers._block_size(vocab))
    expected = x.min(dim=-1)
    assert torch.equal(value, expected.values) and torch.equal(index, expected.indices)


@pytest.mark.parametrize("method", METHODS)
def test_masked_tokens_are_never_chosen(method):
    generator = torch.Generator().manual_seed(0)
    rows, vocab = 64, 500
    sampler = gcs.make_sampler(method, seed=list(range(rows)))
    for _ in range(50):
        logits = torch.randn(rows, vocab, generator=generator) * 3
        mask = torch.rand(rows, vocab, generator=generator) < 0.9
        mask[:, 0] = False
        tokens = sampler.sample(logits.masked_fill(mask, -math.inf))
        assert not mask.gather(1, tokens[:, None]).any()


@pytest.mark.parametrize("method", METHODS)
def test_deterministic_per_seed_and_reset(method):
    logits = torch.randn(3, 1000, generator=torch.Generator().manual_seed(1))
    sampler = gcs.make_sampler(method, seed=[4, 5, 6])
    first = torch.stack([sampler.sample(logits) for _ in range(30)])
    sampler.reset()
    again = torch.stack([sampler.sample(logits) for _ in range(30)])
    other = gcs.make_sampler(method, seed=[7, 8, 9])
    different = torch.stack([other.sample(logits) for _ in range(30)])
    assert torch.equal(first, again)
    assert not torch.equal(first, different)


@pytest.mark.parametrize("method", ["gcs", "gcswr"])
def test_equal_seeds_are_coupled(method):
    logits = torch.randn(1, 5000, generator=torch.Generator().manual_seed(2)).expand(4, -1)
    sampler = gcs.make_sampler(method, seed=[3, 3, 3, 3])
    for _ in range(20):
        tokens = sampler.sample(logits)
        assert (tokens == tokens[0]).all()


def test_independent_rows_differ_despite_equal_seed():
    logits = torch.zeros(4, 5000)
    sampler = gcs.make_sampler("is", seed=3)
    tokens = torch.stack([sampler.sample(logits) for _ in range(5)])
    assert len({tuple(column.tolist()) for column in tokens.T}) == 4


def test_different_methods_use_different_noise():
    logits = torch.zeros(1, 10_000)
    draws = {m: torch.stack([gcs.make_sampler(m, seed=0).sample(logits) for _ in range(1)]) for m in METHODS}
    assert draws["is"].item() != draws["gcs"].item()
    assert draws["gcs"].item() == draws["gcswr"].item()  # the same first Gumbel vector, by design


@pytest.mark.parametrize("method", METHODS)
def test_batch_invariance(method):
    """A row's tokens do not depend on the other rows of its batch (given its seed and stream)."""
    generator = torch.Generator().manual_seed(3)
    steps = [torch.randn(3, 300, generator=generator) for _ in range(25)]
    batch = gcs.make_sampler(method, seed=[10, 11, 12], streams=[100, 101, 102])
    alone = gcs.make_sampler(method, seed=[11], streams=[101])
    for logits in steps:
        assert batch.sample(logits)[1] == alone.sample(logits[1:2])[0]


@pytest.mark.parametrize("method", [*METHODS, "ctx"])
def test_inactive_rows_keep_their_state(method):
    # Row 1 is paused for two steps: it then continues as if those steps never happened,
    # and row 0, active throughout, is untouched by its neighbour's pause. Four tokens: picks repeat,
    # so the draw counts matter too (and ctx's window and context counts).
    generator = torch.Generator().manual_seed(4)
    steps = [torch.randn(3, 4, generator=generator) for _ in range(40)]
    paused, never_paused, started_late = (gcs.make_sampler(method, seed=[1, 2, 1]) for _ in range(3))
    pause = torch.tensor([True, False, True])
    got = [paused.sample(logits, active=pause if i < 2 else None) for i, logits in enumerate(steps)]
    full = [never_paused.sample(logits) for logits in steps]
    late = [started_late.sample(logits) for logits in steps[2:]]
    assert [t[[0, 2]].tolist() for t in got] == [t[[0, 2]].tolist() for t in full]
    assert [t[1].item() for t in got[2:]] == [t[1].item() for t in late]


def test_zero_probability_pick_leaves_other_noise_untouched():
    """Recycling exactness in action: forcing a token other tokens cannot take changes nothing else."""
    p = torch.tensor([0.0, 0.2, 0.5, 0.3]).log()
    forced = torch.tensor([0.0, -math.inf, -math.inf, -math.inf])
    plain = gcs.make_sampler("gcswr", seed=9)
    detour = gcs.make_sampler("gcswr", seed=9)
    detour.sample(forced[None])
    for _ in range(50):
        assert plain.sample(p[None]) == detour.sample(p[None])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"method": "greedy"}, "unknown method"),
        ({"seed": -1}, r"\[0, 2\*\*63 - 1\]"),
        ({"seed": 2**63}, r"\[0, 2\*\*63 - 1\]"),
        ({"seed": 1.5}, "must be an integer"),
        ({"seed": True}, "bool"),
        ({"seed": []}, "empty"),
        ({"seed": [1, "x"]}, r"seed\[1\]"),
        ({"streams": 3}, "one integer per row"),
        ({"seed": [1, 2], "streams": [1, 2, 3]}, "different lengths"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gcs.make_sampler(**{"method": "gcswr", **kwargs})


@pytest.mark.parametrize("method", METHODS)
def test_bad_logits(method):
    sampler = gcs.make_sampler(method, seed=[1, 2])
    with pytest.raises(ValueError, match="torch.Tensor"):
        sampler.sample([[0.0, 1.0]])
    with pytest.raises(ValueError, match="floating"):
        sampler.sample(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\[batch, vocab\]"):
        sampler.sample(torch.zeros(3))
    with pytest.raises(ValueError, match="2 entries but logits have 3 rows"):
        sampler.sample(torch.zeros(3, 4))
    with pytest.raises(ValueError, match="row 1"):
        sampler.sample(torch.tensor([[0.0, 1.0], [math.nan, 0.0]]))
    sampler.reset()
    with pytest.raises(ValueError, match="row 0"):
        sampler.sample(torch.tensor([[-math.inf, -math.inf], [0.0, 1.0]]))
    sampler.reset()
    sampler.sample(torch.zeros(2, 4))
    with pytest.raises(ValueError, match="reset"):
        sampler.sample(torch.zeros(2, 5))
    with pytest.raises(ValueError, match="active"):
        sampler.sample(torch.zeros(2, 4), active=torch.tensor([True]))


def test_make_sampler_names():
    assert [type(gcs.make_sampler(m)).__name__ for m in ("IS", "gcs", "GCSwR", "ctx")] == [
        "IndependentSampler",
        "GumbelSampler",
        "RecyclingGumbelSampler",
        "ContextGumbelSampler",
    ]
    assert set(itertools.chain(gcs.METHOD_NAMES)) == set(gcs.EXTENDED_METHODS) > set(METHODS)


def test_mixed_methods_match_their_own_samplers():
    generator = torch.Generator().manual_seed(5)
    steps = [torch.randn(5, 100, generator=generator) for _ in range(20)]
    for logits in steps:
        logits[3] = logits[1]
    methods, seeds, streams = ["is", "gcswr", "gcs", "gcswr", "is"], [1, 2, 3, 2, 5], [10, 11, 12, 13, 14]
    mixed = gcs.make_sampler(methods, seed=seeds, streams=streams)
    assert type(mixed).__name__ == "MixedSampler"
    alone = [gcs.make_sampler(m, seed=[s], streams=[t]) for m, s, t in zip(methods, seeds, streams, strict=True)]
    for logits in steps:
        tokens = mixed.sample(logits)
        assert tokens.tolist() == [a.sample(logits[i : i + 1]).item() for i, a in enumerate(alone)]
        assert tokens[1] == tokens[3]  # equal seeds and logits under gcswr: coupled inside a mixed batch


def test_mixed_methods_bad_input():
    with pytest.raises(ValueError, match="unknown method"):
        gcs.make_sampler(["is", "nope"])
    with pytest.raises(ValueError, match="2 methods but 3 seeds"):
        gcs.make_sampler(["is", "gcs"], seed=[1, 2, 3])
    with pytest.raises(ValueError, match="2 methods but logits have 3 rows"):
        gcs.make_sampler(["is", "gcs"]).sample(torch.zeros(3, 4))


@pytest.mark.parametrize("method", ["is", "gcs"])
def test_only_gcswr_and_ctx_continue_from_a_state(method):
    state = gcs.RecyclingGumbelSampler.initial_state(0, 4)
    with pytest.raises(ValueError, match="only gcswr and ctx carry state"):
        gcs.make_sampler(method, seed=[0]).begin(1, 4, state=(state[0][None], state[1][None]))
    resumed = gcs.make_sampler("gcswr", seed=[0]).begin(1, 4, state=(state[0][None].clone(), state[1][None].clone()))
    assert torch.equal(resumed.sample(torch.zeros(1, 4)), gcs.make_sampler("gcswr", seed=[0]).sample(torch.zeros(1, 4)))
