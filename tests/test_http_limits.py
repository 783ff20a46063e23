"""The app's HTTP limits (``ui.server.http_limits``), held against the running app (``python app.py``): a request body
over the limit is refused before it is read, a link or Host header past what the server reads gets a plain 4xx on every
route (never an HTTP 500 or a traceback), Gradio's routes beside its queue are closed, a call to an unknown endpoint
or event is refused in one short line, the sessions Gradio keeps are bounded, and every answer is strict JSON (no
bare NaN or Infinity).

Every check waits for what it needs to see (a log line, an answer), never for a fixed time.
"""

from __future__ import annotations

import json
import socket
import sys
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from waiting import Progress, patiently, served

from conftest import log_count, queued_call

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import ui  # noqa: E402
from ui.server.startup import patient_launch_check  # noqa: E402
from ui.shared import messages  # noqa: E402

MODEL = "smollm2-135m-instruct"


# -- request bodies ---------------------------------------------------------------------------------------------
@pytest.mark.slow
def test_oversized_bodies_are_refused_before_they_are_read(app_url, app_progress, client):
    url, json_type = app_url + "gradio_api/call/compare", {"content-type": "application/json"}
    declared = served("POST", url, app_progress, content=b"x" * 3_000_000, headers=json_type)
    chunked = served("POST", url, app_progress, content=(b"x" * 100_000 for _ in range(30)), headers=json_type)
    assert declared.status_code == chunked.status_code == 413 and "request body is over" in declared.text
    assert client.predict("Why?\nHow come?", 0.0, 4, 1, 1.0, "gcswr", api_name="/compare")["responses"]


@pytest.mark.slow
def test_the_page_gets_gradio_s_status_tracker_and_highlighted_text_patched(app_url, app_progress):
    """What a browser loads is each patched bundle (``ui.server.page_assets``); the other assets are Gradio's own."""
    from ui.server import page_assets

    bundles = page_assets.patched_bundles()
    assert len(bundles) == 2
    for name, patched in bundles.items():
        served_bundle = served("GET", f"{app_url}assets/{name}", app_progress)
        assert served_bundle.status_code == 200 and served_bundle.content == patched
        assert served_bundle.headers["content-type"].startswith("text/javascript")
        assert served("HEAD", f"{app_url}assets/{name}", app_progress).content == b""
    css = next(page_assets.FRONTEND_ASSETS.glob("statustracker-*.css"))
    assert served("GET", f"{app_url}assets/{css.name}", app_progress).content == css.read_bytes()


# -- closed routes and unknown calls ----------------------------------------------------------------------------
@pytest.mark.parametrize("route", ["gradio_api/run/trace", "gradio_api/api/trace", "gradio_api/run/coupling",
                                   "gradio_api/run/predict"])
@pytest.mark.slow
def test_no_route_runs_work_beside_the_queue(app_url, app_log, app_progress, route):
    """Gradio answers /run/<name>, /api/<name> and /run/predict (any event, by its index) without its queue:
    model work beside the model lane, past its waiting limit. Closed, with a sentence naming the queued route,
    even for a complete and valid call."""
    config = served("GET", app_url + "config", app_progress).json()
    trace = next(d["id"] for d in config["dependencies"] if d.get("api_name") == "trace")
    valid = {"trace": ["Why?\nHow come?", "gcswr", 0, 1.0, 1.0, 4, "smollm2-135m-instruct"],
             "coupling": ["0.5, 0.5", "", 1.0, 500, 500, 0]}[route.rsplit("/", 1)[1].replace("predict", "trace")]
    tracebacks = app_log.read_text().count("Traceback")
    for data in (valid, ["too few"]):
        response = served("POST", app_url + route, app_progress, json={"data": data, "fn_index": trace})
        assert response.status_code == 404 and "through its queue" in response.json()["detail"], response.text[:300]
    assert app_log.read_text().count("Traceback") == tracebacks


@pytest.mark.slow
def test_an_unknown_endpoint_or_event_is_refused_without_a_traceback(app_url, app_log, app_progress):
    tracebacks, size = log_count(app_log, "Traceback"), len(app_log.read_text())
    for _ in range(20):
        unknown = served("POST", f"{app_url}gradio_api/call/no_such_endpoint", app_progress, json={"data": []})
        assert unknown.status_code == 404 and "no endpoint 'no_such_endpoint'" in unknown.text
        event = served("POST", f"{app_url}gradio_api/queue/join", app_progress,
                       json={"data": [], "fn_index": 9999, "session_hash": "x"})
        assert event.status_code == 400 and "no event 9999" in event.text
    assert log_count(app_log, "Traceback") == tracebacks
    assert len(app_log.read_text()) - size < 2_000  # it was 4.2 KB of log per request


# -- over-long links and headers ------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("length", [70_000, 300_000])
def test_a_link_too_long_for_the_server_is_refused_plainly(app_url, app_log, app_progress, length):
    """Links past what the HTTP server reads get a 4xx answer, never a 500 or a traceback in the log."""
    import socket
    from urllib.parse import urlsplit

    address, tracebacks = urlsplit(app_url), app_log.read_text().count("Traceback")

    def ask() -> bytes:  # (a blocking socket: no timeout, waited for on the app's progress)
        with socket.create_connection((address.hostname, address.port)) as connection:
            connection.sendall(f"GET /?tab={'a' * length} HTTP/1.1\r\nHost: {address.netloc}\r\n"
                               "Connection: close\r\n\r\n".encode())
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
            return answer

    answer = patiently(ask, "the answer to a long link", app_progress)
    status = int(answer.split(b" ", 2)[1])
    assert 400 <= status < 500, answer[:200]
    assert served("GET", app_url, app_progress).status_code == 200  # still serving
    assert app_log.read_text().count("Traceback") == tracebacks


def raw_request(app_url: str, request: str, progress: Progress) -> int:
    address = urlsplit(app_url)

    def ask() -> bytes:  # (a blocking socket: no timeout, waited for on the app's progress)
        with socket.create_connection((address.hostname, address.port)) as connection:
            connection.sendall(request.encode())
            answer = b""
            while chunk := connection.recv(65536):
                answer += chunk
            return answer

    return int(patiently(ask, "the answer to a raw request", progress).split(b" ", 2)[1])


@pytest.mark.slow
@pytest.mark.parametrize("length", [60_100, 65_480, 65_510, 65_530, 100_000])
@pytest.mark.parametrize("route", ["/?tab=", "/gradio_api/queue/join?tab=", "/config?x=", "/gradio_api/mcp/?x="])
def test_a_url_over_the_limit_is_refused_plainly_on_every_route(app_url, app_log, app_progress, route, length):
    """Gradio rebuilds the URL with httpx, which stops at 65,536 characters: links the HTTP server still read got an
    HTTP 500 with a traceback. Every route now answers 414 (or the HTTP server's own 400), never 500."""
    tracebacks = log_count(app_log, "Traceback")
    method = "POST" if "join" in route else "GET"
    host = urlsplit(app_url).netloc
    status = raw_request(app_url, f"{method} {route}{'a' * (length - len(route))} HTTP/1.1\r\nHost: {host}\r\n"
                                  "Content-Length: 0\r\nConnection: close\r\n\r\n", app_progress)
    assert status in (400, 414), status
    assert log_count(app_log, "Traceback") == tracebacks


@pytest.mark.slow
def test_a_host_header_over_the_limit_is_refused_plainly(app_url, app_progress):
    status = raw_request(app_url, f"GET /config HTTP/1.1\r\nHost: {'h' * 2_000}\r\nConnection: close\r\n\r\n",
                         app_progress)
    assert status == 431
    assert served("GET", app_url, app_progress).status_code == 200  # a link within the limit still loads


# -- strict JSON answers ----------------------------------------------------------------------------------------
def strict(text: str):
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


@pytest.mark.slow
def test_trace_results_are_strict_json_where_top_p_gives_infinite_arrivals(app_url, app_progress):
    """A candidate that top-p cut has probability 0 and arrives at E/0 = infinity: it was written as bare
    ``Infinity`` (144 of them), which is not JSON."""
    data = ["Why is the sky blue?\nWhat makes it blue?", "gcswr", 0, 1.0, 0.05, 2, MODEL]
    event = served("POST", f"{app_url}gradio_api/call/trace", app_progress, json={"data": data}).json()["event_id"]
    answer = served("GET", f"{app_url}gradio_api/call/trace/{event}", app_progress).text
    *_, result = [strict(line.removeprefix("data:")) for line in answer.splitlines()
                  if line.startswith("data:") and "steps" in line]  # streamed, then complete: each strict JSON
    arrivals = [step["arrival"] for step in result[0]["steps"]]
    assert None in arrivals and all(a is None or a >= 0 for a in arrivals)


def test_every_endpoint_answers_through_the_strict_json_adapter():
    demo = ui.build()
    for name, (function, _) in ui.ENDPOINTS.items():
        (event,) = [fn for fn in demo.fns.values() if fn.api_name == name]
        adapter = event.fn.__wrapped__  # (event.fn lets its request thread's OpenMP team go: releasing_openmp)
        assert adapter.__code__ in messages.strict_json.__code__.co_consts and adapter.__wrapped__ is function, name
        assert event.fn.releases_openmp, name
    assert messages.finite({"curve": [{"x": float("-inf")}], "p": float("nan")}) == {"curve": [{"x": None}], "p": None}


# -- sessions ---------------------------------------------------------------------------------------------------
def test_the_sessions_gradio_keeps_are_bounded(monkeypatch):
    """Gradio kept every session's state (a copy of each component's config: 0.3 MB for this app) until it held
    10,000 sessions, 3 GB; every visit, API client and MCP tool call is a session. The app launches with at most
    ``SESSIONS_KEPT`` of them (lowered here, to see the bound hold)."""
    monkeypatch.setattr(ui, "SESSIONS_KEPT", 3)
    patient_launch_check()  # (as app.py launches: its check of its own page waits for the answer)
    demo = ui.build()
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **ui.launch_options(demo))
    try:
        (coupling,) = [index for index, fn in demo.fns.items() if fn.api_name == "coupling"]
        for _ in range(6):  # each call a session of its own
            assert queued_call(url, coupling, ["0.5, 0.5", "", 1.0, 100, 100, 0], Progress())["success"]
        assert len(demo.state_holder.session_data) == 3
    finally:
        demo.close()
