"""The app's HTTP limits, applied before Gradio parses anything: request bodies, URLs and uploads bounded, Gradio's
routes around its queue closed, calls to unknown endpoints answered plainly, and how many sessions are kept."""

from __future__ import annotations

import collections
import json
import re
import time

import gradio as gr

from gcs.asgi import read_messages, replaying

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
