"""Serving the app: request bodies, URLs and uploads bounded before parsing, Gradio's routes around its queue
closed and calls to unknown endpoints answered plainly, each lane's waiting limit, cancellable work (MCP tool calls
included), and the files the server keeps."""

from __future__ import annotations

import collections
import contextvars
import html
import json
import re
import shutil
import tempfile
import threading
import time
from pathlib import Path

import anyio
import gradio as gr

import gcs
from gcs.vllm_serve import read_messages, replaying

from .limits import LIMITS, quoted
from .logs import logger

# -- request bodies -------------------------------------------------------------------------------
MAX_BODY_BYTES = 2_000_000  # the largest legitimate request (a 1 MB upload, multipart) fits with room


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


# -- URLs ---------------------------------------------------------------------------------------------
MAX_URL_BYTES = 60_000  # a request's path and query string: Gradio rebuilds URLs with httpx, which stops at 65,536
MAX_HOST_BYTES = 1_000  # each header Gradio builds a URL from
URL_HEADERS = (b"host", b"x-forwarded-host", b"x-forwarded-proto", b"x-gradio-server")


class UrlLimit:
    """ASGI middleware: a request whose path and query are over ``MAX_URL_BYTES`` gets 414, one whose Host (or
    another header Gradio builds URLs from) is over ``MAX_HOST_BYTES`` gets 431, before any route sees it.
    Gradio rebuilds the request's URL with httpx (the page's origin, and the page's link in the load event's
    queue/join), which raises "URL too long" past 65,536 characters: an HTTP 500 with a traceback in the log for
    any link the HTTP server still reads (its own limit depends on the machine's parser)."""

    def __init__(self, app, max_url_bytes: int = MAX_URL_BYTES):
        self.app, self.max_url_bytes = app, max_url_bytes

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        target = len(scope.get("raw_path") or scope["path"].encode()) + 1 + len(scope.get("query_string") or b"")
        if target > self.max_url_bytes:
            return await json_answer(send, 414, {"error": f"the URL is over {self.max_url_bytes:,} bytes"})
        if any(name in URL_HEADERS and len(value) > MAX_HOST_BYTES for name, value in scope.get("headers") or ()):
            return await json_answer(send, 431, {"error": f"a Host or forwarding header is over {MAX_HOST_BYTES:,} "
                                                          "bytes"})
        await self.app(scope, receive, send)


class KnownCalls:
    """ASGI middleware: ``POST /gradio_api/call/<name>`` naming no endpoint gets 404 and one sentence. Gradio answers
    it with HTTP 500 and a 4 KB traceback in the log, for every request (a flood of them fills a disk)."""

    CALL = re.compile(r"/gradio_api/call/([^/]*)/?$")

    def __init__(self, app, demo: gr.Blocks):
        self.app, self.demo = app, demo

    async def __call__(self, scope, receive, send):
        found = self.CALL.search(scope["path"]) if scope["type"] == "http" and scope.get("method") == "POST" else None
        if found is None or found[1] in {function.api_name for function in self.demo.fns.values()}:
            return await self.app(scope, receive, send)
        await json_answer(send, 404, {"detail": f"this server has no endpoint {quoted(found[1])}: see "
                                                "/gradio_api/info"})


# -- uploads ---------------------------------------------------------------------------------------------
FILE_AGE_S, CLEANUP_EVERY_S = 3600, 600  # Gradio's temporary files (uploads, downloads) go after an hour
UPLOAD_WINDOW_S = FILE_AGE_S + CLEANUP_EVERY_S  # the longest an uploaded file stays on disk


class UploadQuota:
    """ASGI middleware: an upload (any multipart body: Gradio writes each to its temporary folder) is counted on
    arrival, and refused when its client already sent ``LIMITS["uploads per client"]`` files or
    ``LIMITS["upload bytes per client"]`` bytes within ``UPLOAD_WINDOW_S`` (HTTP 429), or when every client together
    did (``"uploads in total"``, ``"upload bytes in total"``: HTTP 503). Files live that long, so the disk they take
    is bounded, however many clients or requests. The client is the connection's address as uvicorn reports it
    (behind a proxy, set FORWARDED_ALLOW_IPS so that it reads X-Forwarded-For). Runs after ``BodyLimit``."""

    def __init__(self, app, clock=time.monotonic):
        self.app, self.clock = app, clock
        self.accepted: collections.deque[tuple[float, str, int]] = collections.deque()  # (when, client, bytes)

    async def __call__(self, scope, receive, send):
        content_type = dict(scope.get("headers") or []).get(b"content-type", b"")
        if scope["type"] != "http" or scope.get("method") != "POST" or not content_type.startswith(b"multipart/"):
            return await self.app(scope, receive, send)
        messages = await read_messages(receive, MAX_BODY_BYTES) or []
        size = sum(len(message.get("body", b"")) for message in messages)
        client = (scope.get("client") or ("unknown",))[0]
        refusal = self.refusal(client, size)  # no await between the check and the count: a burst cannot slip in
        if refusal is not None:
            logger.info("refused an upload from %s: %s", ascii(client)[:60], refusal[1])
            return await json_answer(send, refusal[0], {"error": refusal[1]})
        await self.app(scope, replaying(messages, receive), send)

    def refusal(self, client: str, size: int) -> tuple[int, str] | None:
        """(status, message) when this upload would pass a bound, else None (and it is counted)."""
        now = self.clock()
        while self.accepted and self.accepted[0][0] < now - UPLOAD_WINDOW_S:
            self.accepted.popleft()
        mine = [bytes_ for _, sender, bytes_ in self.accepted if sender == client]
        minutes = UPLOAD_WINDOW_S // 60
        for name, used, status in (("uploads per client", len(mine) + 1, 429),
                                   ("upload bytes per client", sum(mine) + size, 429),
                                   ("uploads in total", len(self.accepted) + 1, 503),
                                   ("upload bytes in total", sum(b for *_, b in self.accepted) + size, 503)):
            if used > LIMITS[name].high:
                who = "this client's" if status == 429 else "the server's"
                return status, (f"{who} uploads are at their limit ({name}: {int(LIMITS[name].high):,} within "
                                f"{minutes} minutes); try again later")
        self.accepted.append((now, client, size))
        return None


# -- sessions -----------------------------------------------------------------------------------------
# Gradio keeps every session's state (a copy of each component's config: about 0.3 MB for this app) until it holds
# state_session_capacity sessions, 10,000 by default: 3 GB after as many visits or API clients (an MCP tool call
# is one). The oldest go first; a session in use is never the oldest for long.
SESSIONS_KEPT = 1_000


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
    stop, outcome = threading.Event(), {}

    def target():
        try:
            outcome["result"] = work(stop)
        except BaseException as error:  # re-raised in the handler's thread
            outcome["error"] = error

    context = contextvars.copy_context()  # Gradio's progress tracking (track_tqdm) follows the request's context
    worker = threading.Thread(target=context.run, args=(target,), daemon=True, name="gcs-cancellable")
    worker.start()
    logger.info("work started (it stops if its client leaves)")  # the line an "abandoned" one answers
    abandoned = False
    try:
        yield beat()
        while worker.is_alive():
            worker.join(HEARTBEAT_S)
            if worker.is_alive():
                yield beat()
    except GeneratorExit:
        abandoned = True
        logger.info("request abandoned by its client: stopping its work")
        raise
    finally:
        stop.set()
        worker.join()
        if abandoned:
            error = outcome.get("error")
            logger.info("abandoned request: its work %s", "stopped before its end" if isinstance(error, gcs.Cancelled)
                        else "had already finished" if "result" in outcome else f"failed ({type(error).__name__})")
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
