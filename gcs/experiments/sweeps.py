"""Consistency experiments: temperature sweeps (Fig. 2) and the Table 1 layout (a side by side's scores:
``gcs.experiments.comparison``).

    frame = gcs.sweep(gcs.load_groups("general")[:10], temperatures=[0, 0.5, 1], seeds=3)
    gcs.summary_table(frame)          # mean ± std.err by method x ensembling (Table 1)
    gcs.consistency_figure(frame)     # plotly: consistency vs temperature, one line per method

A *cell* is one group of paraphrases answered under one (method, seed, temperature,
ensemble): its responses are scored with every metric (mean pairwise similarity).
Cells are packed into as few batched ``generate`` calls as ``batch_rows`` allows (one
temperature per call), each scored as soon as its batch finishes, so a caller can save
results as they come (``on_results``) and continue from them (``resume``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from typing_extensions import Unpack

from gcs.checks import (
    DEFAULT_MAX_NEW_TOKENS,
    EXTENDED_METHODS,
    MAX_REWORDINGS,
    METHOD_NAMES,
    METHODS,
    check_engine,
    check_rewordings,
    check_temperatures,
)
from gcs.engines.batch import Row, check_plain_text
from gcs.engines.batching import Progress, check_batch_rows, check_progress, run_batches
from gcs.engines.endpoints import EngineChoice
from gcs.engines.models import Model, resolve_model
from gcs.experiments.data import Group, as_groups
from gcs.experiments.results import finished_keys
from gcs.rewording import reword
from gcs.runtime.arguments import ArgumentTypeError, check_callback, check_stop, is_integer
from gcs.runtime.keywords import GenerateOptions
from gcs.runtime.quoting import quoted
from gcs.scoring.metrics import check_metrics, mean_off_diagonal, similarity_matrices
from gcs.settings import SamplingSettings, check_generate_kwargs, settings_for
from gcs.stats.intervals import standard_error

CELL_KEYS = ("group", "method", "seed", "temperature", "ensemble")
RESULT_COLUMNS = (*CELL_KEYS, "metric", "consistency", "responses")


@dataclass(frozen=True)
class Cell:
    """One group answered under one setting: the unit of generation, scoring and resuming."""

    group: Group
    method: str
    seed: int
    temperature: float
    ensemble: int  # rewordings the model writes per prompt; 0: no ensembling

    @property
    def key(self) -> tuple:
        return (self.group.id, self.method, self.seed, float(self.temperature), int(self.ensemble))


@dataclass(frozen=True)
class SweepPlan:
    """A validated sweep: groups x temperatures x ``settings.methods`` x ``settings.seeds`` x ensembles."""

    groups: tuple[Group, ...]
    temperatures: tuple[float, ...]
    settings: SamplingSettings  # methods, seeds, top_k, top_p, max_new_tokens (its temperature is the first)
    metrics: tuple[str, ...]
    ensembles: tuple[int, ...]  # rewordings per prompt, each a setting of the sweep; 0: no ensembling

    def cells(self, resume=()) -> list[Cell]:
        """Every cell in sweep order (temperature, ensemble, method, seed, group), less those ``resume`` finished."""
        done = finished_keys(resume, CELL_KEYS)
        cells = [Cell(group, method, seed, temperature, ensemble)
                 for temperature in self.temperatures for ensemble in self.ensembles
                 for method in self.settings.methods for seed in self.settings.seeds for group in self.groups]
        return [cell for cell in cells if cell.key not in done]


def check_sweep(groups, *, temperatures, methods, seeds, metrics, max_new_tokens, top_k, top_p, ensemble,
                settings: SamplingSettings | None = None) -> SweepPlan:
    """Validate a sweep's arguments (ValueError naming the problem) into a ``SweepPlan``; see ``sweep`` (whose
    signature holds the defaults)."""
    groups = as_groups(groups, min_size=2)
    explicit = settings is not None
    settings = settings_for(sweep, settings, methods=methods, seeds=seeds, top_k=top_k, top_p=top_p,
                            max_new_tokens=max_new_tokens)
    default_temperatures = settings.temperature if explicit else (0.0, 0.5, 1.0)
    temperatures = check_temperatures(default_temperatures if temperatures is None else temperatures)
    ensembles = _ensembles(settings.ensemble if ensemble is None else ensemble)
    settings = settings.replace(temperature=temperatures[0], ensemble=0)
    return SweepPlan(tuple(groups), tuple(temperatures), settings, tuple(check_metrics(metrics)), ensembles)


def _ensembles(ensemble) -> tuple[int, ...]:
    """One count of rewordings per prompt or several (each a setting of the sweep), each 0 (off) to 8, each once."""
    counts = [ensemble] if is_integer(ensemble) or isinstance(ensemble, bool) else ensemble
    if isinstance(counts, (str, bytes)) or not isinstance(counts, Iterable):
        raise ArgumentTypeError(f"ensemble must be a count of rewordings (0 to {MAX_REWORDINGS}) or a list of "
                                f"counts, got {type(ensemble).__name__}")
    counts = [check_rewordings(count) for count in counts]
    if not counts:
        raise ValueError("ensemble must not be empty")
    return tuple(dict.fromkeys(counts))


def sweep(
    groups: Sequence[Group] | Sequence[Sequence[str]],
    *, temperatures: Iterable[float] | None = None,
    methods: Sequence[str] | str = METHODS,
    seeds: int | Iterable[int] = 3,
    metrics: Sequence[str] = ("e5",),
    model: Model | str | None = None,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    top_k: int | None = None,
    top_p: float | None = None,
    ensemble: int | Iterable[int] | None = None,
    settings: SamplingSettings | None = None,
    batch_rows: int | None = None,
    resume: pd.DataFrame | Iterable[tuple] = (),
    on_results: Callable[[pd.DataFrame], None] | None = None,
    progress: Progress = False,
    stop: threading.Event | None = None,
    engine: EngineChoice = "transformers",
    **generate_kwargs: Unpack[GenerateOptions],
) -> pd.DataFrame:
    """Consistency of responses to each group of paraphrases, for every setting (Fig. 2, Table 1).

    All paraphrases of a group under one seed share their Gumbel noise (gcs, gcswr). ``engine="vllm"`` submits all
    cells of a temperature to vLLM at once and lets it batch them (no ensembling there; ``stop`` then takes effect
    between temperatures). Served endpoints take the cells in batches of a few rounds of their requests: a run that
    fails keeps every batch passed to ``on_results``, to resume from.

    Args:
        groups: ``Group`` objects (``gcs.load_groups``) or lists of paraphrases.
        temperatures: the temperatures (None: 0, 0.5 and 1, or the one of ``settings``).
        methods: a list or a comma-separated string of methods.
        seeds: a count (0..n-1) or a list.
        metrics: similarity metrics (``gcs.METRICS``, or "e5:ID" / "minilm:ID").
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.
        max_new_tokens: at most ``MAX_NEW_TOKENS``.
        top_k: keep the k likeliest tokens (None: all).
        top_p: nucleus sampling's mass, in (0, 1] (None: off).
        ensemble: rewordings the model writes per prompt (section 5; 0 or None is off), or a list of such counts,
            each a setting of the sweep (``[0, 2]``: without and with ensembling).
        settings: a ``gcs.SamplingSettings`` in place of methods, seeds, top_k, top_p, max_new_tokens and, unless
            given, temperatures and ensemble.
        batch_rows: rows per batch (None: automatic).
        resume: an earlier run's results (its frame, or the rows ``on_results`` received, e.g. read back from a file)
            or their cell keys: those cells are not run again, and the frame returned holds the cells this call ran.
        on_results: receives each finished batch's rows.
        progress: True for a tqdm bar (gradio's ``Progress(track_tqdm=True)`` follows it), a tqdm-like bar
            (``update(n)`` gets the cells done) or a callback ``progress(done, total)``.
        stop: a ``threading.Event``; setting it ends the run after the current token with ``gcs.Cancelled``; batches
            already passed to ``on_results`` stay there.
        engine: "transformers", "vllm" or served endpoints (a ``gcs.Endpoint`` or a list).
        **generate_kwargs: passed to transformers' ``generate``.

    Returns:
        One row per cell and metric: group, method, seed, temperature, ensemble, metric, consistency (mean pairwise
        similarity of the group's responses) and responses (the texts, in prompt order).

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a bad value, before any model work.
        gcs.Cancelled: ``stop`` was set.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> frame = gcs.sweep([["What is DNA?", "Explain what DNA is."]], temperatures=[1.0], methods="is,gcswr",
        ...                   seeds=1, metrics=["jaccard"], max_new_tokens=4)
        >>> frame[["method", "metric"]].to_dict("records")
        [{'method': 'is', 'metric': 'jaccard'}, {'method': 'gcswr', 'metric': 'jaccard'}]
    """
    check_generate_kwargs(sweep, generate_kwargs)
    plan = check_sweep(groups, temperatures=temperatures, methods=methods, seeds=seeds, metrics=metrics,
                       max_new_tokens=max_new_tokens, top_k=top_k, top_p=top_p, ensemble=ensemble,
                       settings=settings)
    engine = check_engine(engine, ensembling=any(plan.ensembles))
    cells = plan.cells(resume)
    check_progress(progress)
    check_batch_rows(batch_rows)
    check_stop(stop)
    check_callback(on_results, "on_results")
    model = resolve_model(model)
    for group in plan.groups:
        check_plain_text(group.prompts, model, f"group {quoted(group.id)} prompts")
    rewritten = _rewordings(cells, model)
    at_temperature = {t: plan.settings.replace(temperature=t) for t in plan.temperatures}

    def rows_of(cell: Any) -> list[Row]:  # a Cell (run_batches types its units as object)
        return [Row(p, cell.method, cell.seed, rewritten.get(p, ())[: cell.ensemble]) for p in cell.group.prompts]

    def settings_of(cell: Any) -> SamplingSettings:
        return at_temperature[cell.temperature]

    frames = []
    for chunk, decoded in run_batches(cells, rows_of, settings_of, model, batch_rows, dict(generate_kwargs), progress,
                                      "sweep", stop, engine):
        frame = _score_cells(chunk, [[r["response"] for r in rows] for rows in decoded], plan.metrics, model)
        frames.append(frame)
        if on_results is not None:
            on_results(frame)
    if not frames:
        return pd.DataFrame(columns=list(RESULT_COLUMNS))
    return pd.concat(frames, ignore_index=True)


def _rewordings(cells: Sequence[Cell], model: Model) -> dict[str, tuple[str, ...]]:
    """Rewordings of every prompt answered with ensembling, written once by the model: as many as the largest count
    asks for, a cell taking the first ``cell.ensemble`` of them."""
    most = max((cell.ensemble for cell in cells), default=0)
    prompts = list(dict.fromkeys(p for cell in cells if cell.ensemble for p in cell.group.prompts))
    if not prompts:
        return {}
    return {prompt: tuple(r) for prompt, r in zip(prompts, reword(prompts, n=most, model=model), strict=True)}


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
def ensembling_label(ensemble) -> str:
    """How a cell's ``ensemble`` reads in a table or a legend: its count of rewordings (an older results file says
    only True or False).

    >>> ensembling_label(0), ensembling_label(2), ensembling_label(True)
    ('', ' ensembling (2 rewordings)', ' ensembling')
    """
    if not ensemble:
        return ""
    return " ensembling" if isinstance(ensemble, (bool, np.bool_)) else f" ensembling ({ensemble} rewordings)"


def consistency_by_temperature(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean consistency and its standard error by metric, ensembling, method and temperature.

    Responses generated with one seed share their noise across all groups (that is the coupling), so cells of one seed
    are not independent: the standard error is clustered by seed, taken over the per-seed means (NaN with a single
    seed).

    Args:
        frame: a ``gcs.sweep`` frame.

    Returns:
        Columns metric, ensemble, method, temperature, mean, stderr, seeds (clusters), n (cells).

    Examples:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"group": [0, 0, 1, 1] * 2, "method": ["is", "gcswr"] * 4, "seed": [0] * 4 + [1] * 4,
        ...                       "temperature": 1.0, "ensemble": 0, "metric": "e5",
        ...                       "consistency": [0.80, 0.85, 0.82, 0.86, 0.81, 0.87, 0.79, 0.84]})
        >>> consistency_by_temperature(frame)[["method", "mean", "seeds", "n"]].round(3).to_dict("records")
        [{'method': 'gcswr', 'mean': 0.855, 'seeds': 2, 'n': 4}, {'method': 'is', 'mean': 0.805, 'seeds': 2, 'n': 4}]
    """
    keys = ["metric", "ensemble", "method", "temperature"]
    per_seed = frame.groupby([*keys, "seed"], sort=True)["consistency"].agg(["mean", "count"]).reset_index()
    summary = per_seed.groupby(keys, sort=True).agg(
        mean=("mean", "mean"), stderr=("mean", standard_error), seeds=("seed", "count"), n=("count", "sum"))
    return summary.reset_index()


def summary_table(frame: pd.DataFrame, *, metric: str | None = None, temperature: float | None = None) -> pd.DataFrame:
    """Table 1's layout: rows = methods, columns = without / with ensembling, "mean ± std.err" (x100).

    The standard error is over the per-seed means (the paper's "3 independent runs").

    Args:
        frame: a ``gcs.sweep`` frame.
        metric: the metric (None: the first).
        temperature: the temperature (None: the highest).

    Returns:
        The table.

    Examples:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"group": [0, 0, 1, 1] * 2, "method": ["is", "gcswr"] * 4, "seed": [0] * 4 + [1] * 4,
        ...                       "temperature": 1.0, "ensemble": 0, "metric": "e5",
        ...                       "consistency": [0.80, 0.85, 0.82, 0.86, 0.81, 0.87, 0.79, 0.84]})
        >>> summary_table(frame).to_dict()
        {'without ensembling': {'IS': '80.50 ± 0.50', 'GCSwR': '85.50 ± 0.00'}}
    """
    metric = metric if metric is not None else frame["metric"].iloc[0]
    temperature = temperature if temperature is not None else frame["temperature"].max()
    chosen = frame[(frame["metric"] == metric) & (np.isclose(frame["temperature"], temperature))]
    if chosen.empty:
        raise ValueError(f"no results for metric {quoted(metric)} at temperature {temperature}")
    per_run = chosen.groupby(["method", "ensemble", "seed"])["consistency"].mean().reset_index()
    cells = per_run.groupby(["method", "ensemble"])["consistency"].agg(["mean", standard_error])
    table = pd.DataFrame(index=[m for m in EXTENDED_METHODS if m in cells.index.get_level_values(0)])
    for ensemble in sorted(set(cells.index.get_level_values(1))):
        column = f"with{ensembling_label(ensemble)}" if ensemble else "without ensembling"
        table[column] = [
            f"{100 * cells.loc[(m, ensemble)].iloc[0]:.2f} ± {100 * cells.loc[(m, ensemble)].iloc[1]:.2f}"
            if (m, ensemble) in cells.index else "" for m in table.index
        ]
    table.index = [METHOD_NAMES[m] for m in table.index]
    table.index.name = f"{metric} consistency x100 at T={temperature:g}"
    return table
