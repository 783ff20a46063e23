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

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from tqdm.auto import tqdm

from .data import Group
from .generation import Batch, Row, check_max_new_tokens, reword
from .models import Model, resolve_model
from .processor import check_sampling_settings
from .samplers import METHOD_NAMES, METHODS, check_method, check_seed
from .scoring import check_metrics, mean_off_diagonal, similarity_matrices

CELL_KEYS = ("group", "method", "seed", "temperature", "ensemble")
RESULT_COLUMNS = (*CELL_KEYS, "metric", "consistency", "responses")
MAX_BATCH_ROWS_CPU = 48


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


def as_groups(groups: Sequence[Group] | Sequence[Sequence[str]], min_size: int = 1) -> list[Group]:
    """Accept ``Group`` objects or plain lists of prompts (named "0", "1", ...)."""
    if isinstance(groups, (str, Group)) or not isinstance(groups, Sequence) or not groups:
        raise ValueError("groups must be a non-empty list of groups of prompts")
    result = []
    for i, group in enumerate(groups):
        if not isinstance(group, Group):
            if isinstance(group, str) or not isinstance(group, Sequence):
                raise ValueError(f"groups[{i}] must be a list of prompts, got {type(group).__name__}")
            group = Group(str(i), tuple(group))
        if len(group.prompts) < min_size:
            raise ValueError(f"group {group.id!r} has {len(group.prompts)} prompt(s); this needs at least {min_size}")
        for prompt in group.prompts:
            if not isinstance(prompt, str) or not prompt.strip():
                raise ValueError(f"group {group.id!r} has a blank or non-string prompt")
        result.append(group)
    if len({g.id for g in result}) != len(result):
        raise ValueError("group ids must be unique")
    return result


def check_seed_list(seeds: int | Iterable[int]) -> list[int]:
    """``3`` -> [0, 1, 2]; a list of seeds is checked and kept."""
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if not 1 <= seeds <= 10_000:
            raise ValueError(f"a number of seeds must be in [1, 10000], got {seeds}")
        return list(range(seeds))
    seeds = [check_seed(s, f"seeds[{i}]") for i, s in enumerate(seeds)]
    if not seeds:
        raise ValueError("seeds must not be empty")
    return seeds


def check_temperatures(temperatures: Iterable[float]) -> list[float]:
    temperatures = [temperatures] if isinstance(temperatures, (int, float)) else list(temperatures)
    if not temperatures:
        raise ValueError("temperatures must not be empty")
    for temperature in temperatures:
        check_sampling_settings(temperature, None, None)
    return [float(t) for t in temperatures]


def check_methods(methods: Sequence[str] | str) -> list[str]:
    methods = methods.split(",") if isinstance(methods, str) else list(methods)
    if not methods:
        raise ValueError("methods must not be empty")
    return [check_method(m.strip()) for m in methods]


def auto_batch_rows(model: Model, tokens_per_row: int) -> int:
    """Rows per ``generate`` call: a fixed 48 on CPU (larger batches gain nothing there);
    on CUDA as many as half the free memory holds in KV cache."""
    if model.device.type != "cuda":
        return MAX_BATCH_ROWS_CPU
    config = model.model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    bytes_per_token = 2 * config.num_hidden_layers * heads * head_dim * next(model.model.parameters()).element_size()
    free, _ = torch.cuda.mem_get_info(model.device)
    return max(1, min(1024, int(0.5 * free / (bytes_per_token * tokens_per_row))))


def pack(cells: Sequence[Cell], rows_per_cell: Callable[[Cell], int], batch_rows: int) -> list[list[Cell]]:
    """Consecutive cells of one temperature, chunked so each chunk has at most ``batch_rows`` rows.

    >>> from gcs.data import Group
    >>> g = Group("a", ("x", "y"))
    >>> cells = [Cell(g, "is", s, t, False) for t in (0.0, 1.0) for s in range(3)]
    >>> [[c.seed for c in chunk] for chunk in pack(cells, lambda c: 2, 4)]
    [[0, 1], [2], [0, 1], [2]]
    """
    chunks, current, size = [], [], 0
    for cell in cells:
        rows = rows_per_cell(cell)
        if current and (size + rows > batch_rows or cell.temperature != current[0].temperature):
            chunks.append(current)
            current, size = [], 0
        current.append(cell)
        size += rows
    if current:
        chunks.append(current)
    return chunks


def check_sweep(groups, temperatures, methods, seeds, metrics, max_new_tokens, top_k, top_p, ensembling, rewordings):
    """Validate a sweep's settings (ValueError naming the problem); returns them normalised."""
    groups = as_groups(groups, min_size=2)
    temperatures, methods, seeds = check_temperatures(temperatures), check_methods(methods), check_seed_list(seeds)
    metrics = check_metrics(metrics)
    check_sampling_settings(1.0, top_k, top_p)
    check_max_new_tokens(max_new_tokens)
    ensembling = [bool(e) for e in ([ensembling] if isinstance(ensembling, bool) else ensembling)]
    if not ensembling:
        raise ValueError("ensembling must list at least one of False/True")
    if True in ensembling and (isinstance(rewordings, bool) or not isinstance(rewordings, int) or not 1 <= rewordings <= 8):
        raise ValueError(f"rewordings must be an integer in [1, 8], got {rewordings!r}")
    return groups, temperatures, methods, seeds, metrics, list(dict.fromkeys(ensembling))


def sweep(
    groups: Sequence[Group] | Sequence[Sequence[str]],
    temperatures: Iterable[float] = (0.0, 0.5, 1.0),
    methods: Sequence[str] = METHODS,
    seeds: int | Iterable[int] = 3,
    metrics: Sequence[str] = ("e5",),
    model: Model | str | None = None,
    max_new_tokens: int = 50,
    top_k: int | None = None,
    top_p: float | None = None,
    ensembling: Sequence[bool] = (False,),
    rewordings: int = 2,
    batch_rows: int | None = None,
    skip: Iterable[tuple] = (),
    on_results: Callable[[pd.DataFrame], None] | None = None,
    progress=None,
    show_progress: bool = False,
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
    ``show_progress`` (gradio's ``Progress(track_tqdm=True)`` follows it).
    Extra keyword arguments go to transformers' ``generate``.
    """
    groups, temperatures, methods, seeds, metrics, ensembling = check_sweep(
        groups, temperatures, methods, seeds, metrics, max_new_tokens, top_k, top_p, ensembling, rewordings
    )
    model = resolve_model(model)

    skip = {tuple(key) for key in skip}
    cells = [
        Cell(group, method, seed, temperature, ensemble)
        for temperature in temperatures
        for ensemble in ensembling
        for method in methods
        for seed in seeds
        for group in groups
    ]
    cells = [cell for cell in cells if cell.key not in skip]
    rewritten = _rewordings(cells, rewordings, model)
    rows_per_cell = lambda cell: len(cell.group.prompts) * (1 + (rewordings if cell.ensemble else 0))
    chunks = pack(cells, rows_per_cell, batch_rows or auto_batch_rows(model, max_new_tokens + 128))

    frames, done = [], 0
    with tqdm(total=len(cells), desc="sweep", unit="cell", disable=not show_progress) as bar:
        for chunk in chunks:
            frame = _run_chunk(chunk, rewritten, model, metrics, max_new_tokens, top_k, top_p, generate_kwargs)
            frames.append(frame)
            if on_results is not None:
                on_results(frame)
            done += len(chunk)
            bar.update(len(chunk))
            if hasattr(progress, "update"):  # a tqdm-like bar (tqdm, gr.Progress().tqdm, ...)
                progress.update(len(chunk))
            elif progress is not None:
                progress(done, len(cells))
    if not frames:
        return pd.DataFrame(columns=list(RESULT_COLUMNS))
    return pd.concat(frames, ignore_index=True)


def _rewordings(cells: Sequence[Cell], n: int, model: Model) -> dict[str, tuple[str, ...]]:
    """Rewordings of every prompt answered with ensembling, written once by the model."""
    prompts = list(dict.fromkeys(p for cell in cells if cell.ensemble for p in cell.group.prompts))
    if not prompts:
        return {}
    return {prompt: tuple(r) for prompt, r in zip(prompts, reword(prompts, n=n, model=model))}


def _run_chunk(chunk, rewritten, model, metrics, max_new_tokens, top_k, top_p, generate_kwargs) -> pd.DataFrame:
    rows = [
        Row(prompt, cell.method, cell.seed, rewritten.get(prompt, ()) if cell.ensemble else ())
        for cell in chunk
        for prompt in cell.group.prompts
    ]
    batch = Batch(rows, model, chunk[0].temperature, top_k, top_p, max_new_tokens, dict(generate_kwargs))
    texts = [row["response"] for row in batch.decode(batch.run())]
    responses, start = [], 0
    for cell in chunk:
        responses.append(texts[start : start + len(cell.group.prompts)])
        start += len(cell.group.prompts)
    records = []
    for metric in metrics:
        matrices = similarity_matrices(responses, metric, tokenizer=model.tokenizer)
        for cell, matrix, texts_of_cell in zip(chunk, matrices, responses):
            records.append(
                dict(zip(CELL_KEYS, cell.key), metric=metric, consistency=mean_off_diagonal(matrix), responses=texts_of_cell)
            )
    return pd.DataFrame.from_records(records, columns=list(RESULT_COLUMNS))


# -- summaries ---------------------------------------------------------------------------------
def _standard_error(values: pd.Series) -> float:
    return float(values.std(ddof=1) / math.sqrt(len(values))) if len(values) > 1 else float("nan")


def consistency_by_temperature(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean and standard error (over groups x seeds) by metric, ensembling, method and temperature."""
    keys = ["metric", "ensemble", "method", "temperature"]
    summary = frame.groupby(keys, sort=True)["consistency"].agg(mean="mean", stderr=_standard_error, n="count")
    return summary.reset_index()


def summary_table(frame: pd.DataFrame, metric: str | None = None, temperature: float | None = None) -> pd.DataFrame:
    """Table 1's layout: rows = methods, columns = without / with ensembling, "mean ± std.err" (x100).

    Picks the first metric and the highest temperature unless told; the standard error
    is over the per-seed means (the paper's "3 independent runs").
    """
    metric = metric if metric is not None else frame["metric"].iloc[0]
    temperature = temperature if temperature is not None else frame["temperature"].max()
    chosen = frame[(frame["metric"] == metric) & (np.isclose(frame["temperature"], temperature))]
    if chosen.empty:
        raise ValueError(f"no results for metric {metric!r} at temperature {temperature}")
    per_run = chosen.groupby(["method", "ensemble", "seed"])["consistency"].mean().reset_index()
    cells = per_run.groupby(["method", "ensemble"])["consistency"].agg(["mean", _standard_error])
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


def score_compare(frame: pd.DataFrame, metrics: Sequence[str] = ("e5",), tokenizer=None):
    """Score a ``gcs.compare`` frame: each (method, seed, ensemble) group of responses under each metric.

    Returns ``(scores, matrices)``: a DataFrame with columns method, seed, ensemble, metric,
    consistency, and a dict mapping (method, seed, ensemble, metric) to the [n, n] matrix.
    Each metric embeds all responses in one call.
    """
    metrics = check_metrics(metrics)
    keys = ["method", "seed", "ensemble"]
    parts = [(key, part.sort_values("prompt_index")) for key, part in frame.groupby(keys, sort=False)]
    records, matrices = [], {}
    for metric in metrics:
        for (key, _), matrix in zip(parts, similarity_matrices([list(p["response"]) for _, p in parts], metric, tokenizer)):
            records.append(dict(zip(keys, key), metric=metric, consistency=mean_off_diagonal(matrix)))
            matrices[(*key, metric)] = matrix
    return pd.DataFrame.from_records(records, columns=[*keys, "metric", "consistency"]), matrices
