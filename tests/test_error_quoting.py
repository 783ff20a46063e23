"""Bounded echoes: an error quotes at most ~100 characters of what it was sent, counted as they read once escaped,
and no message is cut before it is escaped. An A/B template of "{prompt}{x}" and 985 "<" gave a 2,146-character
error: the template quoted whole, then cut at 600 characters, then escaped (each "<" four). Checked in-process on the
library's and the app's messages, and against the running app (``python app.py``) with values of up to 1.9 million
characters."""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import gradio as gr
import pytest

import gcs
from conftest import error_text
from gcs.runtime.quoting import escaped_length, quoted

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ui  # noqa: E402
from ui.shared import messages  # noqa: E402

HOSTILE = "{prompt}{x}" + "<" * 985
QUOTE_MOST = 110  # ~100 characters, and the quotes around them


def quotes_in(message: str) -> list[str]:
    """The values a message quotes (a repr in single quotes)."""
    return re.findall(r"'(?:[^'\\]|\\.)*'", message)


@pytest.mark.parametrize("value", ["<" * 1000, "&" * 1000, "\x00" * 1000, "é<" * 1000, ["<" * 1000] * 3])
def test_a_quote_is_short_once_escaped(value):
    assert escaped_length(quoted(value)) < QUOTE_MOST + len("… (3,000 characters)")


@pytest.mark.parametrize("refused", [
    lambda: gcs.Variant(template=HOSTILE),
    lambda: gcs.Variant(template="{prompt" + "<" * 5000),
    lambda: gcs.abtest.scores.check_scores(["<" * 10_000]),
    lambda: gcs.abtest.scores.check_scores(["regex:(" + "<" * 10_000]),
    lambda: gcs.check_methods("<" * 10_000),
    lambda: gcs.check_sampling_settings("<" * 10_000, None, None),
    lambda: gcs.load_groups("<" * 10_000),
    lambda: gcs.Variant(system=" " * 10_000 + "\t"),
])
def test_library_errors_quote_briefly_after_escaping(refused):
    with pytest.raises(ValueError) as error:
        refused()
    shown = messages.user_message(error.value)
    assert len(shown) < 400, shown
    assert all(escaped_length(quote) <= QUOTE_MOST for quote in quotes_in(str(error.value))), str(error.value)


def test_the_ab_template_error_of_the_attack_is_short():
    with pytest.raises(gr.Error) as refused:
        next(ui.ENDPOINTS["ab"][0]("What is DNA?", a_template=HOSTILE, a_precision="float32"))
    message = refused.value.message
    assert "template" in message and len(message) < 300, (len(message), message)
    assert html.unescape(message).count("<") < QUOTE_MOST // 4 + 1


def test_a_message_is_cut_after_escaping_and_never_inside_an_escape():
    for text in ("<" * 5_000, "x" + "<" * 5_000, "x" * 599 + "&" * 10):
        shown = messages.user_message(ValueError(text))
        assert len(shown) <= messages.MESSAGE_CHARACTERS + len("… (cut)"), len(shown)
        assert shown.endswith("… (cut)") and not re.search(r"&[#\w]*… \(cut\)$", shown), shown  # no "&l" left
    with pytest.warns(UserWarning):  # the toast (outside a request: a warning) and the status line alike
        status = messages.failure(ValueError("<" * 5_000))
    assert len(status) <= len("**Failed:** ") + messages.MESSAGE_CHARACTERS + len("… (cut)")


@pytest.mark.parametrize("endpoint, arguments, message", [
    ("/compare", ("What is DNA?\nExplain DNA.", 1.0, 4, 1, 1.0, "m" * 100_000), "unknown method 'mmm"),
    ("/compare", ("What is DNA?\nExplain DNA.", 1.0, 4, 1, 1.0, "gcswr", 0, "m" * 100_000), "is not offered here"),
    ("/sweep", ("builtin:" + "9" * 1_900_000,), "builtin:N needs a whole number N from 1 to 50"),
    ("/trace", ("Why?\nHow come?", "gcswr", 0, "t" * 100_000), "temperature must be a number, got 'ttt"),
])
@pytest.mark.slow
def test_an_error_quotes_at_most_a_hundred_characters_of_the_value(client, endpoint, arguments, message):
    text = error_text(lambda: client.predict(*arguments, api_name=endpoint))
    assert message in text and len(text) < 1_000, text[:300]
