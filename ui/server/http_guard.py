"""The guard in front of every route, the app's and Gradio's: whatever a client sends, no answer is an HTTP 500 caused
by its input, no connection is dropped mid-answer, and no request writes a traceback in the log. A bad request gets a
4xx and one short sentence, before Gradio sees it: JSON numbers JSON does not have (``StrictJson``), event streams
for sessions or events the server does not hold (``KnownStreams``), request fields of the wrong shape
(``brief_validation_error``: FastAPI's 422, without the input it quoted whole). Whatever still escapes the app is
caught last (``LastResort``). The size limits (bodies, URLs, uploads) are in ``ui.server.http_limits``."""

from __future__ import annotations

import collections
import re

import gradio as gr
from fastapi.exceptions import RequestValidationError
from starlette.datastructures import QueryParams
from starlette.requests import ClientDisconnect
from starlette.responses import JSONResponse

from gcs.runtime.asgi import read_messages, replaying
from gcs.runtime.strict_json import NonFiniteNumber, finite_loads, json_nesting
from ui.server.http_limits import MAX_BODY_BYTES, json_answer
from ui.server.serving import stream_lookup
from ui.shared.limits import quoted
from ui.shared.logs import logger


class LastResort:
    """ASGI middleware, the app's outermost: an exception that escapes the app for one request ends that request
    plainly, instead of reaching uvicorn (which drops the connection mid-answer and logs "Exception in ASGI
    application" with a 4 KB traceback, for every request). Before the answer started: HTTP 500 and one sentence (the
    guards before it refuse bad input with a 4xx, so what reaches here is a fault of the server, said as such); after
    it started: the answer is ended where it stands. The log gets each kind of fault's first traceback, then one
    line per repeat: a flood of one broken request cannot fill a disk or bury the first report."""

    def __init__(self, app):
        self.app = app
        self.faults: collections.Counter[str] = collections.Counter()  # by exception type: few, whatever the input

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        sent = {"started": False, "ended": False}

        async def watched(message):
            if message["type"] == "http.response.start":
                sent["started"] = True
            elif message["type"] == "http.response.body":
                sent["ended"] = not message.get("more_body", False)
            await send(message)

        try:
            await self.app(scope, receive, watched)
        except ClientDisconnect:  # the client left mid-request: nothing to answer, and nothing failed here
            return
        except Exception as error:  # noqa: BLE001 - the last place a request's failure can be answered
            self._log(scope, error)
            try:
                if not sent["started"]:
                    await json_answer(send, 500, {"detail": f"the server could not answer this request "
                                                            f"({type(error).__name__}); the fault is logged"})
                elif not sent["ended"]:
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            except Exception:  # noqa: BLE001 - the client has gone: nothing is left to answer
                pass

    def _log(self, scope, error: Exception) -> None:
        kind = f"{type(error).__module__}.{type(error).__qualname__}"
        self.faults[kind] += 1
        where = f"{scope.get('method')} {quoted(scope.get('path', ''), 80)}"
        if self.faults[kind] == 1:
            logger.error("a request failed past every guard (%s): %s", where, str(error)[:300], exc_info=error)
        else:
            logger.warning("a request failed past every guard (%s): %s: %s (%d times so far; traceback above, once)",
                           where, kind, str(error)[:200], self.faults[kind])


# -- non-finite numbers and deep nesting -------------------------------------------------------------------------------
# What a non-finite JSON number needs to be written: a constant, a three-digit exponent or over 308 digits in a row.
_SUSPECT = re.compile(rb"NaN|Infinity|[eE][+-]?\d{3}|\d{309}")


def non_finite_number(body: bytes) -> str | None:
    """The first NaN, Infinity or number past a double's range in ``body`` read as JSON (quoted briefly); None when
    it holds none, or is not JSON at all (the route says what is wrong with it then).

    >>> non_finite_number(b'{"data": [1, NaN]}'), non_finite_number(b'[-1e400]'), non_finite_number(b'[1e308, 2]')
    ("'NaN'", "'-1e400'", None)
    >>> non_finite_number(b'{"data": Infinity'), non_finite_number(b'not JSON'), non_finite_number(b'[' * 10**6)
    ("'Infinity'", None, None)
    """
    if not _SUSPECT.search(body):  # most bodies: one scan in C, no second parse beside the route's own
        return None
    try:
        finite_loads(body)
    except NonFiniteNumber as found:
        return quoted(str(found))
    except (ValueError, RecursionError):  # not JSON, or nested past Python's stack: the route's own parser says so
        return None
    return None


MAX_JSON_NESTING = 64  # levels: a Gradio call with a file's data, or an MCP tool call with a list, nests 4


def too_deep(body: bytes) -> int | None:
    """How deep a JSON ``body`` (one that opens with ``[`` or ``{``: what a parser reads as JSON) nests, where that
    is over ``MAX_JSON_NESTING``; else None. Measured without recursion (``gcs.runtime.strict_json.json_nesting``).

    >>> too_deep(b' [' * 50_000), too_deep(b'{"a": [[1]]}'), too_deep(b'--boundary ' + b'[' * 100)
    (50000, None, None)
    """
    if body.lstrip()[:1] not in (b"[", b"{") or body.count(b"[") + body.count(b"{") <= MAX_JSON_NESTING:
        return None
    depth = json_nesting(body)
    return depth if depth > MAX_JSON_NESTING else None


class StrictJson:
    """ASGI middleware: a request whose body is JSON holding NaN, Infinity or a number past a double's range, or
    nested over ``MAX_JSON_NESTING`` levels deep, gets 400 and one sentence. Python's JSON parser (FastAPI's) reads
    those numbers as floats; Gradio's routes then refuse the field with a 422 that quotes it back, which cannot be
    written as JSON ("Out of range float values are not JSON compliant"): HTTP 500 and a traceback, for ``{"data":
    NaN}``, a NaN ``session_hash``, an ``fn_index`` of 1e400. JSON has no such numbers (RFC 8259), on any route. A
    parser that recurses (Python's, which the mcp package's MCP route calls) fails past about a thousand levels: a
    body nested 50,000 deep was an HTTP 500 and a ``RecursionError`` traceback. Runs after ``BodyLimit``, so the body
    it reads is bounded."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        # every body, whatever its declared type: a route reads the first of two Content-Type headers, so a
        # declared type is no proof (a multipart body fails to parse as JSON at its first bytes, at once)
        if scope["type"] != "http" or scope.get("method") in ("GET", "HEAD", "OPTIONS"):
            return await self.app(scope, receive, send)
        messages = await read_messages(receive, MAX_BODY_BYTES) or []
        body = b"".join(message.get("body", b"") for message in messages)
        if (depth := too_deep(body)) is not None:
            return await json_answer(send, 400, {"detail": f"the request's JSON nests {depth:,} levels deep: this "
                                                           f"server reads at most {MAX_JSON_NESTING}"})
        found = non_finite_number(body)
        if found is not None:
            return await json_answer(send, 400, {"detail": f"the request's JSON holds {found}: JSON numbers are "
                                                           "finite (no NaN, no Infinity, none beyond 1.8e308)"})
        await self.app(scope, replaying(messages, receive), send)


# -- event streams --------------------------------------------------------------------------------------------------
class KnownStreams:
    """ASGI middleware: ``GET /gradio_api/queue/data?session_hash=S`` and ``GET /gradio_api/call/<name>/<event id>``
    (the event streams a page and a raw API client read) for a session or event the server does not hold get 404 and
    one sentence. Gradio starts a 200 stream for them and then raises inside it: the connection dropped mid-body and
    4 KB of traceback per request. Where Gradio's queue cannot be read (``ui.server.serving.stream_lookup``), those
    streams go on to Gradio, and ``LastResort`` ends them."""

    SESSION_STREAM = re.compile(r"/gradio_api/queue/data$")
    EVENT_STREAM = re.compile(r"/gradio_api/call/(?:v2/)?[^/]+/([^/]+)$")

    def __init__(self, app, demo: gr.Blocks):
        self.app, self.held = app, stream_lookup(demo)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "GET" or self.held is None:
            return await self.app(scope, receive, send)
        if self.SESSION_STREAM.search(scope["path"]):
            session = QueryParams(scope.get("query_string", b"")).get("session_hash")  # the value FastAPI reads
            if session is not None and not self.held(session_hash=session):
                return await json_answer(send, 404, {"detail": f"this server holds no session {quoted(session)}: a "
                                                               "session's stream opens after its POST "
                                                               "/gradio_api/queue/join"})
        elif (event := self.EVENT_STREAM.search(scope["path"])) and not self.held(event_id=event[1]):
            return await json_answer(send, 404, {"detail": f"this server holds no event {quoted(event[1])}: POST "
                                                           "/gradio_api/call/<name> returns the event id to read"})
        await self.app(scope, receive, send)


# -- fields of the wrong shape --------------------------------------------------------------------------------------
SHOWN_PROBLEMS = 3  # a body of 100,000 wrong fields is told about its first few


async def brief_validation_error(request, error) -> JSONResponse:
    """FastAPI's answer to request fields of the wrong shape (422, FastAPI's own layout), without the input it quoted
    whole: a 100,000-character ``session_hash`` list came back in a 100 KB answer. Each problem names where it is
    and what was expected, cut to ~100 characters."""
    problems = error.errors()
    detail = [{"type": str(problem.get("type", ""))[:60], "msg": str(problem.get("msg", ""))[:200],
               "loc": [part if isinstance(part, int) else str(part)[:100] for part in problem.get("loc", ())][:8]}
              for problem in problems[:SHOWN_PROBLEMS]]
    if len(problems) > SHOWN_PROBLEMS:
        detail.append({"type": "more", "msg": f"and {len(problems) - SHOWN_PROBLEMS:,} more", "loc": []})
    return JSONResponse({"detail": detail}, status_code=422)


EXCEPTION_HANDLERS = {RequestValidationError: brief_validation_error}  # FastAPI's exception_handlers, for app_kwargs
