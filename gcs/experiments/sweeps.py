"""Consistency experiments: temperature sweeps (Fig. 2) and the Table 1 layout.

    frame = gcs.sweep(gcs.load_groups("general")[:10], temperatures=[0, 0.5, 1], seeds=3)
    gcs.summary_table(frame)          # mean ± std.err by method x ensembling (Table 1)
    gcs.consistency_figure(frame)     # plotly: consistency vs temperature, one line per method

A *cell* is one group of paraphrases answered under one (method, seed, temperature,
ensembling): its responses are scored with every metric (mean pairwise similarity).
Cells are packed into as few batched ``generate`` calls as ``batch_rows`` allows (one
temperature per call), each scored as soon as its batch finishes, so a caller can save
results as they come (``on_results``) and skip cells it already has (``skip``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from gcs.checks import (
    DEFAULT_MAX_NEW_TOKENS,
    METHOD_NAMES,
    METHODS,
    ArgumentTypeError,
    check_count,
    check_engine,
    check_methods,
    check_seeds,
    check_temperatures,
)
from gcs.engines.batch import Row, check_plain_text
from gcs.engines.batching import run_batches
from gcs.engines.models import Model, resolve_model
from gcs.experiments.data import Group, as_groups
from gcs.rewording import reword
from gcs.runtime.quoting import quoted
from gcs.runtime.stage_timing import timed
from gcs.scoring.metrics import check_metrics, common_prefix_length, mean_off_diagonal, similarity_matrices
from gcs.settings import SamplingSettings
from gcs.stats.intervals import CONFIDENCE, mean_interval, standard_error
from gcs.stats.paired import PAIRED_COLUMNS, paired_tests

CELL_KEYS = ("group", "method", "seed", "temperature", "ensemble")
RESULT_COLUMNS = (*CELL_KEYS, "metric", "consistency", "responses")


@dataclass(frozen=True)
class Cell:
    """One group answered under one setting: the unit of generation, scoring and resuming."""

    group: Group
    method: str
    seed: int
    temperature: float
    ensemble: bool

    @property
    def key(self) -> tuple:
        return (self.group.id, self.method, self.seed, float(self.temperature), bool(self.ensemble))


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: groups x temperatures x ``settings.methods`` x ``settings.seeds`` x ensembling."""

    groups: tuple[Group, ...]
    temperatures: tuple[float, ...]
    settings: SamplingSettings  # methods, seeds, top_k, top_p, max_new_tokens (its temperature is the first)
    metrics: tuple[str, ...]
    ensembling: tuple[bool, ...]
    rewordings: int

    def cells(self, skip: Iterable[tuple] = ()) -> list[Cell]:
        """Every cell in sweep order (temperature, ensembling, method, seed, group), less those in ``skip``."""
        skip = {tuple(key) for key in skip}
        cells = [Cell(group, method, seed, temperature, ensemble)
                 for temperature in self.temperatures for ensemble in self.ensembling
                 for method in self.settings.methods for seed in self.settings.seeds for group in self.groups]
        return [cell for cell in cells if cell.key not in skip]


def check_sweep(groups, temperatures=(0.0, 0.5, 1.0), methods=METHODS, seeds=3, metrics=("e5",),
                max_new_tokens=DEFAULT_MAX_NEW_TOKENS,
                top_k=None, top_p=None, ensembling=(False,), rewordings=2) -> SweepPlan:
    """Validate a sweep's arguments (ValueError naming the problem) into a ``SweepPlan``."""
    groups = as_groups(groups, min_size=2)
    temperatures = check_temperatures(temperatures)
    settings = SamplingSettings(check_methods(methods), check_seeds(seeds), temperatures[0], top_k, top_p,
                                max_new_tokens)
    if not isinstance(ensembling, (bool, Iterable)) or isinstance(ensembling, str):
        raise ArgumentTypeError(f"ensembling must list one or both of False/True, got {type(ensembling).__name__} "
                                f"{quoted(ensembling)}")
    ensembling = [ensembling] if isinstance(ensembling, bool) else list(ensembling)
    if any(not isinstance(e, bool) for e in ensembling):
        raise ArgumentTypeError(f"ensembling must list one or both of False/True, got {quoted(ensembling)}")
    if not ensembling:
        raise ValueError(f"ensembling must list one or both of False/True, got {quoted(ensembling)}")
    if True in ensembling:
        check_count(rewordings, "rewordings", 1, 8)
    return SweepPlan(tuple(groups), tuple(temperatures), settings, tuple(check_metrics(metrics)),
                     tuple(dict.fromkeys(ensembling)), rewordings)


def sweep(
    groups: Sequence[Group] | Sequence[Sequence[str]],
    *, temperatures: Iterable[float] = (0.0, 0.5, 1.0),
    methods: Sequence[str] = METHODS,
    seeds: int | Iterable[int] = 3,
    metrics: Sequence[str] = ("e5",),
    model: Model | str | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    top_k: int | None = None,
    top_p: float | None = None,
    ensembling: Sequence[bool] = (False,),
    rewordings: int = 2,
    batch_rows: int | None = None,
    skip: Iterable[tuple] = (),
    on_results: Callable[[pd.DataFrame], None] | None = None,
    progress=None,
    show_progress: bool = False,
    stop: threading.Event | None = None,
    engine: str = "transformers",
    **generate_kwargs,
) -> pd.DataFrame:
    """Consistency of responses to each group of paraphrases, for every setting.

    Returns a tidy DataFrame with one row per cell and metric: ``group``, ``method``,
    ``seed``, ``temperature``, ``ensemble``, ``metric``, ``consistency`` (mean pairwise
    similarity of the group's responses) and ``responses`` (the texts, in prompt order).
    All paraphrases of a group under one seed share their Gumbel noise (gcs/gcswr).

    ``seeds``: a count (0..n-1) or a list. ``ensembling``: which of False/True to run;
    with True each prompt is answered from the geometric mean over itself and
    ``rewordings`` rewordings the model writes (section 5). ``skip``: cell keys
    ``(group, method, seed, temperature, ensemble)`` already done. ``on_results`` gets
    each finished batch's rows; ``progress`` is a tqdm-like bar (its ``update(n)`` gets the
    cells done) or a callback ``progress(done, total)``; a tqdm bar of its own shows when
    ``show_progress`` (gradio's ``Progress(track_tqdm=True)`` follows it). Setting ``stop`` (a
    ``threading.Event``) ends the sweep after the current token with ``gcs.Cancelled``; batches
    already passed to ``on_results`` stay there. Extra keyword arguments go to transformers' ``generate``.
    ``engine="vllm"`` submits all cells of a temperature to vLLM at once and lets it batch them
    (no ensembling there; ``stop`` then takes effect between temperatures).
    """
    plan = check_sweep(groups, temperatures, methods, seeds, metrics, max_new_tokens, top_k, top_p, ensembling,
                       rewordings)
    engine = check_engine(engine, ensembling=True in plan.ensembling)
    model = resolve_model(model)
    for group in plan.groups:
        check_plain_text(group.prompts, model, f"group {quoted(group.id)} prompts")
    cells = plan.cells(skip)
    rewritten = _rewordings(cells, plan.rewordings, model)
    at_temperature = {t: plan.settings.replace(temperature=t) for t in plan.temperatures}

    def rows_of(cell: Any) -> list[Row]:  # a Cell (run_batches types its units as object)
        return [Row(p, cell.method, cell.seed, rewritten.get(p, ()) if cell.ensemble else ())
                for p in cell.group.prompts]

    def settings_of(cell: Any) -> SamplingSettings:
        return at_temperature[cell.temperature]

    frames = []
    for chunk, decoded in run_batches(cells, rows_of, settings_of, model, batch_rows, generate_kwargs, progress,
                                      show_progress, "sweep", stop, engine):
        frame = _score_cells(chunk, [[r["response"] for r in rows] for rows in decoded], plan.metrics, model)
        frames.append(frame)
        if on_results is not None:
            on_results(frame)
    if not frames:
        return pd.DataFrame(columns=list(RESULT_COLUMNS))
    return pd.concat(frames, ignore_index=True)


def _rewordings(cells: Sequence[Cell], n: int, model: Model) -> dict[str, tuple[str, ...]]:
    """Rewordings of every prompt answered with ensembling, written once by the model."""
    prompts = list(dict.fromkeys(p for cell in cells if cell.ensemble for p in cell.group.prompts))
    if not prompts:
        return {}
    return {prompt: tuple(r) for prompt, r in zip(prompts, reword(prompts, n=n, model=model), strict=True)}


def _score_cells(cells: Sequence[Cell], responses: list[list[str]], metrics, model: Model) -> pd.DataFrame:
    """One row per cell and metric: the mean pairwise similarity of the cell's responses."""
    records = []
    for metric in metrics:
        matrices = similarity_matrices(responses, metric, tokenizer=model.tokenizer)
        for cell, matrix, texts in zip(cells, matrices, responses, strict=True):
            records.append(dict(zip(CELL_KEYS, cell.key, strict=True), metric=metric,
                                consistency=mean_off_diagonal(matrix), responses=texts))
    return pd.DataFrame.from_records(records, columns=list(RESULT_COLUMNS))


# -- summaries ---------------------------------------------------------------------------------
def consistency_by_temperature(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean consistency and its standard error by metric, ensembling, method and temperature.

    Responses generated with one seed share their noise across *all* groups (that is the
    coupling), so cells of one seed are not independent: the standard error is clustered
    by seed, i.e. taken over the per-seed means (NaN with a single seed). Columns: metric,
    ensemble, method, temperature, mean, stderr, seeds (clusters), n (cells).
    """
    keys = ["metric", "ensemble", "method", "temperature"]
    per_seed = frame.groupby([*keys, "seed"], sort=True)["consistency"].agg(["mean", "count"]).reset_index()
    summary = per_seed.groupby(keys, sort=True).agg(
        mean=("mean", "mean"), stderr=("mean", standard_error), seeds=("seed", "count"), n=("count", "sum"))
    return summary.reset_index()


def summary_table(frame: pd.DataFrame, *, metric: str | None = None, temperature: float | None = None) -> pd.DataFrame:
    """Table 1's layout: rows = methods, columns = without / with ensembling, "mean ± std.err" (x100).

    Picks the first metric and the highest temperature unless told; the standard error
    is over the per-seed means (the paper's "3 independent runs").
    """
    metric = metric if metric is not None else frame["metric"].iloc[0]
    temperature = temperature if temperature is not None else frame["temperature"].max()
    chosen = frame[(frame["metric"] == metric) & (np.isclose(frame["temperature"], temperature))]
    if chosen.empty:
        raise ValueError(f"no results for metric {quoted(metric)} at temperature {temperature}")
    per_run = chosen.groupby(["method", "ensemble", "seed"])["consistency"].mean().reset_index()
    cells = per_run.groupby(["method", "ensemble"])["consistency"].agg(["mean", standard_error])
    table = pd.DataFrame(index=[m for m in METHODS if m in cells.index.get_level_values(0)])
    for ensemble, column in ((False, "without ensembling"), (True, "with ensembling")):
        if ensemble in cells.index.get_level_values(1):
            table[column] = [
                f"{100 * cells.loc[(m, ensemble)].iloc[0]:.2f} ± {100 * cells.loc[(m, ensemble)].iloc[1]:.2f}"
                if (m, ensemble) in cells.index else "" for m in table.index
            ]
    table.index = [METHOD_NAMES[m] for m in table.index]
    table.index.name = f"{metric} consistency x100 at T={temperature:g}"
    return table


@dataclass(frozen=True)
class CompareReport:
    """Scores of a ``gcs.compare`` frame, ready to display.

    ``scores``: one row per method, seed and metric (columns method, seed, metric,
    consistency). ``table``: one row per method, one column per metric, the mean over
    seeds. ``matrices[(method, seed, metric)]``: the [prompts, prompts] similarity matrix.
    ``per_seed``: one row per seed and method, one column per metric, plus ``prefix`` (the mean
    common-prefix length in tokens; with a tokenizer only). ``summary``: ``paired_summary`` of the scores.
    """

    scores: pd.DataFrame
    table: pd.DataFrame
    matrices: dict
    per_seed: pd.DataFrame
    summary: pd.DataFrame


def compare_report(frame: pd.DataFrame, *, metrics: Sequence[str] = ("e5",), tokenizer=None) -> CompareReport:
    """Score every (method, seed) group of responses of a ``gcs.compare`` frame under each metric.

    Each metric embeds all responses in one call. Groups are keyed by method and seed
    only: ``ensemble`` is one setting for the whole frame (whether ensembling was requested).
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
    table = table.reindex([m for m in METHODS if m in table.index]).reset_index()
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


# -- paired statistics over seeds ------------------------------------------------------------
def paired_summary(scores: pd.DataFrame, *, baseline: str = "is", confidence: float = CONFIDENCE) -> pd.DataFrame:
    """Per method and metric: consistency over seeds, and the paired test against ``baseline`` (``gcs.paired_tests``).

    ``scores`` has columns method, seed, metric, consistency (``CompareReport.scores``). Each seed is one paired
    observation: every method answered the same paraphrases with that seed. Columns: metric, method, mean, stderr,
    n (seeds scored), then, for methods other than the baseline with the baseline present, ``paired_tests``' own
    columns under its own names (pairs: its n; wins, diff, sd, low, high: the simultaneous sign-flip interval over
    the summary's comparisons, p, claimable, beyond_noise), so that a summary and a verdict read the same numbers.
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


