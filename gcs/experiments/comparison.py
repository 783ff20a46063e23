"""A side by side's scores: ``gcs.compare``'s frame scored per (method, seed) with every metric, and the paired
statistics over seeds (``paired_summary``, the same test as ``gcs.verdict``).

    report = gcs.compare_report(gcs.compare(paraphrases, seeds=8), metrics=("e5", "aligned"))
    report.table      # mean consistency per method and metric
    report.summary    # per method and metric: mean, stderr, n; against IS: gcs.paired_tests' columns
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from gcs.checks import EXTENDED_METHODS
from gcs.runtime.stage_timing import timed
from gcs.scoring.metrics import check_metrics, mean_off_diagonal, similarity_matrices
from gcs.scoring.token_overlap import common_prefix_length
from gcs.stats.intervals import CONFIDENCE, mean_interval
from gcs.stats.paired import PAIRED_COLUMNS, paired_tests


@dataclass(frozen=True)
class CompareReport:
    """Scores of a ``gcs.compare`` frame, ready to display (``compare_report``).

    Attributes:
        scores: one row per method, seed and metric (columns method, seed, metric, consistency).
        table: one row per method, one column per metric, the mean over seeds.
        matrices: ``matrices[(method, seed, metric)]``, the [prompts, prompts] similarity matrix.
        per_seed: one row per seed and method, one column per metric, plus ``prefix`` (the mean common-prefix length
            in tokens; with a tokenizer only).
        summary: ``paired_summary`` of the scores.
    """

    scores: pd.DataFrame
    table: pd.DataFrame
    matrices: dict
    per_seed: pd.DataFrame
    summary: pd.DataFrame


def compare_report(frame: pd.DataFrame, *, metrics: Sequence[str] = ("e5",), tokenizer=None) -> CompareReport:
    """Score every (method, seed) group of responses of a ``gcs.compare`` frame under each metric.

    Each metric embeds all responses in one call. Groups are keyed by method and seed only: ``ensemble`` is one setting
    for the whole frame.

    Args:
        frame: a ``gcs.compare`` frame.
        metrics: similarity metrics (``gcs.METRICS``, or "e5:ID" / "minilm:ID").
        tokenizer: the generating model's tokenizer, for "jaccard" and "aligned" (None: the embedded model's).

    Returns:
        A ``CompareReport``; its ``scores`` (method, seed, metric, consistency) feed ``gcs.verdict``.

    Examples:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"prompt_index": [0, 1, 0, 1], "prompt": ["p", "q"] * 2, "seed": 0, "ensemble": 0,
        ...                       "method": ["is", "is", "gcswr", "gcswr"],
        ...                       "response": ["a b c", "a x y", "a b c", "a b d"]})
        >>> compare_report(frame, metrics=["jaccard"], tokenizer=str.split).scores["consistency"].round(2).tolist()
        [0.2, 0.5]
    """
    metrics = check_metrics(metrics)
    prompts = frame["prompt_index"].nunique() if len(frame) else 0
    if prompts < 2:
        raise ValueError("compare_report scores how alike the answers to several prompts are: the frame holds answers "
                         f"to {prompts} prompt(s), it needs at least 2")
    keys = ["method", "seed"]
    parts = [(key, part.sort_values("prompt_index")) for key, part in frame.groupby(keys, sort=False)]
    records, matrices = [], {}
    for metric in metrics:
        with timed("score", metric=metric, texts=len(frame)):
            found = similarity_matrices([list(p["response"]) for _, p in parts], metric, tokenizer)
        for (key, _), matrix in zip(parts, found, strict=True):
            records.append(dict(zip(keys, key, strict=True), metric=metric, consistency=mean_off_diagonal(matrix)))
            index = (*key, metric)  # (mypy reads a starred tuple inside [] as 3.11's syntax)
            matrices[index] = matrix
    scores = pd.DataFrame.from_records(records, columns=[*keys, "metric", "consistency"])
    per_seed = scores.pivot_table(index=keys, columns="metric", values="consistency", sort=False)[list(metrics)]
    per_seed = per_seed.reset_index()
    if tokenizer is not None and frame["prompt_index"].nunique() > 1:
        with timed("score", metric="prefix", texts=len(frame)):
            prefixes = {key: common_prefix_length(list(part["response"]), tokenizer=tokenizer) for key, part in parts}
        per_seed["prefix"] = [prefixes[key] for key in zip(per_seed["method"], per_seed["seed"], strict=True)]
    per_seed.columns.name = None
    return _report(scores, matrices, per_seed)


def _report(scores: pd.DataFrame, matrices: dict, per_seed: pd.DataFrame) -> CompareReport:
    """A ``CompareReport`` from its per-(method, seed) parts: the table (means over seeds) and the paired summary."""
    metrics = list(dict.fromkeys(scores["metric"]))
    table = scores.pivot_table(index="method", columns="metric", values="consistency", sort=False)[metrics]
    table = table.reindex([m for m in EXTENDED_METHODS if m in table.index]).reset_index()
    if "prefix" in per_seed:
        table["prefix"] = table["method"].map(per_seed.groupby("method")["prefix"].mean())
    return CompareReport(scores, table, matrices, per_seed, paired_summary(scores))


def combine_reports(reports: Sequence[CompareReport]) -> CompareReport:
    """One report of several runs' reports over other seeds (the rounds of one run): their
    per-(method, seed) scores side by side, the table and summary over all of them. Nothing is embedded again.

    >>> import pandas as pd
    >>> part = lambda seed: CompareReport(pd.DataFrame({"method": ["is", "gcswr"], "seed": seed, "metric": "e5",
    ...     "consistency": [0.8, 0.9]}), None, {}, pd.DataFrame({"method": ["is", "gcswr"], "seed": seed,
    ...     "e5": [0.8, 0.9]}), None)
    >>> combine_reports([part(0), part(1)]).summary[["method", "n", "diff"]].round(2).values.tolist()
    [['is', 2, nan], ['gcswr', 2, 0.1]]
    """
    scores = pd.concat([r.scores for r in reports], ignore_index=True)
    seen = scores.duplicated(["method", "seed", "metric"])
    if seen.any():
        row = scores[seen].iloc[0]
        raise ValueError(f"seed {row['seed']} of {row['method']} is in more than one report: combine other seeds")
    matrices = {key: value for r in reports for key, value in r.matrices.items()}
    return _report(scores, matrices, pd.concat([r.per_seed for r in reports], ignore_index=True))


def paired_summary(scores: pd.DataFrame, *, baseline: str = "is", confidence: float = CONFIDENCE) -> pd.DataFrame:
    """Per method and metric: consistency over seeds, and the paired test against ``baseline`` (``gcs.paired_tests``).

    Each seed is one paired observation: every method answered the same paraphrases with that seed.

    Args:
        scores: columns method, seed, metric, consistency (``CompareReport.scores``).
        baseline: the method the others are compared with.
        confidence: the simultaneous confidence level.

    Returns:
        Columns metric, method, mean, stderr, n (seeds scored), then, for methods other than the baseline with the
        baseline present, ``paired_tests``' own columns (pairs: its n; wins, diff, sd, low, high, p, claimable,
        beyond_noise), so that a summary and a verdict read the same numbers.

    Examples:
        >>> import pandas as pd
        >>> scores = pd.DataFrame({"method": ["is"] * 8 + ["gcswr"] * 8, "seed": list(range(8)) * 2, "metric": "e5",
        ...                        "consistency": [0.80, 0.82, 0.81, 0.79, 0.80, 0.83, 0.81, 0.80,
        ...                                        0.85, 0.86, 0.84, 0.85, 0.87, 0.86, 0.85, 0.84]})
        >>> paired_summary(scores)[["method", "n", "beyond_noise"]].to_dict("records")
        [{'method': 'is', 'n': 8, 'beyond_noise': nan}, {'method': 'gcswr', 'n': 8, 'beyond_noise': True}]
    """
    records = []
    for (metric, method), part in scores.groupby(["metric", "method"], sort=False):
        values = part["consistency"].dropna()
        mean, error, _, _ = mean_interval(values)
        records.append({"metric": metric, "method": method, "mean": mean, "stderr": error, "n": len(values)})
    summary = pd.DataFrame.from_records(records, columns=["metric", "method", "mean", "stderr", "n"])
    paired = PAIRED_COLUMNS[2:]
    if baseline in set(scores["method"]) and scores["method"].nunique() > 1:
        tests = paired_tests(scores, baseline=baseline, confidence=confidence).rename(columns={"n": "pairs"})
        summary = summary.merge(tests, on=["metric", "method"], how="left")
    else:
        summary = summary.reindex(columns=[*summary.columns, "pairs", *paired[1:]])
    return summary[["metric", "method", "mean", "stderr", "n", "pairs", *paired[1:]]]


