"""The guard in front of every route (issue 44: items 1 and 2, and its rule for every route). Whatever a client
sends to Gradio's own routes, it gets a 4xx and one short sentence: never an HTTP 500, a connection dropped
mid-answer or a traceback in the log. An MCP tool error is short whatever the call sent. (Item 9, upload quotas and
forwarded client addresses: tests/test_uploads.py.)

The running app (the session's ``app_server``) is attacked over loopback as a hostile client would; the middleware
and the Gradio and mcp internals it reads are also checked in-process. Every request to the app waits on the app's
progress (``waiting.served``, ``waiting.patiently``), never on a client timeout: a loaded machine is slow, not broken.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import sys
from pathlib import Path

import gradio as gr
import httpx
import pytest
from waiting import patiently, served

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ui.server import http_guard, http_limits, mcp_calls, serving  # noqa: E402

FAULTS = ("Traceback", "Exception in ASGI application")


def assert_quiet(app_log: Path, since: int, most_bytes: int = 2_000) -> None:
    """Since ``since`` (a length of the log), no traceback and at most ``most_bytes`` of log: a flood of bad requests
    cannot fill a disk or bury a real error (each of these added 4 KB of traceback)."""
    added = app_log.read_text()[since:]
    assert not any(fault in added for fault in FAULTS), added[-3_000:]
    assert len(added) < most_bytes, added[-3_000:]


def post_json(url: str, body: str, progress) -> httpx.Response:
    """``body`` sent as it is: Python's json module would refuse to write NaN, and a client need not."""
    return served("POST", url, progress, content=body, headers={"content-type": "application/json"})


# -- 1. Gradio's own routes: event streams, non-finite numbers, fields of the wrong shape ----------------------------
@pytest.mark.parametrize("route, says", [
    ("gradio_api/queue/data?session_hash=no-such-session", "holds no session 'no-such-session'"),
    ("gradio_api/call/compare/no-such-event", "holds no event 'no-such-event'"),
    ("gradio_api/call/v2/compare/no-such-event", "holds no event 'no-such-event'"),
])
@pytest.mark.slow
def test_a_stream_the_server_does_not_hold_is_refused_plainly(app_url, app_log, app_progress, route, says):
    """Gradio started a 200 event stream for these, then raised inside it: the connection dropped mid-body (httpx
    reads the whole answer, and raised "incomplete chunked read") and 4 KB of traceback per request."""
    since = len(app_log.read_text())
    for _ in range(10):
        answer = served("GET", app_url + route, app_progress)
        assert answer.status_code == 404 and says in answer.json()["detail"], answer.text[:300]
    assert_quiet(app_log, since)


@pytest.mark.slow
def test_a_stream_the_server_holds_still_streams_its_result(app_url, app_progress):
    """The guard checks what Gradio holds, as Gradio does: a raw call's stream still ends with its result."""
    called = served("POST", f"{app_url}gradio_api/call/coupling", app_progress,
                    json={"data": ["0.5, 0.5", "", 1.0, 500, 500, 0]})
    assert called.status_code == 200, called.text[:300]
    stream = served("GET", f"{app_url}gradio_api/call/coupling/{called.json()['event_id']}", app_progress)
    events = [line for line in stream.text.splitlines() if line.startswith("event:")]
    assert stream.status_code == 200 and events[-1] == "event: complete", events


@pytest.mark.parametrize("route, body", [
    ("gradio_api/call/compare", '{"data": NaN}'),
    ("gradio_api/call/compare", '{"data": Infinity}'),
    ("gradio_api/queue/join", '{"data": [], "fn_index": 0, "session_hash": NaN}'),
    ("gradio_api/queue/join", '{"data": [], "fn_index": NaN, "session_hash": "h"}'),
    ("gradio_api/queue/join", '{"data": [], "fn_index": 1e400, "session_hash": "h"}'),
    ("gradio_api/queue/join", '{"data": [], "fn_index": 0, "session_hash": "h", "trigger_id": Infinity}'),
    ("gradio_api/cancel", '{"session_hash": NaN, "fn_index": 0, "event_id": "e"}'),
    ("gradio_api/call/v2/coupling", '{"seed": -Infinity}'),
    ("gradio_api/call/counterfactual", '{"data": ["Why is the sky blue?", "Because.", Infinity, " air"]}'),
])
@pytest.mark.slow
def test_a_number_json_does_not_have_is_refused_plainly(app_url, app_log, app_progress, route, body):
    """Python's JSON parser reads NaN, Infinity and 1e400 (as infinity); Gradio then refused the field with a 422
    quoting it back, which cannot be written as JSON: HTTP 500 and a traceback ("Out of range float values are not
    JSON compliant"). Where the field's type took it, the endpoint got it (a counterfactual ``at`` of Infinity): now
    no route reads one."""
    since = len(app_log.read_text())
    answer = post_json(app_url + route, body, app_progress)
    assert answer.status_code == 400 and "JSON numbers are finite" in answer.json()["detail"], answer.text[:300]
    assert len(answer.text) < 300
    assert_quiet(app_log, since)


@pytest.mark.parametrize("route, body, where", [
    ("gradio_api/queue/join", {"data": [], "fn_index": 0, "session_hash": ["x" * 100_000]}, ["body", "session_hash"]),
    ("gradio_api/call/compare", {"data": "x" * 100_000}, ["body", "data"]),
    ("gradio_api/cancel", {"k" * 100_000: 1}, ["body", "session_hash"]),
])
@pytest.mark.slow
def test_a_field_of_the_wrong_shape_is_refused_without_its_value(app_url, app_progress, route, body, where):
    """FastAPI's 422 quoted the value whole: 100 KB sent, 100 KB back (300 KB for three missing fields)."""
    answer = served("POST", app_url + route, app_progress, json=body)
    assert answer.status_code == 422 and len(answer.text) < 1_000, answer.text[:300]
    assert answer.json()["detail"][0]["loc"] == where


@pytest.mark.parametrize("route, body, status, says", [
    ("gradio_api/call/v2/no_such_endpoint", {}, 404, "has no endpoint 'no_such_endpoint'"),
    ("gradio_api/call/v2/coupling", {"k" * 100_000: 1}, 400, "has no parameter 'kkk"),
    ("gradio_api/call/v2/compare", {"temperature": 1.0}, 400, "needs a value for paraphrases"),
])
@pytest.mark.slow
def test_a_keyword_call_gradio_cannot_read_is_refused_plainly(app_url, app_log, app_progress, route, body, status,
                                                              says):
    """Gradio's keyword form (POST /gradio_api/call/v2/<name>) answered an unknown endpoint, an unknown parameter and
    a missing value with HTTP 500 and a traceback each."""
    since = len(app_log.read_text())
    answer = served("POST", app_url + route, app_progress, json=body)
    assert answer.status_code == status and says in answer.json()["detail"], answer.text[:300]
    assert len(answer.text) < 400
    assert_quiet(app_log, since)


@pytest.mark.slow
def test_the_example_loader_takes_only_an_example_s_index(app_url, app_log, app_progress):
    """The one event the app leaves unqueued (Gradio's example loader, on /run/predict): Gradio answers every failure
    there with HTTP 500, and an index of null with a traceback; an event that runs only in the page has no server
    part (Gradio: HTTP 500, "function has no backend method", and a traceback)."""
    dependencies = served("GET", f"{app_url}config", app_progress).json()["dependencies"]
    loader = next(d["id"] for d in dependencies if d.get("api_name") == "load_example")
    in_the_page = next(d["id"] for d in dependencies if d.get("queue") is False and d.get("backend_fn") is False)
    since = len(app_log.read_text())

    def predict(fn_index: int, data: list) -> httpx.Response:
        return served("POST", f"{app_url}gradio_api/run/predict", app_progress,
                      json={"data": data, "fn_index": fn_index, "session_hash": "h"})

    for data, says in (([None], "chosen by its index"), ([99_999], "chosen by its index"), ([], "takes 1 values")):
        answer = predict(loader, data)
        assert answer.status_code == 400 and says in answer.json()["detail"], answer.text[:300]
    assert predict(in_the_page, []).status_code == 404
    assert_quiet(app_log, since)
    assert predict(loader, [0]).status_code == 200  # what the page sends for its first example


# -- 2. MCP errors are short ---------------------------------------------------------------------------------------
async def mcp_error_texts(app_url: str, calls: list[tuple[str, dict]]) -> list[str]:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    texts = []
    async with streamable_http_client(f"{app_url}gradio_api/mcp/") as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            for name, arguments in calls:
                result = await session.call_tool(name, arguments)
                assert result.isError, (name[:40], result)
                texts.append(" ".join(getattr(part, "text", "") for part in result.content))
    return texts


@pytest.mark.slow
def test_an_mcp_tool_error_is_short_whatever_the_call_sent(app_url, app_progress):
    """A 100,000-character tool name came back in a 100,034-character error; a value of the wrong type (the mcp
    package's schema check) and a parameter the tool does not have (Gradio) were quoted whole too."""
    calls = [("x" * 100_000, {}), ("coupling", {"seed": "z" * 100_000}), ("coupling", {"k" * 100_000: 1})]
    unknown, wrong_type, no_such_parameter = patiently(lambda: asyncio.run(mcp_error_texts(app_url, calls)),
                                                       "the MCP errors", app_progress)
    assert unknown.startswith("Unknown tool for this Gradio app: 'xxx") and "(100,000 characters)" in unknown
    assert len(unknown) < 200
    assert wrong_type.startswith("Input validation error: 'zzz") and len(wrong_type) < 700
    assert "kkk" in no_such_parameter and len(no_such_parameter) < 700


@pytest.mark.parametrize("route", ["gradio_api/mcp/", "gradio_api/queue/join", "gradio_api/call/compare"])
@pytest.mark.slow
def test_json_nested_past_what_a_parser_recurses_through_is_refused_plainly(app_url, app_log, app_progress, route):
    """An MCP request nested 50,000 deep was an HTTP 500 and a ``RecursionError`` traceback from the mcp package's
    parser (Python's, which recurses once per level); now every route refuses JSON nested over 64 levels, measured
    before any parser reads it."""
    since = len(app_log.read_text())
    body = '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": ' + "[" * 50_000 + "]" * 50_000 + "}"
    answer = served("POST", app_url + route, app_progress, content=body,
                    headers={"content-type": "application/json", "accept": "application/json, text/event-stream"})
    assert answer.status_code == 400 and "nests 50,001 levels deep" in answer.json()["detail"], answer.text[:300]
    assert len(answer.text) < 200
    assert_quiet(app_log, since)


async def mcp_prompt(app_url: str, name: str):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.exceptions import McpError

    async with streamable_http_client(f"{app_url}gradio_api/mcp/") as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            listed = (await session.list_prompts()).prompts
            try:
                return listed, await session.get_prompt(name, {})
            except McpError as error:
                return listed, error


@pytest.mark.parametrize("name", ["no_such_prompt", "coupling", "p" * 100_000],
                         ids=["an unknown name", "a tool's name", "100,000 characters"])
@pytest.mark.slow
def test_an_unknown_mcp_prompt_is_an_error_naming_it(app_url, app_progress, name):
    """``prompts/get`` of a name the app serves as no prompt ran the coupling tool (Gradio's handler ran the last
    endpoint it looked at) and answered with its result."""
    listed, got = patiently(lambda: asyncio.run(mcp_prompt(app_url, name)), "the prompt's answer", app_progress)
    assert listed == []
    message = getattr(getattr(got, "error", None), "message", repr(got)[:300])
    assert message.startswith(f"Unknown prompt for this Gradio app: '{name[:20]}"), message
    assert "it serves no prompts" in message and len(message) < 300


# -- the last resort, and the internals the guard reads --------------------------------------------------------
def answered(app, path: str = "/x") -> list[dict]:
    """What an ASGI ``app`` sends for one GET of ``path``."""
    sent = []

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    asyncio.run(app({"type": "http", "method": "GET", "path": path, "headers": []}, receive, send))
    return sent


def test_a_fault_past_every_guard_ends_its_request_plainly(caplog):
    """uvicorn answered an exception that escaped the app by dropping the connection (after the answer started) or
    with "Internal Server Error", and logged "Exception in ASGI application" with a traceback, every time."""
    from starlette.requests import ClientDisconnect

    async def fails_at_once(scope, receive, send):
        raise KeyError("a fault")

    async def fails_mid_stream(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
        raise RuntimeError("Caught handled exception, but response already started.")

    async def client_leaves(scope, receive, send):
        raise ClientDisconnect()

    guard = http_guard.LastResort(fails_at_once)
    with caplog.at_level(logging.INFO, logger="gcs.app"):
        first, again = answered(guard), answered(guard, "/y" * 5_000)
    assert first[0]["status"] == 500 and b"KeyError" in first[1]["body"] and len(first[1]["body"]) < 200
    assert again == first
    assert caplog.text.count("Traceback") == 1 and "(2 times so far" in caplog.text  # the repeat: one line
    assert len(caplog.text) < 6_000  # the 10,000-character path quoted briefly
    ended = answered(http_guard.LastResort(fails_mid_stream))
    assert ended[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert answered(http_guard.LastResort(client_leaves)) == []


def test_the_queue_internals_the_stream_check_reads_have_the_shape_it_expects(monkeypatch, caplog):
    """``ui.server.serving.stream_lookup`` reads Gradio's queue (private) and resolves an event's session as Gradio's
    stream routes do; if an upgrade changes either, this fails instead of the check going soft without a word."""
    import gradio.routes

    with gr.Blocks() as demo:
        gr.Button().click(lambda: None)
    demo.queue()
    held = serving.stream_lookup(demo)
    assert held is not None and not held(session_hash="nobody") and not held(event_id="nothing")
    demo._queue.pending_messages_per_session["someone"] = None  # what Queue.push records for a session and event
    demo._queue.pending_event_ids_session["someone"] = {"an-event"}
    assert held(session_hash="someone") and held(event_id="an-event")
    routes = inspect.getsource(gradio.routes)
    assert "not in blocks._queue.pending_messages_per_session" in routes  # the stream's own check
    assert "queue.event_ids_to_events.get(event_id)" in routes and "queue.pending_event_ids_session.items()" in routes
    monkeypatch.delattr(demo._queue, "event_ids_to_events")
    with caplog.at_level(logging.WARNING):
        assert serving.stream_lookup(demo) is None
    assert "an event stream for an unknown session or event is answered by Gradio" in caplog.text


def test_the_mcp_internals_the_brief_errors_wrap_have_the_shape_they_expect():
    from gradio.mcp import GradioMCPServer
    from mcp.server.lowlevel import Server

    assert mcp_calls.brief_mcp_errors() and Server.errors_are_brief
    assert list(inspect.signature(GradioMCPServer._prepare_tool_call_args).parameters) == ["self", "name", "arguments"]
    assert list(inspect.signature(Server._make_error_result).parameters) == ["self", "error_message"]
    assert "self.tool_to_endpoint = " in inspect.getsource(GradioMCPServer.__init__)
    handlers = inspect.getsource(GradioMCPServer.create_mcp_server)  # what internals.served_prompts mirrors
    assert 'block_fn.fn._mcp_type == "prompt"' in handlers and "block_fn.fn._mcp_name == name" in handlers
    error = Server("test")._make_error_result("y" * 100_000)
    assert error.root.isError and len(error.root.content[0].text) < 700


def asgi_answer(middleware, headers: list[tuple[bytes, bytes]], body: bytes) -> tuple[int | None, bool]:
    """(status the middleware answered itself, or None; whether it handed the request on) for a POST of ``body``."""
    handed, answered = [], []

    async def app(scope, receive, send):  # the route behind: takes the request, answers 200
        handed.append(await receive())
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def receive():
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start" and not handed:
            answered.append(message["status"])

    scope = {"type": "http", "method": "POST", "path": "/gradio_api/queue/join", "headers": headers,
             "client": ("127.0.0.9", 5000)}
    asyncio.run(middleware(app)(scope, receive, send))
    return (answered[0] if answered else None), bool(handed)


def test_a_second_content_type_header_hides_nothing():
    """Starlette, FastAPI and Gradio's upload route read the first of two Content-Type headers, a dict of the headers
    the last: a JSON body declared JSON then multipart slipped past the non-finite check, and an upload declared
    multipart then text past the upload quota."""
    two = [(b"content-type", b"application/json"), (b"content-type", b"multipart/form-data; boundary=x")]
    assert asgi_answer(http_guard.StrictJson, two, b'{"data": [], "fn_index": NaN}') == (400, False)
    assert asgi_answer(http_guard.StrictJson, two, b'{"data": [], "fn_index": 0}') == (None, True)
    quota = http_limits.UploadQuota(None)
    upload = [(b"content-type", b"multipart/form-data; boundary=x"), (b"content-type", b"text/plain")]
    assert asgi_answer(lambda app: setattr(quota, "app", app) or quota, upload, b"--x--") == (None, True)
    assert len(quota.accepted) == 1  # counted as an upload (the route took it: 200)
