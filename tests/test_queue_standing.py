"""A run that waits for the model says where it stands: runs ahead of it in its lane and when it should start, read
from a real Gradio queue (``ui.server.serving.lane_standing``) and said in the status line
(``ui.shared.messages.say_working``)."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import gradio as gr
from gradio_client import Client

from conftest import free_port

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ui.server import serving  # noqa: E402
from ui.shared import messages  # noqa: E402

WAIT_S = 600  # generous: a busy machine is slow, not broken


def until(condition, what: str):
    deadline = time.time() + WAIT_S
    while not (found := condition()):
        assert time.time() < deadline, f"never: {what}"
        time.sleep(0.05)
    return found


def test_a_waiting_run_is_told_its_place_and_when_it_should_start():
    release, started = threading.Event(), []

    def work(text: str) -> str:
        started.append(text)
        if text != "first":  # the first run ends at once: the lane then has a past run to estimate from
            release.wait(WAIT_S)
        return text

    with gr.Blocks() as demo:
        box, out = gr.Textbox(), gr.Textbox()
        gr.Button().click(work, box, out, concurrency_id="model", concurrency_limit=1, api_name="work")
    demo.queue(max_size=None)
    standing = serving.lane_standing(demo)
    port = free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, server_name="127.0.0.1", quiet=True)
    try:
        assert standing("model") == (0, None)  # nothing has run: nobody ahead, nothing to estimate from
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        assert client.submit("first", api_name="/work").result(timeout=WAIT_S) == "first"
        running, waiting = client.submit("running", api_name="/work"), client.submit("waiting", api_name="/work")
        ahead, starts = until(lambda: (found := standing("model"))[0] == 2 and found, "a run and a waiting one")
        assert starts is not None and starts >= 0
        messages.watch_lanes(standing)
        assert messages.say_working("model").startswith("Waiting in the queue: 2 runs ahead of yours; yours should "
                                                        "start in about ")
        assert messages.say_working("coupling") == messages.WORKING  # another lane: nobody ahead there
        release.set()
        assert [running.result(timeout=WAIT_S), waiting.result(timeout=WAIT_S)] == ["running", "waiting"]
        assert until(lambda: standing("model") and standing("model")[0] == 0, "the lane empty again")
        assert messages.say_working("model") == messages.WORKING
        client.close()
    finally:
        messages.watch_lanes(None)
        release.set()
        demo.close()
