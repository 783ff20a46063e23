"""Side by side: IS / GCS / GCSwR responses to the user's paraphrases, streamed, then scored and plotted."""

from __future__ import annotations

import html
import json

import gradio as gr
import pandas as pd

import gcs

from .common import (
    DEFAULT_MODEL, LIMITS, check, check_flag, check_work, download_folder, engine_for, gpu, load_allowed_model,
    method_choices, model_dropdown, parse_paraphrases, user_error,
)

METRICS = ("e5", "jaccard", "minilm")
METRIC_LABELS = {"e5": "E5", "jaccard": "Jaccard", "minilm": "MiniLM"}
REWORDINGS = 2  # the model writes this many rewordings per prompt when ensembling is on


def compare_inputs(paraphrases, temperature, max_new_tokens, seed, top_p, methods, ensembling, model_name):
    """The request as (prompts, settings, model), checked against the demo's limits."""
    prompts = parse_paraphrases(paraphrases)
    top_p = check("top_p", top_p)
    settings = gcs.SamplingSettings(
        methods=gcs.check_methods(methods if methods is not None else []), seeds=[check("seed", seed)],
        temperature=check("temperature", temperature), top_p=None if top_p == 1 else top_p,
        max_new_tokens=check("max_new_tokens", max_new_tokens),
        ensemble=REWORDINGS if check_flag(ensembling, "ensembling") else 0,
    )
    model = load_allowed_model(model_name)
    rows_per_prompt = len(settings.methods) * len(settings.seeds) * (1 + settings.ensemble)
    check_work(prompts, model, rows_per_prompt, settings.max_new_tokens, "work tokens")
    return prompts, settings, model


def _run(prompts, settings: gcs.SamplingSettings, model, streaming: bool):
    run = gcs.stream_compare if streaming else gcs.compare
    return run(prompts, model=model, settings=settings, engine=engine_for(bool(settings.ensemble)))


def _pieces(frame: pd.DataFrame, method: str, shared: list | None = None) -> list[tuple[str, str | None]]:
    """HighlightedText value: numbered responses, tokens shared by all of them marked "shared"."""
    part = frame[frame["method"] == method].sort_values("prompt_index")
    value = []
    for i, response in enumerate(part["response"]):
        value.append((f"[{i + 1}] ", "paraphrase"))
        if shared is None:
            value.append((response.strip() or "…", None))
        else:
            value += [(text, "shared" if is_shared else None) for text, is_shared in shared[i]]
        value.append(("\n\n", None))
    return value


def _table(report: gcs.CompareReport) -> pd.DataFrame:
    table = report.table.rename(columns=METRIC_LABELS).round(3)
    table["method"] = table["method"].map(gcs.METHOD_NAMES)
    return table


def _save_run(frame: pd.DataFrame, report: gcs.CompareReport) -> list[str]:
    folder = download_folder("gcs-run-")
    gcs.write_csv(frame, folder / "gcs_responses.csv")  # spreadsheet-safe: user text never starts a formula
    run = {"responses": frame.to_dict(orient="records"), "scores": report.scores.to_dict(orient="records")}
    (folder / "gcs_run.json").write_text(json.dumps(run, indent=2, ensure_ascii=False, default=str))
    return [str(folder / "gcs_responses.csv"), str(folder / "gcs_run.json")]


@gpu
def compare_stream(paraphrases, temperature, max_new_tokens, seed, top_p, methods, ensembling, model_name):
    """UI: responses stream into the method columns, then scores, heatmaps and shared tokens."""
    try:
        prompts, settings, model = compare_inputs(paraphrases, temperature, max_new_tokens, seed, top_p, methods,
                                                  ensembling, model_name)
        visible = [gr.update(visible=m in settings.methods) for m in gcs.METHODS]
        frame = None
        for step, frame in enumerate(_run(prompts, settings, model, streaming=True)):
            if step % 4 == 0:  # a browser update per few tokens is smooth enough and keeps the queue light
                texts = [_pieces(frame, m) for m in gcs.METHODS]
                yield *visible, *texts, *[None] * 3, None, None, f"Generating… {step + 1} tokens"
        report = gcs.compare_report(frame, METRICS, tokenizer=model.tokenizer)
        texts, plots = [], []
        labels = [f"[{i + 1}] {html.escape(p)}" for i, p in enumerate(prompts)]  # user text shown as text
        (seed,) = settings.seeds
        for method in gcs.METHODS:
            if method not in settings.methods:
                texts.append([])
                plots.append(None)
                continue
            responses = list(frame[frame["method"] == method].sort_values("prompt_index")["response"])
            texts.append(_pieces(frame, method, gcs.shared_tokens(responses, model.tokenizer)))
            e5 = report.table.set_index("method").loc[method, "e5"]
            plots.append(gcs.similarity_heatmap(report.matrices[(method, seed, "e5")], labels,
                                                f"{gcs.METHOD_NAMES[method]}: E5 consistency {e5:.3f}", zmin=0.5))
        yield *visible, *texts, *plots, _table(report), _save_run(frame, report), "Done."
    except Exception as error:
        raise user_error(error) from error


@gpu
def api_compare(
    paraphrases: str,
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    top_p: float = 1.0,
    methods: str = "is,gcs,gcswr",
    ensembling: bool = False,
    model: str = DEFAULT_MODEL,
) -> dict:
    """Responses to each paraphrase (one per line) by each method, and their consistency scores.

    Returns {"paraphrases": [...], "responses": {method: [...]}, "scores": {method: {metric: value}}, "settings": {...}}.
    While it works it yields {"status": "generating", "tokens": n} (``client.predict`` returns only the
    result): being a generator lets the server stop generating when the client goes away.
    """
    try:
        prompts, settings, loaded = compare_inputs(paraphrases, temperature, max_new_tokens, seed, top_p, methods,
                                                   ensembling, model)
        frame = None
        for step, frame in enumerate(_run(prompts, settings, loaded, streaming=True)):
            if step % 8 == 0:
                yield {"status": "generating", "tokens": step}
        report = gcs.compare_report(frame, METRICS, tokenizer=loaded.tokenizer)
    except Exception as error:
        raise user_error(error) from error
    by_method = report.table.set_index("method")
    yield {
        "paraphrases": prompts,
        "responses": {m: list(frame[frame["method"] == m].sort_values("prompt_index")["response"])
                      for m in settings.methods},
        "scores": {m: {metric: float(by_method.loc[m, metric]) for metric in METRICS} for m in settings.methods},
        "settings": {"temperature": settings.temperature, "max_new_tokens": settings.max_new_tokens,
                     "seed": settings.seeds[0], "top_p": settings.top_p or 1.0, "ensembling": bool(settings.ensemble),
                     "model": loaded.name},
    }


def build(examples: list[list[str]]) -> None:
    """The "Side by side" tab, inside the caller's ``gr.Blocks``."""
    with gr.Tab("Side by side", id="compare"):
        with gr.Row():
            with gr.Column(scale=3):
                low, high = int(LIMITS["paraphrases"].low), int(LIMITS["paraphrases"].high)
                paraphrases = gr.Textbox(label=f"paraphrases ({low}–{high}, one per line)", lines=4,
                                         value=examples[0][0], elem_id="paraphrases")
                gr.Examples(examples, inputs=[paraphrases], label="examples")
            with gr.Column(scale=2):
                temperature = gr.Slider(0, LIMITS["temperature"].high, value=0.7, step=0.05, label="temperature",
                                        info="1 = the model's own distribution; 0 = greedy")
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p")
                max_new_tokens = gr.Slider(8, LIMITS["max_new_tokens"].high, value=64, step=8, label="max new tokens")
                seed = gr.Number(value=0, precision=0, minimum=0, label="seed")
                methods = gr.CheckboxGroup(method_choices(), value=list(gcs.METHODS), label="methods")
                ensembling = gr.Checkbox(value=False,
                                         label=f"ensembling (the model writes {REWORDINGS} rewordings per prompt)")
                model = model_dropdown()
        run = gr.Button("Generate", variant="primary", elem_id="run-compare")
        status = gr.Markdown(elem_id="status")
        columns, texts, plots = [], [], []
        with gr.Row(equal_height=False):
            for method in gcs.METHODS:
                with gr.Column(elem_classes="method-column") as column:
                    gr.Markdown(f"### {gcs.METHOD_NAMES[method]}")
                    texts.append(gr.HighlightedText(label="responses (tokens present in all responses highlighted)",
                                                    color_map={"shared": "#ffd54f", "paraphrase": "#e0e0e0"},
                                                    show_legend=False, show_inline_category=False,
                                                    combine_adjacent=True, elem_id=f"responses-{method}"))
                    plots.append(gr.Plot(label="E5 similarity", elem_id=f"heatmap-{method}"))
                columns.append(column)
        scores = gr.Dataframe(label="consistency (mean pairwise similarity)", elem_id="scores", interactive=False)
        downloads = gr.File(label="download this run (CSV, JSON)", file_count="multiple", interactive=False)
        run.click(compare_stream, [paraphrases, temperature, max_new_tokens, seed, top_p, methods, ensembling, model],
                  [*columns, *texts, *plots, scores, downloads, status], api_visibility="private",
                  concurrency_id="model", concurrency_limit=1)
