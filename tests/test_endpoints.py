"""``gcs.Endpoint``: real ``gcs vllm-serve`` processes (vLLM's CPU build, the embedded model) as gcs's engine.

Three servers: A (``gcs vllm-serve``, with a key: the suite's shared keyed server, tests/keyed_server.py, which
tests/test_vllm_serve.py uses next), started when the first test needs it, B (the command it runs, without), started
once that test's in-process engine is shut down (a start is mostly one core's work importing vLLM, so B's overlaps the
tests before the one that needs it), and vLLM without the gcs plugin, started for the test that refuses it once B is
gone (three servers at once held 10 GB). The app, on A, starts once the plugin-less server is gone, beside the tests
on A alone that follow it, for the tests at the end (a browser's run, a tab closed mid-run, MCP tool calls): no more
than two of B, the plugin-less server and the app run beside A at once (the app beside B held the worker's processes
at 8.3 GiB). Every test sends few requests of few tokens, but those stopped
mid-run (``stop``, a closed tab), and the frame of one request at a time on A is generated once (``alone``) for every
test that compares with it. The frame of one endpoint equals the in-process vLLM engine's; several endpoints give the
frame of one where each server answers one request at a time (``max_requests=1``: ``gcs vllm-serve`` on CPU does not
promise a request's tokens inside a burst equal its tokens alone, docs/deploy.md).
"""

from __future__ import annotations

import ast
import contextlib
import gc
import http.server
import os
import ssl
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlencode

import httpx
import pandas as pd
import psutil
import pytest
import torch
from keyed_server import KEY, SMALL, early, start
from test_browser import CHROMIUM, TIMEOUT_MS, record_answers
from test_mcp import tool_result
from test_vllm_serve import metric, shared_prefix
from waiting import WaitingTransport, app_client, until

import gcs
from conftest import free_port, log_count, released_to_the_system, running_server, tiny_gcs_model
from gcs.cli.commands import main
from gcs.cli.vllm_server import batch_invariant_environment, server_environment, vllm_serve_command

PROMPTS = ["What is DNA?", "Explain what DNA is."]


def plain(tmp_path_factory):
    """vLLM itself, with gcs's entry point hidden from it: it would sample gcs requests freely."""
    hide = ("import runpy, vllm.v1.sample.logits_processor as lp; lp._load_logitsprocs_plugins = lambda: []; "
            "runpy.run_module('vllm.entrypoints.openai.api_server', run_name='__main__')")
    command = [sys.executable, "-c", hide, *vllm_serve_command(None, port=1, cpu=True, registered=True)[3:], *SMALL]
    command[command.index("--port") + 1] = "PORT"
    return start(tmp_path_factory, "plain", [], command, {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"})


@pytest.fixture(scope="module")
def b_starting(tmp_path_factory):
    """B, starting now: the call that waits until it serves. B runs the command ``gcs vllm-serve`` replaces itself
    with, in the environment it adds (A runs gcs vllm-serve itself): the same server, without importing gcs first.
    The first test asks for it once its in-process engine is shut down (the engine, A, B and the app at once held
    12 GB)."""
    b = [*vllm_serve_command(None, port=1, cpu=True), *SMALL]
    b[b.index("--port") + 1] = "PORT"
    with early(start(tmp_path_factory, "b", [], b, server_environment(SMALL))) as b_served:
        yield b_served


@pytest.fixture(scope="module")
def server_a(keyed_server):
    return keyed_server()


@pytest.fixture(scope="module")
def server_b(b_starting):
    return b_starting()


@pytest.fixture(scope="module")
def app_on_a(server_a, tmp_path_factory):
    """The app (its own process) with GCS_ENDPOINTS naming A and its key in GCS_ENDPOINT_KEY, starting now that A
    serves: a call that waits until it serves, giving (url, log, progress). First asked for by the test after the
    plugin-less server's (B and that server are gone by then)."""
    port, log = free_port(), tmp_path_factory.mktemp("app") / "app.log"
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False",
           "GCS_ENGINE": "transformers", "GCS_ENDPOINTS": server_a[0], "GCS_ENDPOINT_KEY": KEY}
    url = f"http://127.0.0.1:{port}/"

    @contextlib.contextmanager
    def app():
        with running_server([sys.executable, "app.py"], log, url, env,
                            fail_on="Traceback (most recent call last)") as (_, progress):
            yield url, log, progress

    with early(app()) as waiting:
        yield waiting


@pytest.fixture(scope="module")
def quiet_a(server_a, app_on_a):
    """A once the app has checked it, for the tests that compare tokens after the app started: the check's requests
    would share A's batches with a test's rows, and on CPU a request's company changes its tokens
    (``max_requests=1`` promises one request at a time from this client, not from every client). Before the app
    starts, A is quiet: ``server_a``."""
    _, log, progress = app_on_a()
    until(lambda: "endpoint(s): " in log.read_text() or "the endpoints cannot generate" in log.read_text(),
          "the app to check its endpoint", progress)
    return server_a


@pytest.fixture(scope="module")
def alone(server_a, embedded_model) -> pd.DataFrame:
    """The frame of one request at a time on A: what two endpoints, a run that lost one and a run retried after
    busy answers must each give, row for row. Generated before the app starts (the first test to ask runs beside B),
    or after ``quiet_a`` where a test asks for that first."""
    return gcs.compare(PROMPTS, **settings(), model=embedded_model, engine=endpoint_a(server_a, max_requests=1))


def endpoint_a(server_a, **options) -> gcs.Endpoint:
    return gcs.Endpoint(server_a[0], api_key=KEY, **options)


def answered(url: str, reasons: tuple[str, ...] | None = None) -> float:
    """The requests a server finished, whatever their finish reason (or for one of ``reasons``: "stop", "length";
    vLLM counts no aborted request here)."""
    return sum(float(line.split()[-1]) for line in httpx.get(f"{url}/metrics").text.splitlines()
               if line.startswith("vllm:request_success_total{")
               and (reasons is None or any(f'finished_reason="{reason}"' in line for reason in reasons)))


def settings(**changes) -> dict:
    return {"seeds": [0, 1], "max_new_tokens": 12, **changes}


def tokens(frame) -> list[list[int]]:
    return [list(ids) for ids in frame["token_ids"]]


BURSTS = 3  # tries of the burst below: a loaded machine may split one into other batches


@pytest.mark.slow  # real vLLM servers
def test_an_endpoint_answers_as_the_in_process_vllm_engine(server_a, embedded_model, request, monkeypatch):
    """A burst of the frame's 12 rows on A (each a request, all sent at once) is the frame the in-process engine
    generates: the client lays out prompts, token ids and gcs arguments as the engine does. On CPU a request's tokens
    depend on the requests batched beside it, and a burst's batches on when its requests arrive: the in-process
    engine takes all 12 at once, and so does A when they arrive within one engine step, but a loaded machine can split
    a burst (this test, with one burst, failed at load 7-26). So the burst is sent up to ``BURSTS`` times and one must
    give the engine's frame exactly; a client that lays a row out otherwise never does. The in-process engine runs
    here with vLLM's own linear kernels, as the server does: by default on CPU it computes linears in row blocks
    (``GCS_ROW_INVARIANT``), which in bfloat16 round otherwise: on an AVX512-BF16 machine 4 rows of 12 differed in
    every burst, and 1 with the row blocks off; so both sides run in float32 (``keyed_server.DTYPE``), as on the
    machines where this test was written."""
    monkeypatch.setenv("GCS_ROW_INVARIANT", "off")
    exact = gcs.load_model(dtype=torch.float32)  # A's dtype
    local = gcs.compare(PROMPTS, **settings(), model=exact, engine="vllm")
    gcs.engines.vllm.close_engines()  # (~3 GB the servers and the app need more, for the rest of the module)
    del exact
    gc.collect()  # (what holds the engine's memory in cycles)
    released_to_the_system()  # (0.4 GiB glibc kept of the engine's, measured: for the rest of the module too)
    request.getfixturevalue("b_starting")  # (now that the engine is gone; for the tests after this one)
    differing = []
    for _ in range(BURSTS):
        served = gcs.compare(PROMPTS, **settings(), model=embedded_model, engine=endpoint_a(server_a))
        assert len(served) == 12
        differing.append(sum(a != b for a, b in zip(tokens(served), tokens(local), strict=True)))
        if differing[-1] == 0:
            break
    assert differing[-1] == 0, f"rows differing from the in-process engine's, burst by burst: {differing}"
    assert list(served["finished"]) == list(local["finished"])
    assert list(served["response"]) == list(local["response"])


@pytest.mark.slow  # real vLLM servers
def test_a_streamed_frame_ends_as_the_whole_one_and_gcswr_couples_the_paraphrases(server_a, embedded_model):
    whole = gcs.compare(PROMPTS, **settings(seeds=range(4), methods=["is", "gcswr"]), model=embedded_model,
                        engine=endpoint_a(server_a, max_requests=1))
    frames = list(gcs.stream_compare(PROMPTS, **settings(seeds=range(4), methods=["is", "gcswr"]),
                                     model=embedded_model, engine=endpoint_a(server_a, max_requests=1)))
    assert len(frames) > 2 and tokens(frames[-1]) == tokens(whole)  # partial frames first, as tokens arrive

    def shared(method: str) -> int:
        pairs = whole[whole["method"] == method].groupby("seed")["token_ids"]
        return sum(shared_prefix(*map(list, pair)) for _, pair in pairs)

    assert shared("gcswr") > shared("is") + 8, (shared("gcswr"), shared("is"))  # measured: 38 against 4


@pytest.mark.slow  # real vLLM servers
def test_two_endpoints_give_the_frame_of_one_and_share_the_rows(server_a, server_b, alone, embedded_model):
    done = answered(server_b[0])
    two = gcs.compare(PROMPTS, **settings(), model=embedded_model,
                      engine=[endpoint_a(server_a, max_requests=1), gcs.Endpoint(server_b[0], max_requests=1)])
    assert tokens(two) == tokens(alone)
    assert answered(server_b[0]) > done  # B answered some


@pytest.mark.slow  # real vLLM servers
def test_the_cli_generates_on_an_endpoint_with_the_key_from_the_environment(server_a, monkeypatch, capsys):
    monkeypatch.setenv("GCS_ENDPOINT_KEY", KEY)
    assert main(["compare", PROMPTS[0], "--endpoint", server_a[0], "--max-new-tokens", "6", "--methods", "gcswr"]) == 0
    assert "== gcswr" in capsys.readouterr().out
    monkeypatch.delenv("GCS_ENDPOINT_KEY")
    assert main(["compare", PROMPTS[0], "--endpoint", server_a[0], "--max-new-tokens", "6"]) == 2
    error = capsys.readouterr().err
    assert f"endpoint {server_a[0]} answered /v1/models with HTTP 401" in error and "Traceback" not in error
    assert "it wants a key: give api_key= (on the command line and in the app, GCS_ENDPOINT_KEY)" in error


@pytest.mark.slow  # real vLLM servers
def test_a_request_the_server_refuses_is_a_sentence_naming_the_endpoint(server_a, embedded_model):
    """A prompt within the local model's context window but past the server's (--max-model-len 1024)."""
    with pytest.raises(ValueError, match=rf"endpoint {server_a[0]} refused a request with HTTP 400: .*1024"):
        gcs.compare(["DNA " * 1100], methods="gcswr", max_new_tokens=4, model=embedded_model,
                    engine=endpoint_a(server_a))


@pytest.mark.slow  # real vLLM servers
def test_another_chat_template_is_refused_before_any_row(server_a, embedded_model):
    import copy

    tokenizer = copy.deepcopy(embedded_model.tokenizer)
    tokenizer.chat_template = tokenizer.chat_template.replace("<|im_start|>", "<|im_start|> ")
    other = gcs.Model(name="smollm2-other-template", model=embedded_model.model, tokenizer=tokenizer)
    with pytest.raises(ValueError, match="with another chat template than the local model 'smollm2-other-template'"):
        gcs.compare(PROMPTS, max_new_tokens=4, model=other, engine=endpoint_a(server_a))


@pytest.mark.slow  # real vLLM servers
def test_the_key_shows_nowhere(server_a, embedded_model, caplog, tmp_path):
    endpoint = endpoint_a(server_a)
    frame = gcs.compare(PROMPTS[:1], methods="gcswr", max_new_tokens=4, model=embedded_model, engine=endpoint)
    gcs.write_csv(frame, tmp_path / "frame.csv")
    wrong = gcs.Endpoint(server_a[0], api_key="not-" + KEY)
    with pytest.raises(gcs.EndpointError) as refused:
        gcs.compare(PROMPTS[:1], max_new_tokens=4, model=embedded_model, engine=wrong)
    shown = [repr(endpoint), str(endpoint.as_engine()), str(refused.value), caplog.text,
             (tmp_path / "frame.csv").read_text(), frame.to_json()]
    assert "HTTP 401" in str(refused.value) and "the key sent was refused" in str(refused.value)
    assert not [text for text in shown if KEY in text]
    # nor on the server's side: gcs vllm-serve -- --api-key KEY moved it into VLLM_API_KEY (neither `ps` nor the
    # command it printed shows it), and the server still asked for it (the 401 above)
    process, progress = server_a[1], server_a[2]
    printed = progress.log.read_text()
    assert "(with the --api-key given, as VLLM_API_KEY)" in printed and KEY not in printed
    assert KEY not in " ".join(psutil.Process(process.pid).cmdline())


@pytest.mark.slow  # real vLLM servers
def test_a_killed_endpoint_hands_its_rows_to_the_others_then_fails_by_name(server_a, server_b, alone,
                                                                           embedded_model):
    """B is killed while it answers: its rows start again on A, and the frame is A's alone. Then B alone fails with
    an error naming it and what it said."""
    url_b, process_b, progress_b = server_b
    b = gcs.Endpoint(url_b, max_requests=1)
    b.as_engine().connect(embedded_model)  # (now: its probe's requests are not the one awaited below)
    with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=url_b, transport=WaitingTransport(progress_b)) as http:
        # (B answers its half of the rows one after another: it is running one whenever it is looked at)
        running = pool.submit(gcs.compare, PROMPTS, **settings(), model=embedded_model,
                              engine=[endpoint_a(server_a, max_requests=1), b])
        until(lambda: metric(http, "vllm:num_requests_running") >= 1, "a request on B", progress_b)
        server = psutil.Process(process_b.pid)
        for part in [server, *server.children(recursive=True)]:  # its engine core and worker too, as a dead machine
            part.kill()                                          # (orphans would hold memory for the whole suite)
        assert tokens(running.result()) == tokens(alone)
    with pytest.raises(gcs.EndpointError, match=rf"every endpoint failed \({url_b}: .*onnect"):
        gcs.compare(PROMPTS[:1], methods="gcswr", max_new_tokens=4, model=embedded_model, engine=b)


@pytest.mark.slow  # real vLLM servers
def test_a_server_without_the_plugin_is_refused(tmp_path_factory, embedded_model):
    """(After the test above has killed B: the plugin-less server starts beside A alone; the app starts after it.)"""
    with plain(tmp_path_factory) as (url, _, _):
        with pytest.raises(ValueError, match=rf"endpoint {url} has no gcs plugin"):
            gcs.compare(PROMPTS, max_new_tokens=4, model=embedded_model, engine=gcs.Endpoint(url))


@pytest.mark.slow  # real vLLM servers
def test_sweep_ab_and_rounds_run_on_endpoints_and_stop_aborts_the_requests(server_a, app_on_a, embedded_model):
    """(app_on_a: the app starts beside this test, for the tests at the end: none of this test's checks depends on
    which requests share A's batches.)"""
    endpoint = endpoint_a(server_a)
    swept = gcs.sweep([PROMPTS], temperatures=[1.0], methods=["gcswr"], seeds=2, metrics=["jaccard"],
                      model=embedded_model, max_new_tokens=6, engine=endpoint)
    assert len(swept) == 2 and swept["consistency"].notna().all()
    variant = gcs.Variant(embedded_model, system="Answer briefly.")
    pairs = gcs.ab(PROMPTS[:1], gcs.Variant(embedded_model), variant, seeds=2, metrics=["length"], max_new_tokens=6,
                   engine=[endpoint])
    assert len(pairs) == 4 and pairs["answer_a"].str.len().gt(0).all()
    *_, last = gcs.compare_rounds(PROMPTS, methods=["is", "gcswr"], seeds=4, rounds=[4], metrics=["jaccard"],
                                  model=embedded_model, max_new_tokens=6, engine=gcs.Endpoint(server_a[0],
                                                                                              api_key=KEY,
                                                                                              max_requests=1))
    assert last.final and "each request ran alone on its server (max_requests=1)" in last.reason
    stop = threading.Event()
    _, _, progress = server_a
    with ThreadPoolExecutor(1) as pool, httpx.Client(base_url=server_a[0]) as http:
        running = pool.submit(gcs.compare, ["Count from 1 to 1000, one number a line."], methods="gcswr",
                              seeds=[0, 1], max_new_tokens=1000, model=embedded_model, engine=endpoint, stop=stop)
        until(lambda: metric(http, "vllm:num_requests_running") >= 1, "a request to run", progress)
        stop.set()
        with pytest.raises(gcs.Cancelled):
            running.result()
        until(lambda: metric(http, "vllm:num_requests_running") == 0, "the requests to be aborted", progress)


def test_an_endpoint_is_checked_and_keeps_its_key_to_itself():
    endpoint = gcs.Endpoint("https://gpu.example:8000/v1/", api_key=KEY, max_requests=2)
    assert endpoint.url == "https://gpu.example:8000" and KEY not in repr(endpoint) + repr(endpoint.as_engine())
    for bad, error, message in [
        ({"url": 8000}, TypeError, "url must be a string"),
        ({"url": "https://user:pass@gpu.example"}, ValueError, "must not hold credentials"),
        ({"url": "http://gpu.example?x=1"}, ValueError, "no query"),
        ({"url": "http://a", "timeout": "5"}, TypeError, "timeout must be a number"),
        ({"url": "http://a", "timeout": 0}, ValueError, "timeout must be a positive"),
        ({"url": "http://a", "max_requests": 1.0}, TypeError, "max_requests must be an integer"),
        ({"url": "http://a", "max_requests": 0}, ValueError, "max_requests must be 1 to 1024"),
        ({"url": "http://a", "api_key": 5}, TypeError, "api_key must be a string"),
        ({"url": "http://a", "model": ""}, ValueError, "model must be a served model's name"),
    ]:
        with pytest.raises(error, match=message):
            gcs.Endpoint(**bad)
    with pytest.raises(TypeError, match=r"engine\[1\] must be a gcs.Endpoint"):
        gcs.check_engine([endpoint, "vllm"])
    with pytest.raises(ValueError, match="names an endpoint twice"):
        gcs.check_engine([endpoint, endpoint])
    with pytest.raises(ValueError, match="ensembling is not available on served endpoints"):
        gcs.check_engine(endpoint, ensembling=True)
    with pytest.raises(ValueError, match=r"a served endpoint is gcs.Endpoint\(url\)"):
        gcs.check_engine("http://gpu.example:8000")


def test_a_web_server_that_is_not_vllm_is_named_so_not_quoted():
    """A real HTTP server that is not vLLM answers /v1/models with an HTML error page: the error says so in a
    sentence instead of pasting the page."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(gcs.EndpointError) as refused:
            gcs.compare(["w1 w2", "w3 w4"], max_new_tokens=2, model=tiny_gcs_model(),
                        engine=gcs.Endpoint(url, timeout=30))
    finally:
        server.shutdown()
    message = str(refused.value)
    assert f"endpoint {url} answered /v1/models with HTTP 404" in message
    assert "an HTML page, not vLLM's JSON: is this a gcs vllm-serve server?" in message and "<" not in message


def test_a_server_whose_certificate_is_not_trusted_is_refused_before_any_request(tmp_path):
    """TLS certificates are verified: a real HTTPS server with a self-signed certificate is refused during the
    handshake, so it never receives a request (nor the key in its headers), and the error names the endpoint."""
    key, certificate = tmp_path / "key.pem", tmp_path / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
                    str(certificate), "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    requests = []

    class Counting(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            requests.append((self.path, dict(self.headers)))
            self.send_response(404)
            self.end_headers()

        def log_message(self, *args):  # the handshake failures are expected here
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Counting)
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(certificate, key)
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    server.handle_error = lambda *args: None  # a refused handshake is what this test wants
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"https://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(gcs.EndpointError) as refused:
            gcs.compare(["w1 w2", "w3 w4"], max_new_tokens=2, model=tiny_gcs_model(),
                        engine=gcs.Endpoint(url, api_key=KEY, timeout=30))
    finally:
        server.shutdown()
    message = str(refused.value)
    assert url in message and "certificate" in message.lower() and KEY not in message, message
    assert requests == []  # no request got past the handshake: no path, no header, no key


def test_the_cli_refuses_two_engines_and_batch_invariance_on_cpu(capsys):
    assert main(["compare", "Why?", "--engine", "vllm", "--endpoint", "http://127.0.0.1:9"]) == 2
    assert "--engine vllm and --endpoint name two engines" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--batch-invariant needs a GPU"):
        batch_invariant_environment(cpu=True)
    assert batch_invariant_environment(cpu=False) == {"VLLM_BATCH_INVARIANT": "1"}


@pytest.mark.slow  # real vLLM servers
def test_the_page_runs_on_the_endpoints_of_the_environment_and_shows_the_key_nowhere(server_a, embedded_model,
                                                                                    monkeypatch, caplog):
    """GCS_ENDPOINTS and GCS_ENDPOINT_KEY, as the app reads them at start: the side by side (in rounds) and its API
    (what MCP answers) generate there, and neither they, their downloads nor the log show the key."""
    from gcs.engines.endpoints import configured_endpoints
    from ui.shared import deployment
    from ui.tabs import ab, hindsight, stepthrough
    from ui.tabs.side_by_side import compare, compare_rounds

    monkeypatch.setenv("GCS_ENDPOINTS", server_a[0])
    monkeypatch.setenv("GCS_ENDPOINT_KEY", KEY)
    engine = deployment.Engine("transformers", configured_endpoints())
    engine.start(embedded_model)
    assert engine.endpoints is not None and engine.for_request(False, embedded_model) is engine.endpoints
    assert engine.for_request(True, embedded_model) == "transformers"  # ensembling needs every logit: here
    for module in (deployment, compare, compare_rounds, ab, hindsight, stepthrough):
        monkeypatch.setattr(module, "ENGINE", engine)
    page = list(compare.compare_stream("\n".join(PROMPTS), 1.0, 4, 0, 1.0, ["is", "gcswr"], False,
                                       deployment.DEFAULT_MODEL, 4))
    assert "on served endpoints, requests ran in bursts" in page[-1]["status"], page[-1]["status"]
    assert f"Answers of {gcs.DEFAULT_MODEL}, generated on 1 served vLLM endpoint(s)." in page[-1]["status"]
    one_batch = list(compare.compare_stream("\n".join(PROMPTS), 1.0, 4, 0, 1.0, ["is", "gcswr"], False,
                                            deployment.DEFAULT_MODEL, 2, compare.HIGHLIGHTS[0], False))  # one batch
    assert one_batch[-1]["status"] == f"Done: {gcs.DEFAULT_MODEL}, generated on 1 served vLLM endpoint(s)."
    page += one_batch
    answer = [update for update in compare.compare("\n".join(PROMPTS), 1.0, 4, 2, 1.0, "is,gcswr")
              if "stopping" in update][-1]
    assert "on served endpoints" in answer["stopping"]["reason"]
    downloads = [open(path).read() for update in page for path in (update.get("downloads") or [])]
    local, ab_run = logit_tabs_and_ab(server_a, engine, monkeypatch)
    downloads.append(open(ab_run[-1][-2]).read())
    shown = [repr(page), repr(answer), caplog.text, *downloads, repr(local), repr(ab_run[-1])]
    assert downloads and not [text for text in shown if KEY in text]


def logit_tabs_and_ab(server_a, engine, monkeypatch) -> tuple[list, list]:
    """The tabs that read every logit (step-through, hindsight, counterfactual, why two A/B answers parted) run here
    and say so; the A/B tab runs on the endpoint (A answers its requests) and says which backend answered. Their
    final updates."""
    from ui.shared import deployment
    from ui.tabs import ab, hindsight, stepthrough

    model = deployment.DEFAULT_MODEL
    note = f"Computed on this server's local copy of {model}: served endpoints give tokens, not every logit."
    local = [list(stepthrough.start("\n".join(PROMPTS), "gcswr", 0, 1.0, 1.0, 3, model))[-1][-1],
             list(hindsight.hindsight_ui(PROMPTS[0], "DNA is a molecule.", PROMPTS[1], "gcswr", 0, 1.0, 1.0, 8,
                                         model))[-1][-1],
             list(hindsight.counterfactual_ui(PROMPTS[0], "DNA is a molecule.", 1, " RNA", "gcswr", 0, 1.0, 1.0, 8,
                                              model))[-1][-1]]
    assert local[0].startswith("Token 1 of ") and local[1:] == [f"Done. {note}", f"Done. {note}"], local
    assert local[0].endswith(f". {note}"), local
    done = answered(server_a[0])
    ab_run = list(ab.ab_ui("my prompts", PROMPTS[0], 0, "", "{prompt}", 1.0, 1.0, model, "default",
                           "Answer in French.", "{prompt}", 1.0, 1.0, model, "default", 2, "gcswr", ["length"], 4))
    assert ab_run[-1][-1] == f"Done: {model}, generated on 1 served vLLM endpoint(s).", ab_run[-1][-1]
    assert answered(server_a[0]) >= done + 8  # 1 prompt x 2 seeds x 2 arms x (GCSwR and the IS control)
    parting = [value for label, value in ab_run[-1][3]["choices"] if "part at" in label]
    assert parting, f"no pair parted in 4 tokens: {ab_run[-1][3]['choices']}"  # (B answers in French)
    why = ab.why_ui(ab_run[-1][4], parting[0])[0]
    assert why.endswith(f" {note}"), why  # why they parted: both races' every logit, computed here
    monkeypatch.setattr(stepthrough, "ENGINE", deployment.Engine("transformers"))  # no endpoint: nothing said
    assert list(stepthrough.start("\n".join(PROMPTS), "gcswr", 0, 1.0, 1.0, 3, model))[-1][-1] == \
        local[0].removesuffix(f" {note}")
    return local, ab_run


class FaultyProxy(http.server.ThreadingHTTPServer):
    """An HTTP proxy in front of a real server that answers its next ``busy`` completion requests with 503 (Retry-After
    0), and every completion request after ``alive`` of them with 500: the faults a loaded or dying server shows."""

    def __init__(self, upstream: str):
        super().__init__(("127.0.0.1", 0), _Forward)
        self.upstream, self.busy, self.alive, self.completions, self.refused = upstream, 0, None, 0, 0
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def fault(self, path: str) -> int | None:
        """The status to answer ``path`` with instead of the server's, if any."""
        with self.lock:
            if path != "/v1/completions":
                return None
            if self.busy:
                self.busy, self.refused = self.busy - 1, self.refused + 1
                return 503
            if self.alive is not None and self.completions >= self.alive:
                return 500
            self.completions += 1
            return None


class _Forward(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):  # (the test's output stays the test's)
        pass

    def do_GET(self):
        self.forward(b"")

    def do_POST(self):
        self.forward(self.rfile.read(int(self.headers["Content-Length"])))

    def forward(self, body: bytes) -> None:
        status = self.server.fault(self.path)
        if status is not None:
            self.send_response(status)
            self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "injected"}}')
            return
        headers = {name: self.headers[name] for name in ("Content-Type", "Authorization") if self.headers[name]}
        with httpx.stream(self.command, self.server.upstream + self.path, content=body, headers=headers,
                          timeout=None) as answer:
            self.send_response(answer.status_code)
            self.send_header("Content-Type", answer.headers.get("content-type", "application/json"))
            self.end_headers()  # (HTTP/1.0: the body ends when the connection closes)
            for chunk in answer.iter_raw():
                self.wfile.write(chunk)
                self.wfile.flush()


@contextlib.contextmanager
def faulty_proxy(upstream: str):
    proxy = FaultyProxy(upstream)
    thread = threading.Thread(target=proxy.serve_forever, daemon=True)
    thread.start()
    try:
        yield proxy
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.mark.slow  # real vLLM servers
def test_busy_answers_are_retried_and_a_failed_sweep_keeps_its_batches_to_resume(quiet_a, alone, embedded_model):
    server_a = quiet_a
    with faulty_proxy(server_a[0]) as proxy:
        through = gcs.Endpoint(proxy.url, api_key=KEY, max_requests=1)
        through.as_engine().connect(embedded_model)
        proxy.busy = 3
        frame = gcs.compare(PROMPTS, **settings(), model=embedded_model, engine=through)
        assert proxy.refused == 3 and proxy.busy == 0
        assert tokens(frame) == tokens(alone)
        kept: list = []
        proxy.alive = proxy.completions + 4  # two cells of two paraphrases, then every answer a 500
        sweep = {"temperatures": [1.0], "methods": ["gcswr"], "seeds": 4, "metrics": ["jaccard"],
                 "model": embedded_model, "max_new_tokens": 6, "batch_rows": 2}
        with pytest.raises(gcs.EndpointError, match=rf"{proxy.url}: HTTP 500: injected"):
            gcs.sweep([PROMPTS], **sweep, on_results=kept.append, engine=through)
        assert [len(part) for part in kept] == [1, 1]  # the batches before the fault
        rest = gcs.sweep([PROMPTS], **sweep, resume=pd.concat(kept), engine=endpoint_a(server_a, max_requests=1))
        assert sorted(rest["seed"]) == [2, 3]


@pytest.mark.slow  # a real vLLM server, the app and a browser
def test_the_side_by_side_streams_from_an_endpoint_in_a_browser(server_a, app_on_a):
    """The app started with GCS_ENDPOINTS and GCS_ENDPOINT_KEY: a visitor's Generate streams the answers from A, the
    status says where they came from, and the key is nowhere in the page, its config or the app's log."""
    from playwright.sync_api import expect, sync_playwright

    url, log, _ = app_on_a()
    done = answered(server_a[0])
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(TIMEOUT_MS)  # a busy machine is slow, not broken
        page.goto(url + "?seeds=4&max_new_tokens=8")
        expect(page.locator("#compare-seeds input[type=number]")).to_have_value("4", timeout=TIMEOUT_MS)
        record_answers(page)  # answers show while the run generates
        page.locator("#run-compare").click()
        # (expect's own timeout is 5 s whatever the page's default: each wait names the generous one)
        expect(page.locator("#status")).to_contain_text(f"Answers of {gcs.DEFAULT_MODEL}, generated on 1 served "
                                                        "vLLM endpoint(s).", timeout=TIMEOUT_MS)
        expect(page.locator("#status")).to_contain_text("Done: ", timeout=TIMEOUT_MS)
        for method in ("is", "gcs", "gcswr"):
            expect(page.locator(f"#responses-{method}")).to_contain_text("[2]", timeout=TIMEOUT_MS)
        seen = page.evaluate("window.answersSeen")
        html, config = page.content(), page.request.get(url + "config").text()
        browser.close()
    assert [answers for status, answers in seen if "[1]" in answers and "generating" in status], seen[:3]
    assert answered(server_a[0]) > done
    assert KEY not in html and KEY not in config and KEY not in log.read_text()


COUNTING = "Count from 1 to 1000, one number a line.\nWrite every number from 1 to 1000, one per line."


@pytest.mark.slow  # a real vLLM server, the app and a browser
def test_a_closed_tab_aborts_its_run_s_requests_on_the_endpoint(server_a, app_on_a):
    """A visitor starts a long side by side on A (96 rows of up to 256 tokens, one batch) and closes the tab once A
    runs its requests: the app stops the work (its log says so), A aborts the requests in flight (none runs or
    waits), and far fewer rows ended than the run holds: cut short, not run to its end."""
    from playwright.sync_api import expect, sync_playwright

    url, log, _ = app_on_a()
    a, _, progress = server_a
    rows, stopped = 3 * 16 * 2, "abandoned request: its work stopped before its end"
    marked, ended = log_count(log, stopped), answered(a, ("stop", "length"))
    with sync_playwright() as playwright, httpx.Client(base_url=a) as http:
        generated = metric(http, "vllm:generation_tokens_total")
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
        page = browser.new_page()
        page.set_default_timeout(TIMEOUT_MS)  # a busy machine is slow, not broken
        page.goto(url + "?" + urlencode({"q": COUNTING, "seeds": 16, "max_new_tokens": 256, "rounds": "false"}))
        expect(page.locator("#compare-seeds input[type=number]")).to_have_value("16", timeout=TIMEOUT_MS)
        page.locator("#run-compare").click()
        until(lambda: metric(http, "vllm:num_requests_running") >= 1, "the run's requests on A", progress)
        page.close()
        # (either: a run the app did not stop ends with every row, and the assertions below say so)
        until(lambda: log_count(log, stopped) > marked or answered(a, ("stop", "length")) >= ended + rows,
              "the app to stop the run", progress)
        until(lambda: metric(http, "vllm:num_requests_running") + metric(http, "vllm:num_requests_waiting") == 0,
              "A's requests to be aborted", progress)
        browser.close()
        tokens_generated = metric(http, "vllm:generation_tokens_total") - generated
    finished = answered(a, ("stop", "length")) - ended
    assert log_count(log, stopped) > marked, log.read_text()[-2000:]
    assert finished < rows / 2 and tokens_generated < rows * 256 / 4, (finished, tokens_generated)


@pytest.mark.slow  # a real vLLM server and the app
def test_no_visitor_value_makes_the_app_call_a_url(server_a, app_on_a):
    """Only the operator names endpoints (GCS_ENDPOINTS): a URL a visitor sends where a model (either A/B arm's too) or
    a prompt goes is refused or taken as text, and the address it names is never called (a listening socket counts
    every connection made to it)."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.2)
    address, calls, done = f"http://127.0.0.1:{listener.getsockname()[1]}", [], threading.Event()

    def count():
        while not done.is_set():
            with contextlib.suppress(TimeoutError):
                calls.append(listener.accept()[0].close())

    threading.Thread(target=count, daemon=True).start()
    url, log, progress = app_on_a()
    try:
        client = app_client(url, progress)
        for model in (address, address + "/v1", f"{address}/v1/completions"):
            with pytest.raises(Exception, match="model") as refused:
                client.predict("\n".join(PROMPTS), 1.0, 4, [1], 1.0, "gcswr", 0, model, False, api_name="/compare")
            assert address not in str(refused.value) or "not offered" in str(refused.value), refused.value
            with pytest.raises(Exception, match="model"):
                client.predict(PROMPTS[0], b_model=model, seeds=2, max_new_tokens=4, scores="length", api_name="/ab")
        answer = client.predict(f"{address}/v1\nWhat is {address}?", 1.0, 4, [1], 1.0, "gcswr", 0,
                                "smollm2-135m-instruct", False, api_name="/compare")  # a URL as a question is text
        assert answer["responses"]["gcswr"]
    finally:
        done.set()
    assert calls == [], f"the app called {address} {len(calls)} time(s)"


@pytest.mark.slow
def test_mcp_tool_calls_on_an_endpoint_show_the_key_nowhere(server_a, app_on_a):
    """Through the real MCP transport, against the app started with GCS_ENDPOINT_KEY: a compare tool call generates
    on A, and neither its answer (every content item, text and structured) nor what the app logged meanwhile shows
    the key; an A/B tool call whose arm B the server refuses (its system prompt alone is ~1,500 tokens, past A's
    --max-model-len 1024) is an error quoting A's sentence, naming A "endpoint 1", with neither the key nor a
    traceback."""
    url, log, progress = app_on_a()
    logged, done = len(log.read_text()), answered(server_a[0])
    answer = tool_result(url, progress, "compare", {"paraphrases": "\n".join(PROMPTS), "max_new_tokens": 6,
                                                    "seeds": [3], "methods": "is,gcswr"})
    assert not answer.isError, answer.content
    assert ast.literal_eval(answer.content[0].text)["responses"]["gcswr"][1]
    assert answered(server_a[0]) >= done + 4  # 2 paraphrases x 2 methods, generated on A
    refused = tool_result(url, progress, "ab", {"prompts": PROMPTS[0], "b_system": "漢" * 500, "seeds": 2,
                                                "max_new_tokens": 4, "scores": "length"})
    error = " ".join(item.text for item in refused.content)
    # (a visitor reads the endpoint's name, the app's log its URL: tests/test_endpoint_answers.py)
    assert refused.isError and "endpoint 1 refused a request with HTTP 400" in error and server_a[0] not in error, error
    assert "1024" in error and "Traceback" not in error
    printed = log.read_text()[logged:]
    assert "Traceback" not in printed, printed
    assert not [text for text in (answer.model_dump_json(), refused.model_dump_json(), printed) if KEY in text]
