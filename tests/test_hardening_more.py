"""Hardening III against the running app (``python app.py``): request bodies, one limits table for every model
endpoint, abandoned /trace and /hindsight calls, and what reaches the log.

Every check waits for what it needs to see (a log line, an answer), never for a fixed time.
"""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from conftest import error_text
from waiting import patiently, served, until

HIEROGLYPHS = "\U00013000" * 1000  # 1,000 characters, about 4,000 tokens
TAGS = "Why is the sky blue?" + "\U000e0041" * 20  # invisible: four tokens each


@pytest.mark.slow
def test_oversized_bodies_are_refused_before_they_are_read(app_url, app_progress, client):
    url, json_type = app_url + "gradio_api/call/compare", {"content-type": "application/json"}
    declared = served("POST", url, app_progress, content=b"x" * 3_000_000, headers=json_type)
    chunked = served("POST", url, app_progress, content=(b"x" * 100_000 for _ in range(30)), headers=json_type)
    assert declared.status_code == chunked.status_code == 413 and "request body is over" in declared.text
    assert client.predict("Why?\nHow come?", 0.0, 4, 0, 1.0, "gcswr", seeds=1, api_name="/compare")["responses"]


@pytest.mark.parametrize("endpoint, arguments", [
    ("/trace", (f"{HIEROGLYPHS}\nWhy is the sky blue?",)),
    ("/hindsight", (HIEROGLYPHS, "Blue.", "Why is the sky blue?")),
    ("/hindsight", ("Why is the sky blue?", "Blue.", HIEROGLYPHS)),
    ("/counterfactual", (HIEROGLYPHS, "Blue.", 0, " Red")),
])
@pytest.mark.slow
def test_every_model_endpoint_caps_a_paraphrase_s_tokens(client, endpoint, arguments):
    assert "tokens long as the model sees it" in error_text(lambda: client.predict(*arguments, api_name=endpoint))


@pytest.mark.parametrize("endpoint, arguments", [
    ("/trace", (f"{TAGS}\nWhat makes it blue?",)),
    ("/compare", (f"{TAGS}\nWhat makes it blue?",)),
    ("/hindsight", ("Why is the sky blue?", "Blue\u202e.", "What makes it blue?")),
])
@pytest.mark.slow
def test_invisible_and_direction_overriding_characters_are_refused(client, endpoint, arguments):
    assert "invisible or direction-overriding" in error_text(lambda: client.predict(*arguments, api_name=endpoint))


@pytest.mark.slow
@pytest.mark.parametrize("response", ["Blue\x00.", "Blue\x01 sky", "Blue\x1b[2J"])
def test_a_response_with_control_characters_is_refused_by_hindsight(client, response):
    message = error_text(lambda: client.predict("Why is the sky blue?", response, "What makes it blue?",
                                                 api_name="/hindsight"))
    assert "the response contains control characters" in message


MODEL = "smollm2-135m-instruct"
STORIES = "\n".join(f"Tell me a long story about dragon number {i}, with every detail." for i in range(8))
# Each call as long as the demo's limits allow (256 new tokens, 64 traced), so that it cannot end in the moment
# between its first progress update and its client's kill, on any machine.
ABANDONED = [
    ("/compare", (STORIES, 1.0, 256, 0, 1.0, "is,gcs,gcswr", False, MODEL, 4)),  # 96 rows: ~27,000 of 32,768 tokens
    ("/trace", ("Tell me a long story about a dragon.\nTell me a long tale about a dragon.", "gcswr", 0, 1.0, 1.0, 64,
                MODEL)),
    ("/hindsight", ("Tell me a long story.", "Once upon a time", "Tell me a long tale.\nTell me a story, a long one.\n"
                    "Tell me a long dragon story.\nTell me a very long story.", "gcswr", 0, 1.0, 1.0, 256, MODEL, False)),
    ("/counterfactual", ("Tell me a long story.", "Once upon a time", 1, " dragon", "gcswr", 0, 1.0, 1.0, 256, MODEL,
                         False)),
]
# The client: submit, print the first update (progress, or the result had it finished first), wait to be killed.
# No timeout on its requests (httpx's default 5 s failed them on a loaded machine): the test waits on the app.
ABANDONING_CLIENT = ("import json, sys, time; from gradio_client import Client\n"
                     "c = Client(sys.argv[1], verbose=False, httpx_kwargs={'timeout': None})\n"
                     "job = c.submit(*json.loads(sys.argv[3]), api_name=sys.argv[2])\n"
                     "for update in job:\n    print(json.dumps(update)[:300], flush=True); break\n"
                     "else:\n    print(json.dumps({'finished first': str(job.exception())[:300]}), flush=True)\n"
                     "time.sleep(3600)")


@pytest.mark.slow
@pytest.mark.parametrize("endpoint, arguments", ABANDONED)
def test_an_abandoned_call_stops_its_work(app_url, app_log, app_progress, client, endpoint, arguments):
    """A client that goes away mid-call: the model lane serves the next call, and the log shows the work stopped
    before its end (/compare: fewer tokens than asked for; the others: gcs.Cancelled). A call that had ended
    before the kill fails the test by name: nothing is skipped."""
    import json

    marker = "/compare abandoned by its client" if endpoint == "/compare" else "abandoned request: its work"
    before = app_log.read_text().count(marker)
    abandoned = subprocess.Popen([sys.executable, "-c", ABANDONING_CLIENT, app_url, endpoint, json.dumps(arguments)],
                                 stdout=subprocess.PIPE, text=True)
    try:
        # the client's first update: the work is under way
        first = patiently(abandoned.stdout.readline, f"{endpoint}'s first update", app_progress)
        assert json.loads(first).get("status") in ("working", "generating"), f"no progress before the kill: {first}"
    finally:
        abandoned.kill()
        abandoned.wait()
    # the lane is free again: the next call is served (the client waits as long as it takes)
    assert client.predict("Why?\nHow come?", "gcswr", 0, 1.0, 1.0, 4, api_name="/trace")["responses"]
    until(lambda: app_log.read_text().count(marker) > before, f"{marker!r} in the log (did the call end before the "
          "kill?)", app_progress)
    (line,) = [line for line in app_log.read_text().splitlines() if marker in line][before:]
    if endpoint == "/compare":
        done, most = map(int, re.search(r"stopped after (\d+) of at most (\d+) tokens", line).groups())
        assert done < most == 256, f"the generation was not cut short: {line}"
    else:
        assert line.endswith("its work stopped before its end"), line


@pytest.mark.slow
def test_what_a_refused_raw_call_carries_never_reaches_the_log_whole(app_url, app_log, app_progress):
    secret = "hf_" + "A1b2C3d4E5f6G7h8I9j0K" * 2
    huge = "why " * 200_000  # under the body limit, far over anything a log should hold
    before = app_log.read_text().count("refused a call to trace with 1 of its 7 values")
    for data in ([f"HF_TOKEN={secret}"], [huge]):
        response = served("POST", app_url + "gradio_api/call/trace", app_progress, json={"data": data})
        assert response.status_code == 400 and "this endpoint takes 7 values" in response.text  # no echo, no addresses
        assert secret not in response.text and len(response.text) < 1_000
    # Both refusals were answered, so whatever their handling printed has been written (the app writes its output
    # through at each line end); wait for the app's own line about each refusal, however slow the machine.
    marker = "refused a call to trace with 1 of its 7 values"
    until(lambda: app_log.read_text().count(marker) >= before + 2, "the refusals' lines", app_progress)
    log = app_log.read_text()
    assert secret not in log
    assert "why " * 2_000 not in log  # cut, not copied whole


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


def test_the_browse_lane_tokenizes_with_its_own_tokenizer_beside_generation():
    """A fast tokenizer keeps padding state between calls: two threads sharing one built padded batches with each
    other's settings. Each browse thread gets its own copy, and tokenizing beside a padded batch is safe."""
    import threading
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    import gcs
    from ui import deployment

    model = deployment.load_allowed_model(gcs.DEFAULT_MODEL)
    mine, errors = {}, []

    def browse(name: str):
        tokenizer = deployment.thread_tokenizer(gcs.DEFAULT_MODEL)
        mine[name] = tokenizer
        try:
            for _ in range(1500):
                tokenizer.encode("the spans of a response " * 5, add_special_tokens=False)
        except Exception as error:  # noqa: BLE001 - any failure is the finding
            errors.append(repr(error))

    def generate_side():
        try:
            for _ in range(200):
                model.tokenizer(["short"] * 5 + ["a much longer text " * 20], padding=True, padding_side="left",
                                return_tensors="pt")
        except Exception as error:  # noqa: BLE001
            errors.append(repr(error))

    threads = [threading.Thread(target=browse, args=(f"b{i}",)) for i in range(3)]
    threads.append(threading.Thread(target=generate_side))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:2]
    assert len({id(t) for t in mine.values()}) == 3 and model.tokenizer not in mine.values()


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
