"""What every tab shares: the demo's limits, input parsing, the model allowlist, errors, downloads, logging.

The public demo is stricter than the library: ``LIMITS`` is the one table of its bounds,
and ``check(name, value)`` the one place they are enforced (so the UI, the API and the
README's bad-input table say the same thing).
"""

from __future__ import annotations

# ZeroGPU Spaces: `spaces` must be imported before anything initialises CUDA. Elsewhere its
# decorator is a no-op, so the same code runs on CPU, a GPU and ZeroGPU.
try:
    import spaces

    gpu = spaces.GPU
except ImportError:

    def gpu(function=None, **_):
        return function if function is not None else (lambda f: f)


import collections
import contextvars
import copy
import html
import importlib.util
import io
import json
import logging
import math
import os
import re
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import gradio as gr
import torch

import gcs

logger = logging.getLogger("gcs.app")


# -- limits of the public demo (the library itself allows more) ---------------------------------
@dataclass(frozen=True)
class Limit:
    """A number the demo accepts: ``low`` to ``high`` (``low`` excluded when ``open_low``), whole or not."""

    low: float
    high: float
    whole: bool = False
    open_low: bool = False
    high_text: str = ""  # how to write ``high`` in a message, when its digits would not help

    def describe(self) -> str:
        high = self.high_text or (f"{int(self.high):,}" if self.whole else f"{self.high:g}")
        if self.whole:
            return f"a whole number from {int(self.low):,} to {high}"
        return f"in ({self.low:g}, {high}]" if self.open_low else f"between {self.low:g} and {high}"


# The page holds numbers as JavaScript doubles: whole numbers are exact up to 2^53 - 1, so the seed boxes stop
# there (a larger typed or linked seed would silently become another). The API takes seeds up to 2^63 - 1.
PAGE_SEED_MAX = 2**53 - 1

LIMITS = {
    "paraphrases": Limit(2, 8, whole=True),
    "paraphrase characters": Limit(1, 1000, whole=True),
    "temperature": Limit(0, 2),
    "top_p": Limit(0, 1, open_low=True),
    "max_new_tokens": Limit(1, 256, whole=True),
    "prompt tokens": Limit(1, 256, whole=True),  # one paraphrase as the model sees it (template included)
    "work tokens": Limit(1, 64 * (256 + 256), whole=True),  # rows x (prompt + new tokens) of one side-by-side run
    "seed": Limit(0, gcs.MAX_SEED, whole=True, high_text="2^63 - 1"),
    "seeds per run": Limit(1, 16, whole=True),  # side by side: every method x seed x paraphrase in one batch
    "trace tokens": Limit(1, 64, whole=True),
    "hindsight paraphrases": Limit(1, 4, whole=True),
    "hindsight response tokens": Limit(1, 256, whole=True),
    "seeds": Limit(1, 10, whole=True),
    "sweep max_new_tokens": Limit(1, 128, whole=True),
    "temperatures": Limit(1, 8, whole=True),
    "groups": Limit(1, 50, whole=True),
    "sweep cells": Limit(1, 240, whole=True),
    "sweep work tokens": Limit(1, 150_000, whole=True),
    "upload bytes": Limit(1, 1_000_000, whole=True),
    "max ε": Limit(0, 10),
    "trials": Limit(100, 20_000, whole=True),
    "steps": Limit(100, 20_000, whole=True),
    "coupling seed": Limit(0, 2**31, whole=True),
}


def check(name: str, value) -> float | int:
    """``value`` if it is within ``LIMITS[name]`` (as int for whole numbers), else ValueError naming the limit.

    >>> check("temperature", 0.7), check("seeds", 4.0)
    (0.7, 4)
    >>> check("top_p", 0)
    Traceback (most recent call last):
    ...
    ValueError: top_p must be in (0, 1], got 0
    """
    limit = LIMITS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{name} must be a number, got {value!r}")
    inside = (limit.low < value if limit.open_low else limit.low <= value) and value <= limit.high
    if not inside or (limit.whole and value != int(value)):
        raise ValueError(f"{name} must be {limit.describe()}, got {value:g}" if isinstance(value, float)
                         else f"{name} must be {limit.describe()}, got {value}")
    return int(value) if limit.whole else float(value)


def check_count_of(name: str, items: list) -> list:
    """``items`` if their number is within ``LIMITS[name]``."""
    limit = LIMITS[name]
    if not limit.low <= len(items) <= limit.high:
        raise ValueError(f"give {int(limit.low)} to {int(limit.high)} {name}, got {len(items)}")
    return items


METRICS = gcs.METRICS  # the demo offers the bundled metrics only (the library also takes "e5:MODEL_ID")


def check_metric(metric) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric {str(metric)[:40]!r} is not offered here; choose one of: {', '.join(METRICS)}")
    return metric


def check_flag(value, name: str) -> bool:
    """A true boolean (the API must not read "yes" or 1 as true)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {value!r}")
    return value


def check_work(prompts: list[str], model: gcs.Model, rows_per_prompt: int, new_tokens: int, limit: str) -> None:
    """Refuse a paraphrase over the prompt-token limit, or a request whose total work (every row's prompt and
    new tokens) is over ``LIMITS[limit]``: each parameter within its range can still multiply into too much."""
    lengths = gcs.prompt_lengths(prompts, model)
    most = int(LIMITS["prompt tokens"].high)
    for i, length in enumerate(lengths, start=1):
        if length > most:
            raise ValueError(f"paraphrase {i} is {length:,} tokens long as the model sees it; the limit here is {most:,}")
    work = rows_per_prompt * sum(length + new_tokens for length in lengths)
    if work > LIMITS[limit].high:
        raise ValueError(f"this request is {work:,} tokens of work (every response's prompt and new tokens); the limit "
                         f"here is {int(LIMITS[limit].high):,}: use fewer paraphrases, methods, seeds or new tokens")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Invisible text that reads differently than it shows: Unicode tag characters (four tokens each, unseen) and
# bidirectional embeddings, overrides and isolates (they reorder what is displayed).
_INVISIBLE = re.compile("[\U000e0000-\U000e007f\u202a-\u202e\u2066-\u2069]")


def check_text(text: str, name: str) -> str:
    """``text`` if it holds no control character and no invisible or direction-overriding one."""
    if _CONTROL.search(text):
        raise ValueError(f"{name} contains control characters")
    if _INVISIBLE.search(text):
        raise ValueError(f"{name} contains invisible or direction-overriding characters")
    return text


def parse_paraphrases(text: str, minimum: int | None = None, maximum: int | None = None,
                      name: str = "paraphrases") -> list[str]:
    """Paraphrases typed one per line: 2 to 8 of them (or ``minimum`` to ``maximum``), each up to 1,000 characters,
    no control characters."""
    if not isinstance(text, str):
        raise ValueError(f"{name} must be text, one per line")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    limit, chars = LIMITS["paraphrases"], int(LIMITS["paraphrase characters"].high)
    low, high = int(limit.low if minimum is None else minimum), int(limit.high if maximum is None else maximum)
    singular = name[:-1] if name.endswith("s") else name
    if len(lines) > high > low:
        raise ValueError(f"at most {high} {name} here, got {len(lines)}")
    if not low <= len(lines) <= high:
        what = f"one {singular}" if low == high == 1 else f"exactly {low} {name}" if low == high else \
            f"{low} to {high} {name}"
        raise ValueError(f"enter {what}, one per line (got {len(lines)})")
    for i, line in enumerate(lines, start=1):
        if len(line) > chars:
            raise ValueError(f"{singular} {i} has {len(line):,} characters; the limit here is {chars:,}")
        check_text(line, f"{singular} {i}")
    return lines


MAX_NUMBERS_CHARACTERS = 2_000


def parse_numbers(text: str, name: str, separators: str = r"[,;\s]+") -> list[float]:
    """Numbers separated by commas (or spaces), or ValueError naming the field (quoting at most 60 characters).

    >>> parse_numbers("0.5, 0.25 0.25", "p")
    [0.5, 0.25, 0.25]
    """
    text = str(text or "").strip()
    if len(text) > MAX_NUMBERS_CHARACTERS:
        raise ValueError(f"{name} has {len(text):,} characters; the limit here is {MAX_NUMBERS_CHARACTERS:,}")
    try:
        return [float(x) for x in re.split(separators, text) if x]
    except ValueError:
        quoted = text if len(text) <= 60 else text[:60] + "…"
        raise ValueError(f"{name} must be numbers separated by commas, got {quoted!r}") from None


# -- models: an allowlist, widened by GCS_ALLOWED_MODELS for self-hosting ----------------------
def _hub_reachable() -> bool:
    return bool(os.environ.get("SPACE_ID")) and os.environ.get("HF_HUB_OFFLINE", "0") in ("", "0")


HUB_MODELS = ["HuggingFaceTB/SmolLM2-360M-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"]
GPU_MODELS = ["meta-llama/Meta-Llama-3-8B-Instruct"]


def allowed_models() -> list[str]:
    models = [gcs.DEFAULT_MODEL] if gcs.embedded_model_installed() or not _hub_reachable() else []
    if _hub_reachable():
        models += HUB_MODELS + (GPU_MODELS if torch.cuda.is_available() else [])
    extra = [m.strip() for m in os.environ.get("GCS_ALLOWED_MODELS", "").split(",") if m.strip()]
    return list(dict.fromkeys(models + extra))


def app_engine() -> str:
    """What the demo generates with: ``$GCS_ENGINE`` ("transformers" or "vllm"), else vLLM where it is installed
    (2-2.5x faster here, bench/bench_vllm.py) and transformers elsewhere."""
    choice = os.environ.get("GCS_ENGINE", "auto").strip().lower()
    if choice == "auto":
        return "vllm" if importlib.util.find_spec("vllm") is not None else "transformers"
    return gcs.check_engine(choice)


ENGINE = app_engine()


def engine_for(ensembling: bool) -> str:
    """Ensembling mixes several rows' logits in each step, which only the transformers engine does."""
    return "transformers" if ensembling else ENGINE


def start_engine(model: gcs.Model) -> None:
    """Start the demo's vLLM engine for ``model``; if it cannot start, the demo generates with transformers."""
    global ENGINE
    if ENGINE != "vllm":
        return
    try:
        from gcs.vllm import engine

        engine(model)
        logger.info("generating with vLLM (GCS_ENGINE=transformers switches it off)")
    except Exception:
        logger.exception("could not start the vLLM engine: generating with transformers instead")
        ENGINE = "transformers"


ALLOWED_MODELS = allowed_models()
DEFAULT_MODEL = os.environ.get("GCS_DEFAULT_MODEL") or (HUB_MODELS[0] if _hub_reachable() else gcs.DEFAULT_MODEL)
if DEFAULT_MODEL not in ALLOWED_MODELS:
    ALLOWED_MODELS.insert(0, DEFAULT_MODEL)


def load_allowed_model(name: str) -> gcs.Model:
    if name not in ALLOWED_MODELS:
        raise ValueError(f"model {name!r} is not offered here; choose one of: {', '.join(ALLOWED_MODELS)}")
    return gcs.load_model(name)


_THREAD_TOKENIZERS = threading.local()


def thread_tokenizer(name: str):
    """The model's tokenizer for this thread alone: a fast tokenizer keeps its padding and truncation state
    between calls, so the browse lane's tokenizing beside a generation (or beside another browse request)
    must not share one (seen: a padded batch built with another thread's settings)."""
    tokenizers = _THREAD_TOKENIZERS.__dict__.setdefault("by_model", {})
    if name not in tokenizers:
        tokenizers[name] = copy.deepcopy(load_allowed_model(name).tokenizer)
    return tokenizers[name]


def model_dropdown() -> gr.Dropdown:
    return gr.Dropdown(choices=ALLOWED_MODELS, value=DEFAULT_MODEL, label="model",
                       info="embedded SmolLM2-135M-Instruct works offline")


def method_choices() -> list[tuple[str, str]]:
    return [(gcs.METHOD_NAMES[m], m) for m in gcs.METHODS]


# -- errors ---------------------------------------------------------------------------------------
def user_message(error: Exception) -> str:
    """The message a user sees, as text (markup in it is escaped); internal failures are logged, not shown in full.

    A user error (ValueError) is logged in one line; a fault with its traceback.
    """
    if isinstance(error, gr.Error):  # already a message for the user
        return str(error.message)
    if isinstance(error, ValueError):
        logger.info("refused: %s", str(error)[:300])
        return html.escape(str(error), quote=False)
    if isinstance(error, torch.OutOfMemoryError):
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        logger.warning("out of memory: %s", str(error)[:200])
        return "out of memory for this request: use fewer paraphrases, seeds or new tokens"
    logger.exception("request failed")
    return f"generation failed ({type(error).__name__}); please try again"


def user_error(error: Exception) -> gr.Error:
    """``user_message`` as the ``gr.Error`` an API client receives (logged once, in one line for user errors)."""
    return gr.Error(user_message(error), print_exception=False)


TOAST_SECONDS = 8  # a toast goes away by itself: old ones neither stack up nor follow the user to other tabs


def failed(error: Exception, outputs: int) -> tuple:
    """A UI handler's answer to an error: a toast and "Failed: ..." in the status (the last output); every
    other output keeps what it showed (an error must not wipe earlier results)."""
    message = user_message(error)
    gr.Warning(message, duration=TOAST_SECONDS)
    return (*[gr.skip()] * (outputs - 1), f"**Failed:** {message}")


_MARKDOWN_PUNCTUATION = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")


def as_text(text: str) -> str:
    """``text`` (a token, a paraphrase, anything not ours) escaped for a Markdown output: it shows as typed,
    never as markup or formatting.

    >>> print(as_text("<b>*x*</b>"))
    &lt;b&gt;\\*x\\*&lt;/b&gt;
    """
    return _MARKDOWN_PUNCTUATION.sub(r"\\\1", html.escape(text, quote=False))


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


def say_working() -> str:
    """A status line's text while a new run works (it must not keep the last run's "Done.")."""
    return WORKING


def click_working(button: gr.Button, status: gr.Markdown, handler, inputs, outputs, **lane):
    """``button.click`` that first says "Working…" in ``status`` (at once, while the request waits for its lane or
    a model loads), then runs ``handler`` in ``lane`` (``concurrency_id=...``). Returns the handler's event."""
    return button.click(say_working, None, status, api_visibility="private", concurrency_id="browse",
                        concurrency_limit=4).then(handler, inputs, outputs, api_visibility="private", **lane)


def caption(text: str) -> gr.Markdown:
    """The one line under a plot that says what the viewer should see."""
    return gr.Markdown(f"<small>{text}</small>", elem_classes="caption")


_SECRET = re.compile(
    r"hf_[A-Za-z0-9]{16,}"
    r"|\bBearer\s+[^\s\"',;]+"
    r"|[\"']?\b[\w-]*(?:token|api[_-]?key|password|passwd|secret|authorization)[\"']?\s*[=:]\s*"
    r"(?:(?:Bearer|Basic|token)\s+)?(?:\"[^\"]*\"|'[^']*'|[^\s,;}]+)",
    re.IGNORECASE,
)


def redact(text: str) -> str:
    """Hide anything that looks like a token or password before it reaches a log.

    >>> redact('HF_TOKEN=abc {"token": "x y"} Authorization: Bearer eyJ.z api_key=1')
    '[redacted] {[redacted]} [redacted] [redacted]'
    """
    return _SECRET.sub("[redacted]", text)


class RedactSecrets(logging.Filter):
    """Redacts the whole formatted record: message, arguments, traceback and stack."""

    _formatter = logging.Formatter()

    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), ()
        if record.exc_info and not record.exc_text:
            record.exc_text = self._formatter.formatException(record.exc_info)
        if record.exc_text:  # the handler's formatter prints exc_text as it is
            record.exc_text = redact(record.exc_text)
        if record.stack_info:
            record.stack_info = redact(record.stack_info)
        return True


class RedactingStream(io.TextIOBase):
    """stdout/stderr for the server: what anything prints (Gradio prints a refused call's inputs) is redacted and
    each write is cut to ``MAX_WRITE`` characters, so no secret and no megabyte of user input reaches the log."""

    MAX_WRITE = 4_000

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> int:
        shown = text if len(text) <= self.MAX_WRITE else \
            f"{text[: self.MAX_WRITE]}… [{len(text) - self.MAX_WRITE:,} characters cut]\n"
        self.stream.write(redact(shown))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return False


# -- request bodies -------------------------------------------------------------------------------
MAX_BODY_BYTES = 2_000_000  # the largest legitimate request (a 1 MB upload, multipart) fits with room


async def read_messages(receive, max_bytes: int) -> list[dict] | None:
    """An HTTP request's messages up to the end of its body; None once the body passes ``max_bytes``."""
    messages, size = [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages
        size += len(message.get("body", b""))
        if size > max_bytes:
            return None
        if not message.get("more_body", False):
            return messages


def replaying(messages: list[dict], receive):
    """A ``receive`` that hands on ``messages`` (already read), then whatever comes next."""
    pending = iter(messages)

    async def replay():
        return next(pending, None) or await receive()

    return replay


class BodyLimit:
    """ASGI middleware: an HTTP request whose body is over ``max_bytes`` gets 413 before anything parses it. A
    declared Content-Length is refused at once; any other body is read up to the limit (never more), then
    handed on whole."""

    def __init__(self, app, max_bytes: int = MAX_BODY_BYTES):
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_bytes):
            return await self._refuse(send)
        messages = await read_messages(receive, self.max_bytes)
        if messages is None:
            return await self._refuse(send)
        await self.app(scope, replaying(messages, receive), send)

    async def _refuse(self, send):
        await json_answer(send, 413, {"error": f"the request body is over {self.max_bytes:,} bytes"})


async def json_answer(send, status: int, payload: dict) -> None:
    """Answer an ASGI HTTP request with ``payload`` as JSON, before the app sees it."""
    body = json.dumps(payload).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


class QueuedOnly:
    """ASGI middleware: Gradio also answers ``POST /gradio_api/run/<name>`` and ``/gradio_api/api/<name>`` without
    its queue, for *any* event, so a raw client could run model work beside the model lane, past its waiting
    limit and its cancellation. Those routes are closed (404 and a sentence naming the queued route) except
    for what the page itself sends there: ``run/predict`` for an event the app declared unqueued (Gradio's
    example loader). Runs after ``BodyLimit``, so the body it reads is bounded."""

    UNQUEUED = re.compile(r"/gradio_api/(run|api)/")

    def __init__(self, app, demo: gr.Blocks):
        self.app, self.demo = app, demo

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or not self.UNQUEUED.search(scope["path"]):
            return await self.app(scope, receive, send)
        messages = await read_messages(receive, MAX_BODY_BYTES) or []
        if self._declared_unqueued(scope["path"], b"".join(m.get("body", b"") for m in messages)):
            return await self.app(scope, replaying(messages, receive), send)
        await json_answer(send, 404, {"detail": "this server runs every call through its queue: POST "
                                                "/gradio_api/call/<name> (or use gradio_client)"})

    def _declared_unqueued(self, path: str, body: bytes) -> bool:
        if not path.rstrip("/").endswith("/run/predict"):
            return False
        try:
            index = json.loads(body).get("fn_index")
        except (ValueError, AttributeError):
            return False
        function = self.demo.fns.get(index) if isinstance(index, int) and not isinstance(index, bool) else None
        return function is not None and not function.queue


# -- capacity and cancellation --------------------------------------------------------------------
TESTED_GRADIO = ((6, 0), (7, 0))  # guard_queue wraps Queue.push: checked against these versions (tests/test_hardening*)


def guard_queue(demo: gr.Blocks, waiting_limits: dict[str, int]) -> None:
    """Bound how many requests may *wait* in each lane (``concurrency_id``), each lane on its own, and refuse a
    request with too few values before it is queued; call it after ``demo.queue(max_size=None)``.

    Gradio's ``queue(max_size=...)`` counts every waiting request of every lane, so a full model lane would
    refuse the coupling explorer too. Instead ``Queue.push`` is wrapped: a request of a guarded lane is counted
    from the moment it arrives (before Gradio's awaits, so a burst cannot slip in between a check and its
    admission) and refused with HTTP 503 when its lane already holds its limit. The browser then says "This
    application is currently busy", gradio_client raises "Queue is full", a raw call reads the message below.
    A raw call with too few values gets HTTP 400 and one sentence (Gradio would queue it, then fail listing
    every value it was sent).
    """
    version = tuple(int(part) for part in re.findall(r"\d+", gr.__version__)[:2])
    if not TESTED_GRADIO[0] <= version < TESTED_GRADIO[1]:
        logger.warning("gradio %s is untested here: the queue's guards wrap its Queue.push", gr.__version__)
    queue = demo._queue
    push, arriving = queue.push, collections.Counter()

    async def guarded_push(body, request, username):
        function = demo.fns.get(body.fn_index) if body.fn_index is not None else None
        sent = len(body.data) if isinstance(body.data, list) else 0
        if function is not None and sent < len(function.inputs):
            return False, (f'this endpoint takes {len(function.inputs)} values in "data" (see /gradio_api/info), '
                           f"got {sent}"), "error"
        lane = getattr(function, "concurrency_id", None)
        if lane not in waiting_limits:
            return await push(body=body, request=request, username=username)
        # No await between this check and the count: on the event loop, check-and-admit is one step.
        waiting = len(getattr(queue.event_queue_per_concurrency_id.get(lane), "queue", ())) + arriving[lane]
        if waiting >= waiting_limits[lane]:
            return False, f"the {lane} queue is full ({waiting} waiting); please try again shortly", "queue_full"
        arriving[lane] += 1
        try:
            return await push(body=body, request=request, username=username)
        finally:  # admitted (now in the lane's queue) or refused by Gradio: no longer arriving either way
            arriving[lane] -= 1

    queue.push = guarded_push


HEARTBEAT_S = 0.5


def run_cancellable(work, heartbeat=None):
    """Run ``work(stop)`` in a thread, yielding ``heartbeat`` every half second; returns its result.

    In a Gradio handler, ``result = yield from run_cancellable(...)`` makes a long job stoppable: when the
    client goes away Gradio closes the generator, which sets ``stop``; ``work`` passes it on
    (``gcs.sweep(stop=...)``) and the model is free again after the current token.
    """
    stop, outcome = threading.Event(), {}

    def target():
        try:
            outcome["result"] = work(stop)
        except BaseException as error:  # re-raised in the handler's thread
            outcome["error"] = error

    context = contextvars.copy_context()  # Gradio's progress tracking (track_tqdm) follows the request's context
    worker = threading.Thread(target=context.run, args=(target,), daemon=True, name="gcs-cancellable")
    worker.start()
    try:
        while worker.is_alive():
            worker.join(HEARTBEAT_S)
            if worker.is_alive():
                yield heartbeat
    finally:
        if worker.is_alive():
            logger.info("request abandoned by its client: stopping its work")
        stop.set()
        worker.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


# -- downloads ------------------------------------------------------------------------------------
_DOWNLOADS: collections.deque[Path] = collections.deque()
KEPT_DOWNLOADS = 64


def download_folder(prefix: str) -> Path:
    """A fresh temporary folder for one run's files; only the newest 64 are kept (a public app must not fill the disk)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    _DOWNLOADS.append(folder)
    while len(_DOWNLOADS) > KEPT_DOWNLOADS:
        shutil.rmtree(_DOWNLOADS.popleft(), ignore_errors=True)
    return folder
