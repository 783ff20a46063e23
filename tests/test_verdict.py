"""gcs.verdict: paired comparisons over seeds that hold together, against scipy and by simulation.

The simulations use fixed seeds. Under exchangeable null scores the share of runs in which any line
claims an effect must not be significantly above the nominal 5 % (one-sided binomial test, p > 1e-3);
a real effect must be found in most runs.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pandas as pd
import pytest
import scipy.stats

import gcs
from gcs.stats.paired import paired_tests, sign_flip_p


def long_scores(table: dict[tuple[str, str], list[float]], seeds=None) -> pd.DataFrame:
    """{(method, metric): scores per seed} as CompareReport.scores' long frame."""
    records = []
    for (method, metric), values in table.items():
        for seed, value in zip(seeds or range(len(values)), values, strict=True):
            records.append({"method": method, "seed": seed, "metric": metric, "consistency": value})
    return pd.DataFrame.from_records(records)


@pytest.mark.parametrize("n", [2, 3, 5, 8, 16])
def test_the_t_test_and_interval_are_scipy_s_at_the_simultaneous_level(n):
    rng = np.random.default_rng(n)
    for _ in range(50):
        base, other = rng.normal(0.8, 0.05, n), rng.normal(0.82, 0.05, n)
        scores = long_scores({("is", "e5"): base, ("gcswr", "e5"): other, ("gcs", "e5"): rng.normal(0.8, 0.05, n)})
        row = paired_tests(scores, confidence=0.95).set_index("method").loc["gcswr"]
        assert row["p"] == pytest.approx(scipy.stats.ttest_rel(other, base).pvalue, rel=1e-9)
        low, high = scipy.stats.t.interval(1 - 0.05 / 2, n - 1, loc=np.mean(other - base),
                                           scale=scipy.stats.sem(other - base))
        assert (row["low"], row["high"]) == (pytest.approx(low), pytest.approx(high))
        assert row["beyond_noise"] == (not low <= 0 <= high) and row["test"] == "t"


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


@pytest.mark.parametrize("differences", [[0.02, 0.02], [0.001] * 4, [0.0] * 5, [0.05] * 3])
def test_differences_without_spread_never_make_a_claim_from_a_zero_width_interval(differences):
    n = len(differences)
    scores = long_scores({("is", "e5"): [0.8] * n, ("gcswr", "e5"): [0.8 + d for d in differences]})
    row = paired_tests(scores).iloc[0]
    assert row["test"] == "sign-flip" and row["p"] == pytest.approx(sign_flip_p(differences))
    assert not row["beyond_noise"]  # 2 / 2**n > 0.05 for n <= 5
    assert "exact sign-flip test" in gcs.verdict(scores)[0] and "within noise" in gcs.verdict(scores)[0]


def test_sixteen_identical_positive_differences_are_beyond_noise_by_the_exact_test():
    scores = long_scores({("is", "e5"): [0.8] * 16, ("gcswr", "e5"): [0.85] * 16})
    row = paired_tests(scores).iloc[0]
    assert row["test"] == "sign-flip" and row["p"] == pytest.approx(2 / 2**16) and row["beyond_noise"]


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


def test_a_real_effect_is_found():
    rng, runs, found = np.random.default_rng(7), 200, 0
    for _ in range(runs):
        scores = null_scores(rng, 8)
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
