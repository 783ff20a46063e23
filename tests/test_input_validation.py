"""Input checked at the edge (issue 44, items 3 and 6): every public endpoint refuses an argument of the wrong type
as bad input, in one sentence naming the argument and the type expected, logged in one line (never a fault with a
traceback); "builtin:N" and typed numbers take the ASCII digits 0-9 only.

The types run in-process through ``ui.ENDPOINTS`` (what the app serves: refused before any model loads) and once
through the served app with gradio_client, with the attack's own values. Every wait is generous.
"""

from __future__ import annotations

import inspect
import logging
import sys
import time
import typing
from pathlib import Path

import gradio as gr
import pytest
from conftest import error_text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ui  # noqa: E402
from ui import limits  # noqa: E402

WAIT_S = 600  # generous: a busy machine is slow, not broken

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
    with pytest.raises(ValueError, match=r"temperatures must be numbers separated by commas, got '0\.5, ٣' \(digits"):
        limits.parse_numbers("0.5, ٣", "temperatures")
    assert limits.parse_numbers("0.5, 1e-3 2", "temperatures") == [0.5, 0.001, 2.0]
