"""One keyed ``gcs vllm-serve`` shared by the test files that need a real server with the gcs plugin
(tests/test_endpoints.py's server A and tests/test_vllm_serve.py's server): a start is ~1.5 minutes of a core and a
server holds ~3.5 GB, so the suite starts one where it started two.

The files run in one pytest-xdist worker, one after the other (``SuiteScheduling``, in the root
``conftest.py``); the server starts when the first test that needs it asks (``SHARED.waiting``: in a thread, so that
other servers start beside it) and stops once the next test is in no file that shares it (tests/conftest.py's
``pytest_runtest_teardown``), so it holds no memory through the rest of the worker's files. A run of one of the files
alone, or with ``-n 0``, starts it itself. Its settings are what both files' premises allow: float32 (test_endpoints
compares A with the in-process engine; docs/testing.md, "Shared servers"), a small KV cache and context.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import sys
import threading
from collections.abc import Callable

import httpx
from servers import free_port, running_server
from waiting import until

KEY = "gcs-test-key-7f3a9c21"  # what no link, log, error or download may show
# float32 whatever the machine: test_endpoints compares A with the in-process engine, and in bfloat16 (the default
# on an AVX512-BF16 machine) kernels that differ only in their order of summation give other tokens now and then
DTYPE = "float32"
# 128 MiB of KV cache holds ~2,900 of the embedded model's tokens in float32: every test's requests at once (the
# largest, counted to 1000 or killed mid-answer, are stopped early), and less memory beside the in-process engine
SMALL = ["--dtype", DTYPE, "--kv-cache-memory-bytes", str(128 << 20), "--max-model-len", "1024"]
# the files that share it (by name): the scheduler keeps them in one worker, and the server stops after the last
SHARING_FILES = ("test_endpoints.py", "test_vllm_serve.py")
# the files whose tests use the app in its own process (tests/conftest.py's ``app_server``), the same way: one scope
# (the root conftest.py's ``SHARED_SCOPES``, named by the first), and the app stops after the last (it held ~3.5 GiB to
# the worker's end)
APP_FILES = ("test_browser.py", "test_app.py", "test_cancellation.py", "test_error_quoting.py", "test_faults.py",
             "test_http_guard.py", "test_http_limits.py", "test_input_validation.py", "test_log_safety.py",
             "test_mcp.py", "test_uploads.py", "test_waiting.py", "test_work_caps.py")


@contextlib.contextmanager
def start(tmp_path_factory, name: str, extra: list[str], command=None, env=None):
    """``gcs vllm-serve -- extra`` (or ``command``, whose port is ``extra``'s) on a free port, once it is up:
    (its URL, its process, its progress)."""
    port, log = free_port(), tmp_path_factory.mktemp(name) / "serve.log"
    url = f"http://127.0.0.1:{port}"
    command = [part.replace("PORT", str(port)) for part in command] if command else \
        [sys.executable, "-m", "gcs", "vllm-serve", "--port", str(port), "--", *extra]
    # (not this worker's VLLM_ENABLE_V1_MULTIPROCESSING, which an in-process engine sets: the server decides its own)
    inherited = {name: value for name, value in os.environ.items() if name != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    env = {**inherited, "VLLM_LOGGING_LEVEL": "WARNING", "OMP_NUM_THREADS": "1", **(env or {})}
    # (/health: a server with --api-key answers /v1/models with 401 to a request without the key)
    with running_server(command, log, f"{url}/health", env) as (process, progress):
        until(lambda: httpx.get(f"{url}/v1/models", headers={"Authorization": f"Bearer {KEY}"}).status_code == 200,
              "the model to be listed", progress)
        yield url, process, progress


@contextlib.contextmanager
def early(server):
    """``server`` (a context manager) entered in a thread from now on: yields the call that waits for what it
    yields (or raises what it raised); exited after, once it was entered."""
    entered: concurrent.futures.Future = concurrent.futures.Future()

    def enter():
        try:
            entered.set_result(server.__enter__())
        except BaseException as error:  # noqa: BLE001 - raised where the test waits for it
            entered.set_exception(error)

    threading.Thread(target=enter, daemon=True).start()
    try:
        yield entered.result
    finally:
        if entered.exception() is None:  # (a start that failed stopped its process itself: running_server)
            server.__exit__(None, None, None)


def keyed(tmp_path_factory):
    return start(tmp_path_factory, "keyed", [*SMALL, "--api-key", KEY])


class SharedServer:
    """A server the tests of ``files`` share (``starting(tmp_path_factory)``: the context manager that runs it),
    started on first use and stopped by ``close`` (tests/conftest.py's teardown hook: once the next test is in none
    of ``files``): ``waiting(tmp_path_factory)`` is the call that waits until it serves, giving what the context
    manager gives."""

    def __init__(self, starting: Callable = keyed, files: tuple[str, ...] = SHARING_FILES) -> None:
        self.starting, self.files = starting, files
        self.stack: contextlib.ExitStack | None = None
        self.wait: Callable[[], tuple] | None = None

    def waiting(self, tmp_path_factory) -> Callable[[], tuple]:
        if self.wait is None:
            self.stack = contextlib.ExitStack()
            self.wait = self.stack.enter_context(early(self.starting(tmp_path_factory)))
        return self.wait

    @property
    def running(self) -> bool:
        return self.wait is not None

    def close(self) -> None:
        stack, self.stack, self.wait = self.stack, None, None
        if stack is not None:
            stack.close()


SHARED = SharedServer()
