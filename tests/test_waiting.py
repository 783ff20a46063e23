"""Tests wait on a served process's progress, never on a clock (``tests/waiting.py``): a server that gets no CPU for a
while, as on a loaded machine, is waited for; one that exits or stops using CPU fails the wait, saying so. The app's
own launch check waits for its page too (``ui.server.startup``)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import psutil
import pytest
from waiting import Progress, app_client, patiently, until

from conftest import free_port

PAUSE_S = 7  # longer than httpx's default 5 s timeout, which gradio_client's requests carried


@pytest.mark.slow
def test_calls_wait_out_an_app_that_gets_no_cpu(app_url, app_progress):
    """At load 8-12 on 2 cores, calls through gradio_client failed with ``httpx.ReadTimeout``: its requests (the
    config, the queue join) carry httpx's default 5 s timeout, and a starved server answers later than that. Here
    the app gets no CPU at all (SIGSTOP) for 7 s, once while a new client reads its config and once while a call
    joins the queue: both are answered."""
    app = psutil.Process(app_progress.process.pid)
    for step in ("connect", "call"):
        app.suspend()
        resume = threading.Timer(PAUSE_S, app.resume)
        resume.start()
        try:
            start = time.monotonic()
            if step == "connect":
                fresh = app_client(app_url, app_progress)
            else:
                assert fresh.predict(api_name="/coupling", trials=500, steps=500)["curve"]
            assert time.monotonic() - start > PAUSE_S - 1  # the answer came after the pause: it was waited for
        finally:
            resume.cancel()
            app.resume()


def process(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code])


def test_a_wait_fails_when_the_server_exits():
    server = process("import time; time.sleep(0.5)")
    try:
        with pytest.raises(AssertionError, match="the server exited while the test waited for the answer"):
            until(lambda: False, "the answer", Progress(server.pid))
    finally:
        server.kill()
        server.wait()


def test_a_wait_fails_when_the_server_stops_using_cpu_and_not_while_it_works():
    idle, busy = process("import time; time.sleep(60)"), process("while True: pass")
    try:
        with pytest.raises(AssertionError, match="the server used no CPU for 1 s while the test waited for x: stuck"):
            until(lambda: False, "x", Progress(idle.pid, stall_s=1))
        working, start = Progress(busy.pid, stall_s=1), time.monotonic()
        until(lambda: time.monotonic() - start > 3, "3 s of work", working)  # three stall limits, and no stall
    finally:
        for server in (idle, busy):
            server.kill()
            server.wait()


def test_patiently_hands_back_the_answer_or_the_error_and_gives_up_on_a_dead_server():
    alive = Progress()
    assert patiently(lambda: 42, "an answer", alive) == 42
    with pytest.raises(ValueError, match="refused"):
        patiently(lambda: (_ for _ in ()).throw(ValueError("refused")), "a refusal", alive)
    server = process("import time; time.sleep(0.5)")
    try:
        with pytest.raises(AssertionError, match="the server exited while the test waited for a hung call"):
            patiently(threading.Event().wait, "a hung call", Progress(server.pid))
    finally:
        server.kill()
        server.wait()


def test_the_launch_check_waits_for_a_page_that_answers_late(monkeypatch):
    """``Blocks.launch`` checks that its own page answers, giving it 3 s, and refuses to start if not: at load 14-17
    the app's page took longer, and the app exited after its whole start-up ("When localhost is not accessible, a
    shareable link must be created"). With ``ui.server.startup.patient_launch_check`` a page answering in 4 s passes; a
    port nobody serves still fails the check."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from gradio import networking

    from ui.server.startup import GRADIO_URL_OK, patient_launch_check

    class Late(BaseHTTPRequestHandler):
        def do_HEAD(self):  # noqa: N802 (http.server's name)
            time.sleep(4)
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Late)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url, closed = f"http://127.0.0.1:{server.server_address[1]}/", f"http://127.0.0.1:{free_port()}/"
    try:
        # Gradio's own check gives up (this worker may have launched the app already, patching it: the original)
        monkeypatch.setattr(networking, "url_ok", GRADIO_URL_OK)  # (and whatever was there, restored after)
        assert not networking.url_ok(url)
        patient_launch_check()
        assert networking.url_ok(url) and not networking.url_ok(closed)
    finally:
        server.shutdown()
        server.server_close()
