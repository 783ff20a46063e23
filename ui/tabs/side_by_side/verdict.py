"""What a side-by-side run shows over all its seeds: the score table (each metric's mean ± standard error per
method) and the headline verdict (paired statistics, degenerate answers flagged, the seeds a 1-point E5
difference would need). Text and tables only: ``ui.tabs.side_by_side.compare`` lays them out and the /compare endpoint
returns the verdict."""

from __future__ import annotations

import pandas as pd

import gcs
from gcs.scoring.surprise import frame_excess

METRICS = ("e5", "jaccard", "minilm", "aligned")
METRIC_LABELS = {"e5": "E5", "jaccard": "Jaccard", "minilm": "MiniLM", "aligned": "aligned",
                 "prefix": "common prefix (tokens)"}


def score_table(report: gcs.CompareReport) -> pd.DataFrame:
    """Per method: each metric's mean ± standard error over seeds, and the mean common prefix."""
    summary = report.summary.set_index(["method", "metric"])
    rows = []
    for method in report.table["method"]:
        row = {"method": gcs.METHOD_NAMES[method]}
        for metric in METRICS:
            mean, error = summary.loc[(method, metric), ["mean", "stderr"]]
            row[METRIC_LABELS[metric]] = f"{mean:.3f}" + ("" if pd.isna(error) else f" ± {error:.3f}")
        if "prefix" in report.table:
            row[METRIC_LABELS["prefix"]] = round(float(report.table.set_index("method").loc[method, "prefix"]), 1)
        rows.append(row)
    return pd.DataFrame(rows)


SCORE_COLUMNS = ["method", *(METRIC_LABELS[m] for m in METRICS), METRIC_LABELS["prefix"]]  # headers before a run
VERDICT_METRICS = ("e5", "aligned")  # the paper's metric, and the footprint of shared noise itself
SURPRISE_RESPONSES = 24  # responses scored for the degenerate-output check (the first seeds'): a median needs few


def _means(report: gcs.CompareReport, seeds: int) -> str:
    summary = report.summary[report.summary["metric"] == "e5"].set_index("method")
    means = " · ".join(f"{gcs.METHOD_NAMES[m]} {summary.loc[m, 'mean']:.3f}"
                       + ("" if pd.isna(summary.loc[m, "stderr"]) else f" ± {summary.loc[m, 'stderr']:.3f}")
                       for m in gcs.METHODS if m in summary.index)
    return f"**E5 consistency, mean ± standard error over {seeds} seed{'s' * (seeds > 1)}:** {means}"


def excess(frame: pd.DataFrame, seeds: list[int], model: gcs.Model) -> list[float]:
    """The excess surprise of the first seeds' answers (about ``SURPRISE_RESPONSES`` of them): the degenerate-output
    flag's evidence. As generation recorded it (a frame's "excess_surprise"), else a pass of the model over the tokens
    drawn (an engine that records none: served endpoints, vLLM in worker processes)."""
    per_seed = max(1, len(frame[frame["seed"] == seeds[0]]))
    sample = frame[frame["seed"].isin(seeds[: max(1, SURPRISE_RESPONSES // per_seed)])]
    return list(frame_excess(sample, model))


def round_verdict(run: gcs.RoundReport) -> str:
    """The headline of a run in rounds so far: E5 means over its seeds, then ``gcs.verdict``'s sequential sentences
    (each comparison claimed, within noise or still deciding; degenerate answers flagged by the run's own excess
    surprise) and how many seeds it used and why it stopped."""
    lines = [_means(run.report, len(run.seeds)), *_greedy(run.settings)]
    lines += [f"- {line}" for line in gcs.verdict(run)]  # no user text
    return "\n\n".join(lines)


def _greedy(settings: gcs.SamplingSettings) -> list[str]:
    """The line that says why a greedy run compares nothing (its sentences would read as a finding of no effect)."""
    if settings.temperature != 0:
        return []
    return ["**At temperature 0 every method is greedy**: each takes the likeliest token, so all methods give the same "
            "answers and there is no luck to share. The comparisons below can only find no difference; raise the "
            "temperature to compare the methods."]


def verdict(report: gcs.CompareReport, settings: gcs.SamplingSettings, surprise: list[float]) -> str:
    """The headline: E5 means over the seeds, ``gcs.verdict``'s sentences (E5 and aligned agreement, holding
    together; degenerate answers flagged by ``surprise``, ``excess``), and how many seeds would resolve a 1-point E5
    difference."""
    seeds = list(settings.seeds)
    lines = [_means(report, len(seeds)), *_greedy(settings)]
    if "is" not in settings.methods or len(settings.methods) < 2:
        lines.append("Select IS and another method, to compare against the baseline.")
        return "\n\n".join(lines)
    scores = report.scores[report.scores["metric"].isin(VERDICT_METRICS)]
    lines += [f"- {line}" for line in gcs.verdict(scores, metrics=VERDICT_METRICS, excess=surprise)]  # no user text
    tests = gcs.paired_tests(scores, metrics=VERDICT_METRICS)
    e5 = tests[tests["metric"] == "e5"].set_index("method")
    other = "gcswr" if "gcswr" in e5.index else e5.index[0]
    needed = gcs.seeds_for(float(e5.loc[other, "sd"]), comparisons=len(tests))
    if needed is not None:
        lines.append(f"<small>With this spread, about {needed} seeds resolve a 1-point E5 difference between "
                     f"{gcs.METHOD_NAMES[other]} and IS (this run: {len(seeds)}).</small>")
    return "\n\n".join(lines)
