"""The new tabs' handlers in-process: step-through moves, hindsight's inputs, seeds, and link parameters."""

from __future__ import annotations

import html
import inspect
import math
import re
import sys
import types
from pathlib import Path

import gradio as gr
import pandas as pd
import pytest
from markdown_it import MarkdownIt

from conftest import first_recycled_win, refused_in_ui

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import gcs  # noqa: E402
import ui  # noqa: E402
from ui.shared import deployment, highlights, limits, links, messages  # noqa: E402
from ui.tabs import hindsight, stepthrough  # noqa: E402
from ui.tabs.side_by_side import compare  # noqa: E402

PAIR = "Why is the sky blue?\nWhat makes the sky blue?"


def last(updates):
    """A generator handler's final answer (its earlier ones are heartbeats while the model works)."""
    return list(updates)[-1]


@pytest.fixture(scope="module")
def app_model() -> gcs.Model:
    """The model the app's tabs use (loaded once)."""
    return deployment.load_allowed_model(gcs.DEFAULT_MODEL)


@pytest.fixture(scope="module")
def trace(app_model):
    trace, *shown = last(stepthrough.start(PAIR, "gcswr", 0, 1.0, 1.0, 4, gcs.DEFAULT_MODEL))
    assert shown[0] == 0 and shown[-1].startswith("Token 1 of")
    return trace


@pytest.mark.slow
def test_step_and_back_move_through_the_trace_and_stop_at_its_ends(trace):
    last = len(trace.steps) - 1
    assert stepthrough.move(trace, 0, 1)[0] == 1
    assert stepthrough.move(trace, 1, -1)[0] == 0
    refused_in_ui(lambda: stepthrough.move(trace, last, 1), f"the trace ends at token {last + 1}")
    refused_in_ui(lambda: stepthrough.move(trace, 0, -1), "already at the first token")
    refused_in_ui(lambda: stepthrough.move(None, 0, 1), "press Start first")
    played = list(stepthrough.play(trace, last - 1))
    assert [update[0] for update in played] == [last]


@pytest.mark.slow
def test_step_through_refuses_bad_settings(app_model):
    refused_in_ui(lambda: [u[1:] for u in stepthrough.start("one line", "gcswr", 0, 1.0, 1.0, 4, gcs.DEFAULT_MODEL)],
                  "enter exactly 2 paraphrases")
    refused_in_ui(lambda: [u[1:] for u in stepthrough.start(PAIR, "gcswr", 0, 1.0, 1.0, 65, gcs.DEFAULT_MODEL)],
                  "trace tokens must be a whole number from 1 to 64")
    refused_in_ui(lambda: [u[1:] for u in stepthrough.start(PAIR, "gcswr", 0, 0.0, 1.0, 4, gcs.DEFAULT_MODEL)],
                  "no noise to trace")


@pytest.mark.slow
def test_the_text_so_far_marks_tokens_both_paraphrases_share(trace):
    pieces = stepthrough.text_so_far(trace, len(trace.steps) - 1)
    labelled = [label for _, label in pieces]
    assert "now" in labelled and labelled.count("paraphrase") == 2
    for position, (first, second) in enumerate(trace.steps[:-1]):
        same = first.winner == second.winner
        assert (pieces[1 + position][1] == "same") == same


@pytest.mark.parametrize("arguments, message", [
    (dict(response="  "), "enter the response"),
    (dict(paraphrases="a\nb\nc\nd\ne"), "at most 4 paraphrases here"),
    (dict(prompt="two\nlines"), "enter one prompt"),
    (dict(response="word " * 300), "the limit here is 256"),
    (dict(top_p=0.0), "top_p must be in (0, 1]"),
    (dict(method="beam"), "unknown method"),
])
@pytest.mark.slow
def test_hindsight_bad_input_is_named_and_nothing_is_wiped(app_model, arguments, message):
    values = dict(prompt="Why is the sky blue?", response="Because of scattering", paraphrases="What makes it blue?",
                  method="gcswr", seed=0, temperature=1.0, top_p=1.0, max_new_tokens=8, model_name=gcs.DEFAULT_MODEL)
    values.update(arguments)
    refused_in_ui(lambda: list(hindsight.hindsight_ui(*values.values())), message)


@pytest.mark.slow
def test_hindsight_tab_explains_is_and_takes_a_side_by_side_run(app_model):
    answers, replay, explanation, choices, status = last(hindsight.hindsight_ui(
        "Why is the sky blue?", "Because of scattering", "What makes it blue?", "is", 0, 1.0, 1.0, 8,
        gcs.DEFAULT_MODEL))
    assert status == "Done." and "independent of the response" in explanation and "nothing to replay" in replay
    assert answers[0] == ("[response] ", "paraphrase")
    refused_in_ui(lambda: hindsight.from_side_by_side(None), "run Side by side first")


@pytest.mark.slow
def test_hindsight_shows_its_replay_check_and_lists_the_tokens_to_edit(app_model):
    response = "Because air scatters blue light."
    tokens = gcs.response_tokens(response, model=app_model)
    _, replay, ended, choices, status = last(hindsight.hindsight_ui("Why is the sky blue?", response,
                                                                    "What makes it blue?", "gcswr", 0, 1.0, 1.0, 8,
                                                                    gcs.DEFAULT_MODEL))
    assert status == "Done." and "Replay check ✓" in replay and f"all {len(tokens)} tokens, then ended" in replay
    assert "favours an early end of turn" in ended  # why short answers come (the tab's own example gave two)
    assert choices["choices"][0] == (f"0: {tokens[0]!r}", 0) and choices["choices"][-1][1] == len(tokens)
    _, unfinished, going_on, choices, _ = last(hindsight.hindsight_ui("Why is the sky blue?", response,
                                                                      "What makes it blue?", "gcs", 0, 1.0, 1.0, 8,
                                                                      gcs.DEFAULT_MODEL, False))
    assert "the replay goes on" in unfinished and len(choices["choices"]) == len(tokens)
    assert "early end" not in going_on


@pytest.mark.slow
def test_a_counterfactual_edit_from_the_tab(app_model):
    arguments = ["Why is the sky blue?", "Because air scatters blue light.", 2, " red", "gcswr", 0, 1.0, 1.0, 16,
                 gcs.DEFAULT_MODEL]
    view, status = last(hindsight.counterfactual_ui(*arguments))
    tokens = gcs.response_tokens(arguments[1], model=app_model)
    assert status == "Done." and ("[had it said that] ", "paraphrase") in view
    edited = "".join(text for text, label in view[view.index(("[had it said that] ", "paraphrase")) + 1:])
    assert edited.startswith("".join(tokens[:2]) + " red")
    edit = lambda *changed: list(hindsight.counterfactual_ui(*changed))  # noqa: E731
    refused_in_ui(lambda: edit(*arguments[:2], None, *arguments[3:]), "pick the token")
    refused_in_ui(lambda: edit(*arguments[:3], "", *arguments[4:]), "type the replacement")
    refused_in_ui(lambda: edit(*arguments[:3], "x\u202ey", *arguments[4:]), "invisible or direction-overriding")
    refused_in_ui(lambda: edit(*arguments[:2], 99, *arguments[3:]), "at must index")


@pytest.mark.slow
def test_taking_a_side_by_side_run_brings_its_settings(app_model):
    frame = gcs.compare(["Why is the sky blue?", "What makes it blue?"], methods=["is", "gcswr"], seeds=[4],
                        temperature=0.7, top_p=0.9, max_new_tokens=12, model=app_model)
    run = {"frame": frame.to_dict(orient="list"), "prompts": ["Why is the sky blue?", "What makes it blue?"],
           "methods": ["is", "gcswr"], "seeds": [4], "model": gcs.DEFAULT_MODEL, "max_new_tokens": 12}
    prompt, response, paraphrases, method, finished, temperature, top_p, tokens, taken, status = \
        hindsight.from_side_by_side(run)
    row = frame[(frame.method == "gcswr") & (frame.prompt_index == 0)].iloc[0]
    assert (prompt, response, paraphrases, method) == ("Why is the sky blue?", row.raw_response, "What makes it blue?",
                                                       "gcswr")
    assert finished == bool(row.finished) and (temperature, top_p, tokens) == (0.7, 0.9, 12)
    assert taken == {"text": row.raw_response, "ids": list(row.token_ids)}


@pytest.mark.slow
def test_a_taken_answer_is_observed_as_its_tokens_even_where_its_text_reads_back_otherwise(app_model):
    """A run's answer whose text tokenizes to other tokens ('Yes', '\\n', '\\n' reads back as 'Yes', '\\n\\n'):
    taken from the side by side, hindsight observes the tokens that were generated and replays them exactly; the
    same text typed in is tokenized (and stripped), as typed text always is."""
    tokenizer = app_model.tokenizer
    newline, = tokenizer.encode("\n", add_special_tokens=False)
    ids = [*tokenizer.encode("Yes", add_special_tokens=False), newline, newline]
    text = tokenizer.decode(ids)
    run = {"frame": {"method": ["gcswr"], "seed": [0], "prompt_index": [0], "raw_response": [text],
                     "token_ids": [ids], "finished": [False], "temperature": [1.0], "top_p": [None]},
           "prompts": ["Is fire hot?", "Is fire warm?"], "methods": ["gcswr"], "seeds": [0],
           "model": gcs.DEFAULT_MODEL, "max_new_tokens": 8}
    *_, taken, status = hindsight.from_side_by_side(run)
    assert taken["ids"] == ids and "read back as other tokens" in status
    arguments = ["Is fire hot?", text, "Is fire warm?", "gcswr", 0, 1.0, 1.0, 8, gcs.DEFAULT_MODEL, False]
    _, replay, _, choices, _ = last(hindsight.hindsight_ui(*arguments, taken))
    assert "Replay check ✓" in replay and "all 3 tokens" in replay and len(choices["choices"]) == 3
    _, replay, _, choices, _ = last(hindsight.hindsight_ui(*arguments, None))  # typed (and stripped): 'Yes'
    assert [label for label, _ in choices["choices"]] == ["0: 'Yes'"]


@pytest.mark.slow
def test_forcing_a_candidate_branches_the_trace(trace):
    choices = stepthrough.force_choices(trace, 1)
    label, value = choices[0]
    row, token = map(int, value.split(":"))
    branch, *shown = last(stepthrough.force(trace, 1, value, 4, gcs.DEFAULT_MODEL))
    shown = dict(zip(stepthrough.OUTPUTS, shown, strict=True))
    assert shown["position"] == 1 and branch.steps[1][row].forced and branch.token_ids[row][1] == token
    assert branch.token_ids[row][0] == trace.token_ids[row][0] and "was forced to emit" in shown["explanation"]
    branch_from = lambda shown, choice: [u[1:] for u in stepthrough.force(shown, 1, choice, 4, gcs.DEFAULT_MODEL)]  # noqa: E731
    refused_in_ui(lambda: branch_from(trace, None), "pick a candidate")
    refused_in_ui(lambda: branch_from(None, value), "press Start first")


def test_seed_lists():
    assert compare.seed_list(5, 3) == [5, 6, 7] and compare.seed_list(0, [9, 2, 9]) == [9, 2]
    for seeds, message in ((0, "seeds per run must be a whole number from 1 to 16"),
                           (17, "from 1 to 16"), ([], "from 1 to 16"), ([1, -2], "seed must be")):
        with pytest.raises(ValueError, match=message):
            compare.seed_list(0, seeds)
    with pytest.raises(ValueError, match="runs past the largest seed"):
        compare.seed_list(gcs.MAX_SEED, 2)


@pytest.mark.parametrize("component, text, expected", [
    (gr.Slider(0, 2), "0.5", 0.5),
    (gr.Slider(1, 16, step=1), "4", 4),
    (gr.Number(precision=0, minimum=0), "7", 7),
    (gr.Number(precision=0, minimum=0, maximum=limits.PAGE_SEED_MAX), "9007199254740991", 2**53 - 1),  # exact
    (gr.Checkbox(), "true", True),
    (gr.CheckboxGroup(["is", "gcs"]), "gcs,is", ["gcs", "is"]),
    (gr.Radio(["a", "b"]), "b", "b"),
    (gr.Textbox(), "What?\nWhy?", "What?\nWhy?"),
])
def test_link_values_parse(component, text, expected):
    assert links.parse_value(component, text) == expected


@pytest.mark.parametrize("component, text, message", [
    (gr.Slider(0, 2), "hot", "must be a number"),
    (gr.Slider(0, 2), "3", "must be a number from 0 to 2"),
    (gr.Slider(0, 2), "nan", "must be a number"),
    (gr.Number(precision=0, minimum=0), "٣", "must be a number"),  # float() reads Unicode digits: ASCII only here
    (gr.Number(precision=0, minimum=0), "1_0", "must be a number"),
    (gr.Number(precision=0, minimum=0), "1.5", "must be a whole number"),
    # through a float 2^53 + 1 became 2^53, a seed the page cannot hold exactly: refused, not changed
    (gr.Number(precision=0, minimum=0, maximum=limits.PAGE_SEED_MAX), "9007199254740993", "from 0 to 9007199254740991"),
    (gr.Number(precision=0, minimum=0, maximum=limits.PAGE_SEED_MAX), "1e308", "from 0 to 9007199254740991"),
    (gr.Checkbox(), "yes", "must be true or false"),
    (gr.CheckboxGroup(["is", "gcs"]), "is,beam", "has an unknown choice 'beam': expected one of is, gcs"),
    (gr.CheckboxGroup(["is", "gcs"]), "is,gc", r"unknown choice 'gc' \(did you mean 'gcs'\?\)"),
    (gr.Radio(["a", "b"]), "c", "must be one of a, b"),
])
def test_malformed_link_values_are_named(component, text, message):
    with pytest.raises(ValueError, match=message):
        links.parse_value(component, text)


def test_every_seed_box_stops_where_its_value_stays_exact():
    """The page holds numbers as doubles: a seed box's maximum is one the page, the link and the API agree on."""
    demo = ui.build()
    boxes = [block for block in demo.blocks.values() if isinstance(block, gr.Number) and "seed" in (block.label or "")]
    assert len(boxes) == 4
    for box in boxes:
        assert box.maximum is not None and box.maximum <= limits.PAGE_SEED_MAX and float(box.maximum) == box.maximum


def test_a_negative_seed_reaches_the_handler_which_names_it():
    """Gradio's box refused it before any handler ran, in a sentence naming no setting ("Value -3 is less than minimum
    value 0."), with the status left at "Working…"."""
    demo = ui.build()
    boxes = [block for block in demo.blocks.values() if isinstance(block, gr.Number) and "seed" in (block.label or "")]
    assert [box.preprocess(-3) for box in boxes] == [-3] * 4
    with pytest.raises(ValueError, match=r"^seed must be a whole number from 0 to 2\^63 - 1, got -3$"):
        compare.seed_list(-3, 4)


def test_coupling_numbers_are_bounded_and_quoted_briefly():
    with pytest.raises(ValueError, match="p has 10,000,000 characters; the limit here is 2,000"):
        limits.parse_numbers("1," * 5_000_000, "p")
    with pytest.raises(ValueError) as refused:
        limits.parse_numbers("0.5, x" + "y" * 1_900, "q")
    assert len(str(refused.value)) < 200 and "must be numbers separated by commas" in str(refused.value)
    assert gcs.sampling.coupling.check_distribution([1e308, 1e308]).tolist() == [0.5, 0.5]  # no overflow to inf


def test_a_link_round_trips_a_tabs_settings():
    with gr.Blocks():
        with gr.Tabs() as tabs:
            with gr.Tab("t", id="compare"):
                text, number = gr.Textbox(), gr.Slider(0, 2)
        selected = gr.State("compare")
    mapping = links.Links(tabs, {"compare": {"q": text, "temperature": number}}, selected)
    query = mapping.query("compare", "What?\nWhy?", 0.5)
    assert query == "?tab=compare&q=What%3F%0AWhy%3F&temperature=0.5"


def test_a_page_loaded_without_a_tab_in_its_link_keeps_the_tab_clicked_meanwhile():
    """The load's answer may come after the user's first tab click (seen on a busy machine: "Copy a link" on the
    coupling tab gave the compare tab's link): only a link that names a tab sets the remembered tab."""
    from types import SimpleNamespace

    with gr.Blocks():
        with gr.Tabs() as tabs:
            with gr.Tab("t", id="compare"):
                text = gr.Textbox()
            with gr.Tab("u", id="coupling"):
                seed = gr.Number()
        selected = gr.State("compare")
    mapping = links.Links(tabs, {"compare": {"q": text}, "coupling": {"seed": seed}}, selected)
    tab_update, remembered, *_ = mapping.apply(SimpleNamespace(query_params={"q": "What?"}))
    assert tab_update == gr.skip() and remembered == gr.skip()
    tab_update, remembered, *_ = mapping.apply(SimpleNamespace(query_params={"tab": "coupling", "seed": "3"}))
    assert remembered == "coupling" and tab_update.selected == "coupling"


def test_a_link_s_text_reaches_the_toast_as_text_and_the_log_in_one_line(caplog):
    import logging
    from types import SimpleNamespace

    with gr.Blocks():
        with gr.Tabs() as tabs:
            with gr.Tab("t", id="compare"):
                methods = gr.CheckboxGroup(["is", "gcswr"])
        selected = gr.State("compare")
    mapping = links.Links(tabs, {"compare": {"methods": methods}}, selected)
    forged = "<b>zz</b>\n2026 gcs.app CRITICAL FORGED\x1b[2J" + "x" * 500
    with caplog.at_level(logging.INFO, logger="gcs.app"), pytest.warns(UserWarning) as toasts:
        mapping.apply(SimpleNamespace(query_params={"methods": forged}))
    # (pytest.warns records every warning meanwhile: a garbage-collected event loop's ResourceWarning came first once)
    toast = next(str(w.message) for w in toasts if issubclass(w.category, UserWarning))
    assert "<b>" not in toast and "&lt;b&gt;" in toast and "x" * 60 not in toast  # escaped, and cut
    logged = [r.getMessage() for r in caplog.records if "link parameters ignored" in r.getMessage()]
    assert len(logged) == 1 and "\n" not in logged[0] and "\x1b" not in logged[0]


def test_every_event_of_the_app_goes_through_the_queue():
    """The app closes Gradio's unqueued routes (ui.server.http_limits.QueuedOnly) but for events declared unqueued: only
    Gradio's own example loaders are; one of ours with queue=False would do nothing in the page."""
    unqueued = {fn.name for fn in ui.build().fns.values() if fn.fn is not None and not fn.queue}
    assert unqueued <= {"load_example"}, unqueued


# -- the step-through a teacher runs, and the side-by-side polish --------------------------------------------
def shown_at(method: str, token: int, tokens: int = 12, seed: int = 0):
    """The step-through's outputs by name for its example at ``seed``, started at ``token`` (as a link's step)."""
    trace, *shown = last(stepthrough.start(stepthrough.EXAMPLE, method, seed, 1.0, 1.0, tokens, gcs.DEFAULT_MODEL,
                                           token))
    return trace, dict(zip(stepthrough.OUTPUTS, shown, strict=True))


@pytest.fixture(scope="module")
def sky(app_model):
    """The example at the first step where paraphrase 2's race is won by a recycled clock (which seed and step that
    is depends on the machine's kernels, as the tokens do), and that carried win."""
    seed, _, carried = first_recycled_win(lambda seed: shown_at("gcswr", 1, seed=seed)[0])
    return (*shown_at("gcswr", carried.position + 1, seed=seed), carried)


@pytest.mark.slow
def test_a_link_s_step_is_shown_and_a_recycled_clock_is_named(sky):
    trace, shown, carried = sky
    position = carried.position
    assert (shown["position"], shown["token"], shown["status"]) == (position, position + 1,
                                                                    f"Token {position + 1} of 12.")
    shown_text = re.sub(r"<[^>]+>", "", MarkdownIt("commonmark").render(shown["explanation"]))  # as the page shows it
    assert (f"Recycled clock: paraphrase 2's {carried.text!r} won with clock E = {carried.clock:.3g}, the same clock "
            f"that won paraphrase {carried.earlier_row + 1}'s race at token {carried.earlier_position + 1}"
            in html.unescape(shown_text))
    assert shown["explanation"].count("Recycled clock") == sum(
        gcs.carried_win(trace, position, row) is not None for row in (0, 1))
    _, past_the_end = shown_at("gcswr", 99, tokens=4)
    assert past_the_end["status"] == "Token 4 of 4."


def test_a_link_runs_the_trace_only_when_it_names_a_step_of_this_tab():
    assert links.linked_step("trace", 10) == 10
    for tab, token in (("compare", 10), ("trace", 0), ("trace", None)):  # the load's chain ends before the model lane
        with pytest.raises(links.NoStepAsked) as raised:
            links.linked_step(tab, token)
        assert not raised.value.visible and not raised.value.print_exception


@pytest.mark.slow
def test_the_two_races_share_one_scale_with_plain_powers_of_ten(sky):
    _, shown, _ = sky
    one, two = shown["race-1"].layout, shown["race-2"].layout
    assert one.xaxis.range == two.xaxis.range and one.xaxis2.range == two.xaxis2.range
    assert one.xaxis2.type == "log" and one.xaxis2.tickvals == two.xaxis2.tickvals
    for value, label in zip(one.xaxis2.tickvals, one.xaxis2.ticktext, strict=True):
        assert math.log10(value) == round(math.log10(value)) and float(label.replace("10⁴", "1e4")) == value


@pytest.mark.slow
def test_is_shows_no_clock_columns_and_its_own_caption(app_model):
    _, shown = shown_at("is", 1, tokens=4)
    assert list(shown["table"].columns) == ["paraphrase", "token", "p", "won"]
    assert "IS has no clocks" in shown["race caption"] and "arrives" not in shown["race caption"]
    assert "clock" not in shown["explanation"].split("\n", 1)[1]  # the step lines: no clock, only u
    _, gcs_shown = shown_at("gcs", 1, tokens=4)
    assert list(gcs_shown["table"].columns) == ["paraphrase", "token", "p", "clock E", "g = −log E", "arrival E/p",
                                                "won"]
    assert "arrives" in gcs_shown["race caption"]


def test_a_token_s_text_stays_text_in_the_explanation_and_the_race():
    hostile = '<img src="https://evil.example/x.png">*b*'
    candidate = gcs.Candidate(7, hostile, 0.5, 0.2, None, 0.4)
    step = gcs.TraceStep(0, 0, (candidate,), 7, hostile, None, False)
    for shown in (stepthrough.race_title(step, 0), *gcs.race_figure(step, title=stepthrough.race_title(step,
                                                                                                       0)).data[0].y):
        assert "<img" not in shown and "&lt;img" in shown, shown  # plot text is HTML
    page = MarkdownIt("commonmark").render(stepthrough.step_line("gcs", step))  # the explanation is Markdown
    assert "<img" not in page and "<em>" not in page and hostile in html.unescape(re.sub("<[^>]+>", "", page))


def test_an_unlikely_winner_s_probability_is_shown_not_rounded_to_zero():
    """A recycled clock can win at p = 0.00003; "p = 0.000" would say the model could not emit it."""
    candidate = gcs.Candidate(7, " both", 3.1234e-05, 1.5e-05, 0.8, 0.4802)
    step = gcs.TraceStep(8, 1, (candidate,), 7, " both", None, False)
    assert "(p = 3.12e-05, clock E = 1.5e-05" in stepthrough.step_line("gcswr", step)
    row = stepthrough.candidate_row("gcswr", step, candidate)
    assert row["p"] == 3.123e-05 and row["clock E"] == 1.5e-05 and row["clock after the race"] == 0.8


@pytest.mark.slow
def test_a_line_break_inside_a_response_never_starts_another(app_model):
    responses = ["Leaves fall.\n\nThen snow.", "Leaves fall.\nThen snow comes."]  # "\n\n" is two tokens here
    for pieces in (highlights.response_pieces(responses),
                   highlights.highlighted(responses, highlights.HIGHLIGHTS[0], app_model.tokenizer),
                   highlights.highlighted(responses, highlights.HIGHLIGHTS[1], app_model.tokenizer)):
        with_breaks = [text for text, _ in pieces if "\n" in text]
        assert with_breaks == ["\n\n", "\n\n"], pieces  # only the separators between responses
        shown = "".join(text for text, _ in pieces)
        assert "fall. ↵ Then" in shown and "↵  ↵" not in shown  # one mark for a run of breaks, split or not


def test_every_run_button_says_working_before_its_work():
    """A new run's status says "Working…" at once, not the last run's "Done." (a browse-lane event, then the work)."""
    demo = ui.build()
    working = {index: fn.outputs[0].elem_id for index, fn in demo.fns.items()
               if getattr(fn.fn, "__name__", None) == "say_working_in_lane"}
    chained = {(working[fn.trigger_after], fn.name) for fn in demo.fns.values() if fn.trigger_after in working}
    assert {("status", "compare_stream"), ("trace-status", "start"), ("trace-status", "force"),
            ("hindsight-status", "hindsight_ui"), ("hindsight-status", "counterfactual_ui"),
            ("sweep-status", "sweep_ui"), ("coupling-status", "coupling_ui")} <= chained, chained


def test_updates_by_name_reach_their_components():
    """``messages.by_name``: each update's names become the wired components (none: nothing changes), a generator
    still streams and keeps its name, and a client that leaves closes the handler's own generator."""
    answers, status = gr.Textbox(), gr.Markdown()
    closed = []

    def stream(text):
        try:
            yield {"answers": text}
            yield {}
            yield {"answers": text, "status": "Done."}
        finally:
            closed.append(text)

    adapted = messages.by_name(stream, {"answers": answers, "status": status})
    assert adapted.__name__ == "stream" and inspect.isgeneratorfunction(adapted)
    assert list(adapted("a")) == [{answers: "a"}, gr.skip(), {answers: "a", status: "Done."}]
    updates = adapted("b")
    assert next(updates) == {answers: "b"}
    updates.close()
    assert closed == ["a", "b"]
    assert messages.by_name(lambda: {"status": "x"}, {"answers": answers, "status": status})() == {status: "x"}


def test_tables_have_readable_headers_before_and_after_a_run():
    from ui.tabs import coupling, sweep

    done = coupling.coupling_ui("0.5, 0.3, 0.15, 0.05", "", 3, 500, 500, 0)
    assert done[-1].startswith("Done: 11 points × 500 Monte Carlo trials")
    assert list(done[2].columns) == list(coupling.CURVE_HEADERS.values())
    assert "Monte Carlo (shared noise)" in done[2].columns
    blended = coupling.coupling_ui("0.5, 0.5", "0.2, 0.8", 3, 500, 500, 0)[2]
    assert blended.columns[0] == "blend weight w" and blended.iloc[-1, 0] == 1.0
    rows = pd.DataFrame({"method": ["is"] * 2, "temperature": [1.0] * 2, "metric": ["e5"] * 2, "ensemble": [False] * 2,
                         "seed": [0, 1], "group": ["a"] * 2, "consistency": [0.8, 0.9]})
    assert list(sweep.curve_table(rows).columns) == list(sweep.CURVE_HEADERS.values())
    close = rows.assign(consistency=[0.92030, 0.92027])  # two seeds' nearly equal means: the error was shown as 0
    assert sweep.curve_table(close)[sweep.CURVE_HEADERS["stderr"]].iloc[0] == pytest.approx(1.5e-5)
    demo = ui.build()
    headers = {block.elem_id: list(block.value["headers"]) for block in demo.blocks.values()
               if isinstance(block, gr.Dataframe) and block.elem_id}
    assert headers["scores"] == compare.SCORE_COLUMNS and headers["sweep-table"][0] == "method"
    assert headers["coupling-table"][1] == "shared noise: Theorem 1"
    assert headers["trace-table"][:2] == ["paraphrase", "token"]


def test_a_greedy_run_says_why_it_compares_nothing_and_offers_no_more_seeds():
    """At temperature 0 the verdict read "GCS agreed more than IS in 0 of 4 seeds ... within noise" and offered more
    seeds, though every method gives the same answers there."""
    from ui.tabs.side_by_side import compare_rounds, verdict

    undecided = lambda temperature: types.SimpleNamespace(  # noqa: E731
        settings=gcs.SamplingSettings(temperature=temperature), more_seeds=True)
    assert not compare_rounds.more_seeds(undecided(0.0)) and compare_rounds.more_seeds(undecided(0.7))
    assert "every method is greedy" in verdict._greedy(gcs.SamplingSettings(temperature=0.0))[0]
    assert verdict._greedy(gcs.SamplingSettings(temperature=1.0)) == []
