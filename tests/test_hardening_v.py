"""Hardening V (issue 33): what an attack on the landed app still broke. MCP calls outlive their client, a kill during
a long prefill holds the model lane, bare Infinity in results, long links answered with HTTP 500, forged log lines,
bad input logged as a fault, unbounded uploads, whole inputs echoed in errors, and smaller gaps.

The running app (``python app.py``, the session's ``app_server``) is driven as a hostile client would drive it: raw
sockets and HTTP, gradio_client, and the real ``mcp`` client in a process that is killed mid-call. The rest runs
in-process on the real embedded model. Every check waits for what it needs to see, never for a fixed time.
"""

from __future__ import annotations

import asyncio
import inspect
import io
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest
from conftest import error_text
from waiting import Progress, patiently, served, until

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import gcs  # noqa: E402
import ui  # noqa: E402
from ui import hindsight, http_limits, limits, logs, messages, sweep  # noqa: E402
from ui.startup import patient_launch_check  # noqa: E402

MODEL = "smollm2-135m-instruct"


def log_count(app_log: Path, text: str) -> int:
    return app_log.read_text().count(text)


# -- 1. an MCP call stops when its client leaves --------------------------------------------------------------
# 24 rows x 256 tokens of stories: tens of seconds on any machine, so the kill always lands mid-call
LONG_COMPARE = {"paraphrases": "\n".join(f"Tell me a long story about dragon number {i}, with every detail."
                                         for i in range(8)), "max_new_tokens": 256, "seeds": 1}
# The client: one tool call (with progress notifications or without, as most clients call), then wait to be killed.
# Its requests carry no timeout (mcp's default gives up after 30 s, a stream's read after 300 s): the test waits.
MCP_CLIENT = """
import asyncio, json, sys
import httpx
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

async def main(url, name, arguments, progress):
    async with httpx.AsyncClient(timeout=None) as http, \\
            streamable_http_client(url, http_client=http) as (read, write, _):
        async with ClientSession(read, write) as session:
            await session.initialize()
            async def told(done, total, message):
                if message == "Processing":
                    print("processing", flush=True)
            await session.call_tool(name, arguments, progress_callback=told if progress else None)
            print("finished first", flush=True)

asyncio.run(main(sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), sys.argv[4] == "progress"))
"""


@pytest.mark.slow
@pytest.mark.parametrize("progress", [False, True], ids=["plain call", "call with progress"])
def test_an_mcp_call_stops_when_its_client_is_killed(app_url, app_log, app_progress, client, progress):
    """Gradio ran each tool through a loopback client that nothing cancelled: a killed MCP client left its job
    running to its end. Now the job stops, the log says "abandoned" as for HTTP, and the lane serves the next call."""
    started, abandoned = log_count(app_log, "work started"), log_count(app_log, "abandoned request: its work")
    caller = subprocess.Popen([sys.executable, "-c", MCP_CLIENT, f"{app_url}gradio_api/mcp/", "compare",
                               json.dumps(LONG_COMPARE), "progress" if progress else "plain"],
                              stdout=subprocess.PIPE, text=True)
    try:
        if progress:  # the server says the job is processing
            assert patiently(caller.stdout.readline, "the processing notice", app_progress).strip() == "processing"
        else:  # the app's log says the work started
            until(lambda: log_count(app_log, "work started") > started or caller.poll() is not None, "the work",
                  app_progress)
        assert caller.poll() is None, f"the call ended before the kill: {caller.stdout.read()}"
    finally:
        caller.kill()
        caller.wait()
    until(lambda: log_count(app_log, "abandoned request: its work") > abandoned,
          'an "abandoned" line (did the job run to its end?)', app_progress)
    (line,) = [line for line in app_log.read_text().splitlines() if "abandoned request: its work" in line][abandoned:]
    assert line.endswith("its work stopped before its end"), line
    assert client.predict("Why?\nHow come?", "gcswr", 0, 1.0, 1.0, 4, api_name="/trace")["responses"]


# -- 2. a stop reaches the prefill ------------------------------------------------------------------------------
def many_rows(model, rows: int = 48) -> gcs.batch.Batch:
    prompts = [f"Tell me a long story about dragon number {i}, with every detail you know." for i in range(rows)]
    settings = gcs.SamplingSettings(["gcswr"], [0], 1.0, None, None, 8, 0)
    return gcs.batch.Batch([gcs.batch.Row(p, "gcswr", 0) for p in prompts], model, settings)


@pytest.fixture
def rows_per_forward(embedded_model):
    """The rows of each forward through the model (prefill chunks and steps); with ``stop`` set on the first."""
    seen, stop = [], threading.Event()

    def hook(module, arguments, kwargs):
        seen.append(kwargs["hidden_states"].shape[0] if "hidden_states" in kwargs else arguments[0].shape[0])
        stop.set()  # the client leaves during the first forward

    handle = embedded_model.model.model.layers[0].register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield seen, stop
    finally:
        handle.remove()


@pytest.mark.slow
def test_a_stop_during_a_big_prefill_ends_it_before_its_other_chunks(embedded_model, rows_per_forward):
    """A 48-row prefill took tens of seconds after the stop was set (the prefill never checked it). Now the rows go
    through in chunks and the stop is checked between them: one chunk, no step, ``Cancelled``."""
    seen, stop = rows_per_forward
    with pytest.raises(gcs.Cancelled):
        many_rows(embedded_model).complete(stop)
    assert len(seen) == 1 and seen[0] < 48, f"rows per forward after the stop: {seen}"


@pytest.mark.slow
def test_a_stop_reaches_a_streamed_side_by_side_run(embedded_model, rows_per_forward):
    """/compare streams ``gcs.stream_compare``: its stop must reach the runner's prefill too."""
    seen, stop = rows_per_forward
    prompts = [f"Tell me a long story about dragon number {i}, with every detail." for i in range(16)]
    with pytest.raises(gcs.Cancelled):
        list(gcs.stream_compare(prompts, methods="is,gcs,gcswr", seeds=[0], max_new_tokens=8, model=embedded_model,
                                stop=stop))
    assert len(seen) == 1 and seen[0] < 16, seen


@pytest.mark.slow
def test_a_stream_that_ends_by_itself_leaves_its_stop_unset(embedded_model):
    """The transformers runner set its caller's stop event after every run: a finished stream would read as stopped."""
    stop = threading.Event()
    frames = list(gcs.stream_compare(["What is DNA?", "Explain DNA."], methods="gcswr", max_new_tokens=4,
                                     model=embedded_model, stop=stop))
    assert not stop.is_set() and len(frames[-1]) == 2


@pytest.mark.slow
def test_a_prefill_in_chunks_is_the_prefill_in_one(embedded_model, monkeypatch):
    """Each row's cache is the same whatever chunk it went through (row-invariant kernels): same answers as before."""
    batch = many_rows(embedded_model, 12)
    ids, mask = batch.inputs["input_ids"], batch.inputs["attention_mask"]
    whole = gcs.engines.transformers.prefill(embedded_model, ids, mask)
    monkeypatch.setattr(gcs.engines.transformers, "PREFILL_CHUNK_TOKENS", ids.shape[1] * 5)  # chunks of 5, 5 and 2 rows
    chunked = gcs.engines.transformers.prefill(embedded_model, ids, mask)
    for one, other in zip(whole.layers, chunked.layers, strict=True):
        assert one.keys.equal(other.keys) and one.values.equal(other.values)


# -- 3. strict JSON -------------------------------------------------------------------------------------------------
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
        assert event.fn.__wrapped__ is function, name
    assert messages.finite({"curve": [{"x": float("-inf")}], "p": float("nan")}) == {"curve": [{"x": None}], "p": None}


# -- 4. over-long URLs ----------------------------------------------------------------------------------------
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


# -- 5. forged log lines --------------------------------------------------------------------------------------------
FORGED = "x\n2026-01-01 00:00:00,000 gcs.app ERROR forged\x1b[2J"


@pytest.mark.slow
def test_an_mcp_tool_name_cannot_forge_a_log_line(app_url, app_log, app_progress):
    async def call():
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        async with httpx.AsyncClient(timeout=None) as http, \
                streamable_http_client(f"{app_url}gradio_api/mcp/", http_client=http) as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool(FORGED, {})

    before = len(app_log.read_text())
    assert patiently(lambda: asyncio.run(call()), "the MCP call", app_progress).isError
    until(lambda: "forged" in app_log.read_text()[before:], "mcp's line about the unknown tool", app_progress)
    added = app_log.read_text()[before:]
    assert "\x1b" not in added and not any(line.startswith("2026-01-01") for line in added.splitlines()), added


def test_every_logger_s_records_and_every_printed_line_have_their_controls_escaped():
    stream = io.StringIO()
    handler = logging.StreamHandler(logs.RedactingStream(stream))
    handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
    handler.addFilter(logs.RedactSecrets())
    third_party = logging.getLogger("mcp.server.lowlevel.test")
    third_party.addHandler(handler)
    try:
        third_party.warning("Tool %r not listed", FORGED)
        try:
            raise ValueError("bad\x1b[2J value")
        except ValueError:
            third_party.exception("failed")
    finally:
        third_party.removeHandler(handler)
    print("printed\x1b[31m red\r over", file=logs.RedactingStream(stream))
    written = stream.getvalue()
    assert "\x1b" not in written and "\r" not in written and "\\x1b[2J" in written
    assert not any(line.startswith("2026") for line in written.splitlines())
    assert "Traceback (most recent call last):\n" in written  # a traceback keeps its line breaks


def test_a_long_traceback_keeps_its_last_line():
    """Each write was cut after 4,000 characters: a long traceback lost the line that names the error."""
    stream = io.StringIO()
    frames = "".join(f'  File "/x/module{i}.py", line {i}, in f\n    call()\n' for i in range(200))
    logs.RedactingStream(stream).write(f"Traceback (most recent call last):\n{frames}ValueError: the error itself\n")
    written = stream.getvalue()
    assert written.endswith("ValueError: the error itself\n") and "characters cut" in written
    assert len(written) < logs.RedactingStream.HEAD + logs.RedactingStream.TAIL + 100


# -- 6. bad input is refused, not logged as a fault -------------------------------------------------------------
@pytest.mark.parametrize("endpoint, arguments, message", [
    ("/compare", ("What is DNA?\nExplain\ud800 DNA.", 1.0, 4, 0), "paraphrase 2 contains an unpaired surrogate"),
    ("/trace", ("What is DNA?\n\u200b\u200d\ufeff",), "paraphrase 2 shows nothing"),
    ("/counterfactual", ("Why is the sky blue?", "Because of scattering.", 1, "<|im_end|>"),
     "the replacement holds an end-of-turn token"),
    ("/hindsight", ("Why is the sky blue?", "\u200b\u2060", "What makes it blue?"), "enter the response"),
])
@pytest.mark.slow
def test_bad_text_is_refused_in_one_line(app_url, app_log, app_progress, endpoint, arguments, message):
    """A lone surrogate failed in the tokenizer and ``at=Infinity`` in ``int()``: "generation failed", with a
    traceback. (Sent as raw JSON: gradio_client cannot encode either. Infinity is now refused before any endpoint
    reads it, HTTP 400: tests/test_http_guard.py.)"""
    tracebacks, faults = log_count(app_log, "Traceback"), log_count(app_log, "generation failed")
    event, answer = raw_call(app_url, endpoint, list(arguments), app_progress)
    assert event == "error" and message in answer, answer[:300]
    until(lambda: log_count(app_log, message[:30]) > 0, "the refusal's log line", app_progress)
    assert log_count(app_log, "Traceback") == tracebacks and log_count(app_log, "generation failed") == faults


def raw_call(app_url: str, endpoint: str, data: list, progress: Progress) -> tuple[str, str]:
    """A call as raw JSON (Python's: a lone surrogate as "\\ud800", infinity as Infinity), the values left out
    taking their defaults: its last event and data."""
    parameters = list(inspect.signature(ui.ENDPOINTS[endpoint.strip("/")][0]).parameters.values())
    body = json.dumps({"data": [*data, *(parameter.default for parameter in parameters[len(data):])]}).encode()
    joined = served("POST", f"{app_url}gradio_api/call{endpoint}", progress, content=body,
                    headers={"content-type": "application/json"})
    assert joined.status_code == 200, joined.text[:300]
    answer = served("GET", f"{app_url}gradio_api/call{endpoint}/{joined.json()['event_id']}", progress).text
    events = [line.removeprefix("event:").strip() for line in answer.splitlines() if line.startswith("event:")]
    return events[-1], answer.split("data:")[-1]


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


def queued_call(app_url: str, fn_index: int, data: list, progress: Progress) -> dict:
    """A raw queue/join call and its final message (as the page sends it)."""
    session = f"hardening-v-{time.monotonic_ns()}"
    joined = served("POST", f"{app_url}gradio_api/queue/join", progress,
                    json={"data": data, "fn_index": fn_index, "session_hash": session})
    assert joined.status_code == 200, joined.text[:300]
    answer = served("GET", f"{app_url}gradio_api/queue/data", progress, params={"session_hash": session}).text
    for line in answer.splitlines():  # (the stream closes after the session's last event)
        if line.startswith("data:") and '"process_completed"' in line:
            return json.loads(line.removeprefix("data:"))
    raise AssertionError("the stream ended without a result")


@pytest.mark.slow
def test_a_choice_outside_its_choices_is_refused_briefly(app_url, app_log, app_progress):
    """A radio button or dropdown value outside its choices: Gradio quoted it whole and logged a 1.8 KB traceback."""
    config = served("GET", f"{app_url}config", app_progress).json()
    (fn_index,) = [d["id"] for d in config["dependencies"] if d.get("api_name") == "source_inputs"]
    tracebacks, size = log_count(app_log, "Traceback"), len(app_log.read_text())
    answer = queued_call(app_url, fn_index, ["y" * 100_000], app_progress)
    assert not answer["success"] and "is not one of this input's choices" in answer["output"]["error"]
    assert len(json.dumps(answer)) < 1_000
    until(lambda: "is not one of this input's choices" in app_log.read_text()[size:], "the refusal's log line",
          app_progress)
    assert log_count(app_log, "Traceback") == tracebacks and len(app_log.read_text()) - size < 1_000


# -- 7. uploads are bounded per client and in total ------------------------------------------------------------
def upload_from(app_url: str, address: str, progress: Progress, size: int = 1_000) -> httpx.Response:
    """One upload, sent from ``address`` (a loopback address of its own: each test is its own client)."""
    def upload():
        with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=None) as http:
            return http.post(f"{app_url}gradio_api/upload", files={"files": ("groups.csv", b"x" * size, "text/csv")})

    return patiently(upload, "an upload's answer", progress)


@pytest.mark.slow
def test_one_client_s_uploads_are_bounded(app_url, app_progress):
    """100 uploads of 1 MB from one client were accepted in 1.2 s, each kept an hour: one client filled the disk."""
    allowed = int(limits.LIMITS["uploads per client"].high)
    answers = [upload_from(app_url, "127.0.0.33", app_progress) for _ in range(allowed + 3)]
    assert [a.status_code for a in answers] == [200] * allowed + [429] * 3
    assert "uploads are at their limit (uploads per client: 20 within 70 minutes)" in answers[-1].json()["error"]
    assert upload_from(app_url, "127.0.0.34", app_progress).status_code == 200  # another client is not held back


def test_every_client_s_uploads_are_bounded_in_total(monkeypatch):
    """The same middleware, its bounds lowered: bytes per client, then every client together (the clock moves on
    past the time a file lives, and the count starts again)."""
    monkeypatch.setitem(limits.LIMITS, "upload bytes per client", limits.Limit(1, 2_500, whole=True))
    monkeypatch.setitem(limits.LIMITS, "upload bytes in total", limits.Limit(1, 5_000, whole=True))
    now = [0.0]
    quota = http_limits.UploadQuota(None, clock=lambda: now[0])
    assert [quota.refusal("a", 1_000) for _ in range(2)] == [None, None]
    assert quota.refusal("a", 1_000)[0] == 429  # 3,000 bytes from one client
    assert [quota.refusal(client, 1_000) for client in "bc"] == [None, None]
    status, message = quota.refusal("d", 1_200)
    assert status == 503 and "the server's uploads are at their limit (upload bytes in total: 5,000" in message
    now[0] += http_limits.UPLOAD_WINDOW_S + 1
    assert quota.refusal("d", 1_200) is None


# -- 8. errors quote at most ~100 characters --------------------------------------------------------------------
@pytest.mark.parametrize("endpoint, arguments, message", [
    ("/compare", ("What is DNA?\nExplain DNA.", 1.0, 4, 0, 1.0, "m" * 100_000), "unknown method 'mmm"),
    ("/compare", ("What is DNA?\nExplain DNA.", 1.0, 4, 0, 1.0, "gcswr", False, "m" * 100_000), "is not offered here"),
    ("/sweep", ("builtin:" + "9" * 1_900_000,), "builtin:N needs a whole number N from 1 to 50"),
    ("/trace", ("Why?\nHow come?", "gcswr", 0, "t" * 100_000), "temperature must be a number, got 'ttt"),
])
@pytest.mark.slow
def test_an_error_quotes_at_most_a_hundred_characters_of_the_value(client, endpoint, arguments, message):
    text = error_text(lambda: client.predict(*arguments, api_name=endpoint))
    assert message in text and len(text) < 1_000, text[:300]


# -- 9. one validation for text from every source ---------------------------------------------------------------
@pytest.mark.parametrize("prompt, message", [("Why is the sky\x1b[2J blue?", "contains control characters"),
                                             ("Why is the sky blue?\u202e", "contains invisible or direction-overriding"),
                                             ("\u200b\u200b", "shows nothing")])
def test_an_uploaded_file_s_text_meets_the_rules_typed_text_meets(tmp_path, prompt, message):
    path = tmp_path / "groups.jsonl"
    path.write_text(json.dumps({"id": "sky", "prompts": [prompt, "What makes the sky blue?"]}) + "\n")
    with pytest.raises(ValueError, match=f"group 'sky', paraphrase 1 {message}"):
        sweep.sweep_groups("uploaded file", "", 0, str(path))


@pytest.mark.slow
def test_a_counterfactual_cannot_write_an_end_of_turn_inside_a_response(embedded_model):
    """/hindsight refuses a response holding the end-of-turn token; a counterfactual replacement holding it ended
    the response instead. Both are refused now, by the library, with the same words."""
    for replacement in ("<|im_end|>", " sour<|im_end|>", [embedded_model.tokenizer.convert_tokens_to_ids("<|im_end|>")]):
        with pytest.raises(ValueError, match="the replacement holds an end-of-turn token"):
            gcs.counterfactual("Name a fruit.", "Apples are sweet.", 1, replacement, seed=1, max_new_tokens=16,
                               model=embedded_model)
    with pytest.raises(ValueError, match="token to change must be a whole number"):
        hindsight.counterfactual_inputs("Name a fruit.", "Apples are sweet.", 10**400, " sour", "gcswr", 0, 1.0, 1.0,
                                        16, ui.DEFAULT_MODEL)


# -- 10. memory after floods ---------------------------------------------------------------------------------
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
