"""gcs.verdict: paired comparisons over seeds that hold together, by the exact sign-flip test, against a brute-force
reference, scipy, Hartigan's subset means and by simulation.

The simulations use fixed seeds. Under exchangeable null scores the share of runs in which any line claims an effect
must not be significantly above the nominal 5 % (one-sided binomial test, p > 1e-3), at 8 seeds and with discrete
scores at 4 (where the exact test cannot claim at all); with one comparison the exact test's size is its theory's,
floor(alpha 2**(n - 1)) / 2**(n - 1), both ways; a real effect must be found in most runs.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pandas as pd
import pytest
import scipy.stats

import gcs
from gcs.stats.paired import paired_tests
from gcs.stats.signflip import sign_flip_p


def long_scores(table: dict[tuple[str, str], list[float]], seeds=None) -> pd.DataFrame:
    """{(method, metric): scores per seed} as CompareReport.scores' long frame."""
    records = []
    for (method, metric), values in table.items():
        for seed, value in zip(seeds or range(len(values)), values, strict=True):
            records.append({"method": method, "seed": seed, "metric": metric, "consistency": value})
    return pd.DataFrame.from_records(records)


def subset_means(d: np.ndarray) -> np.ndarray:
    """The means of d's 2**n - 1 non-empty subsets, sorted (Hartigan 1969: they cut the line into 2**n pieces that
    each hold a symmetric distribution's centre with probability 1 / 2**n)."""
    return np.sort([d[list(subset)].mean() for size in range(1, len(d) + 1)
                    for subset in itertools.combinations(range(len(d)), size)])


@pytest.mark.parametrize("n", [6, 8, 10, 12])
def test_the_interval_is_hartigan_s_subset_means_and_the_claim_is_its_excluding_0(n):
    """The sign-flip test inverted at level alpha keeps the shifts between the k-th smallest and the k-th largest
    subset mean, k = floor(alpha 2**(n - 1)); a claim is exactly an interval without 0."""
    rng = np.random.default_rng(n)
    for trial in range(20):
        base, other = rng.normal(0.8, 0.05, n), rng.normal(0.8 + 0.01 * (trial % 4), 0.05, n)
        scores = long_scores({("is", "e5"): base, ("gcswr", "e5"): other, ("gcs", "e5"): rng.normal(0.8, 0.05, n)})
        row = paired_tests(scores, confidence=0.95).set_index("method").loc["gcswr"]
        d = other - base
        means, k = subset_means(d), int(np.floor(0.05 / 2 * 2 ** (n - 1)))
        assert row["claimable"] == (k >= 1)
        if k >= 1:
            assert (row["low"], row["high"]) == (pytest.approx(means[k - 1], abs=1e-9),
                                                 pytest.approx(means[-k], abs=1e-9))
            assert row["beyond_noise"] == (not row["low"] <= 0 <= row["high"]) == (row["p"] <= 0.05 / 2)
        assert row["p"] == pytest.approx(sign_flip_p(d)) and row["sd"] == pytest.approx(np.std(d, ddof=1))


@pytest.mark.parametrize("n", [3, 5, 8, 10])
def test_the_exact_test_s_size_is_its_theory_s(n):
    """Continuous symmetric null differences, one comparison: the two-sided p-values are multiples of 2 / 2**n (a
    pattern and its negation tie), so P(p <= alpha) = floor(alpha 2**(n - 1)) / 2**(n - 1) exactly (other ties have
    probability 0): 0 at 3 and 5 seeds, 6 / 128 at 8. Checked both ways at 4 standard errors over 20,000 runs."""
    rng, runs, alpha = np.random.default_rng(100 + n), 20_000, 0.05
    rejected = np.mean([sign_flip_p(rng.standard_t(3, n)) <= alpha for _ in range(runs)])
    size = np.floor(alpha * 2 ** (n - 1)) / 2 ** (n - 1)
    assert abs(rejected - size) <= 4 * np.sqrt(max(size, 1 / runs) * (1 - size) / runs), (rejected, size)


@pytest.mark.parametrize("n", [1, 2, 3, 6, 9])
def test_the_sign_flip_p_value_counts_every_sign_pattern(n):
    rng = np.random.default_rng(10 + n)
    for d in (rng.normal(0.3, 1, n), np.round(rng.normal(0, 1, n), 1), np.full(n, 0.2), np.zeros(n)):
        patterns = [np.array(s) * d for s in itertools.product((1, -1), repeat=n)]
        expected = np.mean([abs(p.mean()) >= abs(d.mean()) - 1e-12 for p in patterns])
        assert sign_flip_p(d) == pytest.approx(expected)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 12])
def test_the_sign_flip_p_value_matches_scipy_permutation_test(n):
    """scipy's exact paired permutation test (one sample, signs flipped), on random differences with ties."""
    rng = np.random.default_rng(20 + n)
    for d in (rng.normal(0.02, 0.05, n).round(3), np.r_[np.full(n // 2, 0.01), rng.normal(0, 0.02, n - n // 2)]):
        reference = scipy.stats.permutation_test((d,), lambda x, axis: np.mean(x, axis=axis), vectorized=True,
                                                 permutation_type="samples", n_resamples=np.inf)
        assert sign_flip_p(d) == pytest.approx(reference.pvalue)


@pytest.mark.parametrize("differences", [[0.02, 0.02], [0.001] * 4, [0.0] * 5, [0.05] * 3, [0.3, 0.2, 0.25, 0.4]])
def test_too_few_seeds_for_the_exact_test_never_claim_and_say_so(differences):
    n = len(differences)
    scores = long_scores({("is", "e5"): [0.5] * n, ("gcswr", "e5"): [0.5 + d for d in differences]})
    row = paired_tests(scores).iloc[0]
    assert row["p"] == pytest.approx(sign_flip_p(differences)) and row["p"] >= 2 / 2**n
    assert not row["claimable"] and not row["beyond_noise"] and np.isnan(row["low"])  # 2 / 2**n > 0.05 for n <= 5
    line = gcs.verdict(scores)[0]
    assert f"{n} seeds are too few for any claim at 95 %" in line and "needs at least 6" in line
    assert "no claim either way; use more seeds" in line and "within noise" not in line


def test_sixteen_identical_positive_differences_are_beyond_noise_by_the_exact_test():
    scores = long_scores({("is", "e5"): [0.8] * 16, ("gcswr", "e5"): [0.85] * 16})
    row = paired_tests(scores).iloc[0]
    assert row["p"] == pytest.approx(2 / 2**16) and row["beyond_noise"]
    assert row["low"] == pytest.approx(0.05) and row["high"] == pytest.approx(0.05)  # no spread: one point


def test_one_seed_is_an_anecdote_and_missing_seeds_are_dropped_from_the_pairs():
    one = long_scores({("is", "e5"): [0.8], ("gcswr", "e5"): [0.9]})
    assert "One seed is an anecdote" in gcs.verdict(one)[0] and not paired_tests(one).iloc[0]["beyond_noise"]
    scores = pd.concat([long_scores({("is", "e5"): [0.8, 0.7, 0.9]}, seeds=[0, 1, 2]),
                        long_scores({("gcswr", "e5"): [0.85, 0.75]}, seeds=[1, 2])])
    row = paired_tests(scores).iloc[0]
    assert row["n"] == 2 and row["diff"] == pytest.approx(np.mean([0.85 - 0.7, 0.75 - 0.9]))


def test_bad_scores_are_refused_with_the_reason():
    scores = long_scores({("is", "e5"): [0.8, 0.7], ("gcswr", "e5"): [0.9, 0.8]})
    with pytest.raises(ValueError, match="seed 1 appears more than once for gcswr under e5"):
        gcs.verdict(pd.concat([scores, scores.iloc[[3]]]))
    with pytest.raises(ValueError, match="baseline 'is' is not among"):
        gcs.verdict(scores[scores.method == "gcswr"])
    with pytest.raises(ValueError, match="confidence must be"):
        gcs.verdict(scores, confidence=1.5)
    with pytest.raises(ValueError, match="columns method, seed, metric, consistency"):
        gcs.verdict(scores.drop(columns="seed"))


def test_metrics_are_a_list_or_one_comma_string_and_the_baseline_any_case():
    """``metrics="e5"`` was read letter by letter (KeyError ('gcswr', 'e')), as compare_report takes it whole; an
    unknown metric was a KeyError; ``baseline="IS"`` was refused though methods are case-insensitive elsewhere."""
    rng = np.random.default_rng(1)
    scores = long_scores({(method, metric): list(rng.random(8)) for method in ("is", "gcs", "gcswr")
                          for metric in ("e5", "aligned")})
    plan = gcs.sequential_plan(8, comparisons=2)
    for call in (lambda **k: paired_tests(scores, **k), lambda **k: gcs.sequential_tests(scores, plan=plan, **k)):
        assert list(call(metrics="e5")["metric"]) == ["e5", "e5"]
        assert call(metrics=" aligned, e5")["metric"].tolist() == call(metrics=["aligned", "e5"])["metric"].tolist()
        assert call(baseline="IS").equals(call())
        with pytest.raises(ValueError, match=r"unknown scored metric 'minilm': expected one of e5, aligned"):
            call(metrics=["e5", "minilm"])
        with pytest.raises(TypeError, match="metrics must be a list"):
            call(metrics=5)
    assert gcs.verdict(scores, metrics="e5") == gcs.verdict(scores, metrics=["e5"])
    assert len(gcs.verdict(scores, metrics="e5")) == 2


def test_the_sentences_label_their_confidence_and_metric():
    rng = np.random.default_rng(3)
    base = rng.normal(0.8, 0.01, 8)
    scores = long_scores({("is", "e5"): base, ("gcswr", "e5"): base + 0.04 + rng.normal(0, 0.01, 8),
                          ("is", "aligned"): base - 0.7, ("gcswr", "aligned"): base - 0.7 + rng.normal(0, 0.01, 8)})
    lines = gcs.verdict(scores, confidence=0.9)
    assert len(lines) == 2 and all("90 % CI" in line and "simultaneous over 2 comparisons" in line for line in lines)
    assert "over 8 seeds" in lines[0] and "E5 points" in lines[0] and "beyond noise" in lines[0]
    assert "aligned-agreement points" in lines[1] and "what shared noise does directly" in lines[1]


def null_scores(rng, seeds: int) -> pd.DataFrame:
    """3 exchangeable methods, 2 metrics: each seed's paraphrases set a level, each method adds its own noise."""
    table = {}
    for metric, (level, spread) in {"e5": (0.85, 0.02), "aligned": (0.1, 0.03)}.items():
        seed_level = rng.normal(level, spread, seeds)
        for method in gcs.METHODS:
            table[(method, metric)] = seed_level + rng.normal(0, spread, seeds)
    return long_scores(table)


def test_under_the_null_any_claim_is_at_most_as_likely_as_the_nominal_5_percent():
    rng, runs = np.random.default_rng(2026), 2000
    claims = sum(paired_tests(null_scores(rng, 8))["beyond_noise"].any() for _ in range(runs))
    assert scipy.stats.binom.sf(claims - 1, runs, 0.05) > 1e-3, f"{claims} of {runs} null runs claimed an effect"


def poisson_scores(rng, seeds: int) -> pd.DataFrame:
    """3 exchangeable methods, 3 discrete scores (counts, Poisson-like: many ties, skewed), as the issue measured."""
    return long_scores({(method, metric): rng.poisson(rate, seeds).astype(float)
                        for metric, rate in {"count_a": 0.5, "count_b": 1.5, "count_c": 4.0}.items()
                        for method in gcs.METHODS})


@pytest.mark.parametrize("seeds", [4, 8])
def test_discrete_null_scores_keep_the_error_rate(seeds):
    """Where a paired t test claimed in 5.8 % of null runs at 4 seeds (discrete scores), the exact test cannot claim
    at all at 4 seeds, and stays within 5 % at 8."""
    rng, runs = np.random.default_rng(46 + seeds), 500
    claims = sum(paired_tests(poisson_scores(rng, seeds))["beyond_noise"].any() for _ in range(runs))
    if seeds == 4:
        assert claims == 0
    assert scipy.stats.binom.sf(claims - 1, runs, 0.05) > 1e-3, f"{claims} of {runs} null runs claimed an effect"


def test_a_real_effect_is_found():
    """12 seeds: with 4 comparisons the exact test's level is 0.0125, which 8 seeds reach only when every seed agrees
    in sign (its floor, 2 / 256, is 0.0078)."""
    rng, runs, found = np.random.default_rng(7), 200, 0
    for _ in range(runs):
        scores = null_scores(rng, 12)
        gain = (scores.method == "gcswr") & (scores.metric == "e5")
        scores.loc[gain, "consistency"] += 0.05  # 2.5 standard deviations of one method's noise
        tests = paired_tests(scores).set_index(["method", "metric"])
        found += bool(tests.loc[("gcswr", "e5"), "beyond_noise"])
    assert found >= 0.8 * runs


def test_no_number_in_a_sentence_reads_as_a_signed_zero_unless_it_is_zero():
    """An interval that reaches just below 0 must say so ("-0.03"), never "-0.0", which reads as touching 0."""
    rng, lines = np.random.default_rng(11), []
    for _ in range(300):
        lines += gcs.verdict(null_scores(rng, 8))
    assert re.search(r"CI [+-]0\.0\d", " ".join(lines)), "no bound near 0 drawn: the test checks nothing"
    assert not re.search(r"[+-]0\.0(?!\d)", " ".join(lines))
