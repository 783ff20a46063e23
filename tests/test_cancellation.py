"""Cancellation: a call whose client goes away stops its work and frees the model lane. An HTTP client killed
mid-call (/compare, /trace, /hindsight, /counterfactual) and an MCP client killed mid-call (a tool call otherwise
outlives its client) both end their job, the log says it was abandoned, and the next call is served. A stop reaches
a big batch's prefill between its chunks (and chunking changes no answer); a run that ends by itself is not read as
stopped.

The running app (``python app.py``, the session's ``app_server``) is called from a client process that is killed
once its call is under way; the prefill checks run in-process on the real embedded model. Every check waits for what
it needs to see (a log line, an answer), never for a fixed time.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading

import pytest
from waiting import patiently, until

import gcs
from conftest import log_count

MODEL = "smollm2-135m-instruct"

# -- an HTTP call stops when its client leaves ------------------------------------------------------------------
STORIES = "\n".join(f"Tell me a long story about dragon number {i}, with every detail." for i in range(8))
# Each call as long as the demo's limits allow (256 new tokens, 64 traced), so that it cannot end in the moment
# between its first progress update and its client's kill, on any machine.
ABANDONED = [
    ("/compare", (STORIES, 1.0, 256, 4, 1.0, "is,gcs,gcswr", 0, MODEL)),  # 96 rows: ~27,000 of 32,768 tokens
    ("/trace", ("Tell me a long story about a dragon.\nTell me a long tale about a dragon.", "gcswr", 0, 1.0, 1.0, 64,
                MODEL)),
    ("/hindsight", ("Tell me a long story.", "Once upon a time", "Tell me a long tale.\nTell me a story, a long one.\n"
                    "Tell me a long dragon story.\nTell me a very long story.", "gcswr", 0, 1.0, 1.0, 256, MODEL,
                    False)),
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


# -- an MCP call stops when its client leaves --------------------------------------------------------------
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


# -- a stop reaches the prefill ------------------------------------------------------------------------------
def many_rows(model, rows: int = 48) -> gcs.engines.batch.Batch:
    prompts = [f"Tell me a long story about dragon number {i}, with every detail you know." for i in range(rows)]
    settings = gcs.SamplingSettings(["gcswr"], [0], 1.0, None, None, 8, 0)
    return gcs.engines.batch.Batch([gcs.engines.batch.Row(p, "gcswr", 0) for p in prompts], model, settings)


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
