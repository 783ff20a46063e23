"""Theorem 1 closed form, p_repeat unbiasedness, geometric ensembling."""

import math

import numpy as np
import pytest
import torch
from scipy import stats

import gcs


def theorem1_brute_force(p, q) -> float:
    """Theorem 1 exactly as printed: sum over k of p_k q_k / (p_k q_k + sum_{i!=k} max(p_i q_k, q_i p_k))."""
    total = 0.0
    for k in range(len(p)):
        if p[k] * q[k] == 0:
            continue
        others = sum(max(p[i] * q[k], q[i] * p[k]) for i in range(len(p)) if i != k)
        total += p[k] * q[k] / (p[k] * q[k] + others)
    return total


def random_pair(seed, vocab, zeros):
    rng = np.random.default_rng(seed)
    p, q = rng.dirichlet(np.ones(vocab) * 0.5), rng.dirichlet(np.ones(vocab) * 0.5)
    if zeros:
        p[rng.choice(vocab, zeros, replace=False)] = 0
        q[rng.choice(vocab, zeros, replace=False)] = 0
        p, q = p / p.sum(), q / q.sum()
    return p, q


@pytest.mark.parametrize("seed, vocab, zeros", [(0, 2, 0), (1, 5, 0), (2, 30, 0), (3, 30, 10), (4, 200, 50), (5, 7, 3)])
def test_agreement_matches_brute_force(seed, vocab, zeros):
    p, q = random_pair(seed, vocab, zeros)
    assert gcs.agreement_probability(p, q) == pytest.approx(theorem1_brute_force(p, q), abs=1e-12)
    assert gcs.agreement_probability(p, q, method="is") == pytest.approx(float(p @ q), abs=1e-12)


def test_agreement_limits_and_batches():
    p, q = random_pair(6, 10, 0)
    assert gcs.agreement_probability(p, p) == pytest.approx(1.0)
    assert gcs.agreement_probability([1, 0], [0, 1]) == 0.0
    batch = gcs.agreement_probability(torch.tensor(np.stack([p, q])), torch.tensor(np.stack([q, q])))
    assert batch.shape == (2,)
    assert batch[0].item() == pytest.approx(gcs.agreement_probability(p, q))
    # Shared noise never agrees less often than independent draws.
    for seed in range(20):
        p, q = random_pair(seed, 12, seed % 4)
        assert gcs.agreement_probability(p, q) >= gcs.agreement_probability(p, q, method="is") - 1e-12


@pytest.mark.parametrize(
    "p, q, message",
    [
        ([0.5, 0.6], [0.5, 0.5], "sum to 1"),
        ([-0.5, 1.5], [0.5, 0.5], "non-negative"),
        ([math.nan, 1.0], [0.5, 0.5], "finite"),
        ([0.5, 0.5], [1.0], "same shape"),
        ([], [], "at least one category"),
    ],
)
def test_agreement_bad_input(p, q, message):
    with pytest.raises(ValueError, match=message):
        gcs.agreement_probability(p, q)
    with pytest.raises(ValueError, match="unknown method"):
        gcs.agreement_probability([1.0], [1.0], method="beam")


@pytest.mark.parametrize("n", [2, 3, 10, 57])
@pytest.mark.parametrize("p", [0.0, 0.1, 0.5, 0.83, 1.0])
def test_p_repeat_is_exactly_unbiased(n, p):
    """E[estimator] over Binomial(n, p), enumerated exactly, equals p^2 + (1-p)^2."""
    expectation = sum(
        stats.binom.pmf(k, n, p) * gcs.p_repeat([True] * k + [False] * (n - k)) for k in range(n + 1)
    )
    assert expectation == pytest.approx(p**2 + (1 - p) ** 2, abs=1e-12)


def test_p_repeat_simulation_and_plug_in_bias():
    rng = np.random.default_rng(0)
    p, n, trials = 0.3, 5, 40_000
    samples = rng.random((trials, n)) < p
    estimates = np.array([gcs.p_repeat(row) for row in samples])
    truth = p**2 + (1 - p) ** 2
    standard_error = estimates.std() / np.sqrt(trials)
    assert abs(estimates.mean() - truth) < 4.5 * standard_error
    plug_in = samples.mean(1) ** 2 + (1 - samples.mean(1)) ** 2
    assert plug_in.mean() - truth > 10 * standard_error  # the naive estimator is biased upwards


@pytest.mark.parametrize("labels, message", [([True], "at least 2"), ([[True, False]], "one-dimensional"),
                                             ([0, 2], "booleans")])
def test_p_repeat_bad_input(labels, message):
    with pytest.raises(ValueError, match=message):
        gcs.p_repeat(labels)


def reference_geometric_mean(logits: np.ndarray) -> np.ndarray:
    probabilities = np.exp(logits - logits.max(axis=-1, keepdims=True))
    probabilities /= probabilities.sum(axis=-1, keepdims=True)
    mean = np.prod(probabilities ** (1 / len(probabilities)), axis=0)
    return mean / mean.sum()


@pytest.mark.parametrize("n, vocab", [(1, 4), (2, 5), (4, 50)])
def test_geometric_ensemble_matches_reference(n, vocab):
    logits = np.random.default_rng(n).normal(size=(n, vocab)) * 2
    got = gcs.geometric_ensemble(torch.tensor(logits)).exp().numpy()
    np.testing.assert_allclose(got, reference_geometric_mean(logits), rtol=1e-5, atol=1e-7)


def test_geometric_ensemble_properties():
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(0))
    shifted = logits + torch.tensor([[1.0], [-50.0], [7.0]])
    assert torch.allclose(gcs.geometric_ensemble(logits), gcs.geometric_ensemble(shifted), atol=1e-5)
    single = gcs.geometric_ensemble(logits[:1])
    assert torch.allclose(single, torch.log_softmax(logits[0], -1), atol=1e-6)
    masked = logits.clone()
    masked[1, 5] = -math.inf
    assert gcs.geometric_ensemble(masked)[5] == -math.inf
    batched = gcs.geometric_ensemble(torch.stack([logits, shifted]))
    assert batched.shape == (2, 20)
    # Eq. 1 is the minimiser of the average forward KL (appendix D): no small perturbation does better.
    q = gcs.geometric_ensemble(logits).double()
    members = torch.log_softmax(logits.double(), -1)

    def average_kl(log_q):
        return (log_q.exp() * (log_q - members)).sum(-1).mean()

    for seed in range(5):
        noise = torch.randn(20, generator=torch.Generator().manual_seed(seed)).double()
        nudged = torch.log_softmax(q + 0.05 * noise, -1)
        assert average_kl(nudged) > average_kl(q)


def test_geometric_ensemble_bad_input():
    with pytest.raises(ValueError, match=r"\[..., n, vocab\]"):
        gcs.geometric_ensemble(torch.zeros(5))
    with pytest.raises(ValueError, match="floating"):
        gcs.geometric_ensemble(torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="share no token"):
        gcs.geometric_ensemble(torch.tensor([[0.0, -math.inf], [-math.inf, 0.0]]))
