"""Side by side in rounds: the seeds run a round at a time (``gcs.compare_rounds``), the first round's first seed
streams into the method columns, and after each round the page shows its answers, the scores and the verdict so far,
until every comparison is decided or the seeds run out."""

from __future__ import annotations

import threading

import gradio as gr

import gcs
from gcs.runtime.stage_timing import mark, timed
from ui.server.serving import run_cancellable
from ui.shared.deployment import ENGINE
from ui.shared.highlights import response_pieces
from ui.shared.messages import changes_only
from ui.tabs.side_by_side.seed_browser import responses_of, run_state, save_run, seed_view
from ui.tabs.side_by_side.verdict import METRICS, VERDICT_METRICS, round_verdict, score_table


def one_batch_because(settings: gcs.SamplingSettings, seeds, rounds: bool) -> str | None:
    """Why a run goes in one batch rather than in rounds, or None when it runs in rounds.

    >>> one_batch_because(gcs.SamplingSettings(methods=["gcswr"]), 16, True)
    'rounds compare a method with IS'
    """
    if not rounds:
        return "stopping once decided is off"
    if "is" not in settings.methods or len(settings.methods) < 2:
        return "rounds compare a method with IS"
    if settings.ensemble:
        return "ensembling runs in one batch"
    if isinstance(seeds, (list, tuple)):
        return "a list of seeds runs in one batch"
    if len(settings.seeds) < 2:
        return "one seed is one batch"
    return None


def start_rounds(prompts, settings: gcs.SamplingSettings, model, resume: gcs.RoundReport | None = None):
    """``rounds(on_partial, stop)``: the run's ``gcs.compare_rounds`` (or its continuation with more seeds), testing
    the verdict's metrics and scoring the table's."""
    def rounds(on_partial, stop):
        if resume is not None:
            return gcs.compare_rounds(prompts, resume=resume, on_partial=on_partial, stop=stop)
        return gcs.compare_rounds(prompts, settings=settings, metrics=VERDICT_METRICS, report_metrics=METRICS,
                                  model=model, engine=ENGINE.for_request(False, model), on_partial=on_partial,
                                  stop=stop)
    return rounds


def more_seeds(run: gcs.RoundReport) -> bool:
    """Whether the page offers "more seeds": the run ended undecided, and not greedy (at temperature 0 more seeds give
    the same answers again)."""
    return run.more_seeds and run.settings.temperature != 0


def generated_tokens(frame) -> int:
    """The tokens generated so far: the longest answer's (a stream's frames come one per step, then once more; none
    while a served endpoint has answered nothing yet)."""
    return int(frame["n_tokens"].max()) if frame is not None and len(frame) else 0


def round_work(rounds, progress: dict):
    """The work of a run in rounds, for ``run_cancellable``: the first round's frame as it grows
    (``progress["frame"]``, ``progress["tokens"]``) and each round's report as it lands (``progress["rounds"]``);
    ``progress["landed"]``, where given, is set as a round lands (the page's next beat comes then)."""
    landed = progress.get("landed") or threading.Event()

    def work(stop):
        def partial(frame):  # (the stream's last frame repeats its last step's tokens: the longest answer counts)
            progress["tokens"] = generated_tokens(frame)
            progress["frame"] = frame

        for report in rounds(partial, stop):
            progress["rounds"].append(report)
            landed.set()
        return progress["rounds"][-1]

    return work


def shown_methods(settings: gcs.SamplingSettings) -> dict:
    """The method columns (responses and heatmaps) as updates: only the run's methods are shown."""
    return {f"{column}-{m}": gr.update(visible=m in settings.methods)
            for column in ("column", "plot-column") for m in gcs.METHODS}


def round_updates(rounds, prompts, settings: gcs.SamplingSettings, model, highlight: str, continued: bool = False):
    """The page's updates for a run in rounds: the first round's first seed as it streams, then after each round its
    answers in the seed browser, the scores and the verdict so far; the final one adds the stopping reason, the
    downloads and, for an undecided run, "more seeds". ``continued``: the run goes on with more seeds."""
    starting = "Generating more seeds…" if continued else "Round 1: generating…"
    visible = shown_methods(settings)
    first = settings.seeds[0]
    progress = {"tokens": 0, "frame": None, "rounds": [], "landed": threading.Event()}
    news = changes_only()  # a beat sends only what changed since the last
    shown = []  # the rounds shown so far: each in its own update, in order, however fast the next one lands

    def landed(run: gcs.RoundReport) -> dict:
        with timed("page update", round=run.look + 1):
            update = round_update(run)
        mark("update handed over", round=run.look + 1, what="verdict")
        return update

    def round_update(run: gcs.RoundReport) -> dict:
        state = {**run_state(run.frame, run.report, prompts, run.settings, model),
                 "resume": run if more_seeds(run) else None}
        update = {"verdict": round_verdict(run), "scores": score_table(run.report),
                  "paired": gcs.paired_figure(run.report.per_seed, run.report.summary, metric="e5"), "run-state": state,
                  "seed-shown": gr.update(choices=run.seeds, visible=len(run.seeds) > 1)}
        if not shown:  # the first round to land: the browser shows its first seed
            update.update(seed_view(state, first, highlight))
            update["seed-shown"] = gr.update(choices=run.seeds, value=first, visible=len(run.seeds) > 1)
        shown.append(run)
        return update

    def scored(run: gcs.RoundReport) -> str:
        return f"Round {run.look + 1}: {len(run.seeds)} seeds scored; the next round is generating…"

    def so_far() -> dict:
        landed_rounds, frame = progress["rounds"], progress["frame"]
        if not landed_rounds:  # the first round streams its first seed into the method columns
            streamed = {} if frame is None else \
                {f"responses-{m}": response_pieces(responses_of(frame, m, first)) for m in gcs.METHODS}
            if streamed and not progress.get("streaming"):
                progress["streaming"] = True
                mark("update handed over", round=1, what="first answers")
            return {**visible, **streamed, "status": starting if frame is None else
                    f"Round 1: generating… {progress['tokens']} tokens; showing seed {first}"}
        if len(shown) < len(landed_rounds):  # the next round not shown yet
            run = landed_rounds[len(shown)]
            return {**landed(run), "status": scored(run)}
        return {"status": scored(shown[-1])}

    run = yield from run_cancellable(round_work(rounds, progress), heartbeat=lambda: news(so_far()),
                                     wake=progress["landed"])
    for earlier in progress["rounds"][len(shown):-1]:  # rounds that landed between two beats
        yield {**landed(earlier), "status": scored(earlier)}
    final = landed(run) if not shown or shown[-1] is not run else {}  # unless the last beat showed it
    with timed("downloads", round=run.look + 1):
        downloads = save_run(run.frame, run.report)
    mark("update handed over", round=run.look + 1, what="done")
    yield {**visible, **final, "downloads": downloads,
           "more-seeds": gr.update(visible=more_seeds(run)),
           "status": f"Done: {run.reason}." + ENGINE.answered_by(run.engine, run.model.name)
           + (" More seeds can continue this run." if more_seeds(run) else "")}
