"""gcs.stats.intervals: the one place intervals are computed, checked against scipy's own and light enough for any
caller."""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest
import scipy.stats

import gcs
from conftest import Z_THRESHOLD, z_score
from gcs.stats.intervals import variance_ratio_interval


@pytest.mark.parametrize("values", [[0.1, 0.4, 0.35], list(np.linspace(-1, 2, 17)), [5.0, 5.0, 5.5, 4.0]])
@pytest.mark.parametrize("confidence", [0.9, 0.95, 0.99])
def test_the_mean_interval_is_scipy_s_t_interval(values, confidence):
    mean, error, low, high = gcs.mean_interval(values, confidence=confidence)
    expected = scipy.stats.t.interval(confidence, len(values) - 1, loc=np.mean(values), scale=scipy.stats.sem(values))
    assert error == pytest.approx(scipy.stats.sem(values))
    assert (low, high) == pytest.approx(expected)


def test_one_value_has_no_interval():
    mean, error, low, high = gcs.mean_interval([0.5])
    assert mean == 0.5 and all(math.isnan(x) for x in (error, low, high))
    assert math.isnan(gcs.standard_error([0.5]))


def test_seeds_for_is_the_smallest_count_whose_simultaneous_interval_is_narrow_enough():
    for spread, comparisons in ((0.02, 4), (0.05, 2), (0.01, 1)):
        n = gcs.seeds_for(spread, comparisons=comparisons)

        def half(k, spread=spread, comparisons=comparisons):
            return scipy.stats.t.ppf(1 - 0.05 / comparisons / 2, k - 1) * spread / math.sqrt(k)

        assert half(n) <= 0.01 < half(n - 1)
    assert gcs.seeds_for(0.0, comparisons=4) is None


def test_the_variance_ratio_interval_covers_at_its_confidence():
    """Normal samples of 12 and 9 values, variances 9 and 1: the F interval holds the true ratio 95 % of the time."""
    rng = np.random.default_rng(0)
    reps, truth = 4_000, 9.0
    numerator = rng.normal(0, 3.0, (reps, 12)).var(axis=1, ddof=1)
    denominator = rng.normal(0, 1.0, (reps, 9)).var(axis=1, ddof=1)
    bounds = [variance_ratio_interval(n / d, 11, 8) for n, d in zip(numerator, denominator, strict=True)]
    covered = sum(low <= truth <= high for low, high in bounds)
    assert abs(z_score(covered, reps, 0.95)) < Z_THRESHOLD
    assert all(math.isnan(x) for x in variance_ratio_interval(0.0, 11, 8) + variance_ratio_interval(2.0, 0, 8))


def test_the_statistics_import_no_torch_and_no_engine():
    code = ("import sys, gcs.stats.intervals, gcs.stats.sequential, gcs.stats.paired; "
            "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('gcs.engines')); print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
