"""A/B with shared luck: what a change to the system prompt, the template, the sampling or the model does to the
answers, both arms answering with one noise per seed (``gcs.ab``), against an independent-sampling control."""

from __future__ import annotations

import json
import math

import gradio as gr
import pandas as pd

import gcs
from gcs.runtime.names import parse_names
from ui.server.serving import download_folder, run_cancellable
from ui.server.zerogpu import gpu
from ui.shared.deployment import (
    DEFAULT_MODEL,
    ENGINE,
    check_allowed_model,
    load_allowed_model,
    model_dropdown,
    thread_tokenizer,
)
from ui.shared.highlights import HIGHLIGHTS, SPAN_COLORS, SPAN_LABELS, highlighted
from ui.shared.limits import LIMITS, check, check_paraphrase, check_text, check_work, parse_builtin, quoted, visible
from ui.shared.messages import as_text, caption, click_working, failed, failure, one_paragraph, shown_for, user_error
from ui.shared.tab import Tab

SOURCES = ("built-in set", "my prompts")
PRECISIONS = [("the model's default", "default"), ("bfloat16", "bfloat16"), ("float32", "float32")]
SCORES = [("length (tokens)", "length"), ("E5 between A and B", "e5_between"), ("aligned agreement", "aligned")]
SHARED_METHODS = [("GCSwR", "gcswr"), ("GCS", "gcs")]
EFFECT_HEADERS = {"score": "score", "diff": "B − A (mean over seeds)", "low": "low", "high": "high",
                  "beyond_noise": "beyond noise", "control_low": "IS control: low", "control_high": "IS control: high",
                  "is_seeds": "seeds IS needs for this width"}
RACE_COLUMNS = ["arm", "token", "probability", "noise", "arrival", "won"]
PAIR_HEADERS = {"prompt_index": "prompt", "seed": "seed", "identical": "identical", "parts_at": "parts at token",
                "answer_a": "A's answer", "answer_b": "B's answer"}
PROGRESS = gr.Progress(track_tqdm=True)  # as ab_ui's default, gradio hands it the run's tqdm bars


def ab_prompts(source: str, prompts_text: str, builtin_count) -> list[str]:
    """The prompts of the chosen source: the first wording of the first N built-in groups, or typed, one per line."""
    if source == "built-in set":
        return [group.prompts[0] for group in gcs.load_groups("general")[: check("ab prompts", builtin_count)]]
    if not isinstance(prompts_text, str):
        raise ValueError("prompts must be text, one per line")
    lines = [line.strip() for line in prompts_text.splitlines() if line.strip()]
    high = int(LIMITS["ab prompts"].high)
    if not 1 <= len(lines) <= high:
        raise ValueError(f"enter 1 to {high} prompts, one per line (got {len(lines)})")
    return [check_paraphrase(line, f"prompt {i}") for i, line in enumerate(lines, start=1)]


def arm(name: str, system, template, temperature, top_p, model_name, precision) -> gcs.Variant:
    """One arm from the page's (or the API's) settings, each checked against the demo's limits."""
    for value, what in ((system, "system prompt"), (template, "template")):
        if not isinstance(value, str):
            raise ValueError(f"{name}'s {what} must be text, got {quoted(value)}")
        chars = int(LIMITS["paraphrase characters"].high)
        if len(value) > chars:
            raise ValueError(f"{name}'s {what} has {len(value):,} characters; the limit here is {chars:,}")
        check_text(value, f"{name}'s {what}")
    if system.strip() and not visible(system):  # "" is the template's default; zero-width spaces would be sent
        raise ValueError(f"{name}'s system prompt shows nothing (only spaces or invisible characters): leave it empty "
                         "for the chat template's default")
    if precision not in {value for _, value in PRECISIONS}:
        raise ValueError(f"{name}'s precision must be one of {', '.join(v for _, v in PRECISIONS)}, got "
                         f"{quoted(precision)}")
    top_p = check("top_p", top_p)
    model = load_allowed_model(model_name) if precision == "default" else check_allowed_model(model_name)
    return gcs.Variant(model=model, system=system.strip() or None, template=template, name=name,
                       temperature=check("temperature", temperature), top_p=None if top_p == 1 else top_p,
                       dtype=None if precision == "default" else precision)


def run_ab(prompts: list[str], a: gcs.Variant, b: gcs.Variant, seeds, method: str, scores, max_new_tokens,
           stop=None) -> pd.DataFrame:
    """Both arms and the IS control, within the demo's limits (the work counted with each arm's own wording)."""
    seeds, max_new_tokens = check("ab seeds", seeds), check("ab max_new_tokens", max_new_tokens)
    if method not in {value for _, value in SHARED_METHODS}:
        raise ValueError(f"method must be gcswr or gcs (the arms share luck only there), got {quoted(method)}")
    scores = parse_names(scores, [value for _, value in SCORES], what="score")
    for variant in (a, b):  # two rows (shared luck and the IS control) per seed and prompt, for each arm
        model = variant.model if isinstance(variant.model, gcs.Model) else load_allowed_model(variant.model)
        check_work([variant.text(p) for p in prompts], model, 2 * seeds, max_new_tokens, "ab work tokens",
                   fewer="prompts, seeds or new tokens")
    return gcs.ab(prompts, a, b, seeds=range(seeds), method=method, metrics=list(scores),
                  max_new_tokens=max_new_tokens, progress=True, stop=stop,
                  engine=ENGINE.for_arms(a, b))



def effects_table(report: gcs.ABReport) -> pd.DataFrame:
    table = report.effects.rename(columns={"metric": "score"})
    table = table[[c for c in EFFECT_HEADERS if c in table]].round(3)
    if "is_seeds" in table:  # an estimate of a count: whole seeds (a fraction read as precision it does not have)
        table["is_seeds"] = table["is_seeds"].map(lambda n: n if not math.isfinite(n) else math.ceil(n))
    if "beyond_noise" in table:
        table["beyond_noise"] = table["beyond_noise"].map({True: "yes", False: "no"})
    return table.rename(columns=EFFECT_HEADERS)


def pairs_table(frame: pd.DataFrame, method: str) -> pd.DataFrame:
    part = frame[frame["method"] == method].copy()
    part["prompt_index"] = part["prompt_index"] + 1
    part["parts_at"] = part["parts_at"].map(lambda at: "—" if pd.isna(at) else int(at))
    for column in ("answer_a", "answer_b"):
        part[column] = part[column].map(lambda text: one_paragraph(text.strip()))
    return part[list(PAIR_HEADERS)].rename(columns=PAIR_HEADERS)


def pair_choices(frame: pd.DataFrame, method: str) -> list[tuple[str, str]]:
    part = frame[frame["method"] == method]
    return [(f"prompt {row.prompt_index + 1}, seed {row.seed}: "
             + ("identical" if row.identical else f"part at token {int(row.parts_at)}"),
             f"{row.prompt_index}/{row.seed}") for row in part.itertuples()]


def _chosen_row(run: dict, choice: str):
    if not run or not choice:
        raise ValueError("run an A/B comparison first")
    prompt_index, seed = (int(x) for x in str(choice).split("/"))
    frame = run["frame"]
    rows = frame[(frame["method"] == run["method"]) & (frame["prompt_index"] == prompt_index) & (frame["seed"] == seed)]
    if rows.empty:
        raise ValueError(f"this run has no pair {quoted(choice)}")
    return rows.iloc[0]


def pair_view(run: dict, choice: str):
    """The chosen pair, aligned spans coloured alike in both, and where they part."""
    if not run or not choice:
        return gr.skip(), gr.skip()
    row = _chosen_row(run, choice)
    tokenizer = thread_tokenizer(run["model_name"])
    value = highlighted([row["answer_a"], row["answer_b"]], HIGHLIGHTS[0], tokenizer, names=["A", "B"])
    if row["identical"]:
        where = "Both arms wrote the same answer with this seed: the change did not move any race it met."
    else:
        at = int(row["parts_at"])
        shared = tokenizer.decode(list(row["token_ids_a"])[:at], skip_special_tokens=True)
        where = (f"They part at token {at}, after {as_text(repr(shared[-60:])) if at else 'nothing'}. "
                 "Press *Why did they part?* for both races there.")
    return value, where


@gpu
def why_ui(run: dict, choice: str):
    """The parting token of the chosen pair: both arms' races there (``gcs.parting``)."""
    try:
        row = _chosen_row(run, choice)
        if row["identical"]:
            return "These answers are identical: they never part.", gr.skip()
        a, b = (arm(name, *settings) for name, settings in zip("AB", run["arms"], strict=True))
        found = gcs.parting(a, b, row["prompt"], seed=int(row["seed"]), method=run["method"],
                            max_new_tokens=int(row["parts_at"]) + 1)
        table = found.frame().drop(columns=["token_id"]).round(4)
        # (every logit of both races: computed here, whichever backend answered the pair)
        return as_text(found.sentence) + ENGINE.local_note(run["model_name"]), table
    except Exception as error:
        return failure(error), gr.skip()


@gpu
def ab_ui(source, prompts_text, builtin_count, a_system, a_template, a_temperature, a_top_p, a_model, a_precision,
          b_system, b_template, b_temperature, b_top_p, b_model, b_precision, seeds, method, scores, max_new_tokens,
          progress=PROGRESS):
    """UI: the verdict, the effects, the pairs and a CSV; stops when the page goes away (``run_cancellable``)."""
    outputs = 7
    try:
        prompts = ab_prompts(source, prompts_text, builtin_count)
        arms = ((a_system, a_template, a_temperature, a_top_p, a_model, a_precision),
                (b_system, b_template, b_temperature, b_top_p, b_model, b_precision))
        a, b = (arm(name, *settings) for name, settings in zip("AB", arms, strict=True))

        def work(stop):
            return run_ab(prompts, a, b, seeds, method, scores, max_new_tokens, stop)

        frame = yield from run_cancellable(work, heartbeat=(gr.skip(),) * outputs)
        report = gcs.ab_report(frame)
        path = download_folder("gcs-ab-") / "gcs_ab.csv"
        gcs.write_csv(frame.drop(columns=["token_ids_a", "token_ids_b"]), path)
        choices = pair_choices(frame, method)
        # the settings, not the variants: a session's state must not keep a model alive after the cache drops it
        run = {"frame": frame, "arms": arms, "method": method, "model_name": a_model}
        verdict = "\n".join(f"- {as_text(line)}" for line in report.lines)
        yield (verdict, effects_table(report), pairs_table(frame, method),
               gr.update(choices=choices, value=choices[0][1] if choices else None), run, str(path),
               ENGINE.done(False, a.model.name) if ENGINE.for_arms(a, b) else "Done.")
    except Exception as error:
        yield failed(error, outputs)


@gpu
def ab(
    prompts: str,
    b_system: str = "Answer in one sentence.",
    a_system: str = "",
    a_template: str = "{prompt}",
    b_template: str = "{prompt}",
    a_temperature: float = 1.0,
    b_temperature: float = 1.0,
    a_top_p: float = 1.0,
    b_top_p: float = 1.0,
    a_model: str = DEFAULT_MODEL,
    b_model: str = DEFAULT_MODEL,
    a_precision: str = "default",
    b_precision: str = "default",
    seeds: int = 8,
    method: str = "gcswr",
    scores: str = "length,e5_between",
    max_new_tokens: int = 48,
) -> dict:
    """A/B with shared luck: both arms (settings a_* and b_*) answer every prompt with the same noise for each seed,
    so a seed's two answers differ only where the change moved the race; the paired effect of B against A on each
    score, with the same estimate from independent sampling, says how many seeds the shared luck saved.

    Args:
        prompts: prompts, one per line (1 to 8); or "builtin:N" for the first wording of the first N built-in groups.
        b_system: arm B's system prompt ("" for the chat template's default).
        a_system: arm A's system prompt ("" for the chat template's default).
        a_template: arm A's user turn, holding {prompt} once.
        b_template: arm B's user turn, holding {prompt} once.
        a_temperature: arm A's temperature, 0 (greedy) or 0.0001 to 2.
        b_temperature: arm B's temperature, 0 (greedy) or 0.0001 to 2.
        a_top_p: arm A's top-p, in (0, 1] (1: off).
        b_top_p: arm B's top-p, in (0, 1] (1: off).
        a_model: arm A's model, one offered by this server.
        b_model: arm B's model (its tokenizer must be A's: the noise is keyed by token id).
        a_precision: default, bfloat16 or float32.
        b_precision: default, bfloat16 or float32.
        seeds: seeds 0 .. N-1, N from 2 to 16.
        method: gcswr or gcs, the shared luck.
        scores: comma-separated among length, e5_between, aligned.
        max_new_tokens: tokens per answer, 1 to 128.
    Returns:
        {"lines": the verdict's sentences, "effects": one record per score (B - A, its interval, the IS control's), "rows": one record per prompt, seed and method with both answers, whether they are identical and where they part}.
        While it works it streams {"status": "running"}; a client that leaves stops the work.
    """  # noqa: E501 (gradio's API and MCP docs read each argument, and each line of Returns, from one line)
    try:
        count = parse_builtin(prompts, "ab prompts")
        if count is not None:
            chosen = ab_prompts("built-in set", "", count)
        else:
            chosen = ab_prompts("my prompts", prompts, 0)
        a = arm("A", a_system, a_template, a_temperature, a_top_p, a_model, a_precision)
        b = arm("B", b_system, b_template, b_temperature, b_top_p, b_model, b_precision)

        def work(stop):
            return run_ab(chosen, a, b, seeds, method, scores, max_new_tokens, stop)

        frame = yield from run_cancellable(work, heartbeat={"status": "running"})
        report = gcs.ab_report(frame)
    except Exception as error:
        raise user_error(error) from error
    rows = frame.drop(columns=["token_ids_a", "token_ids_b"])
    yield {"lines": report.lines, "effects": json.loads(report.effects.to_json(orient="records")),
           "rows": json.loads(rows.to_json(orient="records"))}


def _arm_inputs(name: str, system: str) -> dict:
    with gr.Column():
        gr.Markdown(f"### {name}")
        inputs = {
            "system": gr.Textbox(value=system, label="system prompt (empty: the chat template's default)", lines=2,
                                 elem_id=f"ab-{name.lower()}-system"),
            "template": gr.Textbox(value="{prompt}", label="template (the user turn; holds {prompt})",
                                   elem_id=f"ab-{name.lower()}-template"),
            "temperature": gr.Slider(0, 2, value=1.0, step=0.05, label="temperature"),
            "top_p": gr.Slider(0.05, 1, value=1.0, step=0.05, label="top-p (1: off)"),
            "model": model_dropdown(),
            "precision": gr.Dropdown(PRECISIONS, value="default", label="precision"),
        }
    return inputs


def build() -> Tab:
    """The "A/B" tab, inside the caller's ``gr.Blocks``: its inputs by query name."""
    with gr.Tab("A/B", id="ab"):
        gr.Markdown("Did the answers change because of **your change**, or by luck? Both arms answer every prompt "
                    "with the same noise for each seed (GCSwR), so a seed's two answers differ only where the "
                    "change moved the race. The same run under independent sampling (IS) shows how much more "
                    "luck alone would have moved them.")
        with gr.Row():
            with gr.Column():
                source = gr.Radio(list(SOURCES), value=SOURCES[0], label="prompts")
                builtin_count = gr.Slider(1, LIMITS["ab prompts"].high, value=4, step=1,
                                          label="built-in prompts to use (the first wording of each group)",
                                          elem_id="ab-builtin")
                prompts_text = gr.Textbox(lines=4, label="my prompts, one per line", visible=False,
                                          value="What is DNA?\nWhy is the sky blue?", elem_id="ab-prompts")
            with gr.Column():
                seeds = gr.Slider(LIMITS["ab seeds"].low, LIMITS["ab seeds"].high, value=8, step=1, label="seeds",
                                  elem_id="ab-seeds")
                method = gr.Radio(SHARED_METHODS, value="gcswr", label="shared luck")
                scores = gr.CheckboxGroup(SCORES, value=["length", "e5_between"], label="scores")
                tokens = gr.Slider(8, LIMITS["ab max_new_tokens"].high, value=48, step=8, label="max new tokens",
                                   elem_id="ab-tokens")
        with gr.Row():
            a = _arm_inputs("A", "")
            b = _arm_inputs("B", "Answer in one sentence.")
        run = gr.Button("Run A/B", variant="primary", elem_id="run-ab")
        status = gr.Markdown(elem_id="ab-status")
        verdict = gr.Markdown(elem_id="ab-verdict")
        effects = gr.Dataframe(value=pd.DataFrame(columns=list(EFFECT_HEADERS.values())), interactive=False,
                               label="B against A per score: the mean paired difference over seeds with its "
                                     "interval (simultaneous over the scores), under shared luck and under IS",
                               elem_id="ab-effects")
        caption("A narrower interval under shared luck than under IS is the seeds the coupling saved: the last "
                "column is how many seeds independent sampling would need for shared luck's width.")
        pairs = gr.Dataframe(value=pd.DataFrame(columns=list(PAIR_HEADERS.values())), interactive=False, wrap=True,
                             label="answer pairs under shared luck", elem_id="ab-pairs")
        with gr.Row():
            pair = gr.Dropdown(choices=[], label="pair shown below", interactive=True, elem_id="ab-pair")
            why = gr.Button("Why did they part?", size="sm", elem_id="ab-why")
        colors = {"paraphrase": "#e0e0e0", **dict(zip(SPAN_LABELS, SPAN_COLORS, strict=True))}
        diff = gr.HighlightedText(label="A and B (aligned spans: the same words in the same order, one colour per "
                                        "stretch)", color_map=colors, show_legend=False, show_inline_category=False,
                                  combine_adjacent=True, elem_id="ab-diff", elem_classes="response-text")
        where = gr.Markdown(elem_id="ab-where")
        race = gr.Dataframe(value=pd.DataFrame(columns=RACE_COLUMNS),
                            label="the race at the parting token: each arm's probability, noise and arrival of both "
                                  "tokens (the earliest arrival wins)", interactive=False, elem_id="ab-race")
        csv = gr.File(label="download all rows (CSV)", interactive=False)
        state = gr.State(None)
        source.change(shown_for(SOURCES), source, [builtin_count, prompts_text], api_visibility="private",
                      concurrency_id="browse", concurrency_limit=4)
        inputs = [source, prompts_text, builtin_count, *a.values(), *b.values(), seeds, method, scores, tokens]
        click_working(run, status, ab_ui, inputs, [verdict, effects, pairs, pair, state, csv, status],
                      concurrency_id="model", concurrency_limit=1).then(
            pair_view, [state, pair], [diff, where], api_visibility="private", concurrency_id="browse",
            concurrency_limit=4)
        pair.change(pair_view, [state, pair], [diff, where], api_visibility="private", concurrency_id="browse",
                    concurrency_limit=4)
        click_working(why, where, why_ui, [state, pair], [where, race], concurrency_id="model", concurrency_limit=1)
    return Tab({"source": source, "count": builtin_count, "q": prompts_text, "seeds": seeds, "method": method,
                "scores": scores, "max_new_tokens": tokens, **{f"a_{k}": v for k, v in a.items()},
                **{f"b_{k}": v for k, v in b.items()}})
