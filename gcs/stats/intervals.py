"""Intervals over seeds: the one place the library computes a standard error, a t interval or a sample size (the
paired tests' interval is the sign-flip test's, ``gcs.stats.signflip``; a t interval describes one method's mean).

    >>> standard_error([1.0, 2.0, 3.0]) == 1 / 3 ** 0.5
    True
    >>> [round(x, 3) for x in mean_interval([1.0, 2.0, 3.0])]
    [2.0, 0.577, -0.484, 4.484]

Every verdict, summary and report (``gcs.verdict``, ``gcs.paired_summary``, ``gcs.ab_report``, style tables, the
app's table) takes its numbers from here, at one default ``CONFIDENCE``. numpy and scipy only: no torch, no engine.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import scipy.stats

from gcs.stats.signflip import fewest_seeds

CONFIDENCE = 0.95  # every interval's default, library and app alike
"""Every interval's and test's default confidence level, library and app alike."""


def standard_error(values: Sequence[float] | np.ndarray) -> float:
    """The standard error of the mean of ``values``.

    Args:
        values: the numbers.

    Returns:
        The sample standard deviation over the square root of the count; NaN for fewer than two values.

    Examples:
        >>> round(standard_error([1.0, 2.0, 3.0]), 4)
        0.5774
        >>> standard_error([4.0]) != standard_error([4.0])  # NaN
        True
    """
    array = np.asarray(values, dtype=float)
    return float(array.std(ddof=1) / math.sqrt(len(array))) if len(array) > 1 else math.nan


def t_half_width(error: float, n: int, confidence: float = CONFIDENCE, comparisons: int = 1) -> float:
    """Half the width of Student's t interval at ``confidence`` for a mean of ``n`` values with standard error
    ``error``; ``comparisons`` > 1 makes it hold for all of them together (Bonferroni).

    >>> round(t_half_width(1.0, 10), 3), round(t_half_width(1.0, 10, comparisons=4), 3)
    (2.262, 3.111)
    """
    alpha = (1 - confidence) / comparisons
    return float(scipy.stats.t.ppf(1 - alpha / 2, n - 1)) * error


def mean_interval(values: Sequence[float], *, confidence: float = CONFIDENCE) -> tuple[float, float, float, float]:
    """Student's t interval for the mean of ``values``.

    Args:
        values: the numbers.
        confidence: the interval's confidence level.

    Returns:
        (mean, standard error, low, high); the error and bounds are NaN for one value.

    Examples:
        >>> [round(x, 2) for x in mean_interval([1.0, 2.0, 3.0])]
        [2.0, 0.58, -0.48, 4.48]
    """
    array = np.asarray(values, dtype=float)
    mean = float(array.mean()) if len(array) else math.nan
    if len(array) < 2:
        return mean, math.nan, math.nan, math.nan
    error = standard_error(array)
    half = t_half_width(error, len(array), confidence)
    return mean, error, mean - half, mean + half


def variance_ratio_interval(ratio: float, df_numerator: int, df_denominator: int, *,
                            confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The F interval at ``confidence`` for a ratio of two variances ``sigma_1**2 / sigma_2**2``, from the ratio of
    two independent samples' variances (``ratio = s_1**2 / s_2**2``, with ``n_1 - 1`` and ``n_2 - 1`` degrees of
    freedom). Exact for normal samples; heavy tails make it too narrow. NaN bounds for a degree of freedom below 1
    or a ratio that is not a positive finite number.

    >>> low, high = variance_ratio_interval(4.0, 15, 15)
    >>> round(low, 2), round(high, 2)
    (1.4, 11.45)
    """
    if df_numerator < 1 or df_denominator < 1 or not 0 < ratio < math.inf:
        return math.nan, math.nan
    alpha = 1 - confidence
    return (ratio / float(scipy.stats.f.ppf(1 - alpha / 2, df_numerator, df_denominator)),
            ratio / float(scipy.stats.f.ppf(alpha / 2, df_numerator, df_denominator)))


def seeds_for(spread: float, *, comparisons: int, difference: float = 0.01,
              confidence: float = CONFIDENCE) -> int | None:
    """How many seeds a run should plan for its simultaneous interval to be narrow enough.

    The t approximation of the width for paired differences of standard deviation ``spread``, and never fewer seeds
    than the exact sign-flip test needs to claim at all.

    Args:
        spread: the standard deviation of the paired differences.
        comparisons: how many comparisons share the confidence (Bonferroni).
        difference: the largest half-width wanted.
        confidence: the simultaneous confidence level.

    Returns:
        The seeds, or None when there is no spread to go by.

    Examples:
        >>> seeds_for(0.02, comparisons=4), seeds_for(0.0, comparisons=4), seeds_for(0.5, comparisons=4, difference=1)
        (29, None, 8)
    """
    if not spread > 0:
        return None
    floor = fewest_seeds((1 - confidence) / comparisons)
    for n in range(2, 100_000):
        if t_half_width(spread / math.sqrt(n), n, confidence, comparisons) <= difference:
            return max(n, floor)
    return None
