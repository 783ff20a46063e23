"""Inside the sampler: two paraphrases decoded one token at a time, each step's race shown (``gcs.trace``).

The whole trace is computed once (Start); Step, Back and Play only move through it, so a step costs a
redraw, not a generation.
"""

from __future__ import annotations

import time

import gradio as gr
import pandas as pd

import gcs

from .zerogpu import gpu
from .limits import check, check_work, LIMITS, PAGE_SEED_MAX, parse_paraphrases
from .messages import as_text, caption, failed, user_error
from .serving import run_cancellable
from .settings import DEFAULT_MODEL, load_allowed_model, method_choices, model_dropdown

EXAMPLE = "Why is the sky blue?\nWhat makes the sky look blue?"
PLAY_SECONDS = 0.8
OUTPUTS = ("position", "texts", "race-1", "race-2", "table", "explanation", "force choices", "status")
EXPLAIN = {
    "is": "**IS** draws each token by inverse CDF with its own uniform: the two paraphrases use independent "
          "noise (u₁ ≠ u₂), so they agree only where the model is nearly certain.",
    "gcs": "**GCS** gives every token Exp(1) noise E (Gumbel g = −log E); token i *arrives* at E/p and the first "
           "arrival wins. Both paraphrases race with the *same* noise vector at this position.",
    "gcswr": "**GCSwR** races like GCS, then *recycles*: every loser keeps what is left of its clock, "
             "E − T·p (T: the winner's arrival), and only the winner's noise is redrawn. Both paraphrases carry "
             "the same recycled state, so the same preferences persist across positions.",
}


def trace_inputs(paraphrases, method, seed, temperature, top_p, max_new_tokens, model_name):
    prompts = parse_paraphrases(paraphrases, minimum=2, maximum=2)
    top_p = check("top_p", top_p)
    tokens, model = check("trace tokens", max_new_tokens), load_allowed_model(model_name)
    check_work(prompts, model, 1, tokens, "work tokens")
    return dict(prompts=prompts, method=method, seed=check("seed", seed), temperature=check("temperature", temperature),
                top_p=None if top_p == 1 else top_p, max_new_tokens=tokens, model=model)


def start(paraphrases, method, seed, temperature, top_p, max_new_tokens, model_name):
    """Compute the whole trace once (stopped if the page goes away); show position 0."""
    try:
        arguments = trace_inputs(paraphrases, method, seed, temperature, top_p, max_new_tokens, model_name)
        trace = yield from run_cancellable(lambda stop: gcs.trace(**arguments, stop=stop),
                                           (gr.skip(),) * (1 + len(OUTPUTS)))
        yield trace, *view(trace, 0)
    except Exception as error:
        yield (gr.skip(), *failed(error, len(OUTPUTS)))


def last_position(trace: gcs.Trace) -> int:
    return len(trace.steps) - 1


def move(trace: gcs.Trace | None, position, delta: int):
    """Step (delta 1) or Back (delta -1); past either end, the status says where the trace ends."""
    if trace is None:
        return failed(ValueError("press Start first: it computes the trace that Step and Back move through"),
                      len(OUTPUTS))
    target = int(position) + delta
    if target > last_position(trace):
        return failed(ValueError(f"the trace ends at token {last_position(trace) + 1}: both responses finished or "
                                 f"reached max new tokens; press Start to trace again"), len(OUTPUTS))
    if target < 0:
        return failed(ValueError("already at the first token"), len(OUTPUTS))
    return view(trace, target)


def play(trace: gcs.Trace | None, position):
    """Step through to the end, one token every ``PLAY_SECONDS``."""
    if trace is None:
        yield failed(ValueError("press Start first"), len(OUTPUTS))
        return
    for target in range(int(position) + 1, last_position(trace) + 1):
        yield view(trace, target)
        time.sleep(PLAY_SECONDS)


def text_so_far(trace: gcs.Trace, position: int) -> list[tuple[str, str | None]]:
    """Both responses up to ``position``, tokens both paraphrases picked at the same position marked."""
    value = []
    for row, prompt in enumerate(trace.prompts):
        value.append((f"[{row + 1}] ", "paraphrase"))
        for t in range(position + 1):
            step = trace.steps[t][row]
            if step.finished:
                break
            same = all(trace.steps[t][other].winner == step.winner for other in range(len(trace.prompts)))
            value.append((step.winner_text, "now" if t == position else "same" if same else None))
        value.append(("\n\n", None))
    return value


def candidates_table(trace: gcs.Trace, position: int) -> pd.DataFrame:
    rows = []
    for step in trace.steps[position]:
        for c in step.candidates:
            rows.append({"paraphrase": step.row + 1, "token": repr(c.text), "p": round(c.probability, 4),
                         "E (noise)": None if c.noise is None else round(c.noise, 4),
                         "g = −log E": None if c.gumbel is None else round(c.gumbel, 3),
                         "arrival E/p": None if c.arrival is None else round(c.arrival, 4),
                         "E after": None if c.noise_after is None else round(c.noise_after, 4),
                         "won": "✔" if c.token_id == step.winner else ""})
    return pd.DataFrame(rows)


def explanation(trace: gcs.Trace, position: int) -> str:
    lines = [EXPLAIN[trace.method]]
    for step in trace.steps[position]:
        if step.finished:
            lines.append(f"- Paraphrase {step.row + 1} has finished.")
            continue
        winner = next(c for c in step.candidates if c.token_id == step.winner)
        picked = "was forced to emit" if step.forced else "picked"
        line = f"- Paraphrase {step.row + 1} {picked} **{as_text(repr(winner.text))}** (p = {winner.probability:.3f}"
        if trace.method == "is":
            line += f", uniform u = {step.uniform:.3f})"
        else:
            line += f", arrival {winner.arrival:.3g})"
        if trace.method == "gcswr":
            line += f"; its noise was redrawn {winner.noise:.3g} → {winner.noise_after:.3g}"
        lines.append(line)
    winners = {step.winner for step in trace.steps[position] if not step.finished}
    if len(winners) == 1 and len(trace.steps[position]) > 1:
        lines.append("\nBoth picked the same token here.")
    return "\n".join(lines)


def force_choices(trace: gcs.Trace, position: int) -> list[tuple[str, str]]:
    """This step's candidates of each unfinished paraphrase, as "paraphrase r: 'token' (p …)" -> "row:token id"."""
    return [(f"paraphrase {step.row + 1}: {c.text!r} (p {c.probability:.2f})", f"{step.row}:{c.token_id}")
            for step in trace.steps[position] if not step.finished for c in step.candidates
            if c.token_id != step.winner]


def view(trace: gcs.Trace, position: int) -> tuple:
    races = [gcs.race_figure(step, f"paraphrase {step.row + 1}, token {position + 1}: "
                                   f"{step.winner_text!r} {'forced' if step.forced else 'won'}")
             for step in trace.steps[position]]
    return (position, text_so_far(trace, position), *races, candidates_table(trace, position),
            explanation(trace, position), gr.update(choices=force_choices(trace, position), value=None),
            f"Token {position + 1} of {last_position(trace) + 1}.")


def force(trace: gcs.Trace | None, position, choice, max_new_tokens, model_name):
    """Trace again with one paraphrase forced to emit another candidate at this step: the trace branches here."""
    try:
        if trace is None:
            raise ValueError("press Start first: forcing a token branches the trace at the step shown")
        if not choice or not isinstance(choice, str) or choice.count(":") != 1:
            raise ValueError("pick a candidate to force (a paraphrase's token at this step)")
        row, token = (int(part) for part in choice.split(":"))
        position, tokens, model = int(position), check("trace tokens", max_new_tokens), load_allowed_model(model_name)
        branch = yield from run_cancellable(
            lambda stop: gcs.trace(list(trace.prompts), trace.method, trace.seed, trace.temperature, trace.top_p,
                                   tokens, model=model, forced=[*trace.forced, (position, row, token)], stop=stop),
            (gr.skip(),) * (1 + len(OUTPUTS)))
        yield branch, *view(branch, min(position, last_position(branch)))
    except Exception as error:
        yield (gr.skip(), *failed(error, len(OUTPUTS)))


@gpu
def api_trace(paraphrases: str, method: str = "gcswr", seed: int = 0, temperature: float = 1.0, top_p: float = 1.0,
              max_new_tokens: int = 16, model: str = DEFAULT_MODEL) -> dict:
    """The race behind every token of two paraphrases' responses: per step and paraphrase, the top candidates with
    their probability p, exponential clock E (g = -log E is the same noise as a Gumbel), arrival time E/p (the first
    arrival wins), GCSwR's clock after recycling, and the winner.

    Args:
        paraphrases: exactly 2 rewordings, one per line.
        method: is, gcs or gcswr.
        seed: the shared seed, a whole number from 0 to 2^63 - 1.
        temperature: sampling temperature in (0, 2].
        top_p: nucleus sampling mass in (0, 1].
        max_new_tokens: steps to trace, 1 to 64.
        model: a model offered by this server.
    Returns:
        {"responses": [two answers], "steps": [{"position", "paraphrase", "token", "probability", "noise", "gumbel", "noise_after", "arrival", "won", "uniform", "finished", "forced"}, ...]} (IS rows have "uniform" and no noise).
        While it works it streams {"status": "working"}; a client that leaves stops the work.
    """
    try:
        arguments = trace_inputs(paraphrases, method, seed, temperature, top_p, max_new_tokens, model)
        trace = yield from run_cancellable(lambda stop: gcs.trace(**arguments, stop=stop), {"status": "working"})
    except Exception as error:
        raise user_error(error) from error
    frame = trace.frame().rename(columns={"row": "paraphrase", "text": "token"}).drop(columns=["token_id"])
    yield {"responses": list(trace.responses), "steps": frame.astype(object).where(frame.notna(), None)
           .to_dict(orient="records")}


def build() -> dict:
    """The "Inside the sampler" tab; returns its inputs by query-parameter name."""
    with gr.Tab("Inside the sampler", id="trace"):
        gr.Markdown("Watch two paraphrases being answered one token at a time. Each step is a race: every token "
                    "holds some noise, and the noise decides which likely token wins. Shared noise is what "
                    "makes the two answers agree.")
        with gr.Row():
            paraphrases = gr.Textbox(value=EXAMPLE, lines=2, label="two paraphrases, one per line",
                                     elem_id="trace-paraphrases")
            with gr.Column():
                method = gr.Radio(method_choices(), value="gcswr", label="method", elem_id="trace-method")
                with gr.Row():
                    seed = gr.Number(value=0, precision=0, minimum=0, maximum=PAGE_SEED_MAX, label="seed")
                    temperature = gr.Slider(0.05, LIMITS["temperature"].high, value=1.0, step=0.05,
                                            label="temperature")
                    top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p")
                    tokens = gr.Slider(4, LIMITS["trace tokens"].high, value=24, step=4, label="max new tokens")
                model = model_dropdown()
        with gr.Row():
            start_button = gr.Button("Start / Reset", variant="primary", elem_id="trace-start")
            back = gr.Button("◀ Back", elem_id="trace-back")
            step = gr.Button("Step ▶", elem_id="trace-step")
            play_button = gr.Button("Play ▶▶", elem_id="trace-play")
        status = gr.Markdown(elem_id="trace-status")
        texts = gr.HighlightedText(label="the responses so far (yellow: both picked the same token there; "
                                         "blue: this step)",
                                   color_map={"same": "#ffd54f", "now": "#90caf9", "paraphrase": "#e0e0e0"},
                                   show_legend=False, show_inline_category=False, combine_adjacent=True,
                                   elem_id="trace-texts", elem_classes="response-text")
        explain = gr.Markdown(elem_id="trace-explanation")
        with gr.Row(equal_height=True):
            race_one = gr.Plot(label="paraphrase 1", elem_id="trace-race-1")
            race_two = gr.Plot(label="paraphrase 2", elem_id="trace-race-2")
        caption("Bars: the ten most likely tokens (and the winner, red). Left, their probabilities; right, when each "
                "arrives in the race (E/p, log scale): the shortest bar wins. With GCS and GCSwR the two races "
                "use the same noise, so when the probabilities are alike the same token tends to win.")
        with gr.Row():
            forced_choice = gr.Dropdown(choices=[], label="force another candidate here (the trace branches: same "
                                                          "noise before, the forced token, then the race goes on)",
                                        elem_id="trace-force-choice", scale=3)
            force_button = gr.Button("Force it here ▶", elem_id="trace-force", scale=1)
        table = gr.Dataframe(label="candidates: probability, noise and arrival (GCSwR: noise after recycling)",
                             interactive=False, elem_id="trace-table")
        trace_state, position = gr.State(None), gr.State(0)
        outputs = [position, texts, race_one, race_two, table, explain, forced_choice, status]
        inputs = [paraphrases, method, seed, temperature, top_p, tokens, model]
        start_button.click(start, inputs, [trace_state, *outputs], api_visibility="private",
                                      concurrency_id="model", concurrency_limit=1)
        step.click(lambda t, p: move(t, p, 1), [trace_state, position], outputs, api_visibility="private",
                   concurrency_id="browse", concurrency_limit=4)
        back.click(lambda t, p: move(t, p, -1), [trace_state, position], outputs, api_visibility="private",
                   concurrency_id="browse", concurrency_limit=4)
        playing = play_button.click(play, [trace_state, position], outputs, api_visibility="private",
                                    concurrency_id="browse", concurrency_limit=4)
        force_button.click(force, [trace_state, position, forced_choice, tokens, model], [trace_state, *outputs],
                           api_visibility="private", concurrency_id="model", concurrency_limit=1)
        for event in (step.click, back.click, start_button.click, force_button.click):
            event(None, None, None, cancels=[playing], api_visibility="private")
    return {"q": paraphrases, "method": method, "seed": seed, "temperature": temperature, "top_p": top_p,
            "max_new_tokens": tokens, "model": model}
