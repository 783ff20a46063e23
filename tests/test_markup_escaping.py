"""User text shows as text: HTML or Markdown that a user (or model text the prompt can steer) puts into a
paraphrase, a parameter or a response never becomes markup where the app shows it back. A status line quotes it as
Markdown-escaped text and a toast as HTML-escaped text; a replay check, a traced token's explanation and a plot's
hover labels quote it as text too.

The rendering is CommonMark with GFM's tables and strikethrough (``markdown_it``), checked in-process.
"""

from __future__ import annotations

import html
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from markdown_it import MarkdownIt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import gcs  # noqa: E402
from ui.shared import messages  # noqa: E402
from ui.tabs import hindsight, stepthrough  # noqa: E402
from ui.tabs.side_by_side import compare  # noqa: E402

pytestmark = pytest.mark.usefixtures("transformers_engine")  # (tests/conftest.py: the page on vLLM is not theirs)

PUNCTUATION = r"[!-/:-@\[-`{-~]"  # ASCII punctuation: what every piece of Markdown syntax is made of

# Markdown a user could put into a parameter or paraphrase that an error message (or a replay) quotes back
HOSTILE_MARKDOWN = [
    "[x](https://evil.example/a)",
    "![](https://evil.example/t.png)",
    "<https://evil.example/auto>",
    '<a href="https://evil.example">x</a><img src=https://evil.example/i.png>',
    "**bold** _it_ `code` ~~gone~~",
    "$$\\href{https://evil.example}{x}$$",
    "www.evil.example https://evil.example/bare me@evil.example",
    "x\n# heading\n- item\n> quote\n| a | b |\n|---|---|\n[r]: https://evil.example/ref\n[r]",
    "&lt;b&gt; &#60;i&#62; %%%LATEX_BLOCK_0%%% \\*",
]


def rendered(markdown: str) -> tuple[list[str], str]:
    """The HTML elements and the text that CommonMark (with GFM's tables and strikethrough) makes of ``markdown``."""
    out = MarkdownIt("commonmark").enable(["table", "strikethrough"]).render(markdown)
    return re.findall(r"<(\w+)", out), html.unescape(re.sub(r"<[^>]+>", "", out))


def words(text: str) -> str:
    return " ".join(text.split())


# -- HTML in plot labels and error messages -----------------------------------------------------------------------
@pytest.mark.slow
def test_markup_in_user_text_is_escaped(embedded_model):
    final = list(compare.compare_stream('<a href="http://evil.example">x</a>\n<b>bold</b>', 0.0, 4, 0, 1.0, ["gcswr"],
                                        False, gcs.DEFAULT_MODEL))[-1]
    heatmap = final["heatmap-gcswr"]
    labels = [str(text) for row in heatmap.data[0].customdata for text in row]  # the paraphrases, on hover
    assert all("<a" not in label and "<b>" not in label for label in labels)
    assert any("&lt;a href" in label for label in labels)
    error = messages.user_error(ValueError('p must be numbers, got \'<img src="http://evil.example/x.png">\''))
    assert "<img" not in str(error.message) and "&lt;img" in str(error.message)


# -- Markdown quoted from user input --------------------------------------------------------------------------------
@pytest.mark.parametrize("hostile", HOSTILE_MARKDOWN)
def test_markdown_quoted_in_an_error_shows_as_text(hostile):
    """The status line is Markdown: the message's own text must not become a link, image, markup or math there
    (html.escape alone stops only HTML). The toast is HTML: escaped for HTML."""
    message = f"p must be numbers separated by commas, got {hostile}"
    with pytest.warns(UserWarning) as toasts:
        *kept, status = messages.failed(ValueError(message), 3)
    elements, text = rendered(status)
    assert elements == ["p", "strong"], f"the status renders markup from the message: {status!r} -> {elements}"
    assert words(text) == words(f"Failed: {message}")  # every character shows as it was typed
    # GFM autolinks (bare URLs, www., e-mail addresses) and Gradio's $$ math are made of unescaped punctuation
    unescaped = re.findall(PUNCTUATION, re.sub(r"\\" + PUNCTUATION, "", status.removeprefix("**Failed:** ")))
    assert not unescaped, f"unescaped Markdown punctuation in the status: {unescaped}"
    toast = str(toasts[0].message)
    assert "<" not in toast and html.unescape(toast) == message


def test_markdown_in_a_replayed_response_shows_as_text():
    """The replay check quotes the replay, which repeats the user's typed response: as text."""
    hostile = "Sure: [x](https://evil.example/a) ![](https://evil.example/t.png) <https://evil.example> **b**"
    report = SimpleNamespace(replay=hostile + " then more", replayed=False, parted_at=0, finished=True,
                             response_tokens=["[x](https://evil.example/a)"])
    elements, text = rendered(hindsight.replay_check(report))
    assert not {"a", "img"} & set(elements) and elements.count("strong") == 1, elements  # "Replay check ✗" only
    assert hostile in text and "'[x](https://evil.example/a)'" in text


def test_markdown_in_a_traced_token_shows_as_text():
    """The step-through explanation quotes each winning token (model text, which the prompt can steer): as text."""
    text = "[x](https://evil.example/a)"
    token = gcs.Candidate(5, text, 0.5, 0.5, None, 1.0)
    step = gcs.TraceStep(0, 0, (token,), 5, text, None, False)
    trace = gcs.Trace(("q",), "gcs", 0, 1.0, None, ((step,),), ((5,),), (text,))
    elements, text = rendered(stepthrough.explanation(trace, 0))
    assert not {"a", "img"} & set(elements), elements
    assert "picked '[x](https://evil.example/a)'" in text
