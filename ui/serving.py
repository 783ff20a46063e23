"""Serving the app's requests: each lane's waiting limit, input errors said plainly, cancellable work (MCP tool calls
included), and the files the server keeps. The HTTP limits applied before Gradio parses a request are in
``ui.http_limits``."""

from __future__ import annotations

import collections
import html
import re
import shutil
import tempfile
import threading
from pathlib import Path

import anyio
import gradio as gr

import gcs
from gcs.background import Background

from .limits import quoted
from .logs import logger

# -- capacity and cancellation --------------------------------------------------------------------
# Private Gradio APIs wrapped here, and only here (tests/test_serving.py checks their shape; requirements.txt pins
# the same range): Queue.push and Queue.event_queue_per_concurrency_id[lane].queue (guard_queue),
# Blocks.preprocess_data (quiet_input_errors), GradioMCPServer's _get_or_create_client and _execute_tool_*
# (stop_abandoned_mcp_calls). Outside the range, or where one is missing, a WARNING names what is lost.
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


def stop_abandoned_mcp_calls() -> bool:
    """Make an MCP tool call stop when its client leaves, as an HTTP call does; whether that holds here.

    Gradio runs each queued tool call as a job of one shared loopback ``gradio_client`` and waits for its result
    in a thread that nothing cancels: a client that disconnects (or cancels the call) leaves the job running to
    its end, holding the model lane. Wrapped (``GradioMCPServer``, private): each call gets a loopback client of
    its own (a session of its own, since Gradio's cancel route stops every running job of a session and
    endpoint), the wait can be cancelled, and a cancelled wait cancels its job; Gradio then closes the handler's
    generator, ``run_cancellable`` sets ``stop`` and the log says "abandoned" as for HTTP."""
    try:
        from gradio.mcp import GradioMCPServer
    except ImportError:  # no mcp package: no tools to stop
        return False
    parts = ("_get_or_create_client", "_execute_tool_without_progress", "_execute_tool_with_progress")
    if not gradio_tested() or not all(hasattr(GradioMCPServer, part) for part in parts):
        logger.warning("gradio %s: an MCP tool call runs to its end when its client leaves (GradioMCPServer.%s "
                       "changed)", gr.__version__, ", ".join(parts))
        return False
    if getattr(GradioMCPServer, "stops_abandoned_calls", False):
        return True
    shared_client, with_progress, creating = GradioMCPServer._get_or_create_client, \
        GradioMCPServer._execute_tool_with_progress, threading.Lock()

    def own_client(self):
        with creating:  # Gradio keeps the client it builds in _client_instance: build a fresh one per call
            self._client_instance = None
            client = shared_client(self)
            self._client_instance = None
        submit = client.submit

        def submit_once(*args, **kwargs):
            job = submit(*args, **kwargs)
            job.add_done_callback(lambda _: client.close())  # its session ends with its one job
            return job

        client.submit = submit_once
        return client

    async def without_progress(self, job):
        return [await cancelled_with_caller(job, anyio.to_thread.run_sync(job.result, abandon_on_cancel=True))]

    async def progressing(self, job, progress_token):
        return await cancelled_with_caller(job, with_progress(self, job, progress_token))

    GradioMCPServer._get_or_create_client = own_client
    GradioMCPServer._execute_tool_without_progress = without_progress
    GradioMCPServer._execute_tool_with_progress = progressing
    GradioMCPServer.stops_abandoned_calls = True
    return True


async def cancelled_with_caller(job, waiting):
    """Await ``waiting`` (a loopback job's result); if the wait is cancelled (the MCP client left), cancel the job."""
    try:
        return await waiting
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(job.cancel)
        raise


HEARTBEAT_S = 0.5


def run_cancellable(work, heartbeat=None):
    """Run ``work(stop)`` in a thread, yielding ``heartbeat`` at once (the work is under way) and then every half
    second; returns its result. ``heartbeat`` may be a function: each beat is then what it returns (the
    work's progress so far).

    In a Gradio handler, ``result = yield from run_cancellable(...)`` makes a long job stoppable: when the
    client goes away Gradio notices at the next beat and closes the generator, which sets ``stop``; ``work``
    passes it on (``gcs.sweep(stop=...)``) and the model is free again after the current token (or prefill
    chunk). The beats matter: Gradio looks for a gone client only when a handler yields, and a handler that
    yields per token holds the lane through a long prefill. The log then says whether the work stopped before
    its end (``gcs.Cancelled``) or had already finished.
    """
    beat = heartbeat if callable(heartbeat) else lambda: heartbeat
    job = Background(work, "gcs-cancellable")
    logger.info("work started (it stops if its client leaves)")  # the line an "abandoned" one answers
    abandoned = False
    try:
        yield beat()
        while not job.wait(HEARTBEAT_S):
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
