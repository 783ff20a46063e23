"""Side by side's seed browser: any seed's highlighted responses and E5 heatmaps, redrawn from the run's state without
generating again, and the run's downloads."""

from __future__ import annotations

import html
import json

import pandas as pd

import gcs
from ui.server.serving import download_folder
from ui.shared.deployment import thread_tokenizer
from ui.shared.highlights import highlighted


def responses_of(frame: pd.DataFrame, method: str, seed: int) -> list[str]:
    part = frame[(frame["method"] == method) & (frame["seed"] == seed)].sort_values("prompt_index")
    return list(part["response"])


def seed_view(run: dict, seed, highlight: str) -> dict:
    """The seed browser: that seed's highlighted responses and E5 heatmaps, one per method (nothing before a run)."""
    if not run:
        return {}
    frame, tokenizer = pd.DataFrame(run["frame"]), thread_tokenizer(run["model"])
    seed = int(seed) if seed is not None else run["seeds"][0]
    labels = [html.escape(p) for p in run["prompts"]]  # user text shown as text
    view = {}
    for method in gcs.METHODS:
        text, plot = [], None
        if method in run["methods"]:
            text = highlighted(responses_of(frame, method, seed), highlight, tokenizer)
            matrix = run["matrices"][f"{method}/{seed}"]
            score = gcs.scoring.metrics.mean_off_diagonal(matrix)
            plot = gcs.similarity_heatmap(matrix, labels,
                                          title=f"{gcs.METHOD_NAMES[method]}, seed {seed}: E5 {score:.3f}",
                                          zmin=0.5)
        view[f"responses-{method}"], view[f"heatmap-{method}"] = text, plot
    return view


def save_run(frame: pd.DataFrame, report: gcs.CompareReport) -> list[str]:
    folder = download_folder("gcs-run-")
    gcs.write_csv(frame, folder / "gcs_responses.csv")  # spreadsheet-safe: user text never starts a formula
    # pandas writes a missing number as null (json.dumps would write bare NaN, which is not JSON)
    run = {name: json.loads(table.to_json(orient="records", force_ascii=False))
           for name, table in (("responses", frame), ("scores", report.scores), ("summary", report.summary))}
    (folder / "gcs_run.json").write_text(json.dumps(run, indent=2, ensure_ascii=False, allow_nan=False))
    return [str(folder / "gcs_responses.csv"), str(folder / "gcs_run.json")]


def run_state(frame, report: gcs.CompareReport, prompts, settings, model) -> dict:
    """What the seed browser needs to redraw any seed without generating again."""
    return {"frame": frame.to_dict(orient="list"), "prompts": prompts, "methods": list(settings.methods),
            "seeds": list(settings.seeds), "model": model.name, "max_new_tokens": settings.max_new_tokens,
            "matrices": {f"{m}/{s}": report.matrices[(m, s, "e5")] for m in settings.methods for s in settings.seeds}}

