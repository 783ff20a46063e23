"""The verdict: what a run over several seeds says about each method against the baseline, honestly.

    gcs.verdict(report.scores)  # report = gcs.compare_report(frame, metrics=("e5", "aligned"))
    # -> ['On these paraphrases, with this model, over 8 seeds: GCSwR agreed more than IS by +4.1 E5 points ...',
    #     ...]

Each seed is one paired observation (every method answered the same paraphrases with that seed).
Every line is one comparison (a method against the baseline under one metric), tested with the exact sign-flip
test (``gcs.stats.signflip``), and the lines hold *together*: each test runs at a Bonferroni share of
1 - ``confidence``, so the chance that any line claims an effect that is not there stays at most that, whatever
the scores' shape. A line says "beyond noise" only when its interval excludes 0; with too few seeds for the
exact test to reach its level at all (4 seeds: the smallest p is 0.125), the line says so and claims nothing.

>>> import pandas as pd
>>> scores = pd.DataFrame({"method": ["is"] * 8 + ["gcswr"] * 8, "seed": list(range(8)) * 2, "metric": "e5",
...                        "consistency": [0.80, 0.81, 0.79, 0.80, 0.82, 0.78, 0.80, 0.81,
...                                        0.85, 0.86, 0.83, 0.86, 0.84, 0.85, 0.86, 0.83]})
>>> print(verdict(scores)[0])
On these paraphrases, with this model, over 8 seeds: GCSwR agreed more than IS in 8 of 8 seeds, by +4.6 E5 points
(95 % CI +3.0 to +6.0): GCSwR is more consistent, beyond noise. E5 is the paper's semantic similarity of the answers.
>>> print(verdict(scores[scores["seed"] < 4])[0])
On these paraphrases, with this model, over 4 seeds: GCSwR agreed more than IS in 4 of 4 seeds, by +5.0 E5 points;
4 seeds are too few for any claim at 95 % (the exact sign-flip test needs at least 6): no claim either way; use
more seeds. E5 is the paper's semantic similarity of the answers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd

from gcs.checks import METHOD_NAMES
from gcs.runtime.arguments import ArgumentTypeError, check_share
from gcs.runtime.names import parse_names
from gcs.stats.intervals import CONFIDENCE
from gcs.stats.signflip import fewest_seeds, sign_flip_test

PAIRED_COLUMNS = ("method", "metric", "n", "wins", "diff", "sd", "low", "high", "p", "claimable", "beyond_noise")
METRIC_WORDS = {
    "e5": ("E5", "E5 is the paper's semantic similarity of the answers."),
    "aligned": ("aligned-agreement", "Aligned agreement is the share of tokens in identical runs of 3 or more: "
                                     "what shared noise does directly."),
    "jaccard": ("Jaccard", "Jaccard is the overlap of the answers' sets of tokens."),
    "minilm": ("MiniLM", "MiniLM is a second embedding model's similarity of the answers."),
}



DEGENERATE_EXCESS = 1.5  # nats per token, median over a run's responses (gcs.excess_surprise; bench/bench_surprise.py)


def degenerate(excess: Sequence[float], threshold: float = DEGENERATE_EXCESS) -> bool:
    """Whether a run's answers are not language the model stands behind: median excess surprise above ``threshold``.

    >>> degenerate([0.1, -0.3, 2.5]), degenerate([2.9, 3.1, float("nan"), 2.2])
    (False, True)
    """
    values = np.asarray(excess, dtype=float)
    values = values[~np.isnan(values)]
    return bool(len(values)) and float(np.median(values)) > threshold


def paired_tests(scores: pd.DataFrame, *, baseline: str = "is", confidence: float = CONFIDENCE,
                 metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """One row per (method, metric) against ``baseline``: the paired differences over seeds and their test.

    Every comparison is tested with the exact sign-flip test (``gcs.stats.signflip``) at the Bonferroni level
    ``alpha = (1 - confidence) / comparisons``, so that all lines hold together.

    Args:
        scores: columns method, seed, metric, consistency (``CompareReport.scores``).
        baseline: the method the others are compared with.
        confidence: the simultaneous confidence level.
        metrics: the metrics to test (None: every metric in ``scores``).

    Returns:
        A frame with columns (``PAIRED_COLUMNS``) method, metric, n (paired seeds), wins, diff (mean), sd (the
        differences' standard deviation), low, high (the simultaneous interval: NaN where n seeds cannot reach
        ``alpha`` at all), p (two-sided, exact up to 16 seeds), claimable (``fewest_seeds(alpha)`` seeds or more)
        and beyond_noise (p <= ``alpha``, the interval excluding 0).

    Raises:
        ValueError: a missing column, an unknown baseline or metric, or a seed scored twice.

    Examples:
        >>> import pandas as pd
        >>> scores = pd.DataFrame({"method": ["is"] * 8 + ["gcswr"] * 8, "seed": list(range(8)) * 2, "metric": "e5",
        ...                        "consistency": [0.80, 0.82, 0.81, 0.79, 0.80, 0.83, 0.81, 0.80,
        ...                                        0.85, 0.86, 0.84, 0.85, 0.87, 0.86, 0.85, 0.84]})
        >>> paired_tests(scores)[["method", "n", "wins", "p", "beyond_noise"]].to_dict("records")
        [{'method': 'gcswr', 'n': 8, 'wins': 8, 'p': 0.0078125, 'beyond_noise': True}]
    """
    _check_scores(scores, confidence)
    baseline, methods, metrics = comparisons(scores, baseline, metrics)
    pairs = [(method, metric) for metric in metrics for method in methods]
    alpha = (1 - confidence) / max(1, len(pairs))  # Bonferroni: every line holds together
    by_key = scores.set_index(["method", "metric", "seed"])["consistency"].sort_index()
    records = []
    for method, metric in pairs:
        mine, base = by_key.loc[(method, metric)], by_key.loc[(baseline, metric)]
        d = (mine - base).dropna().to_numpy()
        records.append(dict(method=method, metric=metric, **sign_flip_test(d, alpha=alpha)))
    return pd.DataFrame.from_records(records, columns=list(PAIRED_COLUMNS))


def comparisons(scores: pd.DataFrame, baseline: str, metrics: Sequence[str] | str | None) -> tuple[str, list, list]:
    """The baseline as ``scores`` names it, the other scored methods and the metrics to compare them under: ``metrics``
    a list, or one name or a comma-separated string (as ``compare_report`` takes them; None: every scored metric),
    each one scored; ``baseline`` any case of a scored method.

    >>> scores = pd.DataFrame({"method": ["is", "gcswr"], "seed": 0, "metric": "e5", "consistency": 0.5})
    >>> comparisons(scores, "IS", "e5")
    ('is', ['gcswr'], ['e5'])
    >>> comparisons(scores, "is", ["e5", "minilm"])
    Traceback (most recent call last):
    ...
    ValueError: unknown scored metric 'minilm': expected one of e5
    """
    scored = list(dict.fromkeys(scores["method"]))
    if not isinstance(baseline, str):
        raise ArgumentTypeError(f"baseline must be a method name, got {type(baseline).__name__}")
    named = [m for m in scored if str(m).lower() == baseline.strip().lower()]
    if not named:
        raise ValueError(f"the baseline {baseline!r} is not among the scored methods {sorted(map(str, scored))}")
    return named[0], [m for m in scored if m != named[0]], chosen_metrics(metrics, list(scores["metric"]))


def chosen_metrics(metrics: Sequence[str] | str | None, scored: list[str]) -> list[str]:
    """``metrics`` as a list (one name or a comma-separated string taken whole, not letter by letter), each among
    ``scored``; None: every scored metric."""
    known = list(dict.fromkeys(scored))
    if metrics is None:
        return known
    return parse_names(metrics, known, what="scored metric")  # the one rule for lists of names


def _check_scores(scores: pd.DataFrame, confidence: float) -> None:
    if not isinstance(scores, pd.DataFrame):
        raise ArgumentTypeError(f"scores must be a DataFrame with columns method, seed, metric, consistency "
                                f"(CompareReport.scores), got {type(scores).__name__}")
    if not {"method", "seed", "metric", "consistency"} <= set(scores.columns):
        raise ValueError("scores must be a DataFrame with columns method, seed, metric, consistency "
                         "(CompareReport.scores)")
    check_share(confidence, "confidence", 0.5)
    repeated = scores.duplicated(["method", "metric", "seed"], keep=False)
    if repeated.any():
        row = scores[repeated].iloc[0]
        raise ValueError(f"seed {row['seed']} appears more than once for {row['method']} under {row['metric']}: "
                         "each seed is one paired observation (score each seed once)")


def points(fraction: float) -> str:
    """A score difference in points (x 100), signed, one decimal; more digits where one would read as 0.

    >>> points(0.0234), points(-0.0003), points(0.0)
    ('+2.3', '-0.03', '+0.0')
    """
    text = f"{100 * fraction:+.1f}"
    return f"{100 * fraction:+.2g}" if fraction != 0 and float(text) == 0 else text


def verdict(scores, *, baseline: str = "is", confidence: float = CONFIDENCE,
            metrics: Sequence[str] | None = None, scope: str = "On these paraphrases, with this model",
            excess: Sequence[float] | None = None) -> list[str]:
    """One plain sentence per comparison of a method with ``baseline`` under each metric (``paired_tests``).

    The sentences hold together at ``confidence`` (at most 1 - ``confidence`` chance that any of them claims an effect
    that is not there), say "within noise" otherwise, label the confidence and how many comparisons share it, and scope
    the claim.

    Args:
        scores: columns method, seed, metric, consistency (``CompareReport.scores``); or a run in rounds (a
            ``gcs.RoundReport``): the sentences are then its sequential tests at that look (held over every look;
            ``confidence`` and ``baseline`` are the run's own), each comparison claimed, within noise or still
            deciding, and the last line says how many seeds the run used and why it stopped.
        baseline: the method the others are compared with.
        confidence: the simultaneous confidence level.
        metrics: the metrics to judge (None: every metric in ``scores``).
        scope: how the sentences begin, saying what the claim covers.
        excess: the answers' excess surprise (``gcs.excess_surprise``; a run in rounds: its first round's by
            default); when ``gcs.scoring.surprise.degenerate`` flags it, the first line says the answers are not
            language the model stands behind and no line claims an effect.

    Returns:
        The sentences.

    Raises:
        ValueError: a seed scored twice for one method and metric, or a bad column, baseline or metric.

    Examples:
        >>> import pandas as pd
        >>> scores = pd.DataFrame({"method": ["is"] * 8 + ["gcswr"] * 8, "seed": list(range(8)) * 2, "metric": "e5",
        ...                        "consistency": [0.80, 0.82, 0.81, 0.79, 0.80, 0.83, 0.81, 0.80,
        ...                                        0.85, 0.86, 0.84, 0.85, 0.87, 0.86, 0.85, 0.84]})
        >>> print(verdict(scores)[0])
        On these paraphrases, with this model, over 8 seeds: GCSwR agreed more than IS in 8 of 8 seeds, ...: GCSwR ...
    """
    # a gcs.RoundReport (by its fields: gcs.experiments.rounds builds
    if hasattr(scores, "plan") and hasattr(scores, "look"):
        if excess is None:  # on this module, which does not import it)
            excess = getattr(scores, "excess", None) or None  # the run's own, recorded as its answers were drawn
        return _sequential_verdict(scores, metrics, scope, excess)
    tests = paired_tests(scores, baseline=baseline, confidence=confidence, metrics=metrics)
    comparisons = len(tests)
    together = "" if comparisons == 1 else f", simultaneous over {comparisons} comparisons"
    flagged = excess is not None and degenerate(excess)
    lines = _degenerate_lines(excess) if flagged and excess is not None else []  # mypy cannot narrow via flagged
    for row in tests.itertuples():
        name, base = METHOD_NAMES.get(row.method, row.method), METHOD_NAMES.get(baseline, baseline)
        words, meaning = METRIC_WORDS.get(row.metric, (row.metric, ""))
        head = f"{scope}, over {row.n} seed{'s' if row.n != 1 else ''}: {name}"
        if row.n < 2:
            diff = "no paired seed" if row.n == 0 else f"{points(row.diff)} {words} points against {base}"
            lines.append(f"{head}: {diff}. One seed is an anecdote, not evidence: use more seeds.")
            continue
        body = _agreed(head, base, row, words)
        if not row.claimable:
            needed = fewest_seeds((1 - confidence) / comparisons)
            body += (f"; {row.n} seeds are too few for any claim at {100 * confidence:g} %{together} (the exact "
                     f"sign-flip test needs at least {needed}): no claim either way; use more seeds.")
            lines.append(f"{body} {meaning}".strip())
            continue
        body += f" ({100 * confidence:g} % CI {points(row.low)} to {points(row.high)}{together})"
        if flagged:
            body += ": not interpreted (degenerate answers)."
        elif row.beyond_noise:
            winner = name if row.diff > 0 else base
            body += f": {winner} is more consistent, beyond noise."
        else:
            body += ": within noise."
        lines.append(f"{body} {meaning}".strip())
    return lines


def _degenerate_lines(excess: Sequence[float]) -> list[str]:
    median = float(np.nanmedian(np.asarray(excess, dtype=float)))
    return [(f"These answers are not language the model stands behind: their words surprise the model "
             f"{median:+.1f} nats per token more than its own answers do (flagged above "
             f"{DEGENERATE_EXCESS:+.1f}). Agreement between such answers is shared noise, not consistency: "
             f"lower the temperature. The comparisons below are not interpreted.")]


def _agreed(head: str, base: str, row, words: str) -> str:
    more = "more" if row.diff >= 0 else "less"
    return f"{head} agreed {more} than {base} in {row.wins if more == 'more' else row.n - row.wins} of " \
           f"{row.n} seeds, by {points(row.diff)} {words} points"


def _sequential_verdict(run, metrics: Sequence[str] | None, scope: str, excess: Sequence[float] | None) -> list[str]:
    """``verdict`` of a run in rounds: each comparison's status at the run's look, then how far the run went."""
    plan, tests = run.plan, run.tests
    if metrics is not None:
        tests = tests[tests["metric"].isin(chosen_metrics(metrics, list(tests["metric"])))]
    flagged = excess is not None and degenerate(excess)
    lines = _degenerate_lines(excess) if flagged and excess is not None else []  # mypy cannot narrow via flagged
    compared = f"all {len(run.tests)} comparisons together" if len(run.tests) != 1 else "its one comparison"
    held = f"{100 * plan.confidence:g} % over every look and {compared}"
    base = METHOD_NAMES.get("is", "is")
    for row in tests.itertuples():
        name = METHOD_NAMES.get(row.method, row.method)
        words, meaning = METRIC_WORDS.get(row.metric, (row.metric, ""))
        body = _agreed(f"{scope}, over {row.n} seed{'s' if row.n != 1 else ''}: {name}", base, row, words)
        if not math.isnan(row.low):
            body += f" (sequential interval {points(row.low)} to {points(row.high)}, held at {held})"
        if flagged:
            body += ": not interpreted (degenerate answers)."
        elif row.status == "beyond noise":
            winner = name if row.diff > 0 else base
            body += f": {winner} is more consistent, beyond noise (decided after {row.decided_at:.0f} seeds)."
        elif row.status == "within noise":
            body += (f": within noise (decided after {row.decided_at:.0f} seeds: the rest would very likely not "
                     f"resolve it).")
        elif row.status == "open":
            body += ": still deciding."
        elif math.isnan(row.low):  # no interval: this look could not claim anything, and "within noise" would mislead
            body += (f"; {row.n} seeds are too few for any claim held at {held} (the exact sign-flip test's floor): no "
                     "claim either way" + ("; more seeds can continue the same sequence." if run.more_seeds
                                           else "; use more seeds."))
        else:
            body += ": within noise at this run's maximum" + (
                "; more seeds can continue the same sequence." if run.more_seeds else ".")
        lines.append(f"{body} {meaning}".strip())
    if run.final:
        lines.append(f"Stopped: {run.reason}. Claims hold at {held} (sequential sign-flip tests).")
    else:
        lines.append(f"After {plan.looks[run.look]} of at most {plan.looks[plan.maximum]} seeds: still deciding; the "
                     f"next round runs to {plan.looks[run.look + 1]} seeds.")
    return lines
