"""Hardening IV, in-process: what an audit of issue 24's fixes found left. Markdown quoted from user input shows as
text wherever a Markdown value can hold it, a seed list's length is checked before its elements, and a number
typed past a slider's range is not changed silently. (The browser and the running app: test_browser.py,
test_hardening.py, test_hardening_more.py.)
"""

from __future__ import annotations

import html
import re
import sys
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from markdown_it import MarkdownIt

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import gcs  # noqa: E402
import ui  # noqa: E402
from ui import compare, hindsight, limits, logs, messages, stepthrough  # noqa: E402

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


# -- the log, and the caps on /hindsight ------------------------------------------------------------------------
def test_what_the_server_prints_reaches_its_log_file_line_by_line(tmp_path):
    """stdout to a file is block-buffered: a refused call's echo (or anything printed) would reach the log late,
    so a check of the log could pass before it arrived. Each finished line is written through."""
    with open(tmp_path / "app.log", "w") as file:
        stream = logs.RedactingStream(file)
        print("HF_TOKEN=hf_abcdefghijklmnopqrstuvwx printed", file=stream)
        assert (tmp_path / "app.log").read_text() == "[redacted] printed\n"


def test_hindsight_s_total_work_is_capped(monkeypatch):
    """Within /hindsight's own limits (5 texts of 256 tokens, 256 response and 256 new tokens) the work stays
    under the shared cap, so only a lower cap shows that /hindsight checks it: every text's prompt, the response
    forced through it and the new tokens count."""
    worst = 5 * (limits.LIMITS["prompt tokens"].high + limits.LIMITS["hindsight response tokens"].high
                 + limits.LIMITS["max_new_tokens"].high)
    assert worst <= limits.LIMITS["work tokens"].high
    monkeypatch.setitem(limits.LIMITS, "work tokens", limits.Limit(1, 600, whole=True))
    arguments = ("Why is the sky blue?", "Because of Rayleigh scattering.", "Why's the sky blue?\nWhat makes it blue?",
                 "gcswr", 0, 1.0, 1.0, 256, ui.DEFAULT_MODEL)
    with pytest.raises(ValueError, match=r"this request is [\d,]+ tokens of work .* the limit here is 600"):
        hindsight.hindsight_inputs(*arguments)
    assert hindsight.hindsight_inputs(*arguments[:7], 64, ui.DEFAULT_MODEL)["max_new_tokens"] == 64  # under it
