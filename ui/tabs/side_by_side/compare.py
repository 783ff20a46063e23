"""Side by side: IS / GCS / GCSwR over several seeds, streamed, then scored with paired statistics.

The headline is never one seed: every method answers the paraphrases under each of several seeds, each seed gives
one paired observation (GCSwR's consistency minus IS's), and the verdict says "within noise" whenever the
interval of the mean difference holds 0. By default the seeds run in rounds (``gcs.compare_rounds``: 4, then 12):
the first round streams, each round's answers, scores and verdict so far land as it ends, and the run stops once
every comparison is decided (sequential tests, valid over every look); an undecided run offers "more seeds". A seed
browser shows one seed's responses, heatmaps and aligned spans at a time.
"""

from __future__ import annotations

import json
from contextlib import closing

import gradio as gr
import pandas as pd

import gcs
from gcs.generation.cores import compare_with
from ui.server.serving import run_cancellable
from ui.server.zerogpu import gpu
from ui.shared.deployment import DEFAULT_MODEL, ENGINE, load_allowed_model, method_choices, model_dropdown
from ui.shared.highlights import HIGHLIGHTS, SPAN_COLORS, SPAN_LABELS, response_pieces
from ui.shared.limits import LIMITS, PAGE_SEED_MAX, check, check_flag, check_work, parse_paraphrases
from ui.shared.logs import logger
from ui.shared.messages import by_name, caption, changes_only, click_working, failure, user_error
from ui.shared.tab import Tab
from ui.tabs.side_by_side.compare_rounds import (
    generated_tokens,
    more_seeds,
    one_batch_because,
    round_updates,
    round_work,
    shown_methods,
    start_rounds,
)
from ui.tabs.side_by_side.seed_browser import responses_of, run_state, save_run, seed_view
from ui.tabs.side_by_side.verdict import METRICS, SCORE_COLUMNS, excess, round_verdict, score_table, verdict

REWORDINGS = 2  # the model writes this many rewordings per prompt when ensembling is on
# Defaults with power (bench/bench_verdict.py, all 44 built-in groups, 64 tokens, T = 1): with 16 seeds the verdict
# resolved GCSwR's gain over IS in 64 % of groups under E5 and 89 % under aligned agreement (8 seeds: 30 % and 52 %),
# while a null comparison claimed an effect in 2 % (docs/experiments.md).
DEFAULT_SEEDS = 16
DEFAULT_TEMPERATURE = 1.0


def seed_list(seed, seeds) -> list[int]:
    """The seeds of a run: a count from ``seed`` (``seed``, ``seed + 1``, ...: the page's "first seed" and "seeds";
    the API's ``seeds`` counts from 0, as everywhere in gcs) or an explicit list (at most 16 entries; a repeated
    seed runs once), within the demo's limits. The count is checked before any element.

    >>> seed_list(7, 3), seed_list(0, [5, 2, 5])
    ([7, 8, 9], [5, 2])
    """
    listed = isinstance(seeds, (list, tuple))
    count = check("seeds per run", len(seeds) if listed else seeds)  # first: a huge list's elements are never read
    seed = check("seed", seed)
    if listed:
        return list(dict.fromkeys(check("seed", s) for s in seeds))
    if seed + count - 1 > gcs.MAX_SEED:
        raise ValueError(f"seed {seed} with {count} seeds runs past the largest seed (2^63 - 1); use a smaller seed")
    return [seed + i for i in range(count)]


def compare_inputs(paraphrases, temperature, max_new_tokens, seeds: list[int], top_p, methods, ensemble: int,
                   model_name):
    """The request as (prompts, settings, model), checked against the demo's limits (``seeds``: from ``seed_list``;
    ``ensemble``: rewordings per prompt, 0 for none)."""
    prompts = parse_paraphrases(paraphrases)
    top_p = check("top_p", top_p)
    settings = gcs.SamplingSettings(
        methods=gcs.check_methods(methods if methods is not None else []), seeds=seeds,
        temperature=check("temperature", temperature), top_p=None if top_p == 1 else top_p,
        max_new_tokens=check("max_new_tokens", max_new_tokens), ensemble=check("ensemble", ensemble),
    )
    model = load_allowed_model(model_name)
    rows_per_prompt = len(settings.methods) * len(settings.seeds) * (1 + settings.ensemble)
    check_work(prompts, model, rows_per_prompt, settings.max_new_tokens, "work tokens")
    return prompts, settings, model


def _run(prompts, settings: gcs.SamplingSettings, model, streaming: bool, stop=None):
    """The run's frames (its last is final), with the excess surprise generation records (``gcs.generation``)."""
    engine = ENGINE.for_request(bool(settings.ensemble), model)
    return compare_with(prompts, settings, model, engine=engine, streaming=streaming, stop=stop, record_excess=True)


def generation(prompts, settings: gcs.SamplingSettings, model, progress: dict):
    """The work of a side-by-side run, for ``run_cancellable``: it streams the run in its thread, keeping the steps
    so far (``progress["tokens"]``) and the latest frame (``progress["frame"]``) for the handler's beats to show,
    and returns the final frame; the first seeds' excess surprise, recorded as they were drawn, goes to
    ``progress["excess"]`` (the verdict's degenerate-output check). A stop (the client left) reaches the runner: the
    prefill's next chunk of rows or the next token does not start, and the stream ends with ``gcs.Cancelled``."""

    def work(stop):
        with closing(_run(prompts, settings, model, streaming=True, stop=stop)) as frames:
            for progress["frame"] in frames:
                progress["tokens"] = generated_tokens(progress["frame"])
        progress["excess"] = excess(progress["frame"], list(settings.seeds), model)
        return progress["frame"].drop(columns="excess_surprise")

    return work


@gpu
def compare_stream(paraphrases, temperature, max_new_tokens, seed, top_p, methods, ensembling, model_name,
                   seeds=DEFAULT_SEEDS, highlight=HIGHLIGHTS[0], rounds=True):
    """UI: the first seed's responses stream into the method columns; then scores, the paired view, heatmaps.
    Each update is ``{output name: value}`` for the outputs that change (``build`` wires the names). ``rounds``: run
    the seeds in rounds and stop once decided (where the run compares methods with IS, without ensembling).

    A refused or failed run shows its message as a toast and in the status line; earlier results stay.
    """
    try:
        ensemble = REWORDINGS if check_flag(ensembling, "ensembling") else 0
        prompts, settings, model = compare_inputs(paraphrases, temperature, max_new_tokens, seed_list(seed, seeds),
                                                  top_p, methods, ensemble, model_name)
        one_batch = one_batch_because(settings, seeds, check_flag(rounds, "stop once decided"))
        yield {"more-seeds": gr.update(visible=False)}  # a new run: the last one's continuation is gone
        if one_batch is None:
            yield from round_updates(start_rounds(prompts, settings, model), prompts, settings, model, highlight)
            return
        visible = shown_methods(settings)
        first, rows = settings.seeds[0], len(settings.methods) * len(settings.seeds) * len(prompts)
        progress = {"tokens": 0, "frame": None}

        def so_far() -> dict:  # each half-second beat shows the first seed's responses as they grow
            frame, tokens = progress["frame"], progress["tokens"]
            shown = {} if frame is None else \
                {f"responses-{m}": response_pieces(responses_of(frame, m, first)) for m in gcs.METHODS}
            return {**visible, **shown, "status": f"Generating {rows} responses ({len(settings.methods)} methods × "
                                                  f"{len(settings.seeds)} seeds × {len(prompts)} paraphrases)… "
                                                  f"{tokens} tokens; showing seed {first}"}

        news = changes_only()  # a beat sends only what changed since the last
        frame = yield from run_cancellable(generation(prompts, settings, model, progress),
                                           heartbeat=lambda: news(so_far()))
        report = gcs.compare_report(frame, metrics=METRICS, tokenizer=model.tokenizer)
        state = run_state(frame, report, prompts, settings, model)
        paired = gcs.paired_figure(report.per_seed, report.summary, metric="e5") if "is" in settings.methods else None
        yield {**visible, **seed_view(state, first, highlight),
               "verdict": verdict(report, settings, progress["excess"]), "paired": paired,
               "scores": score_table(report), "downloads": save_run(frame, report),
               "seed-shown": gr.update(choices=list(settings.seeds), value=first, visible=len(settings.seeds) > 1),
               "run-state": state, "more-seeds": gr.update(visible=False),
               "status": ENGINE.done(bool(settings.ensemble), model.name)}
    except Exception as error:
        yield {"status": failure(error)}


@gpu
def compare_more(state, highlight=HIGHLIGHTS[0]):
    """UI: "more seeds" continues an undecided run in rounds with its plan's extension (the same sequence: the
    seeds after its last, the error budget set aside for them before the first seed)."""
    try:
        run = (state or {}).get("resume")
        if run is None:
            raise ValueError("there is no undecided run to continue: run the side by side first")
        extra = run.plan.extended().looks[-1] - len(run.seeds)
        rows = len(run.settings.methods) * extra
        check_work(state["prompts"], run.model, rows, run.settings.max_new_tokens, "work tokens")
        yield {"more-seeds": gr.update(visible=False)}
        yield from round_updates(start_rounds(state["prompts"], run.settings, run.model, resume=run),
                                 state["prompts"], run.settings, run.model, highlight, continued=True)
    except Exception as error:
        yield {"status": failure(error)}


@gpu
def compare(
    paraphrases: str,
    temperature: float = DEFAULT_TEMPERATURE,
    max_new_tokens: int = 64,
    seeds: int | list[int] = DEFAULT_SEEDS,
    top_p: float = 1.0,
    methods: str = "is,gcs,gcswr",
    ensemble: int = 0,
    model: str = DEFAULT_MODEL,
    rounds: bool = True,
) -> dict:
    """IS, GCS and GCSwR side by side: every method answers every paraphrase under each seed, and the verdict
    says, with paired statistics over the seeds, whether GCS/GCSwR answers agree more than IS answers.

    Args:
        paraphrases: 2 to 8 rewordings of one question, one per line (each up to 1,000 characters).
        temperature: sampling temperature, 0 to 2 (0 is greedy: every method gives the same answer).
        max_new_tokens: tokens per response, 1 to 256.
        seeds: how many seeds (seeds 0 to n - 1), 1 to 16, or the seeds themselves (distinct whole numbers from 0 to 2^63 - 1).
        top_p: nucleus sampling mass in (0, 1]; 1 keeps every token.
        methods: comma-separated methods among is, gcs, gcswr (IS is the baseline of the verdict).
        ensemble: rewordings the model writes per paraphrase, 0 (off, the default) to 2, whose distributions are averaged (geometric mean) at every step.
        model: a model offered by this server (see the app's model list; the default works offline).
        rounds: true (the default) to run a count of seeds in rounds of 4 then 12 and stop once every comparison with IS is decided (sequential tests, valid over every look); false, or a list of seeds, ensembling or no IS, runs every seed in one batch.
    Returns:
        {"paraphrases", "responses" (the first seed's, {method: [answer per paraphrase]}), "scores" ({method: {metric: mean over seeds}}), "per_seed" (a record per seed and method: each metric and its responses), "summary" (per method and metric: mean, stderr, n and the paired difference from IS with its interval), "verdict" (the same in plain sentences, simultaneous over every line), "stopping" ({"seeds_used", "max_seeds", "reason", "in_rounds", "more_seeds", "tests": the sequential tests per comparison, in rounds}), "settings"}.
        While it works it streams {"status": "generating", "tokens": n}; a client that leaves stops the work.
    """  # noqa: E501 (gradio's API and MCP docs read each argument, and each line of Returns, from one line)
    try:
        prompts, settings, loaded = compare_inputs(paraphrases, temperature, max_new_tokens, seed_list(0, seeds),
                                                   top_p, methods, ensemble, model)
        one_batch = one_batch_because(settings, seeds, check_flag(rounds, "rounds"))
        progress = {"tokens": 0, "frame": None, "rounds": []}
        work = generation(prompts, settings, loaded, progress) if one_batch else \
            round_work(start_rounds(prompts, settings, loaded), progress)
        try:
            result = yield from run_cancellable(work, heartbeat=lambda: {"status": "generating",
                                                                         "tokens": progress["tokens"]})
        except GeneratorExit:  # the client went away: the generation has stopped (and was waited for)
            logger.info("/compare abandoned by its client: its generation stopped after %d of at most %d tokens",
                        progress["tokens"], settings.max_new_tokens)
            raise
        if one_batch:
            frame = result
            report = gcs.compare_report(frame, metrics=METRICS, tokenizer=loaded.tokenizer)
            said = verdict(report, settings, progress["excess"])
            stopping = {"seeds_used": len(settings.seeds), "max_seeds": len(settings.seeds), "in_rounds": False,
                        "reason": f"one batch of {len(settings.seeds)} seeds ({one_batch})", "more_seeds": False,
                        "tests": []}
        else:
            frame, report, settings = result.frame, result.report, result.settings
            said = round_verdict(result)
            stopping = {"seeds_used": len(result.seeds), "max_seeds": result.plan.looks[result.plan.maximum],
                        "in_rounds": True, "reason": result.reason, "more_seeds": more_seeds(result),
                        "tests": json.loads(result.tests.to_json(orient="records"))}
    except Exception as error:
        raise user_error(error) from error
    by_method = report.table.set_index("method")
    per_seed = report.per_seed.copy()
    per_seed["responses"] = [responses_of(frame, m, s)
                             for m, s in zip(per_seed["method"], per_seed["seed"], strict=True)]
    yield {
        "paraphrases": prompts,
        "responses": {m: responses_of(frame, m, settings.seeds[0]) for m in settings.methods},
        "scores": {m: {metric: float(by_method.loc[m, metric]) for metric in METRICS} for m in settings.methods},
        "per_seed": json.loads(per_seed.to_json(orient="records")),
        "summary": json.loads(report.summary.to_json(orient="records")),
        "verdict": said,
        "stopping": stopping,
        "settings": {"temperature": settings.temperature, "max_new_tokens": settings.max_new_tokens,
                     "seeds": list(settings.seeds), "top_p": settings.top_p or 1.0, "ensemble": settings.ensemble,
                     "model": loaded.name},
    }


def build(examples: list[list[str]]) -> Tab:
    """The "Side by side" tab, inside the caller's ``gr.Blocks``: its inputs by query-parameter name, and the state
    holding its last run (``shared["compare-run"]``: the hindsight tab takes a response from it)."""
    with gr.Tab("Side by side", id="compare"):
        with gr.Row():
            with gr.Column(scale=3):
                low, high = int(LIMITS["paraphrases"].low), int(LIMITS["paraphrases"].high)
                paraphrases = gr.Textbox(label=f"paraphrases ({low}–{high}, one per line)", lines=4,
                                         value=examples[0][0], elem_id="paraphrases")
                gr.Examples(examples, inputs=[paraphrases], label="examples")
            with gr.Column(scale=2):
                temperature = gr.Slider(0, LIMITS["temperature"].high, value=DEFAULT_TEMPERATURE, step=0.05,
                                        label="temperature", info="1 = the model's own distribution; 0 = greedy")
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p")
                max_new_tokens = gr.Slider(8, LIMITS["max_new_tokens"].high, value=64, step=8, label="max new tokens")
                with gr.Row():
                    seed = gr.Number(value=0, precision=0, maximum=PAGE_SEED_MAX, label="first seed",
                                     elem_id="compare-seed")
                    seeds = gr.Slider(1, LIMITS["seeds per run"].high, value=DEFAULT_SEEDS, step=1, label="seeds",
                                      info="one paired observation each", elem_id="compare-seeds")
                methods = gr.CheckboxGroup(method_choices(), value=list(gcs.METHODS), label="methods")
                ensembling = gr.Checkbox(value=False,
                                         label=f"ensembling (the model writes {REWORDINGS} rewordings per prompt)")
                model = model_dropdown()
                rounds = gr.Checkbox(value=True, label="stop once decided (rounds of 4, then 12 seeds)",
                                     info="the verdict looks after each round and holds over every look",
                                     elem_id="compare-rounds")
        run = gr.Button("Generate", variant="primary", elem_id="run-compare")
        status = gr.Markdown(elem_id="status")
        verdict_box = gr.Markdown(elem_id="verdict")
        more = gr.Button("More seeds", visible=False, elem_id="more-seeds", size="sm")
        paired = gr.Plot(label="paired by seed", elem_id="paired-plot")
        caption("Each dot is one seed: that seed's consistency minus IS's, on the same paraphrases. "
                "Dots above the dotted line favour the shared-noise method; the diamond is the mean with "
                "its 95 % interval, and an interval that crosses 0 is within noise.")
        scores = gr.Dataframe(value=pd.DataFrame(columns=SCORE_COLUMNS),
                              label="consistency over seeds (mean pairwise similarity, mean ± s.e.; aligned: share "
                                    "of tokens in identical runs of ≥ 3; common prefix: tokens two responses share "
                                    "before they differ)", elem_id="scores", interactive=False, wrap=True)
        with gr.Row():
            seed_shown = gr.Dropdown(choices=[], label="seed shown below", visible=False, elem_id="seed-shown",
                                     interactive=True)
            highlight = gr.Radio(list(HIGHLIGHTS), value=HIGHLIGHTS[0], label="highlight",
                                 info="aligned spans: the same words in the same order as response [1] (runs of "
                                      "≥ 3 tokens), one colour per stretch; the other view marks any token that "
                                      "occurs in every response, common words included", elem_id="highlight")
        columns, shown = {}, {}  # by output name: each method's two columns; the seed browser's responses and heatmaps
        colors = {"paraphrase": "#e0e0e0", "shared": SPAN_COLORS[0], **dict(zip(SPAN_LABELS, SPAN_COLORS, strict=True))}
        with gr.Row(equal_height=True):
            for method in gcs.METHODS:
                with gr.Column(elem_classes="method-column") as columns[f"column-{method}"]:
                    gr.Markdown(f"### {gcs.METHOD_NAMES[method]}", elem_classes="method-heading")
                    shown[f"responses-{method}"] = gr.HighlightedText(
                        label="responses", color_map=colors, show_legend=False, show_inline_category=False,
                        combine_adjacent=True, elem_id=f"responses-{method}", elem_classes="response-text")
        with gr.Row(equal_height=True):
            for method in gcs.METHODS:
                with gr.Column(elem_classes="method-column") as columns[f"plot-column-{method}"]:
                    shown[f"heatmap-{method}"] = gr.Plot(label=f"{gcs.METHOD_NAMES[method]}: E5 similarity",
                                                         elem_id=f"heatmap-{method}")
        caption("Heatmaps: similarity of each pair of responses (paraphrase numbers on the axes, their text on "
                "hover). Darker off the diagonal means the answers to different wordings agree more.")
        downloads = gr.File(label="download this run (CSV, JSON)", file_count="multiple", interactive=False)
        state = gr.State(None)
        inputs = [paraphrases, temperature, max_new_tokens, seed, top_p, methods, ensembling, model, seeds, highlight,
                  rounds]
        components = {**columns, **shown, "verdict": verdict_box, "paired": paired, "scores": scores,
                      "downloads": downloads, "seed-shown": seed_shown, "run-state": state, "status": status,
                      "more-seeds": more}
        click_working(run, status, by_name(compare_stream, components), inputs, list(components.values()),
                      concurrency_id="model", concurrency_limit=1, show_progress="hidden")
        click_working(more, status, by_name(compare_more, components), [state, highlight],
                      list(components.values()), concurrency_id="model", concurrency_limit=1, show_progress="hidden")
        # .input, not .change: a run's own update sets the seed shown (and already carries its view); .change
        # would fire on that too and draw the same three heatmaps and responses a second time, mid-run
        for control in (seed_shown, highlight):
            control.input(by_name(seed_view, shown), [state, seed_shown, highlight], list(shown.values()),
                          api_visibility="private", concurrency_id="browse", concurrency_limit=4)
    links = {"q": paraphrases, "temperature": temperature, "top_p": top_p, "max_new_tokens": max_new_tokens,
             "seed": seed, "seeds": seeds, "methods": methods, "model": model, "highlight": highlight,
             "rounds": rounds}
    return Tab(links, shared={"compare-run": state})
