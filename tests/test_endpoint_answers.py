"""What ``gcs.Endpoint`` does with a server that misbehaves: HTTP servers on 127.0.0.1 that imitate just enough of
``gcs vllm-serve`` (``/v1/models``, ``/tokenize``, the plugin's probe, streamed completions of ``data:`` events) to
reach each fault. Every answer is checked before it is used, read within bounds, within ``timeout``, and its fault
is a ``gcs.EndpointError`` naming the endpoint in a short message; the key never shows in any form; a visitor of the
app reads an endpoint's name, not its URL. No vLLM here: the client's side only (tests/test_endpoints.py runs real
servers)."""

from __future__ import annotations

import contextlib
import gzip
import html
import http.server
import json
import logging
import threading
import urllib.parse

import pytest

import gcs
from conftest import tiny_gcs_model
from gcs.engines.endpoint_answers import NOT_A_METHOD, event_bytes

MOST_MESSAGE = 700  # characters: an error is a sentence or two, whatever the server sent
STALL_S = 60  # how long a stalling server stalls before it answers after all: far past any timeout used here
PROBE_IDS = [5, 6, 7, 8, 9, 10, 11, 12]


@pytest.fixture(scope="module")
def tiny():
    return tiny_gcs_model()


def ids_for(seed: int, count: int) -> list[int]:
    """The tokens the fake server's good answer gives a row of ``seed`` (never the stop token 1)."""
    return [3 + (seed * 7 + i) % 60 for i in range(count)]


class Handler(http.server.BaseHTTPRequestHandler):
    """One request to the fake server: the answer its ``server`` holds for the path, or a good one."""

    server: FakeServe

    def log_message(self, *args):  # (the test's output stays the test's)
        pass

    def do_GET(self):
        self.answer(None)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.bodies.append(body)
        self.answer(body)

    def answer(self, body) -> None:
        kind = "stream" if body and body.get("stream") else self.path
        if kind == "/v1/completions" and body["vllm_xargs"]["gcs_method"] == NOT_A_METHOD:
            kind = "bogus"
        with self.server.lock:
            self.server.seen.append(kind)
        try:
            self.server.answers.get(kind, GOOD[kind])(self, body)
        except (BrokenPipeError, ConnectionResetError):  # the client closed it: what a refusal does
            with self.server.lock:
                self.server.cut_off += 1
        finally:
            if kind == "stream":
                self.server.streamed.set()

    def send_json(self, value, status: int = 200, headers: dict | None = None, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(value).encode()
        self.send_response(status)
        for name, text in {"Content-Type": "application/json", "Content-Length": str(len(data)),
                           **(headers or {})}.items():
            self.send_header(name, text)
        self.end_headers()
        self.wfile.write(data)

    def start_events(self, headers: dict | None = None) -> None:
        self.send_response(200)
        for name, text in {"Content-Type": "text/event-stream", **(headers or {})}.items():
            self.send_header(name, text)
        self.end_headers()  # (HTTP/1.0: the stream ends when the connection closes)

    def send(self, data: bytes) -> None:
        self.wfile.write(data)
        self.wfile.flush()

    def event(self, value) -> None:
        self.send(b"data: " + (value if isinstance(value, bytes) else json.dumps(value).encode()) + b"\n\n")

    def stall(self, beat=None, every: float = 0.2) -> None:
        """Wait ``STALL_S`` (or until the test ends), ``beat()`` every ``every`` seconds."""
        for _ in range(int(STALL_S / every)):
            if self.server.released.wait(every):
                return
            if beat is not None:
                beat()


def choice(ids, reason=None, index=0, **more) -> dict:
    return {"choices": [{"index": index, "text": "", "token_ids": ids, "finish_reason": reason, **more}]}


def good_stream(handler: Handler, body: dict, before=None) -> None:
    """What vLLM sends: the prompt's ids in the first event, a token an event with keep-alive comments between
    them, the last with finish_reason "length", a usage event without choices, then [DONE]."""
    ids = ids_for(body["vllm_xargs"]["gcs_seed"], body["max_tokens"])
    handler.start_events()
    if before is not None:
        before(handler, ids)
    for i, token in enumerate(ids):
        extra = {"prompt_token_ids": body["prompt"]} if i == 0 else {}
        handler.event(choice([token], "length" if i == len(ids) - 1 else None, **extra))
        handler.send(b": ping\n\n")
    handler.event({"choices": [], "usage": {"completion_tokens": len(ids)}})
    handler.event(b"[DONE]")


GOOD = {
    "/v1/models": lambda handler, body: handler.send_json({"object": "list", "data": [{"id": "tiny"}]}),
    "/tokenize": lambda handler, body: handler.send_json(
        {"tokens": handler.server.tokenizer(body["prompt"], add_special_tokens=False)["input_ids"]}),
    "bogus": lambda handler, body: handler.send_json({"error": {"message": "unknown method 'x'"}}, 400),
    "/v1/completions": lambda handler, body: handler.send_json(choice(PROBE_IDS, "length")),
    "stream": good_stream,
}


class FakeServe(http.server.ThreadingHTTPServer):
    """Just enough of ``gcs vllm-serve``: ``answers`` replaces the good answer for "/v1/models", "/tokenize",
    "bogus" (the plugin's probe with an unknown method), "/v1/completions" (the coupled pair) or "stream" (a row's
    streamed completion). ``seen`` lists the requests in order, ``cut_off`` counts answers the client cut short."""

    daemon_threads = True

    def __init__(self, tokenizer, answers: dict):
        super().__init__(("127.0.0.1", 0), Handler)
        self.tokenizer, self.answers = tokenizer, answers
        self.seen: list[str] = []
        self.bodies: list[dict] = []
        self.cut_off = 0
        self.lock = threading.Lock()
        self.released = threading.Event()
        self.streamed = threading.Event()  # a stream answer ended: sent whole, or cut off by the client

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    @property
    def streams(self) -> int:
        return self.seen.count("stream")


@contextlib.contextmanager
def serving(tiny, **answers):
    server = FakeServe(tiny.tokenizer, answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield server
    finally:
        server.released.set()
        server.shutdown()
        server.server_close()


def run(tiny, *servers, seeds=(0,), max_new_tokens=12, **options):
    """One gcswr row per seed on ``servers`` (one request at a time each); its frame."""
    return gcs.compare(["w5 w6"], methods="gcswr", seeds=list(seeds), max_new_tokens=max_new_tokens, model=tiny,
                       engine=[gcs.Endpoint(server.url, max_requests=1, **{"timeout": 30, **options})
                               for server in servers])


def failure(tiny, *servers, error=gcs.EndpointError, **options) -> str:
    with pytest.raises(error) as raised:
        run(tiny, *servers, **options)
    message = str(raised.value)
    assert len(message) < MOST_MESSAGE, message[:2000]
    return message


def test_a_server_that_answers_as_vllm_does_is_read_whole(tiny):
    """The fake server's good answers (the prompt echoed, comments between tokens, a usage event) pass every
    check: the tests below differ from it only in their fault."""
    with serving(tiny) as server:
        frame = run(tiny, server, seeds=(0, 1))
    assert [list(ids) for ids in frame["token_ids"]] == [ids_for(0, 12), ids_for(1, 12)]
    assert server.seen == ["/v1/models", "/tokenize", "bogus", "/v1/completions", "/v1/completions", "stream",
                           "stream"]


def events_of(*values):
    """A stream answer that sends ``values`` (events, or raw lines as bytes) and ends."""
    def stream(handler: Handler, body: dict) -> None:
        handler.start_events()
        for value in values:
            handler.send(value) if isinstance(value, bytes) else handler.event(value)
        handler.event(b"[DONE]")
    return stream


BAD_STREAMS = {
    "more tokens than asked": (events_of(choice(ids_for(0, 13), "length")), "13 tokens for a request of at most 12"),
    "one token past them": (lambda handler, body: good_stream(handler, body, before=lambda h, ids: h.event(
        choice([7]))), "13 tokens for a request of at most 12"),
    "a choice for another row": (events_of(choice([7], index=1)), "a choice for index 1, where the request asked"),
    "two choices": (events_of({"choices": [choice([7])["choices"][0]] * 2}), "an event of 2 choices"),
    "a float token id": (events_of(choice([7.0])), "a token id that is float 7.0, not a whole number"),
    "a boolean token id": (events_of(choice([True])), "a token id that is bool True"),
    "an id past the vocabulary": (events_of(choice([64])), "token id 64, outside the vocabulary [0, 64)"),
    "a negative id": (events_of(choice([-1])), "token id -1, outside the vocabulary"),
    "an id of 10^12": (events_of(choice([10**12])), "token id 1000000000000, outside the vocabulary"),
    "token ids that are not a list": (events_of(choice("7")), "a choice whose 'token_ids' is str, not a list"),
    "no token ids": (events_of({"choices": [{"index": 0, "text": "x"}]}), "whose 'token_ids' is missing"),
    "'length' after one token": (events_of(choice([7], "length")), "finish_reason 'length' after 1 of 12 tokens"),
    "an unknown finish reason": (events_of(choice([7], "abort")), "finish_reason 'abort', which is neither"),
    "an event without choices": (events_of({"id": "x"}), "an event whose 'choices' is missing, not a list"),
    "an event that is a list": (events_of([1, 2]), "an event that is not a JSON object but list"),
    "an event that is not JSON": (events_of(b"data: {'choices': []}\n\n"), "an event that is not JSON"),
    "JSON nested 5,000 deep": (events_of(b"data: " + b"[" * 5000 + b"]" * 5000 + b"\n\n"), "not JSON"),
    "an error event": (events_of({"error": {"message": "engine dead " * 100}}), "ended with an error: engine dead"),
    "a redirect": (lambda handler, body: handler.send_json({}, 307, {"Location": "http://127.0.0.1:9/v1/x"}),
                   "a redirect (HTTP 307) to 'http://127.0.0.1:9/v1/x'; gcs does not follow redirects"),
    "a compressed answer": (lambda handler, body: handler.send_json(None, 200, {"Content-Encoding": "gzip"},
                                                                     gzip.compress(b"data: {}\n\n" * 1000)),
                            "a compressed answer (Content-Encoding 'gzip')"),
}


@pytest.mark.parametrize("fault", BAD_STREAMS)
def test_a_malformed_answer_ends_the_run_at_its_first_bad_event_by_name_without_a_retry(tiny, fault):
    stream, said = BAD_STREAMS[fault]
    with serving(tiny, stream=stream) as server:
        message = failure(tiny, server)
    assert f"1 of 1 rows could not be generated: every endpoint failed ({server.url}: " in message, message
    assert said in message, message
    assert server.streams == 1  # the endpoint was dropped at once: a protocol violation is not retried


def test_an_event_of_two_million_ids_is_refused_after_a_bounded_read(tiny):
    """An 8-token request answered by one event of 2,000,000 token ids (18 MB, more than the sockets between the
    two hold): refused once the event passes its bound, so the server's write is cut off, not read to its end."""
    huge = b'data: {"choices": [{"index": 0, "token_ids": [' + b"1000000, " * 2_000_000 + b"7]}]}\n\n"
    with serving(tiny, stream=lambda handler, body: (handler.start_events(), handler.send(huge))) as server:
        message = failure(tiny, server, max_new_tokens=8)
        server.streamed.wait()
    bound = event_bytes(len(server.bodies[-1]["prompt"]), 8)
    assert f"an event longer than {bound:,} bytes" in message, message
    assert server.cut_off == 1 and server.streams == 1


def test_a_malformed_endpoint_hands_its_rows_to_a_good_one(tiny):
    """(The good server holds its first answer until the bad one has answered: each takes a row.)"""
    with serving(tiny, stream=BAD_STREAMS["a float token id"][0]) as bad, \
            serving(tiny, stream=lambda handler, body: (bad.streamed.wait(), good_stream(handler, body))) as good:
        frame = run(tiny, bad, good, seeds=(0, 1))
    assert [list(ids) for ids in frame["token_ids"]] == [ids_for(0, 12), ids_for(1, 12)]
    assert bad.streams == 1 and good.streams == 2


def test_busy_answers_are_still_retried(tiny):
    busy = []

    def stream(handler: Handler, body: dict) -> None:
        if len(busy) < 2:
            busy.append(1)
            return handler.send_json({"error": {"message": "busy"}}, 503, {"Retry-After": "0"})
        good_stream(handler, body)

    with serving(tiny, stream=stream) as server:
        frame = run(tiny, server)
    assert [list(ids) for ids in frame["token_ids"]] == [ids_for(0, 12)] and server.streams == 3


def names(count: int) -> dict:
    return {"object": "list", "data": [{"id": f"model-{i}"} for i in range(count)]}


def never_answers(handler: Handler, body) -> None:
    handler.stall()


CONNECT_FAULTS = {
    "100,000 models": ({"/v1/models": lambda h, b: h.send_json(names(100_000))}, gcs.EndpointError,
                       "answered /v1/models with an answer longer than 262,144 bytes"),
    "3,000 models": ({"/v1/models": lambda h, b: h.send_json(names(3000))}, ValueError,
                     "serves 3,000 models ('model-0', 'model-1', 'model-2', 'model-3', 'model-4' and 2,995 more)"),
    "a model list of the wrong shape": ({"/v1/models": lambda h, b: h.send_json({"data": "tiny"})},
                                        gcs.EndpointError, "a model list whose 'data' is str, not a list"),
    "a model without a name": ({"/v1/models": lambda h, b: h.send_json({"data": [{"id": 5}]})}, gcs.EndpointError,
                               "a model list with an entry whose 'id' is int, not a str"),
    "a model list that is not JSON": ({"/v1/models": lambda h, b: h.send_json(None, raw=b"<html>")},
                                      gcs.EndpointError, "an answer that is not JSON"),
    "a redirect": ({"/v1/models": lambda h, b: h.send_json({}, 302, {"Location": "https://elsewhere.example/v1"})},
                   gcs.EndpointError, "answered /v1/models with a redirect (HTTP 302) to 'https://elsewhere.example"
                   "/v1'; gcs does not follow redirects"),
    "a tokenization of floats": ({"/tokenize": lambda h, b: h.send_json({"tokens": [5.0, 6.0]})}, gcs.EndpointError,
                                 "answered /tokenize with a tokenization with a token id that is float 5.0"),
    "a probe answered with two 1,000,000-id lists": (
        {"/v1/completions": lambda h, b: h.send_json(choice(list(range(1_000_000)), "length"))},
        gcs.EndpointError, "answered /v1/completions with an answer longer than 262,144 bytes"),
    "a probe answered with other pairs": (
        {"/v1/completions": lambda h, b: h.send_json(choice([5 + len(h.server.seen)] * 8, "length"))}, ValueError,
        "does not couple requests: two with one gcs_seed got 8 tokens"),
    "a probe of 9 tokens": ({"/v1/completions": lambda h, b: h.send_json(choice(PROBE_IDS + [5], "length"))},
                            gcs.EndpointError, "9 tokens for a request of at most 8"),
    "a probe past the vocabulary": ({"/v1/completions": lambda h, b: h.send_json(choice([64] * 8, "length"))},
                                    gcs.EndpointError, "token id 64, outside the vocabulary [0, 64)"),
    "a probe that never answers": ({"/v1/completions": never_answers}, gcs.EndpointError,
                                   "did not answer /v1/completions: it made no progress for 2 s (its timeout)"),
}


@pytest.mark.parametrize("fault", CONNECT_FAULTS)
def test_a_bad_answer_at_connect_is_a_short_error_naming_the_endpoint(tiny, fault):
    answers, error, said = CONNECT_FAULTS[fault]
    stalls = answers.get("/v1/completions") is never_answers  # (the others get time to write megabytes on a busy host)
    with serving(tiny, **answers) as server:
        message = failure(tiny, server, error=error, timeout=2 if stalls else 30)
    assert f"endpoint {server.url} " in message and said in message, message
    assert server.streams == 0


def stalled_after_two_tokens(beat):
    """A stream answer that sends two tokens, then ``beat`` every 0.2 s for ``STALL_S`` (then the rest)."""
    def stream(handler: Handler, body: dict) -> None:
        good_stream(handler, body, before=lambda handler, ids: (handler.event(choice(ids[:2])),
                                                                 handler.stall(lambda: beat(handler)),
                                                                 ids.__delitem__(slice(0, 2))))
    return stream


def test_stalled_endpoints_are_dropped_at_once_so_the_run_ends_after_one_timeout_each(tiny):
    """Three endpoints that stall, with timeout=2: one sends keep-alive comments after two tokens, one trickles
    bytes of an event that never completes, one sends nothing. Each is dropped at its first stalled request (its
    rows to the others, which stall too): the run ends with an EndpointError naming all three, each having seen
    exactly one request, so the run took at most 3 × timeout after its last token (remote.py)."""
    def nothing(handler: Handler, body: dict) -> None:
        handler.stall()
        good_stream(handler, body)

    trickle = iter(b'data: {"choices": [{"index": 0, "token_ids": [' + b"7, " * 10_000)
    with serving(tiny, stream=stalled_after_two_tokens(lambda handler: handler.send(b": ping\n\n"))) as comments, \
            serving(tiny, stream=stalled_after_two_tokens(lambda h: h.send(bytes([next(trickle)])))) as trickling, \
            serving(tiny, stream=nothing) as silent:
        message = failure(tiny, comments, trickling, silent, seeds=(0, 1, 2), timeout=2)
    assert message.startswith("3 of 3 rows could not be generated: every endpoint failed ("), message
    for server in (comments, trickling, silent):
        assert f"{server.url}: it made no progress for 2 s (its timeout)" in message, message
        assert server.streams == 1, server.seen


KEY = "k\"e'y\\ with\tspaces+&<>%/?=é"[:-1]  # printable ASCII (what a header carries): every escape differs


def echoed(form):
    """A /v1/models answer of 401 that quotes the key sent, written as ``form`` writes it."""
    def answer(handler: Handler, body) -> None:
        sent = handler.headers["Authorization"].removeprefix("Bearer ")
        handler.send_json({"error": {"message": f"key {form(sent)} refused"}}, 401)
    return answer


KEY_FORMS = {"as typed": str, "repr": repr, "bytes repr": lambda key: repr(key.encode()), "JSON": json.dumps,
             "percent": urllib.parse.quote,
             "percent, lower case": lambda key: urllib.parse.quote(key, safe="").lower(),
             "percent, plus": urllib.parse.quote_plus, "HTML": html.escape, "a dict's repr": lambda key: repr(
                 {"authorization": f"Bearer {key}"})}


def test_the_key_shows_in_no_form_a_server_echoes_it_in(tiny, caplog):
    for name, form in KEY_FORMS.items():
        with serving(tiny, **{"/v1/models": echoed(form)}) as server:
            message = failure(tiny, server, api_key=KEY)
        assert "HTTP 401: key " in message and "***" in message, (name, message)
        assert form(KEY).lower() not in message.lower() and KEY not in message, (name, message)
    elsewhere = lambda handler, body: handler.send_json(  # noqa: E731
        {}, 307, {"Location": "https://elsewhere.example/?k=" + urllib.parse.quote(handler.headers["Authorization"])})
    with serving(tiny, **{"/v1/models": elsewhere}) as server:
        message = failure(tiny, server, api_key=KEY)
    assert "a redirect (HTTP 307) to 'https://elsewhere.example/?k=Bearer%20***'" in message, message
    assert KEY not in caplog.text


@pytest.mark.parametrize("key", ["a\x00b", "clé", "a\rb", "a\x1bb", "a\x7fb"])
def test_a_key_no_http_header_carries_is_refused_unquoted(key):
    with pytest.raises(ValueError, match="api_key must be printable ASCII") as refused:
        gcs.Endpoint("http://127.0.0.1:9", api_key=key)
    assert key not in str(refused.value) and repr(key)[1:-1] not in str(refused.value)


def test_an_endpoint_has_a_checked_name_that_equality_ignores():
    named = gcs.Endpoint("http://gpu:8000", name=" west ")
    assert named.name == "west" and gcs.Endpoint("http://gpu:8000").name == "http://gpu:8000"
    assert repr(named) == "Endpoint('http://gpu:8000', name='west')" and named == gcs.Endpoint("http://gpu:8000")
    for bad, error in [(5, TypeError), ("", ValueError), ("a\nb", ValueError), ("a\x00", ValueError),
                       ("x" * 101, ValueError)]:
        with pytest.raises(error, match="name must be"):
            gcs.Endpoint("http://gpu:8000", name=bad)
    from gcs.engines.endpoints import configured_endpoints

    configured = configured_endpoints({"GCS_ENDPOINTS": "http://a:1,http://b:1"})
    assert [endpoint.name for endpoint in configured.endpoints] == ["endpoint 1", "endpoint 2"]


def test_a_visitor_reads_a_failing_endpoint_by_its_name_and_the_log_by_its_url(tiny, monkeypatch, caplog):
    """The app's message for an endpoint's fault (a malformed answer, a refusal): "endpoint 1", never its URL or
    address, and no "generation failed (TypeError)"; its log names the URL in one line, without a traceback."""
    from gcs.engines.endpoints import configured_endpoints
    from ui.shared import deployment, messages

    refused = lambda handler, body: handler.send_json({"error": {"message": "prompt too long"}}, 400)  # noqa: E731
    with serving(tiny, stream=BAD_STREAMS["a float token id"][0]) as bad, serving(tiny, stream=refused) as refusing:
        address = f"127.0.0.1:{bad.server_address[1]}"
        monkeypatch.setattr(deployment, "ENGINE", deployment.Engine("transformers", configured_endpoints(
            {"GCS_ENDPOINTS": f"{refusing.url},{bad.url}"})))
        errors = []
        for server, error in ((bad, gcs.EndpointError), (refusing, ValueError)):
            with pytest.raises(error) as raised:
                run(tiny, server)
            errors.append(raised.value)
        caplog.clear()
        with caplog.at_level(logging.INFO):
            shown = [messages.user_message(error) for error in errors]
    assert shown[0].startswith("1 of 1 rows could not be generated: every endpoint failed (endpoint 2: it answered "
                               "with a choice with a token id that is float 7.0"), shown[0]
    assert shown[1].startswith("endpoint 1 refused a request with HTTP 400: prompt too long"), shown[1]
    assert not [text for text in shown if address in text or refusing.url in text or "generation failed" in text]
    assert bad.url in caplog.text and refusing.url in caplog.text and "Traceback" not in caplog.text
    assert all(record.exc_info is None for record in caplog.records)
