"""Serving the app's requests: each lane's waiting limit and where a new run stands in it, input errors said plainly,
cancellable work, and the files the server keeps. The HTTP limits applied before Gradio parses a request are in
``ui.server.http_limits``, the guard in front of every route in ``ui.server.http_guard``, the MCP tools' adapters in
``ui.server.mcp_calls``."""

from __future__ import annotations

import collections
import html
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import gradio as gr

import gcs
from gcs.runtime.background import Background
from ui.server import internals
from ui.shared.limits import quoted
from ui.shared.logs import logger

# -- capacity and cancellation --------------------------------------------------------------------
# Every private API of Gradio and the mcp package the app relies on (the queue's internals and Blocks.preprocess_data
# here, the MCP server's in ui.server.mcp_calls, the launch check in ui.server.startup) is read and wrapped in
# ui.server.internals, and only there (its docstring's table: what each gives, what is lost without it;
# tests/test_serving.py and tests/test_http_guard.py check their shape; requirements.txt pins the same range). Outside
# the range, or where one is missing, a WARNING names what is lost.
TESTED_GRADIO, gradio_tested = internals.TESTED_GRADIO, internals.gradio_tested  # (read here by callers and tests)


def guard_queue(demo: gr.Blocks, waiting_limits: dict[str, int]) -> None:
    """Bound how many requests may *wait* in each lane (``concurrency_id``), each lane on its own, and refuse a
    request with too few values before it is queued; call it after ``demo.queue(max_size=None)``.

    Gradio's ``queue(max_size=...)`` counts every waiting request of every lane, so a full model lane would
    refuse the coupling explorer too. Instead ``Queue.push`` is wrapped (``ui.server.internals.guard_queue_push``): a
    request of a guarded lane is counted from the moment it arrives (before Gradio's awaits, so a burst cannot slip in
    between a check and its admission) and refused with HTTP 503 when its lane already holds its limit. The browser then
    says "This application is currently busy", gradio_client raises "Queue is full", a raw call reads the message below.
    A raw call with too few values gets HTTP 400 and one sentence (Gradio would queue it, then fail listing
    every value it was sent).
    """
    if not internals.guard_queue_push(demo, waiting_limits, _refused_call):
        # Gradio's own bound instead: every lane's waiting requests counted together (a full model lane then
        # refuses the coupling explorer too), and no early refusal of calls with too few values
        demo.queue(max_size=sum(waiting_limits.values()), default_concurrency_limit=1)


# How often the queue looks for a run to start, and for progress to send: a run starts within 10 ms of its request
# (or of the run ahead of it ending), and the server's event loop no longer wakes a thousand times a second.
QUEUE_POLL_S, PROGRESS_POLL_S = 0.01, 0.05


def calm_queue(demo: gr.Blocks) -> None:
    """Let Gradio's queue look for work every ``QUEUE_POLL_S`` and for progress every ``PROGRESS_POLL_S``, not every
    1 and 10 ms; call it after ``demo.queue()``. Its event loop polled a thousand times a second whether anything
    waited or not: 0.05 of a core, idle, taken from the two cores a Space generates on (and two OpenMP threads wait
    for each other whenever either loses its core: docs/benchmarks.md). ``Queue.sleep_when_free`` is private
    (``ui.server.internals.slow_queue_polls``): where it changed, Gradio's polls stay, with a WARNING."""
    internals.slow_queue_polls(demo, QUEUE_POLL_S, PROGRESS_POLL_S)


def _refused_call(body, function) -> tuple[str, str] | None:
    """(message, kind) for a queued call refused before it is queued: an event this server lacks, or too few values
    for ``function`` (the event it names); None otherwise."""
    if body.fn_index is not None and function is None:  # Gradio: HTTP 500 and a traceback, for every request
        return f"this server has no event {quoted(body.fn_index)}: see /gradio_api/info", "error"
    sent = len(body.data) if isinstance(body.data, list) else 0
    if function is not None and sent < len(function.inputs):
        logger.info("refused a call to %s with %d of its %d values", function.api_name or "an event", sent,
                    len(function.inputs))
        return (f'this endpoint takes {len(function.inputs)} values in "data" (see /gradio_api/info), '
                f"got {sent}"), "error"
    return None


def stream_lookup(demo: gr.Blocks):
    """A function saying whether Gradio holds what an event stream asks for: ``held(session_hash=S)`` for ``GET
    /gradio_api/queue/data``, ``held(event_id=E)`` for ``GET /gradio_api/call/<name>/<E>`` (the event's session found
    as Gradio finds it). Gradio answers a stream it does not hold with 200, then raises inside it (a dropped
    connection and a traceback). Reads the queue's ``pending_messages_per_session``, ``event_ids_to_events`` and
    ``pending_event_ids_session`` (private: ``ui.server.internals.held_streams``); where they changed, None and a
    WARNING."""
    return internals.held_streams(demo)


def lane_standing(demo: gr.Blocks):
    """A function ``standing(lane)``: (runs ahead of a request joining ``lane`` now, running or waiting; seconds until
    its own run would start, or None before the lane's first run ends), estimated as Gradio estimates the places it
    sends a queued client (which a page with its progress display hidden never shows). Reads the queue's
    ``event_queue_per_concurrency_id`` and ``process_time_per_fn`` (private: ``ui.server.internals.lane_reader``); where
    they changed, None and a WARNING (the page then says only "Working…")."""
    read = internals.lane_reader(demo)
    if read is None:
        return None

    def standing(lane: str) -> tuple[int, float | None]:
        line = read(lane)
        if line is None:
            return 0, None
        ahead = line.running + line.waiting
        if not line.past:
            return ahead, None
        typical = sum(t * n for t, n in line.past) / sum(n for _, n in line.past)
        now = time.time()
        running = [max(0.0, start + typical - now) for start in line.starts]
        return ahead, (sum(running) + line.waiting * typical) / max(1, line.limit or 1)

    return standing


_CHOICES_ERROR = re.compile(r"Value: (.*?) (?:\(type: [^)]*\) )?is not in the list of choices: (.*)", re.DOTALL)


def input_error_text(error: Exception) -> str:
    """What a caller is told about a value Gradio's components refused: Gradio's sentence, quoting at most ~100
    characters of the value (Gradio quotes it whole, and every choice)."""
    found = _CHOICES_ERROR.fullmatch(str(getattr(error, "message", error)))
    if found:
        return f"the value {quoted(found[1])} is not one of this input's choices ({quoted(found[2])})"
    return f"an input could not be read ({type(error).__name__}: {quoted(str(getattr(error, 'message', error)))})"


def quiet_input_errors(demo: gr.Blocks) -> None:
    """A value that Gradio's components refuse before any handler runs (a dropdown value outside its choices, a
    malformed file) is the caller's mistake, not a fault: Gradio prints a 1.8 KB traceback for each and quotes the
    whole value back. ``Blocks.preprocess_data`` (private: ``ui.server.internals.wrap_preprocess_data``) is wrapped: the
    caller gets one sentence quoting at most ~100 characters, the log one line."""
    internals.wrap_preprocess_data(demo, _refused_input)


def _refused_input(error: Exception) -> gr.Error:
    """What a refused input raises: one sentence (``input_error_text``), no traceback; the log gets one line."""
    message = input_error_text(error)
    logger.info("refused: %s", message)
    return gr.Error(html.escape(message, quote=False), print_exception=False)


HEARTBEAT_S = 0.5
# A beat that says nothing new is sent only this often: Gradio looks for a gone client when a handler yields, and each
# message it sends costs the visitor's browser (it pushes every loading status it holds to its component: about 0.05
# of a core while round 2 of a side by side generates, on the cores that generate where the browser runs beside it).
QUIET_BEAT_S = 2.0


def run_cancellable(work, heartbeat=None, wake: threading.Event | None = None):
    """Run ``work(stop)`` in a thread, yielding ``heartbeat`` at once (the work is under way) and then every half
    second while it has news, every 2 s while it repeats the last one sent; returns the work's result. ``heartbeat``
    may be a function: each beat is then what it returns (the work's progress so far). ``wake``: an event the work
    sets when it has something to show (a round landed): the next beat comes then, not up to half a second later (it
    is also set when the work ends, whatever the work does).

    In a Gradio handler, ``result = yield from run_cancellable(...)`` makes a long job stoppable: when the
    client goes away Gradio notices at the next beat and closes the generator, which sets ``stop``; ``work``
    passes it on (``gcs.sweep(stop=...)``) and the model is free again after the current token (or prefill
    chunk). The beats matter: Gradio looks for a gone client only when a handler yields, and a handler that
    yields per token holds the lane through a long prefill. The log then says whether the work stopped before
    its end (``gcs.Cancelled``) or had already finished.
    """
    beat = heartbeat if callable(heartbeat) else lambda: heartbeat
    job = Background(work if wake is None else _waking(work, wake), "gcs-cancellable")
    logger.info("work started (it stops if its client leaves)")  # the line an "abandoned" one answers
    abandoned = False
    try:
        sent = beat()
        yield sent
        sent_at = time.monotonic()
        while not _next_beat(job, wake):
            update = beat()
            if not _same(update, sent) or time.monotonic() - sent_at >= QUIET_BEAT_S:
                yield update
                sent, sent_at = update, time.monotonic()
    except GeneratorExit:
        abandoned = True
        logger.info("request abandoned by its client: stopping its work")
        raise
    finally:
        job.stop.set()
        job.wait()
        if abandoned:
            logger.info("abandoned request: its work %s",
                        "stopped before its end" if isinstance(job.error, gcs.Cancelled) else "had already finished"
                        if job.finished else f"failed ({type(job.error).__name__})")
    return job.result()


def _same(update, sent) -> bool:
    """Whether a beat repeats the last one sent (a value whose ``==`` is not one truth value counts as news)."""
    try:
        return bool(update == sent)
    except (TypeError, ValueError):
        return False


def _waking(work, wake: threading.Event):
    """``work`` that sets ``wake`` when it ends (returns or raises): the last beat need not wait for the interval."""
    def work_then_wake(stop):
        try:
            return work(stop)
        finally:
            wake.set()
    return work_then_wake


def _next_beat(job: Background, wake: threading.Event | None) -> bool:
    """Waits for the next beat (half a second, or until ``wake``); whether the work has ended."""
    if wake is None:
        return job.wait(HEARTBEAT_S)
    wake.wait(HEARTBEAT_S)
    wake.clear()
    return job.wait(0)


# -- downloads ------------------------------------------------------------------------------------
_DOWNLOADS: collections.deque[Path] = collections.deque()
KEPT_DOWNLOADS = 64


def download_folder(prefix: str) -> Path:
    """A fresh temporary folder for one run's files; only the newest 64 are kept (a public app must not fill the
    disk)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    _DOWNLOADS.append(folder)
    while len(_DOWNLOADS) > KEPT_DOWNLOADS:
        shutil.rmtree(_DOWNLOADS.popleft(), ignore_errors=True)
    return folder
