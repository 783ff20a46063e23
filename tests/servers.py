"""Processes the tests serve from: a free loopback port, and a command run until its URL answers, stopped after
(with its children), and killed with the pytest process that started it however that ends (``suite_processes``).
Light on purpose (no torch): a small process can start a server the way a test does (tests/test_suite_resources.py).

    with running_server([sys.executable, "app.py"], log, url, env) as (process, progress): ...
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path

import httpx
import psutil
from suite_processes import marked
from waiting import Progress, served, until

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now.

    >>> 0 < free_port() < 65536
    True
    """
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@contextlib.contextmanager
def running_server(command: list[str], log: Path, ready_url: str, env: dict, fail_on: str | None = None):
    """(process, its ``Progress``): ``command`` running from the repository (output in ``log``) once ``ready_url``
    answers 200; stopped after.

    Fails only when the process exits, stops using CPU (``waiting.Progress``) or its log shows ``fail_on``: how
    long start-up takes is ``bench/``'s business, not a test's, and a loaded machine makes it slow, not broken.
    The process and its children die with the pytest process that started it, however that ends, even killed
    (``suite_processes``: ``env`` gets its mark).
    """
    with open(log, "w") as output:
        process = subprocess.Popen(command, cwd=ROOT, env=marked(env), stdout=output, stderr=subprocess.STDOUT)
    try:
        progress = Progress(process.pid, log)

        def ready() -> bool:
            assert not fail_on or fail_on not in log.read_text(), f"the server failed: {log.read_text()[-3000:]}"
            try:  # no client timeout: a server that answers slowly is starting, not failing
                return served("GET", ready_url, progress).status_code == 200
            except httpx.HTTPError:  # not listening yet
                time.sleep(0.5)
                return False

        until(ready, f"{ready_url} to answer", progress)
        yield process, progress
    finally:
        stop_with_children(process)


def stop_with_children(process: subprocess.Popen) -> None:
    """``process`` stopped (SIGTERM, SIGKILL after a minute) and its children too (a vLLM server's engine core and
    worker): none may outlive the test holding memory."""
    try:
        children = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    process.terminate()
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    for child in psutil.wait_procs(children, timeout=30)[1]:  # (a clean stop ends them; a kill leaves them)
        with contextlib.suppress(psutil.NoSuchProcess):
            child.kill()
