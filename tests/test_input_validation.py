"""Input checked at the edge: every public endpoint refuses bad input as bad input, in one sentence naming the
problem, logged in one line (never a fault with a traceback). An argument of the wrong type is named with the type
expected; "builtin:N" and typed numbers take the ASCII digits 0-9 only; a metric is one the app offers (no error
reveals the server's filesystem); text with control, invisible or direction-overriding characters, a lone surrogate
or nothing visible is refused, from every endpoint; a choice outside a radio button's choices is refused briefly; a
counterfactual replacement cannot hold an end-of-turn token; a seed list's length is checked before its elements;
and a number typed past a slider's range is named in a toast, not changed silently.

The types run in-process through ``ui.ENDPOINTS`` (what the app serves: refused before any model loads) and through
the running app (``python app.py``) with gradio_client and as raw JSON, with the attack's own values. Every wait is
generous, or waits on the app's progress.
"""

from __future__ import annotations

import inspect
import json
import logging
import sys
import time
import typing
import warnings
from pathlib import Path

import gradio as gr
import pytest
from waiting import Progress, served, until

import gcs
from conftest import error_text, log_count, queued_call

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ui  # noqa: E402
from ui.shared import limits  # noqa: E402
from ui.tabs import hindsight  # noqa: E402
from ui.tabs.side_by_side import compare  # noqa: E402

WAIT_S = 600  # generous: a busy machine is slow, not broken
PARAPHRASES = "What is DNA?\nExplain what DNA is."
TAGS = "Why is the sky blue?" + "\U000e0041" * 20  # invisible: four tokens each

# The arguments an endpoint cannot go without (the rest take their defaults), each of its own type.
REQUIRED = {"paraphrases": "What is DNA?\nExplain DNA.", "prompt": "Why is the sky blue?", "prompts": "What is DNA?",
            "response": "Because of scattering.", "at": 0, "replacement": " air"}
# A value of another type for each annotation, as a JSON client can send it.
WRONG = {str: ["gcs"], int: "4", float: "1.0", bool: "yes", int | list[int]: {"a": 1}}
SAID = {str: "text", int: "a whole number", float: "a number", bool: "true or false",
        int | list[int]: "a whole number or a list of whole numbers"}
CASES = [(endpoint, name) for endpoint, (function, _) in ui.ENDPOINTS.items()
         for name in inspect.signature(function).parameters]


def answer(endpoint: str, **arguments):
    """The endpoint's first answer (a streaming endpoint's first update), called as Gradio calls it."""
    function = ui.ENDPOINTS[endpoint][0]
    required = {name: REQUIRED[name] for name, parameter in inspect.signature(function).parameters.items()
                if parameter.default is inspect.Parameter.empty}
    result = function(**{**required, **arguments})
    return next(iter(result)) if inspect.isgenerator(result) else result


@pytest.mark.parametrize("endpoint, name", CASES)
def test_every_argument_of_every_endpoint_is_refused_with_the_wrong_type(endpoint, name, caplog):
    """A wrong type used to reach the code (``b_precision=["bfloat16"]``: "generation failed (TypeError)" and a
    traceback). Each endpoint now refuses it first, naming the argument and the type its annotation says."""
    hint = typing.get_type_hints(ui.ENDPOINTS[endpoint][0])[name]
    with caplog.at_level(logging.INFO, logger="gcs.app"), pytest.raises(gr.Error) as refused:
        answer(endpoint, **{name: WRONG[hint]})
    assert str(refused.value.message).startswith(f"{name} must be {SAID[hint]}, got "), refused.value.message
    assert [record.levelname for record in caplog.records if record.name == "gcs.app"] == ["INFO"]
    assert not any(record.exc_info for record in caplog.records)


def test_the_values_of_the_attack_on_ab_are_refused_as_bad_input():
    for arguments, message in [
        ({"b_precision": ["bfloat16"]}, "b_precision must be text, got ['bfloat16']"),
        ({"b_precision": {"a": 1}}, "b_precision must be text, got {'a': 1}"),
        ({"method": ["gcs"]}, "method must be text, got ['gcs']"),
        ({"scores": [["length"]]}, "scores must be text, got [['length']]"),
        ({"scores": [{}]}, "scores must be text, got [{}]"),
    ]:
        with pytest.raises(gr.Error) as refused:
            answer("ab", **arguments)
        assert refused.value.message == message


@pytest.mark.parametrize("arguments, message", [
    ({"b_precision": ["bfloat16"]}, "b_precision must be text"),
    ({"method": ["gcs"]}, "method must be text"),
    ({"scores": [{}]}, "scores must be text"),
])
@pytest.mark.slow
def test_wrong_types_through_gradio_client_are_refused_not_logged_as_faults(client, app_log, arguments, message):
    before = app_log.read_text()
    text = error_text(lambda: client.predict("What is DNA?", **arguments, api_name="/ab"))
    assert message in text and "generation failed" not in text, text
    deadline = time.time() + WAIT_S  # the log line is written as the refusal is sent
    while f"refused: {message}" not in app_log.read_text()[len(before):]:
        assert time.time() < deadline, "no log line for the refusal"
        time.sleep(0.3)
    written = app_log.read_text()[len(before):]
    assert "Traceback" not in written and "generation failed" not in written and " ERROR " not in written


@pytest.mark.parametrize("text", ["builtin:²", "builtin:٣", "builtin:３", "builtin: 1_0"])
def test_builtin_takes_the_ascii_digits_only(text):
    """"builtin:²" passed ``str.isdigit`` and failed in ``int()`` ("invalid literal for int() with base 10"), and
    "builtin:٣" (an Arabic-Indic three) was read as 3."""
    with pytest.raises(ValueError, match="builtin:N needs a whole number N from 1 to 8 in the digits 0-9, got '"):
        limits.parse_builtin(text, "ab prompts")
    assert limits.parse_builtin("builtin: 3", "ab prompts") == 3


def test_the_endpoints_refuse_builtin_with_other_digits_first():
    """Before any other argument is looked at (here a bad precision, which used to be the first refusal)."""
    for endpoint, arguments in (("ab", {"prompts": "builtin:٣", "a_precision": "float64"}),
                                ("sweep", {"paraphrases": "builtin:²", "metric": "no-such-metric"})):
        with pytest.raises(gr.Error, match="in the digits 0-9"):
            answer(endpoint, **arguments)


def test_typed_numbers_take_the_ascii_digits_only():
    """``float()`` reads any script's digits: "٣" was 3.0 in a temperatures list or a coupling distribution."""
    with pytest.raises(ValueError, match=r"temperatures must be numbers separated by commas, got '0\.5, ٣' \(ASCII"):
        limits.parse_numbers("0.5, ٣", "temperatures")
    assert limits.parse_numbers("0.5, 1e-3 2", "temperatures") == [0.5, 0.001, 2.0]


# -- a metric the app offers; smaller bad inputs ------------------------------------------------------------------
@pytest.mark.slow
def test_sweep_metric_cannot_name_a_server_path(client, tmp_path):
    existing, missing = str(Path.home()), str(tmp_path / "no-such-folder")
    messages = [error_text(lambda m=m: client.predict(PARAPHRASES, "1", 1, "is", m, 4, api_name="/sweep"))
                for m in (f"minilm:{existing}", f"minilm:{missing}", f"e5:{existing}", "e5:intfloat/e5-large-v2")]
    for message in messages:
        assert "is not offered here" in message
        for leak in ("Unrecognized model", "not a directory", "is a file", "not found", "No such file"):
            assert leak not in message


@pytest.mark.parametrize(
    "endpoint, arguments, message",
    [("/coupling", ("0.5, 0.5", "", 3.0, 1000, 1000, 1.5), "coupling seed must be a whole number"),
     ("/sweep", ("builtin:-1", "1", 1, "is", "e5", 8), "builtin:N needs a whole number"),
     ("/compare", (PARAPHRASES, 1.0, 8, 1, 1.0, "gcswr", "yes"), "ensemble must be"),
     ("/compare", (PARAPHRASES, 1.0, 8, 1, 1.0, 5), "methods must be")],
)
@pytest.mark.slow
def test_small_bad_inputs(client, endpoint, arguments, message):
    assert message in error_text(lambda: client.predict(*arguments, api_name=endpoint))


# -- text: control, invisible and direction-overriding characters, from every source -----------------------------
@pytest.mark.parametrize("endpoint, arguments", [
    ("/trace", (f"{TAGS}\nWhat makes it blue?",)),
    ("/compare", (f"{TAGS}\nWhat makes it blue?",)),
    ("/hindsight", ("Why is the sky blue?", "Blue\u202e.", "What makes it blue?")),
])
@pytest.mark.slow
def test_invisible_and_direction_overriding_characters_are_refused(client, endpoint, arguments):
    assert "invisible or direction-overriding" in error_text(lambda: client.predict(*arguments, api_name=endpoint))


@pytest.mark.slow
@pytest.mark.parametrize("response", ["Blue\x00.", "Blue\x01 sky", "Blue\x1b[2J"])
def test_a_response_with_control_characters_is_refused_by_hindsight(client, response):
    message = error_text(lambda: client.predict("Why is the sky blue?", response, "What makes it blue?",
                                                 api_name="/hindsight"))
    assert "the response contains control characters" in message


# -- bad input is refused, not logged as a fault -------------------------------------------------------------
@pytest.mark.parametrize("endpoint, arguments, message", [
    ("/compare", ("What is DNA?\nExplain\ud800 DNA.", 1.0, 4, 1), "paraphrase 2 contains an unpaired surrogate"),
    ("/trace", ("What is DNA?\n\u200b\u200d\ufeff",), "paraphrase 2 shows nothing"),
    ("/counterfactual", ("Why is the sky blue?", "Because of scattering.", 1, "<|im_end|>"),
     "the replacement holds an end-of-turn token"),
    ("/hindsight", ("Why is the sky blue?", "\u200b\u2060", "What makes it blue?"), "enter the response"),
])
@pytest.mark.slow
def test_bad_text_is_refused_in_one_line(app_url, app_log, app_progress, endpoint, arguments, message):
    """A lone surrogate failed in the tokenizer and ``at=Infinity`` in ``int()``: "generation failed", with a
    traceback. (Sent as raw JSON: gradio_client cannot encode either. Infinity is now refused before any endpoint
    reads it, HTTP 400: tests/test_http_guard.py.)"""
    tracebacks, faults = log_count(app_log, "Traceback"), log_count(app_log, "generation failed")
    event, answer = raw_call(app_url, endpoint, list(arguments), app_progress)
    assert event == "error" and message in answer, answer[:300]
    until(lambda: log_count(app_log, message[:30]) > 0, "the refusal's log line", app_progress)
    assert log_count(app_log, "Traceback") == tracebacks and log_count(app_log, "generation failed") == faults


def raw_call(app_url: str, endpoint: str, data: list, progress: Progress) -> tuple[str, str]:
    """A call as raw JSON (Python's: a lone surrogate as "\\ud800", infinity as Infinity), the values left out
    taking their defaults: its last event and data."""
    parameters = list(inspect.signature(ui.ENDPOINTS[endpoint.strip("/")][0]).parameters.values())
    body = json.dumps({"data": [*data, *(parameter.default for parameter in parameters[len(data):])]}).encode()
    joined = served("POST", f"{app_url}gradio_api/call{endpoint}", progress, content=body,
                    headers={"content-type": "application/json"})
    assert joined.status_code == 200, joined.text[:300]
    answer = served("GET", f"{app_url}gradio_api/call{endpoint}/{joined.json()['event_id']}", progress).text
    events = [line.removeprefix("event:").strip() for line in answer.splitlines() if line.startswith("event:")]
    return events[-1], answer.split("data:")[-1]


@pytest.mark.slow
def test_a_choice_outside_its_choices_is_refused_briefly(app_url, app_log, app_progress):
    """A radio button or dropdown value outside its choices: Gradio quoted it whole and logged a 1.8 KB traceback."""
    config = served("GET", f"{app_url}config", app_progress).json()
    (fn_index,) = [d["id"] for d in config["dependencies"] if d.get("api_name") == "source_inputs"]
    tracebacks, size = log_count(app_log, "Traceback"), len(app_log.read_text())
    answer = queued_call(app_url, fn_index, ["y" * 100_000], app_progress)
    assert not answer["success"] and "is not one of this input's choices" in answer["output"]["error"]
    assert len(json.dumps(answer)) < 1_000
    until(lambda: "is not one of this input's choices" in app_log.read_text()[size:], "the refusal's log line",
          app_progress)
    assert log_count(app_log, "Traceback") == tracebacks and len(app_log.read_text()) - size < 1_000


@pytest.mark.slow
def test_a_counterfactual_cannot_write_an_end_of_turn_inside_a_response(embedded_model):
    """/hindsight refuses a response holding the end-of-turn token; a counterfactual replacement holding it ended
    the response instead. Both are refused now, by the library, with the same words."""
    for replacement in ("<|im_end|>", " sour<|im_end|>",
                        [embedded_model.tokenizer.convert_tokens_to_ids("<|im_end|>")]):
        with pytest.raises(ValueError, match="the replacement holds an end-of-turn token"):
            gcs.counterfactual("Name a fruit.", "Apples are sweet.", 1, replacement, seed=1, max_new_tokens=16,
                               model=embedded_model)
    with pytest.raises(ValueError, match="token to change must be a whole number"):
        hindsight.counterfactual_inputs("Name a fruit.", "Apples are sweet.", 10**400, " sour", "gcswr", 0, 1.0, 1.0,
                                        16, ui.DEFAULT_MODEL)


# -- a seed list: its length before its elements -------------------------------------------------------------------
class Untouchable(list):
    """A list whose length is known but whose elements must not be read."""

    def __len__(self):
        return 10_000_000

    def __iter__(self):
        raise AssertionError("the elements were read before the count was checked")

    def __getitem__(self, index):
        raise AssertionError("the elements were read before the count was checked")


@pytest.mark.parametrize("seed, seeds", [(0, Untouchable()), (0, ["not a seed"] * 17), ("not a seed", [1] * 17),
                                         ("not a seed", 17)])
def test_a_seed_count_is_checked_before_the_seeds(seed, seeds):
    with pytest.raises(ValueError, match="seeds per run must be a whole number from 1 to 16, got (17|10000000)$"):
        compare.seed_list(seed, seeds)


def test_a_seed_list_still_checks_each_seed_and_runs_a_repeat_once():
    assert compare.seed_list(0, [9, 2, 9]) == [9, 2] and compare.seed_list(0, (3,)) == [3]
    with pytest.raises(ValueError, match="seed must be a whole number"):
        compare.seed_list(0, [1, -2])
    with pytest.raises(ValueError, match="seeds per run must be a whole number from 1 to 16, got 0"):
        compare.seed_list(0, [])


# -- a number typed past a slider's range ------------------------------------------------------------------------
def _release_handlers(demo) -> dict[str, list]:
    """Each slider's label -> the handlers of its release events."""
    handlers: dict[str, list] = {}
    for function in demo.fns.values():
        for block_id, event in function.targets:
            block = demo.blocks.get(block_id)
            if event == "release" and isinstance(block, ui.gr.Slider):
                handlers.setdefault(str(block.label), []).append((block, function))
    return handlers


def test_a_number_typed_past_a_slider_s_range_is_named_in_a_toast():
    """Gradio's Slider sets a typed 5 to its maximum 2 when the box loses focus, silently; the page sends the typed
    value with the release event just before (seen in a real browser: test_browser.py), so the app says so."""
    demo = ui.build()
    sliders = [block for block in demo.blocks.values() if isinstance(block, ui.gr.Slider)]
    handlers = _release_handlers(demo)
    assert len(sum(handlers.values(), [])) == len(sliders), "every slider says when a typed number is out of range"
    temperatures = handlers["temperature"]
    assert len(temperatures) == 5  # side by side, inside the sampler, hindsight, A/B (A and B)
    for slider, function in temperatures:
        assert not function.preprocess and function.queue and function.concurrency_id == "browse"
        with pytest.warns(UserWarning) as toasts:
            function.fn(5)
        high = f"{slider.maximum:g}"
        assert str(toasts[0].message) == (f"temperature: 5 is outside this setting's range ({slider.minimum:g} to "
                                          f"{high}); {high} is used")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no toast within the range, nor for what is not a number
            for value in (slider.minimum, 1.0, slider.maximum, "5", None, True):
                function.fn(value)
        with pytest.warns(UserWarning, match=r"temperature: -1 is outside .*; 0(\.05)? is used"):
            function.fn(-1)
        with pytest.warns(UserWarning, match=r"temperature: inf is outside"):
            function.fn(10**400)
