"""Serving the app: request bodies bounded before parsing, Gradio's routes around its queue closed, each lane's
waiting limit, cancellable work, and the downloads the server keeps."""

from __future__ import annotations

import collections
import contextvars
import json
import re
import shutil
import tempfile
import threading
from pathlib import Path

import gradio as gr

import gcs

from .logs import logger


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
# guard_queue wraps a private Gradio API (Queue.push, Queue.event_queue_per_concurrency_id[lane].queue): tested
# against these versions (tests/test_serving.py checks the API's shape; requirements.txt pins the same range).
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
    if not gradio_tested():
        logger.warning("gradio %s is untested here: the queue's guards wrap its Queue.push", gr.__version__)
    queue = demo._queue
    push, arriving = queue.push, collections.Counter()

    async def guarded_push(body, request, username):
        function = demo.fns.get(body.fn_index) if body.fn_index is not None else None
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


HEARTBEAT_S = 0.5


def run_cancellable(work, heartbeat=None):
    """Run ``work(stop)`` in a thread, yielding ``heartbeat`` at once (the work is under way) and then every half
    second; returns its result.

    In a Gradio handler, ``result = yield from run_cancellable(...)`` makes a long job stoppable: when the
    client goes away Gradio closes the generator, which sets ``stop``; ``work`` passes it on
    (``gcs.sweep(stop=...)``) and the model is free again after the current token. The log then says whether
    the work stopped before its end (``gcs.Cancelled``) or had already finished.
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
    abandoned = False
    try:
        yield heartbeat
        while worker.is_alive():
            worker.join(HEARTBEAT_S)
            if worker.is_alive():
                yield heartbeat
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
