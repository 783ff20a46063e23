"""Serving the app's requests: each lane's waiting limit and where a new run stands in it, input errors said plainly,
cancellable work, and the files the server keeps. The HTTP limits applied before Gradio parses a request are in
``ui.http_limits``, the guard in front of every route in ``ui.http_guard``, the MCP tools' adapters in
``ui.mcp_calls``."""

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
from gcs.background import Background

from .limits import quoted
from .logs import logger

# -- capacity and cancellation --------------------------------------------------------------------
# Private Gradio APIs wrapped here and in ui.mcp_calls and ui.startup, and only there (tests/test_serving.py and
# tests/test_http_guard.py check their shape; requirements.txt pins the same range): Queue.push and
# Queue.event_queue_per_concurrency_id[lane].queue (guard_queue), Blocks.preprocess_data (quiet_input_errors),
# GradioMCPServer's _get_or_create_client and _execute_tool_* (ui.mcp_calls.stop_abandoned_mcp_calls),
# Queue.pending_messages_per_session, event_ids_to_events and pending_event_ids_session (stream_lookup),
# Queue.process_time_per_fn (lane_standing), GradioMCPServer's _prepare_tool_call_args and create_mcp_server and the mcp
# package's Server._make_error_result (ui.mcp_calls.brief_mcp_errors). Outside the range, or where one is missing, a
# WARNING names what is lost.
TESTED_GRADIO = ((6, 0), (7, 0))


def gradio_tested(version: str = gr.__version__) -> bool:
    """Whether ``version`` is in the range ``guard_queue`` was tested on.

    >>> gradio_tested("6.31.0"), gradio_tested("7.0.0"), gradio_tested("5.49.1")
    (True, False, False)
    """
    major_minor = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    return TESTED_GRADIO[0] <= major_minor < TESTED_GRADIO[1]


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
    queue = getattr(demo, "_queue", None)
    if not gradio_tested() or not all(hasattr(queue, part) for part in ("push", "event_queue_per_concurrency_id")):
        # Gradio's own bound instead: every lane's waiting requests counted together (a full model lane then
        # refuses the coupling explorer too), and no early refusal of calls with too few values
        demo.queue(max_size=sum(waiting_limits.values()), default_concurrency_limit=1)
        logger.warning("gradio %s: the queue's per-lane waiting limits are off (Queue.push or "
                       "Queue.event_queue_per_concurrency_id changed): Gradio's max_size=%d bounds every lane together",
                       gr.__version__, sum(waiting_limits.values()))
        return
    push, arriving = queue.push, collections.Counter()

    async def guarded_push(body, request, username):
        function = demo.fns.get(body.fn_index) if body.fn_index is not None else None
        if body.fn_index is not None and function is None:  # Gradio: HTTP 500 and a traceback, for every request
            return False, f"this server has no event {quoted(body.fn_index)}: see /gradio_api/info", "error"
        sent = len(body.data) if isinstance(body.data, list) else 0
        if function is not None and sent < len(function.inputs):
            logger.info("refused a call to %s with %d of its %d values", function.api_name or "an event", sent,
                        len(function.inputs))
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


def stream_lookup(demo: gr.Blocks):
    """A function saying whether Gradio holds what an event stream asks for: ``held(session_hash=S)`` for ``GET
    /gradio_api/queue/data``, ``held(event_id=E)`` for ``GET /gradio_api/call/<name>/<E>`` (the event's session found
    as Gradio finds it). Gradio answers a stream it does not hold with 200, then raises inside it (a dropped
    connection and a traceback). Reads the queue's ``pending_messages_per_session``, ``event_ids_to_events`` and
    ``pending_event_ids_session`` (private); where they changed, None and a WARNING."""
    parts = ("pending_messages_per_session", "event_ids_to_events", "pending_event_ids_session")
    if not gradio_tested() or not all(hasattr(getattr(demo, "_queue", None), part) for part in parts):
        logger.warning("gradio %s: an event stream for an unknown session or event is answered by Gradio (a 200 "
                       "stream holding an error, ended by ui.http_guard.LastResort: Queue.%s changed)", gr.__version__,
                       ", ".join(parts))
        return None

    def held(session_hash: str | None = None, event_id: str | None = None) -> bool:
        queue = demo._queue  # read each time: demo.queue() may replace it
        if event_id is not None:  # as Gradio's route: a running event, then a finished one not yet read, then itself
            event = queue.event_ids_to_events.get(event_id)
            session_hash = event.session_hash if event is not None else next(
                (session for session, ids in queue.pending_event_ids_session.items() if event_id in ids), event_id)
        return session_hash in queue.pending_messages_per_session

    return held


def lane_standing(demo: gr.Blocks):
    """A function ``standing(lane)``: (runs ahead of a request joining ``lane`` now, running or waiting; seconds until
    its own run would start, or None before the lane's first run ends), estimated as Gradio estimates the places it
    sends a queued client (which a page with its progress display hidden never shows). Reads the queue's
    ``event_queue_per_concurrency_id`` and ``process_time_per_fn`` (private); where they changed, None and a
    WARNING (the page then says only "Working…")."""
    parts = ("event_queue_per_concurrency_id", "process_time_per_fn")
    if not gradio_tested() or not all(hasattr(getattr(demo, "_queue", None), part) for part in parts):
        logger.warning("gradio %s: a request waiting for the model is not told its place in the queue (Queue.%s "
                       "changed)", gr.__version__, ", ".join(parts))
        return None

    def standing(lane: str) -> tuple[int, float | None]:
        queue = demo._queue
        line = queue.event_queue_per_concurrency_id.get(lane)
        if line is None:
            return 0, None
        past = [(t.avg_time, t.count) for fn, t in list(queue.process_time_per_fn.items())
                if getattr(fn, "concurrency_id", None) == lane and t.count]
        ahead = line.current_concurrency + len(line.queue)
        if not past:
            return ahead, None
        typical = sum(t * n for t, n in past) / sum(n for _, n in past)
        now = time.time()
        running = [max(0.0, start + typical - now) for starts in list(line.start_times_per_fn.values())
                   for start in list(starts)]
        return ahead, (sum(running) + len(line.queue) * typical) / max(1, line.concurrency_limit or 1)

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
    whole value back. ``Blocks.preprocess_data`` (private) is wrapped: the caller gets one sentence quoting at most
    ~100 characters, the log one line."""
    preprocess = getattr(demo, "preprocess_data", None)
    if preprocess is None or not gradio_tested():
        logger.warning("gradio %s: a value its components refuse (a dropdown value outside its choices) is logged "
                       "with a traceback and quoted whole (Blocks.preprocess_data changed)", gr.__version__)
        return

    async def preprocess_briefly(block_fn, inputs, state, explicit_call=False):
        try:
            return await preprocess(block_fn, inputs, state, explicit_call)
        except Exception as error:  # noqa: BLE001 - nothing has run yet: whatever failed, the inputs were refused
            message = input_error_text(error)
            logger.info("refused: %s", message)
            raise gr.Error(html.escape(message, quote=False), print_exception=False) from None

    demo.preprocess_data = preprocess_briefly


HEARTBEAT_S = 0.5


def run_cancellable(work, heartbeat=None, wake: threading.Event | None = None):
    """Run ``work(stop)`` in a thread, yielding ``heartbeat`` at once (the work is under way) and then every half
    second; returns its result. ``heartbeat`` may be a function: each beat is then what it returns (the
    work's progress so far). ``wake``: an event the work sets when it has something to show (a round landed): the
    next beat comes then, not up to half a second later (it is also set when the work ends, whatever the work does).

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
        yield beat()
        while not _next_beat(job, wake):
            yield beat()
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
