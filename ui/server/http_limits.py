"""The app's HTTP limits, applied before Gradio parses anything: request bodies, URLs and uploads bounded, Gradio's
routes around its queue closed, calls to unknown endpoints answered plainly, which proxies' forwarded client
addresses are believed, and how many sessions are kept. The guard against 500s and tracebacks is
``ui.server.http_guard``."""

from __future__ import annotations

import collections
import json
import os
import re
import time

import gradio as gr

from gcs.environment import env_networks
from gcs.runtime.asgi import read_body, read_messages, replaying
from ui.shared.limits import LIMITS, quoted
from ui.shared.logs import logger

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
        messages = await read_body(scope, receive, self.max_bytes)
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
    example loader), with values the page could send (``unqueued_refusal``: 400 otherwise). Runs after
    ``BodyLimit``, so the body it reads is bounded."""

    UNQUEUED = re.compile(r"/gradio_api/(run|api)/")

    def __init__(self, app, demo: gr.Blocks):
        self.app, self.demo = app, demo

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST" or not self.UNQUEUED.search(scope["path"]):
            return await self.app(scope, receive, send)
        messages = await read_messages(receive, MAX_BODY_BYTES) or []
        call = self._declared_unqueued(scope["path"], b"".join(m.get("body", b"") for m in messages))
        if call is None:
            return await json_answer(send, 404, {"detail": "this server runs every call through its queue: POST "
                                                           "/gradio_api/call/<name> (or use gradio_client)"})
        refusal = unqueued_refusal(*call)
        if refusal is not None:
            return await json_answer(send, 400, {"detail": refusal})
        await self.app(scope, replaying(messages, receive), send)

    def _declared_unqueued(self, path: str, body: bytes) -> tuple | None:
        """The event a ``run/predict`` call names and the values it sends, where the app declared that event
        unqueued and it runs on the server; None otherwise (an event that runs only in the page has nothing to run
        here: Gradio answers HTTP 500 and a traceback)."""
        if not path.rstrip("/").endswith("/run/predict"):
            return None
        try:
            call = json.loads(body)
            index, values = call.get("fn_index"), call.get("data")
        except (ValueError, AttributeError, RecursionError):
            return None
        function = self.demo.fns.get(index) if isinstance(index, int) and not isinstance(index, bool) else None
        return (function, values) if function is not None and function.fn is not None and not function.queue \
            else None


def unqueued_refusal(function, values) -> str | None:
    """Why the page would never send ``values`` to the unqueued event ``function``, or None: too few values, or an
    example index outside the examples. Gradio's direct route answers every failure with HTTP 500, and its example
    loader fails on an index it cannot look up (``null``: a TypeError and a traceback in the log)."""
    sent = values if isinstance(values, list) else []
    if len(sent) < len(function.inputs):
        return f"this event takes {len(function.inputs)} values in \"data\", got {len(sent)}"
    for component, value in zip(function.inputs, sent, strict=False):  # extra values pass: only too few are refused
        examples = len(component.samples) if isinstance(component, gr.Dataset) else None
        if examples is not None and not (isinstance(value, int) and not isinstance(value, bool)
                                         and 0 <= value < examples):
            return f"an example is chosen by its index, a whole number from 0 to {examples - 1}, got {quoted(value)}"
    return None


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
    it with HTTP 500 and a 4 KB traceback in the log, for every request (a flood of them fills a disk). Gradio's
    keyword form, ``POST /gradio_api/call/v2/<name>`` with ``{"parameter": value, ...}``, gets the same 404 for an
    endpoint /gradio_api/info does not list, and 400 for a parameter the endpoint does not have or a value it
    lacks: Gradio answers each with HTTP 500 and a traceback. Runs after ``BodyLimit``, so the body it reads is
    bounded."""

    CALL = re.compile(r"/gradio_api/call/(v2/)?([^/]*)/?$")

    def __init__(self, app, demo: gr.Blocks):
        self.app, self.demo, self.documented = app, demo, None

    async def __call__(self, scope, receive, send):
        found = self.CALL.search(scope["path"]) if scope["type"] == "http" and scope.get("method") == "POST" else None
        if found is None:
            return await self.app(scope, receive, send)
        by_keyword, name = found[1] is not None, found[2]
        known = self.documented_parameters() if by_keyword else {fn.api_name for fn in self.demo.fns.values()}
        if name not in known:
            return await json_answer(send, 404, {"detail": f"this server has no endpoint {quoted(name)}: see "
                                                           "/gradio_api/info"})
        if not by_keyword:
            return await self.app(scope, receive, send)
        messages = await read_messages(receive, MAX_BODY_BYTES) or []
        refusal = keyword_refusal(known[name], b"".join(message.get("body", b"") for message in messages))
        if refusal is not None:
            return await json_answer(send, 400, {"detail": refusal})
        await self.app(scope, replaying(messages, receive), send)

    def documented_parameters(self) -> dict[str, list[dict]]:
        """Each endpoint the keyword form reaches (those /gradio_api/info lists) and its parameters, read once."""
        if self.documented is None:
            self.documented = {endpoint.removeprefix("/"): info.get("parameters", []) for endpoint, info in
                               self.demo.get_api_info()["named_endpoints"].items()}
        return self.documented


def keyword_refusal(parameters: list[dict], body: bytes) -> str | None:
    """Why Gradio's keyword form would fail on ``body`` for an endpoint taking ``parameters`` (as /gradio_api/info
    lists them), or None. A body that is not a JSON object is left to Gradio (its 422); ``oauth_token`` is Gradio's
    own (it drops one that is not a parameter).

    >>> takes = [{"parameter_name": "p"}, {"parameter_name": "q", "parameter_has_default": True}]
    >>> keyword_refusal(takes, b'{"p": 1}'), keyword_refusal(takes, b'{"q": 1}')
    (None, 'this endpoint needs a value for p (see /gradio_api/info)')
    >>> keyword_refusal(takes, b'{"p": 1, "r": 2}'), keyword_refusal(takes, b'[1, 2]')
    ("this endpoint has no parameter 'r': it takes p, q", None)
    """
    try:
        arguments = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not isinstance(arguments, dict):
        return None
    names = [parameter.get("parameter_name") for parameter in parameters]
    unknown = next((key for key in arguments if key not in names and key != "oauth_token"), None)
    if unknown is not None:
        return f"this endpoint has no parameter {quoted(unknown)}: it takes {', '.join(map(str, names))}"
    missing = next((name or f"argument {index}"
                    for index, (name, parameter) in enumerate(zip(names, parameters, strict=True))
                    if not parameter.get("parameter_has_default") and name not in arguments), None)
    return None if missing is None else f"this endpoint needs a value for {missing} (see /gradio_api/info)"


# -- uploads ---------------------------------------------------------------------------------------------
FILE_AGE_S, CLEANUP_EVERY_S = 3600, 600  # Gradio's temporary files (uploads, downloads) go after an hour
UPLOAD_WINDOW_S = FILE_AGE_S + CLEANUP_EVERY_S  # the longest an uploaded file stays on disk


class UploadQuota:
    """ASGI middleware: an upload (any multipart body: Gradio writes each to its temporary folder) is refused when its
    client already sent ``LIMITS["uploads per client"]`` files or ``LIMITS["upload bytes per client"]`` bytes within
    ``UPLOAD_WINDOW_S`` (HTTP 429), or when every client together did (``"uploads in total"``, ``"upload bytes in
    total"``: HTTP 503). Files live that long, so the disk they take is bounded, however many clients or requests.
    Only uploads Gradio accepts count: one is counted on arrival (a burst cannot slip past the check) and uncounted
    when Gradio refuses it (a file over 1 MB: 413), so refusals never use up a client's quota. The client is the
    connection's address as uvicorn reports it: a forwarded one only from ``trusted_proxies``. Runs after
    ``BodyLimit``."""

    def __init__(self, app, clock=time.monotonic):
        self.app, self.clock = app, clock
        self.accepted: collections.deque[tuple[float, str, int]] = collections.deque()  # (when, client, bytes)

    async def __call__(self, scope, receive, send):
        # any Content-Type header naming multipart counts: with two, the upload route reads the first, a dict the last
        multipart = any(name == b"content-type" and value.lower().lstrip().startswith(b"multipart/")
                        for name, value in scope.get("headers") or ())
        if scope["type"] != "http" or scope.get("method") != "POST" or not multipart:
            return await self.app(scope, receive, send)
        messages = await read_messages(receive, MAX_BODY_BYTES) or []
        size = sum(len(message.get("body", b"")) for message in messages)
        client = (scope.get("client") or ("unknown",))[0]
        refusal = self.refusal(client, size)  # no await between the check and the count: a burst cannot slip in
        if refusal is not None:
            logger.info("refused an upload from %s: %s", ascii(client)[:60], refusal[1])
            return await json_answer(send, refusal[0], {"error": refusal[1]})
        counted, answered = self.accepted[-1], []

        async def noting_status(message):
            if message["type"] == "http.response.start":
                answered.append(message["status"])
            await send(message)

        try:
            await self.app(scope, replaying(messages, receive), noting_status)
        finally:
            if not (answered and 200 <= answered[0] < 300) and counted in self.accepted:
                self.accepted.remove(counted)  # Gradio refused it (or failed): no file was kept

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


def trusted_proxies(environ=os.environ) -> str:
    """Trust a forwarded client address (``X-Forwarded-For``) only from the proxies ``GCS_TRUSTED_PROXIES`` names
    (addresses or networks, comma-separated; none by default, so a client is its connection's address); returns
    the list uvicorn now trusts. uvicorn trusts 127.0.0.1 by default, so any local client could pass for another
    and take its upload quota, or dodge its own. Gradio passes uvicorn no such option: uvicorn reads
    FORWARDED_ALLOW_IPS when Gradio configures it at launch, set here from ``GCS_TRUSTED_PROXIES``."""
    trusted = ",".join(str(network) for network in env_networks("GCS_TRUSTED_PROXIES", environ))
    if environ.get("FORWARDED_ALLOW_IPS", trusted) != trusted:
        logger.warning("FORWARDED_ALLOW_IPS=%s is replaced by GCS_TRUSTED_PROXIES=%s (the app's one setting for "
                       "the proxies whose X-Forwarded-For it believes)", quoted(environ["FORWARDED_ALLOW_IPS"]),
                       quoted(trusted))
    environ["FORWARDED_ALLOW_IPS"] = trusted
    return trusted


# -- sessions -----------------------------------------------------------------------------------------
# Gradio keeps every session's state (a copy of each component's config: about 0.3 MB for this app) until it holds
# state_session_capacity sessions, 10,000 by default: 3 GB after as many visits or API clients (an MCP tool call
# is one). The oldest go first; a session in use is never the oldest for long.
SESSIONS_KEPT = 1_000
