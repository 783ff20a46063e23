"""Consistency vs temperature: sweeps over paraphrase groups (the paper's Fig. 2)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import gradio as gr
import pandas as pd

import gcs
from ui.server.serving import download_folder, run_cancellable
from ui.server.zerogpu import gpu
from ui.shared.deployment import DEFAULT_MODEL, ENGINE, load_allowed_model, method_choices, model_dropdown
from ui.shared.limits import (
    LIMITS,
    check,
    check_count_of,
    check_metric,
    check_paraphrase,
    check_text,
    check_work,
    parse_builtin,
    parse_numbers,
    parse_paraphrases,
    quoted,
)
from ui.shared.messages import caption, click_working, failed, shown_for, user_error
from ui.shared.tab import Tab

SOURCES = ("built-in set", "my paraphrases", "uploaded file")
PROGRESS = gr.Progress(track_tqdm=True)  # as sweep_ui's default, gradio hands it the run's tqdm bars


def sweep_groups(source: str, groups_text: str, builtin_count, upload) -> list[gcs.Group]:
    """The groups of the chosen source: built-in, typed (blank line between groups) or an uploaded file."""
    if source == "uploaded file":
        if upload is None:
            raise ValueError("upload a .jsonl or .csv file first")
        path = Path(upload if isinstance(upload, str) else upload.name)
        if path.stat().st_size > LIMITS["upload bytes"].high:
            raise ValueError(f"the uploaded file is over {int(LIMITS['upload bytes'].high) // 1000:,} kB")
        groups = [checked_group(group) for group in gcs.load_groups(path)]
    elif source == "built-in set":
        groups = gcs.load_groups("general")[: check("groups", builtin_count)]
    else:
        blocks = [b for b in re.split(r"\n\s*\n", groups_text or "") if b.strip()]
        if not blocks:
            raise ValueError("enter groups of paraphrases: one per line, a blank line between groups")
        groups = [gcs.Group(str(i + 1), tuple(parse_paraphrases(b))) for i, b in enumerate(blocks)]
    if len(groups) > LIMITS["groups"].high:
        raise ValueError(f"at most {int(LIMITS['groups'].high)} groups here, got {len(groups)}")
    return groups


def checked_group(group: gcs.Group) -> gcs.Group:
    """An uploaded group held to the rules typed paraphrases meet (``check_paraphrase``): a file is one more way
    to send text, not a way around them."""
    name = f"group {quoted(group.id, 40)}"
    check_text(str(group.id), name)
    for i, prompt in enumerate(group.prompts, start=1):
        check_paraphrase(prompt, f"{name}, paraphrase {i}")
    return group


def run_sweep(groups, temperatures, seeds, methods, metric, max_new_tokens, model_name, stop=None):
    temperatures = check_count_of("temperatures", parse_numbers(temperatures, "temperatures"))
    temperatures = [check("temperature", t) for t in temperatures]
    methods, seeds = gcs.check_methods(methods if methods is not None else []), check("seeds", seeds)
    metric, max_new_tokens = check_metric(metric), check("sweep max_new_tokens", max_new_tokens)
    cells = len(groups) * len(temperatures) * len(methods) * seeds
    if cells > LIMITS["sweep cells"].high:
        raise ValueError(f"this sweep has {cells} cells (groups x temperatures x methods x seeds); the limit here "
                         f"is {int(LIMITS['sweep cells'].high)}: run larger sweeps with `gcs run`")
    model = load_allowed_model(model_name)
    prompts = [p for group in groups for p in group.prompts]
    check_work(prompts, model, len(temperatures) * len(methods) * seeds, max_new_tokens, "sweep work tokens")
    return gcs.sweep(groups, temperatures=temperatures, methods=methods, seeds=seeds, metrics=[metric], model=model,
                     max_new_tokens=max_new_tokens, progress=True, stop=stop,
                     engine=ENGINE.for_request(False, model))


CURVE_HEADERS = {"method": "method", "temperature": "temperature", "mean": "mean consistency",
                 "stderr": "± std. error (by seed)", "seeds": "seeds", "n": "cells (groups × seeds)"}


def curve_table(frame):
    # one metric and no ensembling in this tab: those columns would only repeat one value
    table = gcs.consistency_by_temperature(frame).drop(columns=["metric", "ensemble"])
    table["mean"] = table["mean"].round(4)
    # two significant digits: rounded to 4 places, two seeds' nearly equal means showed a standard error of "0"
    table["stderr"] = table["stderr"].map(lambda x: float(f"{x:.2g}"))
    table["method"] = table["method"].map(gcs.METHOD_NAMES)
    return table.rename(columns=CURVE_HEADERS)


@gpu
def sweep_ui(source, groups_text, builtin_count, upload, temperatures, seeds, methods, metric, max_new_tokens,
             model_name, progress=PROGRESS):
    """UI: the curve, its table and the CSV; stops when the page goes away (a generator, see ``run_cancellable``)."""
    try:
        groups = sweep_groups(source, groups_text, builtin_count, upload)
        work = lambda stop: run_sweep(groups, temperatures, seeds, methods, metric, max_new_tokens,  # noqa: E731
                                      model_name, stop)
        frame = yield from run_cancellable(work, heartbeat=(gr.skip(),) * 4)
        path = download_folder("gcs-sweep-") / "gcs_sweep.csv"
        gcs.write_csv(frame, path)  # spreadsheet-safe: user text never starts a formula
        yield (gcs.consistency_figure(frame, metric=metric), curve_table(frame), str(path),
               ENGINE.done(False, model_name))
    except Exception as error:
        yield failed(error, 4)


@gpu
def sweep(
    paraphrases: str,
    temperatures: str = "0, 0.5, 1",
    seeds: int = 2,
    methods: str = "is,gcswr",
    metric: str = "e5",
    max_new_tokens: int = 32,
    model: str = DEFAULT_MODEL,
) -> dict:
    """Consistency vs temperature (the paper's Fig. 2): each method's mean pairwise consistency of the answers to
    each group of paraphrases, at each temperature, averaged over seeds.

    Args:
        paraphrases: groups of rewordings, one per line, groups separated by a blank line; or "builtin:N" for the first N built-in groups.
        temperatures: comma-separated temperatures, 1 to 8 of them, each 0 (greedy) or 0.0001 to 2.
        seeds: seeds per cell, 1 to 10.
        methods: comma-separated methods among is, gcs, gcswr.
        metric: e5 (semantic similarity, the paper's), jaccard (shared words), minilm or aligned (identical token runs).
        max_new_tokens: tokens per response, 1 to 128.
        model: a model offered by this server.
    Returns:
        {"rows": one record per group, method, temperature and seed with its consistency, "curve": one record per method and temperature with the mean, its standard error over seeds, and the counts}.
        While it works it streams {"status": "running"}; a client that leaves stops the work.
    """  # noqa: E501 (gradio's API and MCP docs read each argument, and each line of Returns, from one line)
    try:
        count = parse_builtin(paraphrases, "groups")
        if count is not None:
            groups = sweep_groups("built-in set", "", count, None)
        else:
            groups = sweep_groups("my paraphrases", paraphrases, 0, None)
        work = lambda stop: run_sweep(groups, temperatures, seeds, methods, metric, max_new_tokens,  # noqa: E731
                                      model, stop)
        frame = yield from run_cancellable(work, heartbeat={"status": "running"})
    except Exception as error:
        raise user_error(error) from error
    yield {"rows": json.loads(frame.to_json(orient="records")),
           "curve": json.loads(gcs.consistency_by_temperature(frame).to_json(orient="records"))}


def build() -> Tab:
    """The "Consistency vs temperature" tab, inside the caller's ``gr.Blocks``: its inputs by query name."""
    with gr.Tab("Consistency vs temperature", id="sweep"):
        with gr.Row():
            with gr.Column():
                source = gr.Radio(list(SOURCES), value=SOURCES[0], label="paraphrase groups")
                builtin_count = gr.Slider(2, 20, value=4, step=1, label="built-in groups to use")
                groups_text = gr.Textbox(lines=6, label="my paraphrases: one per line, a blank line between groups",
                                         value="What is DNA?\nExplain what DNA is.\n\nWhy is the sky blue?\n"
                                               "What makes the sky look blue?", visible=False)
                upload = gr.File(label="upload .jsonl / .csv (schema: docs/experiments.md, paraphrase sets; ≤ 1 MB)",
                                 file_types=[".jsonl", ".csv"], type="filepath", visible=False)
            with gr.Column():
                temperatures = gr.Textbox(value="0, 0.5, 1", label="temperatures")
                seeds = gr.Slider(1, LIMITS["seeds"].high, value=2, step=1, label="seeds", elem_id="sweep-seeds")
                methods = gr.CheckboxGroup(method_choices(), value=["is", "gcswr"], label="methods")
                metric = gr.Dropdown([("E5", "e5"), ("MiniLM", "minilm"), ("token Jaccard", "jaccard"),
                                      ("aligned agreement", "aligned")],
                                     value="e5", label="metric")
                tokens = gr.Slider(8, LIMITS["sweep max_new_tokens"].high, value=32, step=8, label="max new tokens")
                model = model_dropdown()
        run = gr.Button("Run sweep", variant="primary", elem_id="run-sweep")
        status = gr.Markdown(elem_id="sweep-status")
        curve = gr.Plot(label="consistency vs temperature", elem_id="sweep-plot")
        caption("Each line is a method; points are the mean consistency over groups and seeds, bars its standard "
                "error (clustered by seed). At temperature 0 every method is greedy and they coincide; as the "
                "temperature rises, shared noise (GCS, GCSwR) should stay above IS. A standard error from few seeds "
                "(2 by default, for speed) is itself rough: use more seeds before reading a gap as real.")
        table = gr.Dataframe(value=pd.DataFrame(columns=list(CURVE_HEADERS.values())),
                             label="mean ± std.err (clustered by seed: one seed's groups share noise)",
                             interactive=False, elem_id="sweep-table")
        csv = gr.File(label="download all rows (CSV)", interactive=False)
        source.change(shown_for(SOURCES), source, [builtin_count, groups_text, upload], api_visibility="private",
                      concurrency_id="browse", concurrency_limit=4)
        click_working(run, status, sweep_ui, [source, groups_text, builtin_count, upload, temperatures, seeds, methods,
                                              metric, tokens, model], [curve, table, csv, status],
                      concurrency_id="model", concurrency_limit=1)
    return Tab({"source": source, "groups": builtin_count, "q": groups_text, "temperatures": temperatures,
                "seeds": seeds, "methods": methods, "metric": metric, "max_new_tokens": tokens, "model": model})
