"""The sequential verdict (gcs.stats.sequential): its plan, its decisions, and its error over every look and comparison.

The null simulation here is the fast one (a few hundred families per shape); bench/bench_rounds.py runs thousands,
and the real null pairs.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import scipy.stats

import gcs
from conftest import P_VALUE_THRESHOLD
from gcs.stats.sequential import decide, sequential_plan, sequential_tests
from gcs.stats.signflip import sign_flip_interval

SHAPES = {  # per-seed scores of one method, one metric
    "normal": lambda rng, n: rng.normal(0.8, 0.05, n),
    "tied": lambda rng, n: rng.choice([0.5, 0.75, 1.0], n),
    "heavy-tailed": lambda rng, n: 0.8 + 0.02 * rng.standard_t(2, n),
    "two-humped": lambda rng, n: rng.beta(0.3, 0.3, n),
}
NULL_FAMILIES = 250


def run_as_the_page_does(differences: dict, plan):
    """Look after each round of the run, stop once nothing is open."""
    for n in plan.looks[: plan.maximum + 1]:
        decisions = decide({pair: d[:n] for pair, d in differences.items()}, plan)
        if decisions.stopped:
            break
    return decisions


@pytest.mark.parametrize("shape", SHAPES)
def test_under_the_null_a_claim_over_all_looks_and_comparisons_is_at_most_as_likely_as_stated(shape):
    """Two methods scored exactly like the baseline (exchangeable), two metrics: four comparisons, looked at after
    every round. Any claim is a false one; the share of families with one must not exceed 5 % beyond chance."""
    plan, rng, draw = sequential_plan(16), np.random.default_rng(1), SHAPES[shape]
    families_with_a_claim = 0
    for _ in range(NULL_FAMILIES):
        baseline = {metric: draw(rng, 16) for metric in ("e5", "aligned")}
        differences = {(method, metric): draw(rng, 16) - baseline[metric] for method in ("gcs", "gcswr")
                       for metric in baseline}
        decisions = run_as_the_page_does(differences, plan)
        families_with_a_claim += any(status == "beyond noise" for status, _ in decisions.status.values())
    p = scipy.stats.binom.sf(families_with_a_claim - 1, NULL_FAMILIES, 1 - plan.confidence)
    assert p > P_VALUE_THRESHOLD, f"{families_with_a_claim} of {NULL_FAMILIES} null families claimed an effect"


@pytest.mark.parametrize("spending", ["proportional", "floor-first"])
def test_a_real_effect_is_claimed_and_a_null_one_is_not(spending):
    """A large effect and a small steady one are claimed; in rounds of 4, 4, 8 with floor-first spending the large one
    is claimed at 8 seeds (every seed agrees in sign), with proportional spending at 16 (the look at 8 passes its share
    on)."""
    rng, plan = np.random.default_rng(2), sequential_plan(16, rounds=(4, 4, 8), spending=spending)
    differences = {("gcswr", "aligned"): rng.normal(0.3, 0.05, 16), ("gcswr", "e5"): rng.normal(0.02, 0.01, 16),
                   ("gcs", "aligned"): rng.normal(0.0, 0.05, 16), ("gcs", "e5"): rng.normal(0.0, 0.01, 16)}
    decisions = run_as_the_page_does(differences, plan)
    status = decisions.status
    assert status[("gcswr", "aligned")][0] == status[("gcswr", "e5")][0] == "beyond noise"
    assert status[("gcswr", "aligned")][1] == (8 if spending == "floor-first" else 16)
    assert {status[("gcs", metric)][0] for metric in ("e5", "aligned")} <= {"within noise", "undecided"}


def test_identical_methods_are_never_claimed_and_stop_early():
    """Every seed's difference 0 (the same answers): nothing to claim, and nothing to wait for."""
    plan = sequential_plan(16)
    decisions = run_as_the_page_does({("gcswr", "e5"): np.zeros(16)}, plan)
    assert decisions.status[("gcswr", "e5")] == ("within noise", plan.looks[0])


def test_the_plan_spends_only_where_an_exact_test_can_reject_and_sets_aside_the_extension():
    plan = sequential_plan(16)
    assert plan.looks[: plan.maximum + 1] == (4, 16) and plan.looks[plan.maximum + 1 :] == (24, 32)
    assert math.isclose(sum(plan.spend), 1.0) and plan.spend[0] == 0.0  # 4 seeds: the floor 0.125 is above 0.05
    budget = (1 - plan.confidence) / 4
    # every look that spends can claim: its floor is within its share
    for n, spend in zip(plan.looks, plan.spend, strict=True):
        assert spend == 0 or 2 / 2**n <= spend * budget * (1 + 1e-6), (n, spend)
    assert sequential_plan(16, rounds=(4, 4, 8), spending="floor-first").spend[1] * budget >= 2 / 2**8
    assert math.isclose(sum(plan.spend[plan.maximum + 1 :]), gcs.stats.sequential.EXTENSION_SHARE)
    assert sequential_plan(6, rounds=(4,)).looks[:2] == (4, 6)  # rounds cut at the maximum
    more = plan.extended()  # "more seeds": the run goes on into the looks set aside, spending as planned
    assert more.maximum == len(plan.looks) - 1 and more.spend == plan.spend and more.looks == plan.looks
    for bad, message in (({"max_seeds": 0}, "max_seeds"), ({"rounds": (4, 0)}, "rounds"),
                         ({"confidence": 1.0}, "confidence"),
                         ({"spending": "even"}, "spending")):
        with pytest.raises(ValueError, match=message):
            sequential_plan(**{"max_seeds": 16, **bad})


def test_the_interval_holds_the_centre_of_symmetric_differences_as_often_as_stated():
    rng, alpha, misses, runs = np.random.default_rng(3), 0.1, 0, 400
    for _ in range(runs):
        low, high = sign_flip_interval(0.5 + rng.standard_t(3, 12), alpha=alpha)
        misses += not low <= 0.5 <= high
    assert scipy.stats.binom.sf(misses - 1, runs, alpha) > P_VALUE_THRESHOLD, misses
    assert all(math.isnan(x) for x in sign_flip_interval([0.1, 0.2, 0.3], alpha=0.05))  # the floor 0.25 is above 0.05


def test_the_tests_read_a_compare_report_s_scores():
    rng = np.random.default_rng(4)
    records = [dict(method=method, seed=seed, metric="e5", consistency=0.8 + shift + 0.01 * rng.normal())
               for method, shift in (("is", 0.0), ("gcswr", 0.1)) for seed in range(16)]
    tests = sequential_tests(pd.DataFrame.from_records(records), plan=sequential_plan(16))
    (row,) = tests.itertuples()
    assert row.status == "beyond noise" and row.n in (8, 16) and row.low < row.diff < row.high
    with pytest.raises(ValueError, match="baseline 'x'"):
        sequential_tests(pd.DataFrame.from_records(records), plan=sequential_plan(16), baseline="x")
