"""Inside the sampler: two paraphrases decoded one token at a time, each step's race shown (``gcs.trace``).

The whole trace is computed once (Start); Step, Back and Play only move through it, so a step costs a
redraw, not a generation.
"""

from __future__ import annotations

import html
import time

import gradio as gr
import pandas as pd

import gcs
from gcs.runtime.background import releasing_openmp
from ui.server.serving import run_cancellable
from ui.server.zerogpu import gpu
from ui.shared.deployment import DEFAULT_MODEL, ENGINE, load_allowed_model, method_choices, model_dropdown
from ui.shared.limits import LIMITS, PAGE_SEED_MAX, check, check_work, parse_paraphrases
from ui.shared.links import linked_step
from ui.shared.messages import as_text, click_working, failed, one_paragraph_pieces, user_error, working_in
from ui.shared.tab import Tab

EXAMPLE = "Why is the sky blue?\nWhat makes the sky look blue?"
PLAY_SECONDS = 0.8
OUTPUTS = ("position", "token", "texts", "race-1", "race-2", "race caption", "table", "explanation", "force choices",
           "status")
# The one vocabulary of the tab, said once at its top: a token's noise is its clock E.
INTRO = ("Watch two paraphrases being answered one token at a time. Each token is a race: every candidate holds a "
         "**clock E** (its Exp(1) noise) and **arrives at E/p**, p being its probability; the **first arrival "
         "wins**. (g = −log E is the same noise in Gumbel form: the first arrival is the largest log p + g.) GCS and "
         "GCSwR give both paraphrases the same clocks, which is what makes their answers agree; IS picks its tokens "
         "another way.")
EXPLAIN = {
    "is": "**IS** runs no race: each paraphrase draws its own uniform u and takes the token where the cumulative "
          "probability first passes u (inverse CDF). The two u's are independent, so the answers agree only where "
          "the model is nearly certain.",
    "gcs": "**GCS**: at every token both paraphrases race with the same fresh clocks, so where their probabilities "
           "are alike the same token tends to arrive first.",
    "gcswr": "**GCSwR** races like GCS but keeps its clocks: after each race every loser keeps what is left of its "
             "clock, E − T·p (T: the winner's arrival time), and only the winner gets a fresh clock. Both "
             "paraphrases start with the same clocks, so a clock that wins in one tends to win in the other too, "
             "even tokens later.",
}
RACE_CAPTION = {
    "race": "Left: each candidate's probability p (the ten most likely, and the winner in orange). Right: when it "
            "arrives, E/p, on a log scale: the shortest bar wins. Both paraphrases' panels share one scale.",
    "is": "Bars: the ten most likely candidates' probabilities p, the pick in orange; both paraphrases' panels share "
          "one scale. IS has no clocks and no arrival times: its pick is where the paraphrase's own uniform u falls.",
}


def trace_inputs(paraphrases, method, seed, temperature, top_p, max_new_tokens, model_name):
    prompts = parse_paraphrases(paraphrases, minimum=2, maximum=2)
    top_p = check("top_p", top_p)
    tokens, model = check("trace tokens", max_new_tokens), load_allowed_model(model_name)
    check_work(prompts, model, 1, tokens, "work tokens")
    return dict(prompts=prompts, method=method, seed=check("seed", seed), temperature=check("temperature", temperature),
                top_p=None if top_p == 1 else top_p, max_new_tokens=tokens, model=model)


def start(paraphrases, method, seed, temperature, top_p, max_new_tokens, model_name, token=1):
    """Compute the whole trace once (stopped if the page goes away); show token ``token`` (a link's step), or its
    last token when the trace is shorter."""
    try:
        arguments = trace_inputs(paraphrases, method, seed, temperature, top_p, max_new_tokens, model_name)
        trace = yield from run_cancellable(lambda stop: gcs.trace(**arguments, stop=stop),
                                           (gr.skip(),) * (1 + len(OUTPUTS)))
        yield trace, *view(trace, min(max(int(token), 1) - 1, last_position(trace)), ENGINE.local_note(model_name))
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
    """Both responses up to ``position``, tokens both paraphrases picked at the same position marked; a line break
    shows as " ↵ " (each response stays one paragraph)."""
    value = []
    for row in range(len(trace.prompts)):
        pieces = []
        for t in range(position + 1):
            step = trace.steps[t][row]
            if step.finished:
                break
            same = all(trace.steps[t][other].winner == step.winner for other in range(len(trace.prompts)))
            pieces.append((step.winner_text, "now" if t == position else "same" if same else None))
        value += [(f"[{row + 1}] ", "paraphrase"), *one_paragraph_pieces(pieces), ("\n\n", None)]
    return value


def significant(value: float, digits: int = 4) -> float:
    """``value`` to ``digits`` significant digits: a winner with p = 0.00003 must not read as p = 0.

    >>> significant(0.000031234), significant(12.34567)
    (3.123e-05, 12.35)
    """
    return float(f"{value:.{digits}g}")


def candidate_row(method: str, step: gcs.TraceStep, c: gcs.Candidate) -> dict:
    """One candidate as a table row: IS has no clock, GCS no clock after the race."""
    row = {"paraphrase": step.row + 1, "token": repr(c.text), "p": significant(c.probability)}
    if method != "is":
        row.update({"clock E": significant(c.noise), "g = −log E": round(c.gumbel, 3),
                    "arrival E/p": significant(c.arrival)})
    if method == "gcswr":
        row["clock after the race"] = significant(c.noise_after)
    return {**row, "won": "✔" if c.token_id == step.winner else ""}


def candidates_table(trace: gcs.Trace, position: int) -> pd.DataFrame:
    return pd.DataFrame([candidate_row(trace.method, step, c)
                         for step in trace.steps[position] for c in step.candidates])


def token_text(text: str) -> str:
    """A token as Markdown shows it: its repr, bold, as text."""
    return f"**{as_text(repr(text))}**"


def step_line(method: str, step: gcs.TraceStep) -> str:
    """What one paraphrase did at this step, in one line."""
    if step.finished:
        return f"- Paraphrase {step.row + 1} has finished."
    winner = step.winning
    picked = "was forced to emit" if step.forced else "picked"
    line = f"- Paraphrase {step.row + 1} {picked} {token_text(winner.text)} (p = {winner.probability:.3g}"
    if method == "is":
        return line + f", uniform u = {step.uniform:.3f})"
    line += f", clock E = {winner.noise:.3g}, arrival E/p = {winner.arrival:.3g})"
    if method == "gcswr":
        line += f"; it gets a fresh clock: {winner.noise:.3g} → {winner.noise_after:.3g}"
    return line


TIMES = {1: "once", 2: "twice"}


def carried_line(carried: gcs.CarriedWin) -> str:
    """The moment that teaches recycling: a clock that already won another paraphrase's race wins this one."""
    drawn = "" if carried.draw == 0 else \
        f", the clock each drew after emitting it {TIMES.get(carried.draw, f'{carried.draw} times')}"
    return (f"- ↻ **Recycled clock:** paraphrase {carried.row + 1}'s {token_text(carried.text)} won with clock "
            f"E = {carried.clock:.3g}, the same clock that won paraphrase {carried.earlier_row + 1}'s race at token "
            f"{carried.earlier_position + 1} (E = {carried.earlier_clock:.3g} there). One seed gave both paraphrases "
            f"this clock at E = {carried.drawn:.3g}{drawn}; recycling carried it along in each, minus T·p at every "
            f"race it lost.")


def explanation(trace: gcs.Trace, position: int) -> str:
    lines = [EXPLAIN[trace.method]]
    for step in trace.steps[position]:
        lines.append(step_line(trace.method, step))
        carried = gcs.carried_win(trace, position, step.row)
        if carried is not None:
            lines.append(carried_line(carried))
    winners = {step.winner for step in trace.steps[position] if not step.finished}
    if len(winners) == 1 and len(trace.steps[position]) > 1:
        lines.append("\nBoth picked the same token here.")
    return "\n".join(lines)


def force_choices(trace: gcs.Trace, position: int) -> list[tuple[str, str]]:
    """This step's candidates of each unfinished paraphrase, as "paraphrase r: 'token' (p …)" -> "row:token id"."""
    return [(f"paraphrase {step.row + 1}: {c.text!r} (p {c.probability:.2f})", f"{step.row}:{c.token_id}")
            for step in trace.steps[position] if not step.finished for c in step.candidates
            if c.token_id != step.winner]


def race_title(step: gcs.TraceStep, position: int) -> str:
    if step.finished:
        return f"paraphrase {step.row + 1} has finished"
    outcome = "forced" if step.forced else "won"
    token = html.escape(repr(step.winner_text), quote=False)  # plotly reads markup in a title
    return f"paraphrase {step.row + 1}, token {position + 1}: {token} {outcome}"


def view(trace: gcs.Trace, position: int, note: str = "") -> tuple:
    """Everything the tab shows for token ``position + 1``; both races on one scale; ``note`` ends the status."""
    steps = trace.steps[position]
    scale = gcs.race_scale(steps)
    races = [gcs.race_figure(step, title=race_title(step, position), **scale) for step in steps]
    kind = "is" if trace.method == "is" else "race"
    return (position, position + 1, text_so_far(trace, position), *races, f"<small>{RACE_CAPTION[kind]}</small>",
            candidates_table(trace, position), explanation(trace, position),
            gr.update(choices=force_choices(trace, position), value=None),
            f"Token {position + 1} of {last_position(trace) + 1}.{note}")


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
            lambda stop: gcs.trace(list(trace.prompts), method=trace.method, seed=trace.seed,
                                   temperature=trace.temperature, top_p=trace.top_p, max_new_tokens=tokens,
                                   model=model, forced=[*trace.forced, (position, row, token)], stop=stop),
            (gr.skip(),) * (1 + len(OUTPUTS)))
        yield branch, *view(branch, min(position, last_position(branch)), ENGINE.local_note(model.name))
    except Exception as error:
        yield (gr.skip(), *failed(error, len(OUTPUTS)))


@gpu
def trace(paraphrases: str, method: str = "gcswr", seed: int = 0, temperature: float = 1.0, top_p: float = 1.0,
          max_new_tokens: int = 16, model: str = DEFAULT_MODEL) -> dict:
    """The race behind every token of two paraphrases' responses: per step and paraphrase, the top candidates with
    their probability p, exponential clock E (g = -log E is the same noise as a Gumbel), arrival time E/p (the first
    arrival wins), GCSwR's clock after recycling, and the winner.

    Args:
        paraphrases: exactly 2 rewordings, one per line.
        method: is, gcs or gcswr.
        seed: the shared seed, a whole number from 0 to 2^63 - 1.
        temperature: sampling temperature, 0.0001 to 2.
        top_p: nucleus sampling mass in (0, 1].
        max_new_tokens: steps to trace, 1 to 64.
        model: a model offered by this server.
    Returns:
        {"responses": [two answers], "steps": [{"position", "paraphrase", "token", "probability", "noise", "gumbel", "noise_after", "arrival", "won", "uniform", "finished", "forced"}, ...]} (IS rows have "uniform" and no noise).
        While it works it streams {"status": "working"}; a client that leaves stops the work.
    """  # noqa: E501 (gradio's API and MCP docs read each argument, and each line of Returns, from one line)
    try:
        arguments = trace_inputs(paraphrases, method, seed, temperature, top_p, max_new_tokens, model)
        trace = yield from run_cancellable(lambda stop: gcs.trace(**arguments, stop=stop), {"status": "working"})
    except Exception as error:
        raise user_error(error) from error
    frame = trace.frame().rename(columns={"row": "paraphrase", "text": "token"}).drop(columns=["token_id"])
    yield {"responses": list(trace.responses), "steps": frame.astype(object).where(frame.notna(), None)
           .to_dict(orient="records")}


def build() -> Tab:
    """The "Inside the sampler" tab: its inputs by query-parameter name (``step``: the token shown); on load, a page
    opened with ``tab=trace&step=k`` runs the trace to token k."""
    with gr.Tab("Inside the sampler", id="trace"):
        gr.Markdown(INTRO)
        with gr.Row():
            paraphrases = gr.Textbox(value=EXAMPLE, lines=2, label="two paraphrases, one per line",
                                     elem_id="trace-paraphrases", scale=3)
            method = gr.Radio(method_choices(), value="gcswr", label="method", elem_id="trace-method", scale=2)
            with gr.Column(scale=2):
                model = model_dropdown()
        with gr.Row():
            seed = gr.Number(value=0, precision=0, maximum=PAGE_SEED_MAX, label="seed")
            temperature = gr.Slider(0.05, LIMITS["temperature"].high, value=1.0, step=0.05, label="temperature")
            top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p")
            tokens = gr.Slider(4, LIMITS["trace tokens"].high, value=24, step=4, label="max new tokens")
        with gr.Row():
            with gr.Column(scale=2, min_width=420):  # the controls, and beside them the race they move
                with gr.Row():
                    start_button = gr.Button("Start / Reset", variant="primary", elem_id="trace-start", scale=2,
                                             min_width=120)
                    back = gr.Button("◀ Back", elem_id="trace-back", min_width=90)
                    step = gr.Button("Step ▶", elem_id="trace-step", min_width=90)
                    play_button = gr.Button("Play ▶▶", elem_id="trace-play", min_width=100)
                status = gr.Markdown(elem_id="trace-status")
                texts = gr.HighlightedText(label="the responses so far (yellow: both picked the same token there; "
                                                 "blue: this step)",
                                           color_map={"same": "#ffd54f", "now": "#90caf9", "paraphrase": "#e0e0e0"},
                                           show_legend=False, show_inline_category=False, combine_adjacent=True,
                                           elem_id="trace-texts", elem_classes="response-text")
                explain = gr.Markdown(elem_id="trace-explanation")
            with gr.Column(scale=3):
                race_one = gr.Plot(label="paraphrase 1", elem_id="trace-race-1")
                race_two = gr.Plot(label="paraphrase 2", elem_id="trace-race-2")
                race_caption = gr.Markdown(f"<small>{RACE_CAPTION['race']}</small>", elem_classes="caption",
                                           elem_id="trace-race-caption")
        with gr.Row():
            forced_choice = gr.Dropdown(choices=[], label="force another candidate here (the trace branches: same "
                                                          "noise before, the forced token, then the race goes on)",
                                        elem_id="trace-force-choice", scale=3)
            force_button = gr.Button("Force it here ▶", elem_id="trace-force", scale=1)
        table = gr.Dataframe(value=pd.DataFrame(columns=["paraphrase", "token", "p", "won"]),
                             label="this step's candidates, both paraphrases", interactive=False,
                             elem_id="trace-table")
        shown = gr.Number(value=0, precision=0, minimum=0, maximum=LIMITS["trace tokens"].high, visible=False,
                          label="token shown")  # 1-based, 0 before Start: a shared link's step
        trace_state, position, requested = gr.State(None), gr.State(0), gr.State(None)
        outputs = [position, shown, texts, race_one, race_two, race_caption, table, explain, forced_choice, status]
        inputs = [paraphrases, method, seed, temperature, top_p, tokens, model]
        model_lane = dict(concurrency_id="model", concurrency_limit=1)
        browse_lane = dict(api_visibility="private", concurrency_id="browse", concurrency_limit=4)
        click_working(start_button, status, start, inputs, [trace_state, *outputs], **model_lane)
        step.click(lambda t, p: move(t, p, 1), [trace_state, position], outputs, **browse_lane)
        back.click(lambda t, p: move(t, p, -1), [trace_state, position], outputs, **browse_lane)
        playing = play_button.click(play, [trace_state, position], outputs, **browse_lane)
        click_working(force_button, status, force, [trace_state, position, forced_choice, tokens, model],
                      [trace_state, *outputs], **model_lane)
        for event in (step.click, back.click, start_button.click, force_button.click):
            event(None, None, None, cancels=[playing], api_visibility="private")

    def follow_link(load, selected: gr.State) -> None:
        # .success: a link that asks for no step ends here (NoStepAsked), queueing nothing in the model lane
        load.then(linked_step, [selected, shown], requested, **browse_lane).success(
            working_in("model"), None, status, **browse_lane).then(
                releasing_openmp(start), [*inputs, requested], [trace_state, *outputs], api_visibility="private",
                **model_lane)

    links = {"q": paraphrases, "method": method, "seed": seed, "temperature": temperature, "top_p": top_p,
             "max_new_tokens": tokens, "model": model, "step": shown}
    return Tab(links, on_load=follow_link)
