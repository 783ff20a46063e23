"""``gcs vllm-serve``: the command it runs, and the real server (vLLM's CPU build, the embedded model) over HTTP
with the ``openai`` client and ``vllm_xargs``, as the README shows it."""

from __future__ import annotations

import json
import re
import select
import socket
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import psutil
import pytest
import scipy.stats
from keyed_server import KEY
from waiting import WaitingTransport, patiently, served, until

from gcs.cli.commands import main
from gcs.cli.vllm_server import server_environment, vllm_serve_command
from gcs.vllm.options import PLUGIN

MODEL = "smollm2-135m-instruct"
QUESTIONS = ("What is DNA?", "Can you explain what DNA is?")


# -- the command ------------------------------------------------------------------------------------
def options(command: list[str]) -> list[str]:
    return command[3:]  # after python -m ENTRY


def test_cpu_defaults_and_the_plugin_once():
    installed = options(vllm_serve_command("some/model", cpu=True, registered=True))
    assert installed[:6] == ["--model", "some/model", "--host", "127.0.0.1", "--port", "8000"]
    assert "--logits-processors" not in installed  # the entry point loads it: once
    for option in ("--enforce-eager", "--max-model-len", "--kv-cache-memory-bytes", "--max-num-seqs"):
        assert option in installed
    assert installed[installed.index("--generation-config") + 1] == "vllm"  # no hidden penalties or temperature
    on_path = options(vllm_serve_command("some/model", cpu=False, registered=False))
    assert on_path[on_path.index("--logits-processors") + 1] == PLUGIN and "--enforce-eager" not in on_path


def test_what_follows_the_double_dash_wins():
    command = options(vllm_serve_command("m", cpu=True, registered=True,
                                         extra=["--max-model-len=2048", "--no-enforce-eager", "-tp", "2"]))
    assert "--max-model-len" not in command and "--enforce-eager" not in command
    assert command[-4:] == ["--max-model-len=2048", "--no-enforce-eager", "-tp", "2"]


def test_on_cpu_the_one_worker_runs_in_the_engine_core_unless_parallelism_is_asked_for():
    assert server_environment(["--max-model-len", "512"], cpu=True) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
    for extra in (["-tp", "2"], ["--pipeline-parallel-size=2"], ["--data-parallel-size", "2"],
                  ["--distributed-executor-backend", "mp"]):
        assert server_environment(extra, cpu=True) == {}, extra
    assert server_environment(cpu=False) == {}


@pytest.mark.parametrize("extra, message", [
    (["--logits-processors", PLUGIN], "drop --logits-processors"),
    (["--model", "x"], "first argument"),
])
def test_contradictions_are_refused_before_anything_starts(extra, message):
    with pytest.raises(ValueError, match=message):
        vllm_serve_command("m", extra=extra, cpu=True, registered=True)


def test_the_cli_says_what_is_wrong(capsys):
    assert main(["vllm-serve", "m", "--", "--logits-processors", PLUGIN]) == 2
    assert "gcs vllm-serve: error: gcs is installed" in capsys.readouterr().err


# -- the server -------------------------------------------------------------------------------------
WITH_KEY = {"Authorization": f"Bearer {KEY}"}


@pytest.fixture(scope="module")
def vllm_served(keyed_server):
    """The suite's keyed ``gcs vllm-serve`` (``python -m gcs vllm-serve -- --api-key KEY`` and tests/keyed_server.py's
    small float32 settings, shared with tests/test_endpoints.py), once it lists its model: (its URL, its log, its
    progress). Keyed, as a server on 0.0.0.0 must be: every client here sends the key but those that test its
    absence. (The defaults, bfloat16 here where the CPU has it, serve in tests/test_examples.py's serve_and_ask.)"""
    url, _, progress = keyed_server()
    return url, progress.log, progress


@pytest.fixture(scope="module")
def server(vllm_served):
    """(an openai client of the server, its log). The client sets no timeout: each answer is waited for while the
    server works on it (``waiting.WaitingTransport``)."""
    url, log, progress = vllm_served
    http = httpx.Client(transport=WaitingTransport(progress), timeout=None)
    yield openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0, timeout=None, http_client=http), log


@pytest.fixture(scope="module")
def vllm_http(vllm_served):
    """Raw HTTP to the server, as a hostile client with the key sends it (waiting on the server's progress, as
    ``server``)."""
    url, _, progress = vllm_served
    with httpx.Client(base_url=url, transport=WaitingTransport(progress), timeout=None, headers=WITH_KEY) as http:
        yield http


def ask(client, question: str, xargs: dict | None, tokens: int = 24, temperature: float = 1.0, **kwargs) -> list[str]:
    """The response's tokens (as the server names them)."""
    reply = client.chat.completions.create(
        model=MODEL, temperature=temperature, max_tokens=tokens, logprobs=True,
        messages=[{"role": "user", "content": question}],
        extra_body={"vllm_xargs": xargs} if xargs else {}, **kwargs)
    return [token.token for token in reply.choices[0].logprobs.content]


def shared_prefix(a: list[str], b: list[str]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


@pytest.mark.slow
def test_the_served_worker_runs_in_the_engine_core_s_process(keyed_server):
    """Two processes on CPU, not three (``server_environment``): 0.8 GiB and 10 s of start-up less apiece
    (bench/bench_vllm_serve.py). The server gets no VLLM_ENABLE_V1_MULTIPROCESSING from this worker
    (tests/keyed_server.py's ``start``): gcs vllm-serve sets it."""
    _, process, _ = keyed_server()
    titles = [" ".join(child.cmdline()) for child in psutil.Process(process.pid).children(recursive=True)]
    assert any("EngineCore" in title for title in titles), titles
    assert not any("Worker" in title for title in titles), titles


@pytest.mark.slow
def test_the_server_lists_the_embedded_model_under_its_name(server):
    client, _ = server
    assert [model.id for model in client.models.list()] == [MODEL]


@pytest.mark.slow
def test_same_seed_gcswr_answers_to_two_paraphrases_share_longer_starts_than_is(server):
    """16 seeds, each a pair of requests per method (sent together, as a class's clients would): GCSwR's pair
    shares a longer start than IS's in significantly many seeds (one-sided sign test over untied seeds)."""
    client, _ = server

    def pair(method_seed):
        method, seed = method_seed
        return shared_prefix(*(ask(client, q, {"gcs_method": method, "gcs_seed": seed}) for q in QUESTIONS))

    with ThreadPoolExecutor(8) as pool:
        shared = {m: list(pool.map(pair, [(m, s) for s in range(16)])) for m in ("is", "gcswr")}
    wins = sum(g > i for g, i in zip(shared["gcswr"], shared["is"], strict=True))
    losses = sum(g < i for g, i in zip(shared["gcswr"], shared["is"], strict=True))
    p = scipy.stats.binomtest(wins, wins + losses, alternative="greater").pvalue
    assert p < 1e-3, shared  # measured: 15 of 15 untied seeds (IS shares 1-2 tokens, GCSwR 1-24)


@pytest.mark.slow
def test_a_request_alone_gets_the_same_answer_every_time_streamed_or_not(server):
    client, _ = server
    xargs = {"gcs_method": "gcswr", "gcs_seed": 11}
    request = {"model": MODEL, "temperature": 1.0, "max_tokens": 24, "extra_body": {"vllm_xargs": xargs},
               "messages": [{"role": "user", "content": QUESTIONS[0]}]}
    first = client.chat.completions.create(**request).choices[0].message.content
    assert client.chat.completions.create(**request).choices[0].message.content == first
    chunks = client.chat.completions.create(**request, stream=True)
    assert "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices) == first
    request["extra_body"] = {"vllm_xargs": {**xargs, "gcs_seed": 12}}
    assert client.chat.completions.create(**request).choices[0].message.content != first  # another seed, another draw


@pytest.mark.slow
def test_plain_requests_are_untouched_and_greedy_gcs_is_greedy(server):
    client, _ = server
    greedy = ask(client, QUESTIONS[0], None, temperature=0.0)
    assert ask(client, QUESTIONS[0], {"gcs_method": "gcs", "gcs_seed": 3}, temperature=0.0) == greedy
    assert len(ask(client, QUESTIONS[1], None)) == 24  # a plain sampled request is served as before


@pytest.mark.parametrize("xargs, kwargs, message", [
    ({"gcs_method": "gumbel"}, {}, "unknown method"),
    ({"gcs_method": "gcs", "gcs_seed": -1}, {}, "gcs_seed"),
    ({"gcs_method": "gcswr", "gcs_stream": 3}, {}, "applies to IS only"),
    ({"gcs_method": "gcs", "gcs_temperature": 2}, {}, "unknown gcs argument"),
    ({"gcs_seed": 3}, {}, "gcs_method is required"),
    ({"gcs_method": "gcs"}, {"frequency_penalty": 0.5}, "frequency_penalty"),
    ({"gcs_method": "gcswr"}, {"n": 2}, "one request per gcs_seed"),
])
@pytest.mark.slow
def test_each_bad_argument_is_a_400_and_the_server_keeps_serving(server, xargs, kwargs, message):
    client, _ = server
    with pytest.raises(openai.BadRequestError, match=message):
        ask(client, QUESTIONS[0], xargs, tokens=4, **kwargs)
    assert len(ask(client, QUESTIONS[0], {"gcs_method": "gcswr", "gcs_seed": 0}, tokens=4)) == 4


@pytest.mark.parametrize("xargs, message", [
    ({"gcs_method": "gcswr", "gcs_seed": True}, "gcs_seed must not be true or false"),
    ({"gcs_method": "is", "gcs_stream": False}, "gcs_stream must not be true or false"),
])
@pytest.mark.slow
def test_a_boolean_gcs_argument_is_refused(server, xargs, message):
    """vLLM's request model reads ``"gcs_seed": true`` as 1: it ran as seed 1, where the app refuses booleans."""
    client, _ = server
    with pytest.raises(openai.BadRequestError, match=message):
        ask(client, QUESTIONS[0], xargs, tokens=4)
    assert len(ask(client, QUESTIONS[0], {"gcs_method": "gcswr", "gcs_seed": 1}, tokens=4)) == 4


@pytest.mark.slow
def test_a_megabyte_argument_is_not_echoed_back(server):
    """A 1 MB ``gcs_method`` came back whole in a 1,000,122-byte 400."""
    client, _ = server
    with pytest.raises(openai.BadRequestError) as caught:
        ask(client, QUESTIONS[0], {"gcs_method": "m" * 1_000_000}, tokens=4)
    assert "unknown method 'mmm" in str(caught.value) and len(str(caught.value)) < 2_000


# -- a hostile client (docs/robustness.md, "gcs vllm-serve") ------------------------------------------------------
REQUEST = {"model": MODEL, "messages": [{"role": "user", "content": QUESTIONS[0]}], "max_tokens": 4}
MB = "m" * 1_000_000
MANY = 20_000


def longest_run(text: str) -> int:
    return max(map(len, re.findall("m+", text)), default=0)


@pytest.mark.parametrize("path, fields, status, message", [
    ("/v1/chat/completions", {"vllm_xargs": {"gcs_method": "gcs", "gcs_" + MB: 1}}, 400, "unknown gcs argument"),
    ("/v1/chat/completions", {"vllm_xargs": {"gcs_method": "gcs", **{f"gcs_m{i}": 1 for i in range(MANY)}}}, 400,
     f"gcs_m0, gcs_m1, gcs_m10 and {MANY - 3:,} more; expected gcs_method"),
    ("/v1/chat/completions", {"vllm_xargs": {"gcs_method": "gcs", "gcs_" + MB: True}}, 400,
     "must not be true or false"),
    ("/v1/chat/completions", {"vllm_xargs": {"gcs_method": "gcs", **{f"gcs_m{i}": True for i in range(MANY)}}}, 400,
     f"gcs_m0, gcs_m1, gcs_m2 and {MANY - 3:,} more must not be true or false"),
    ("/v1/chat/completions", {"model": MB}, 404, "The model `mmm"),
    ("/v1/completions", {"model": MB, "prompt": "Why?"}, 404, "The model `mmm"),
    ("/v1/chat/completions", {"logit_bias": {MB: 1}}, 400, "logit_bias"),
    ("/v1/chat/completions", {"vllm_xargs": {MB: {"a": 1}}}, 400, "validation error"),
    ("/v1/chat/completions", {"vllm_xargs": {"gcs_method": "gcs", "gcs_excess_key": MB}}, 400,
     "gcs_excess_key must be 1 to 200 characters, got 1,000,000"),
], ids=["unknown gcs key of 1 MB", f"{MANY:,} unknown gcs keys", "boolean gcs key of 1 MB",
        f"{MANY:,} boolean gcs keys", "model of 1 MB", "completions model of 1 MB", "logit_bias key of 1 MB",
        "vllm_xargs key of 1 MB", "excess key of 1 MB"])
@pytest.mark.slow
def test_an_error_quotes_at_most_a_hundred_characters_of_what_it_refuses(vllm_http, path, fields, status, message):
    """Each came back whole, up to 2 MB: gcs's errors named every key refused, vLLM's own quoted the model, the
    ``logit_bias`` key, or the path of the field it named. Now the status and the message's start are the same,
    and no error quotes more than 100 characters of a value."""
    answer = vllm_http.post(path, json={**REQUEST, **fields})
    assert answer.status_code == status and message in answer.json()["error"]["message"], answer.text[:300]
    assert len(answer.text) < 1_500 and longest_run(answer.text) <= 100, answer.text[:300]


@pytest.mark.slow
def test_no_log_line_quotes_more_than_a_hundred_characters_of_a_request(server, vllm_http):
    """vLLM logged a 1 MB model name it refused whole (at ERROR, "Error with model"), and uvicorn's access log a
    60 KB query whole. Each line is written before its answer is sent: the log is read after both."""
    _, log = server
    assert vllm_http.get("/v1/models", params={"q": "m" * 60_000}).status_code == 200
    assert vllm_http.post("/v1/chat/completions", json={**REQUEST, "model": MB}).status_code == 404
    text = log.read_text()
    assert longest_run(text) <= 100, max(text.splitlines(), key=longest_run)[:300]


LONG = 900  # tokens: the request a killed client leaves, as long as the shared server's 1,024-token context allows


def metric(vllm_http, name: str) -> float:
    (value,) = [float(line.split()[-1]) for line in vllm_http.get("/metrics").text.splitlines()
                if line.startswith(name + "{")]
    return value


@pytest.mark.slow
@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_client_killed_mid_answer_stops_its_request_and_the_seed_answers_as_before(server, vllm_served, vllm_http,
                                                                                     stream):
    """A client asks for ``LONG`` (900) tokens and is killed (a reset connection) once its request runs: the request
    stops well before its end, the engine runs nothing, and the same seed's answer is what it was before."""
    client, _ = server
    _, _, progress = vllm_served
    xargs = {"gcs_method": "gcswr", "gcs_seed": 5}
    before = ask(client, QUESTIONS[0], xargs, tokens=16)
    generated = metric(vllm_http, "vllm:generation_tokens_total")
    body = json.dumps({**REQUEST, "max_tokens": LONG, "ignore_eos": True, "stream": stream,
                       "vllm_xargs": xargs}).encode()
    with socket.create_connection((vllm_http.base_url.host, vllm_http.base_url.port)) as killed:
        killed.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                       b"Authorization: Bearer %s\r\nContent-Length: %d\r\n\r\n%s" % (KEY.encode(), len(body), body))
        until(lambda: metric(vllm_http, "vllm:num_requests_running") == 1, "the request to run", progress)
        until(lambda: metric(vllm_http, "vllm:generation_tokens_total") > generated + 8, "its first tokens", progress)
        killed.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # reset
    until(lambda: metric(vllm_http, "vllm:num_requests_running") == 0, "the request to stop", progress)
    assert metric(vllm_http, "vllm:generation_tokens_total") - generated < LONG  # cut short, not run to its end
    assert ask(client, QUESTIONS[0], xargs, tokens=16) == before



# -- the routes it serves, the key on each, the bodies it reads (docs/vllm.md, "What it serves") ---------------------
COMPLETION = {"model": MODEL, "prompt": QUESTIONS[0], "max_tokens": 4}
KEYED = [("POST", "/v1/chat/completions", REQUEST), ("POST", "/v1/completions", COMPLETION),
         ("GET", "/v1/models", None), ("POST", "/tokenize", {"model": MODEL, "prompt": QUESTIONS[0]}),
         ("POST", "/detokenize", {"model": MODEL, "tokens": [1, 2, 3]}), ("GET", "/version", None)]
NOT_SERVED = [("POST", "/invocations", REQUEST), ("POST", "/invocations", COMPLETION),
              ("POST", "/v1/responses", {"model": MODEL, "input": QUESTIONS[0]}),
              ("POST", "/v1/messages", {**REQUEST, "max_tokens": 4}), ("POST", "/scale_elastic_ep", {}),
              ("POST", "/inference/v1/generate", {"token_ids": [1, 2]}), ("GET", "/openapi.json", None),
              ("GET", "/load", None), ("GET", "/v1/models/", None)]


@pytest.mark.parametrize("method, path, body", KEYED, ids=[path for _, path, _ in KEYED])
@pytest.mark.slow
def test_every_route_that_reads_or_writes_text_needs_the_key(vllm_served, vllm_http, method, path, body):
    """vLLM's own check covers /v1 only: /tokenize, /detokenize (and /invocations, now not served) answered 200
    without the key. A wrong key, a key without its scheme and no key are each a 401 in OpenAI's error shape."""
    url, _, progress = vllm_served
    for headers in ({}, {"Authorization": "Bearer not-the-key"}, {"Authorization": KEY}):
        answer = served(method, url + path, progress, json=body, headers=headers)
        assert answer.status_code == 401 and answer.json()["error"]["code"] == 401, (headers, answer.text[:300])
    assert vllm_http.request(method, path, json=body).status_code == 200


@pytest.mark.parametrize("method, path, body", NOT_SERVED, ids=[f"{path} {i}" for i, (_, path, _) in
                                                                enumerate(NOT_SERVED)])
@pytest.mark.slow
def test_a_route_it_does_not_serve_is_a_404_with_or_without_the_key(vllm_served, vllm_http, method, path, body):
    """``POST /invocations`` took completion and chat bodies without the key and generated; the Responses, Messages,
    elastic-scaling and token-in-token-out routes were served too."""
    url, _, progress = vllm_served
    for answer in (served(method, url + path, progress, json=body), vllm_http.request(method, path, json=body)):
        assert answer.status_code == 404 and "serves only" in answer.json()["error"]["message"], answer.text[:300]


@pytest.mark.slow
def test_health_readiness_and_metrics_need_no_key(vllm_served):
    url, _, progress = vllm_served
    for path in ("/health", "/ping", "/metrics"):
        assert served("GET", url + path, progress).status_code == 200, path


def answer_while_sending(url: httpx.URL, path: str, headers: dict[str, str], total: int,
                         chunked: bool) -> tuple[int, int]:
    """(the status the server answers, how many bytes of the body were sent by then) for a POST of ``total`` bytes
    sent in 1 MiB pieces, the answer read as soon as it comes: a server that answers before reading the body
    closes the connection and the sending stops far short of ``total``; one that reads first takes it all."""
    framing = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {total}"
    head = "".join(f"{name}: {value}\r\n" for name, value in headers.items())
    piece = b" " * (1 << 20)
    pieces = [b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece] * (total // len(piece))
    with socket.create_connection((url.host, url.port)) as connection:
        connection.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{head}{framing}"
                           f"\r\n\r\n".encode())
        connection.setblocking(False)
        sent, pending, answer = 0, b"", b""
        while b"\r\n\r\n" not in answer:
            readable, writable, _ = select.select([connection], [connection] if pieces or pending else [], [])
            try:
                if readable:
                    if not (received := connection.recv(1 << 16)):
                        break
                    answer += received
                elif writable:
                    pending = pending or pieces.pop() + (b"0\r\n\r\n" if chunked and not pieces else b"")
                    done = connection.send(pending)
                    pending, sent = pending[done:], sent + done
            except (BrokenPipeError, ConnectionResetError):  # the server closed it: what it sent first is still read
                pieces, pending = [], b""
    assert answer.startswith(b"HTTP/1.1 "), f"no answer after {sent:,} bytes: {answer[:200]!r}"
    return int(answer.split()[1]), sent


@pytest.mark.parametrize("path, key, total, chunked, status", [
    ("/tokenize", False, 300 << 20, False, 401),
    ("/v1/chat/completions", False, 64 << 20, True, 401),
    ("/v1/chat/completions", True, 300 << 20, False, 413),
    ("/v1/chat/completions", True, 64 << 20, True, 413),
], ids=["300 MB declared, no key", "64 MB chunked, no key", "300 MB declared, with the key",
        "64 MB chunked, with the key"])
@pytest.mark.slow
def test_an_oversized_body_is_refused_before_it_is_read(server, vllm_served, path, key, total, chunked, status):
    """A client without the key made the server read a 300 MB body before its 401 (RSS 850 MB to 1,660 MB); with
    the key, any size was read. Now a request without the key is refused before its body is read, and a body over
    16 MiB once its declared length says so, or once 16 MiB of it are read: the connection is closed and the
    sender stops far short of its end (socket buffers hold a few MB)."""
    client, _ = server
    url, _, progress = vllm_served
    got, sent = patiently(lambda: answer_while_sending(httpx.URL(url), path, WITH_KEY if key else {}, total, chunked),
                          f"the answer to a body of {total:,} bytes", progress)
    assert got == status and sent < total // 2, (got, f"{sent:,} of {total:,} bytes sent")
    assert len(ask(client, QUESTIONS[0], {"gcs_method": "gcswr", "gcs_seed": 2}, tokens=4)) == 4


@pytest.mark.parametrize("path, field, value, stream", [
    ("/v1/chat/completions", "top_k", 10**20, False),
    ("/v1/completions", "top_k", 10**20, True),
    ("/v1/chat/completions", "stream_interval", 2**64, True),
    ("/v1/completions", "n", -(10**30), False),
    ("/v1/chat/completions", "max_completion_tokens", 2**63, False),
    ("/v1/completions", "seed", 2**64, False),
    ("/v1/chat/completions", "top_logprobs", 10**4000, False),
], ids=["chat top_k 10**20", "completions top_k 10**20 streamed", "chat stream_interval 2**64 streamed",
        "completions n -10**30", "chat max_completion_tokens 2**63", "completions seed 2**64",
        "chat top_logprobs 10**4000"])
@pytest.mark.slow
def test_a_sampling_field_past_int64_is_a_400_naming_it(vllm_http, path, field, value, stream):
    """``top_k`` 10**20 was an HTTP 500 (and, streamed, a 200 whose one event was an InternalServerError), as was
    ``stream_interval`` past 2**64 - 1; each integer sampling field is held to int64, and a number of 4,000 digits
    is counted, not quoted."""
    body = {**(REQUEST if path.endswith("chat/completions") else COMPLETION), field: value, "stream": stream}
    answer = vllm_http.post(path, content=json.dumps(body), headers={"content-type": "application/json"})
    error = answer.json()["error"]
    assert answer.status_code == 400 and error["param"] == field, answer.text[:300]
    assert error["message"].startswith(f"{field} must be a whole number from -2**63 to 2**63 - 1") \
        and len(error["message"]) < 200, error["message"]


@pytest.mark.parametrize("fields", ['"logit_bias": {"5": NaN}', '"temperature": Infinity', '"top_p": -1e400'])
@pytest.mark.slow
def test_a_number_json_does_not_have_is_a_400(vllm_http, fields):
    """A NaN ``logit_bias`` was taken (200): the token's logit became NaN."""
    body = json.dumps(REQUEST)[:-1] + ", " + fields + "}"
    answer = vllm_http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 400 and "JSON numbers are finite" in answer.json()["error"]["message"], \
        answer.text[:300]


@pytest.mark.parametrize("content_type", ["Application/JSON", "APPLICATION/JSON; charset=UTF-8",
                                          "application/json; charset=utf-8"])
@pytest.mark.slow
def test_a_boolean_gcs_argument_is_refused_whatever_the_media_type_s_case(vllm_http, content_type):
    """vLLM reads ``Application/JSON`` as JSON (media types are case-insensitive); the check matched lower case
    only, so ``"gcs_seed": true`` ran as seed 1."""
    body = json.dumps({**REQUEST, "vllm_xargs": {"gcs_method": "gcswr", "gcs_seed": True}})
    answer = vllm_http.post("/v1/chat/completions", content=body, headers={"content-type": content_type})
    assert answer.status_code == 400 and "gcs_seed must not be true or false" in answer.json()["error"]["message"]
