"""What a user reads besides the results: errors as toasts and status lines, "Working…" while a run works, user
text shown as text (never as markup), responses on one paragraph, a slider's range said out loud, captions."""

from __future__ import annotations

import functools
import html
import inspect
import math
import re
from collections.abc import Callable

import gradio as gr
import torch

from gcs.engines.endpoints import EndpointError
from gcs.runtime.background import releasing_openmp
from ui.shared import deployment
from ui.shared.logs import logger

MESSAGE_CHARACTERS = 600  # an error quotes at most ~100 characters of a value; this bounds the whole sentence
_PARTIAL_ESCAPE = re.compile(r"&[#\w]*$|\\$")  # an HTML entity or a Markdown backslash escape a cut would split


def brief(message: str) -> str:
    """``message`` cut to ``MESSAGE_CHARACTERS``: no error carries a megabyte of what the client sent back to it.
    Cut as it is sent, after escaping (escaping can make a text four times longer), and never inside an escape.

    >>> brief("x" + "&lt;" * 200)[-11:]  # 600 characters would end in "&l"
    '&lt;… (cut)'
    """
    if len(message) <= MESSAGE_CHARACTERS:
        return message
    return f"{_PARTIAL_ESCAPE.sub('', message[:MESSAGE_CHARACTERS])}… (cut)"


def _message_text(error: Exception) -> str:
    """What a user is told about ``error``, as plain text (unescaped, not yet cut: ``brief`` cuts what is sent);
    logged here, once: a user error (ValueError) in one line, a fault with its traceback. Internal failures are
    not shown in full. A served endpoint's fault is told in one line too: the log names it by its URL (the
    operator's), the user by its name."""
    if isinstance(error, gr.Error):  # already a message for the user
        return str(error.message)
    if isinstance(error, EndpointError):
        logger.warning("a served endpoint failed: %s", str(error)[:600])
        return deployment.ENGINE.for_visitors(str(error))
    if isinstance(error, ValueError):
        logger.info("refused: %s", str(error)[:300])
        return deployment.ENGINE.for_visitors(str(error))
    if isinstance(error, torch.OutOfMemoryError):
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        logger.warning("out of memory: %s", str(error)[:200])
        return "out of memory for this request: use fewer paraphrases, seeds or new tokens"
    logger.exception("request failed")
    return f"generation failed ({type(error).__name__}); please try again"


def user_message(error: Exception) -> str:
    """The message a user sees, as HTML text (markup in it is escaped), for a toast or an API error."""
    return brief(html.escape(_message_text(error), quote=False))


def user_error(error: Exception) -> gr.Error:
    """``user_message`` as the ``gr.Error`` an API client receives (logged once, in one line for user errors)."""
    return gr.Error(user_message(error), print_exception=False)


# Every ASCII punctuation mark: CommonMark lets a backslash escape each one, and Markdown syntax (links, images,
# autolinks, HTML, emphasis, code, headings, lists, tables, $$ math, entities) is made of nothing else.
_MARKDOWN_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")


def as_text(text) -> str:
    r"""Markdown that shows ``text`` as written: nothing in it becomes a link, an image, markup or math. Every
    user-derived string that goes into a ``gr.Markdown`` value (a status line, a note) goes through this.

    >>> print(as_text("[x](https://evil.example) <b>**$$"))
    \[x\]\(https\:\/\/evil\.example\) \<b\>\*\*\$\$
    """
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", str(text))


TOAST_SECONDS = 8  # a toast goes away by itself: old ones neither stack up nor follow the user to other tabs


def failure(error: Exception) -> str:
    """A toast for ``error`` and the status line that says it ("Failed: ..."). The toast is HTML and the status
    Markdown: the message (which may quote user input) is escaped for each, so it shows as text in both."""
    message = _message_text(error)
    gr.Warning(brief(html.escape(message, quote=False)), duration=TOAST_SECONDS)
    return f"**Failed:** {brief(as_text(message))}"


def failed(error: Exception, outputs: int) -> tuple:
    """A UI handler's answer to an error, for positional outputs: ``failure``'s toast and status (the last
    output); every other output keeps what it showed (an error must not wipe earlier results). A handler whose
    updates name their outputs (``by_name``) answers ``{"status": failure(error)}`` instead."""
    return (*[gr.skip()] * (outputs - 1), failure(error))


def range_notice(slider: gr.Slider):
    """The handler behind ``say_slider_ranges`` for one slider: a toast when ``value`` is outside its range."""
    label, low, high = str(slider.label or "this setting"), float(slider.minimum), float(slider.maximum)

    def notice(value) -> None:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        value = float(value) if abs(value) < 1e308 else (math.inf if value > 0 else -math.inf)  # no OverflowError
        if math.isnan(value) or low <= value <= high:
            return
        nearest = high if value > high else low
        gr.Warning(html.escape(f"{label}: {value:g} is outside this setting's range ({low:g} to {high:g}); "
                               f"{nearest:g} is used", quote=False), duration=TOAST_SECONDS)

    return notice


def say_slider_ranges(sliders) -> None:
    """A number typed into a slider's box past its range is set to the nearest end when the box loses focus
    (Gradio 6.x's Slider), silently. Just before, the page sends the typed value with the slider's release
    event, so each slider's release (handled unprocessed: Gradio would refuse the value before the handler saw
    it) says in a toast what was typed and what is used instead. Call it inside the ``gr.Blocks``."""
    for slider in sliders:
        slider.release(range_notice(slider), slider, None, preprocess=False, api_visibility="private",
                       show_progress="hidden", concurrency_id="browse", concurrency_limit=4)


def caption(text: str) -> gr.Markdown:
    """The one line under a plot that says what the viewer should see."""
    return gr.Markdown(f"<small>{text}</small>", elem_classes="caption")


LINE_BREAK = " ↵ "


def one_paragraph(text: str) -> str:
    """A response on one paragraph: each line break inside it shows as " ↵ ", so it never looks like the start of
    another (numbered) response.

    >>> one_paragraph("Leaves fall.\\n\\nThen snow.")
    'Leaves fall. ↵ Then snow.'
    """
    return re.sub(r"[ \t]*\n\s*", LINE_BREAK, text)


def one_paragraph_pieces(pieces: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """One response's (text, label) pieces with its line breaks as " ↵ ", one mark for a run of breaks even where
    the tokenizer split the run into pieces (a mark merged into the one before passes on its label, if any).

    >>> one_paragraph_pieces([("art.", None), ("\\n", None), ("\\n", "now")])
    [('art.', None), (' ↵ ', 'now')]
    """
    value = []
    for text, label in pieces:
        text = one_paragraph(text)
        if value and value[-1][0].endswith(LINE_BREAK) and text.startswith(LINE_BREAK):
            text = text[len(LINE_BREAK):]
            if not text:
                value[-1] = (value[-1][0], label or value[-1][1])
        if text:
            value.append((text, label))
    return value


WORKING = "Working…"
_standing: Callable[[str], tuple[int, float | None]] | None = None  # ui.build sets it: ui.server.serving.lane_standing


def watch_lanes(standing: Callable[[str], tuple[int, float | None]] | None) -> None:
    """Where a new run stands in its lane's queue, for ``say_working``: ``standing(lane)`` gives (runs ahead, seconds
    until it would start or None); None says nothing of the queue."""
    global _standing
    _standing = standing


def say_working(lane: str | None = None) -> str:
    """A status line's text while a new run works (it must not keep the last run's "Done."): where it waits behind
    other runs in ``lane``, its place and when it should start (a visitor whose run waits sees why at once).

    >>> watch_lanes(lambda lane: (2, 41.4)); say_working("model")
    'Waiting in the queue: 2 runs ahead of yours; yours should start in about 41 s…'
    >>> watch_lanes(lambda lane: (0, None)); say_working("model")
    'Working…'
    >>> watch_lanes(None)
    """
    ahead, starts = _standing(lane) if _standing is not None and lane is not None else (0, None)
    if not ahead:
        return WORKING
    runs = "1 run" if ahead == 1 else f"{ahead} runs"
    when = f"; yours should start in about {starts:.0f} s" if starts is not None else ""
    return f"Waiting in the queue: {runs} ahead of yours{when}…"


def working_in(lane: str | None):
    """``say_working`` for a run that waits in ``lane``: a handler of no arguments (Gradio reads a handler's
    signature to know what to pass it, so no ``functools.wraps`` here)."""
    def say_working_in_lane() -> str:
        return say_working(lane)

    return say_working_in_lane


def shown_for(sources) -> Callable[[str], list]:
    """A handler that shows only the chosen source's input, one per name in ``sources`` (an edit to a hidden one
    would be silently ignored)."""
    def source_inputs(source: str) -> list:
        return [gr.update(visible=source == name) for name in sources]

    return source_inputs


def click_working(button: gr.Button, status: gr.Markdown, handler, inputs, outputs, **lane):
    """``button.click`` that first says "Working…" in ``status`` (at once, while the request waits for its lane or
    a model loads; where runs are ahead of it in its lane, how many and when it should start), then runs ``handler``
    in ``lane`` (``concurrency_id=...``). Returns the handler's event."""
    event = button.click(working_in(lane.get("concurrency_id")), None, status, api_visibility="private",
                         concurrency_id="browse", concurrency_limit=4).then(releasing_openmp(handler), inputs, outputs,
                                                                            api_visibility="private", **lane)
    # a handler answers its own errors in the status; an input refused before it ran (its message is the toast) would
    # leave "Working…" there
    event.failure(refused_status, None, status, api_visibility="private", concurrency_id="browse",
                  concurrency_limit=4)
    return event


def refused_status() -> str:
    return "**Failed:** a setting was refused (the message says which); nothing ran."


def finite(value):
    """``value`` with every NaN and infinity in it (at any depth) as None: JSON has no such numbers (Python writes
    bare ``NaN`` / ``Infinity``, which no strict parser reads).

    >>> finite({"arrival": float("inf"), "p": (0.5, float("nan")), "won": True})
    {'arrival': None, 'p': [0.5, None], 'won': True}
    """
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(item) for item in value]
    return value


def strict_json(endpoint):
    """``endpoint`` (an API function, plain or streaming) whose every answer is ``finite``: strict JSON whatever
    the numbers (a race's arrival time is infinite for a candidate that top-p cut: probability 0). The adapter
    keeps the function's name, signature and docstring (the MCP tool's schema) and closes its generator when the
    client leaves."""
    if inspect.isgeneratorfunction(endpoint):
        @functools.wraps(endpoint)
        def streamed(*args, **kwargs):
            answers = endpoint(*args, **kwargs)
            try:
                for answer in answers:
                    yield finite(answer)
            finally:
                answers.close()

        return releasing_openmp(streamed)

    @functools.wraps(endpoint)
    def answered(*args, **kwargs):
        return finite(endpoint(*args, **kwargs))

    return releasing_openmp(answered)


def changes_only():
    """``news(update)``: the outputs of ``update`` whose value differs from what this run last sent for them. A
    handler's half-second beats repeat the same status and column visibility; each one sent is one more render in
    the visitor's browser (on a Space's shared cores, in a test's or a benchmark's).

    >>> news = changes_only()
    >>> news({"status": "Round 1", "tokens": 3}), news({"status": "Round 1", "tokens": 4})
    ({'status': 'Round 1', 'tokens': 3}, {'tokens': 4})
    """
    sent: dict = {}

    def news(update: dict) -> dict:
        fresh = {name: value for name, value in update.items() if name not in sent or sent[name] != value}
        sent.update(fresh)
        return fresh

    return news


def by_name(handler, components: dict):
    """``handler`` for an event whose outputs are ``components`` (output name -> component): each of its answers
    (or, for a generator, each update it yields, streamed as they come) is a dict ``{name: value}`` holding only
    the outputs that change; an output left out keeps what it shows. Wire it with
    ``outputs=list(components.values())``. The adapter keeps the handler's name, signature and decorators (``@gpu``
    runs inside it), and closes the handler's generator when the client leaves."""

    def to_components(update: dict):
        # Gradio reads an empty dict as one value, not as "no change": say that with a skip.
        return {components[name]: value for name, value in update.items()} or gr.skip()

    if inspect.isgeneratorfunction(handler):
        @functools.wraps(handler)
        def streamed(*args):
            updates = handler(*args)
            try:
                for update in updates:
                    yield to_components(update)
            finally:
                updates.close()

        adapted = streamed
    else:
        @functools.wraps(handler)
        def adapted(*args):
            return to_components(handler(*args))

    adapted.components = components  # the names its updates may use (tests compare them with the wiring)
    return releasing_openmp(adapted)
