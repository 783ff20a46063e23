"""How tests wait on a served process (the app, ``gcs vllm-serve``): on its progress, never on a clock.

A loaded machine (load 8-12 on 2 cores) gives a server no CPU for seconds at a time: gradio_client's calls, with
httpx's default 5 s timeout, failed with ``httpx.ReadTimeout`` there, and any fixed limit is a guess at how loaded
a machine may be. So requests to a served process carry no client timeout (``PATIENT``), and every wait on one
(``patiently``, ``until``) checks ``Progress`` instead: the process is still running and still using CPU. A slow
server is waited for; only one that died, or that used no CPU at all for ``STALL_S``, fails the wait.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import threading
import time
from pathlib import Path

import httpx
import psutil

PATIENT = httpx.Timeout(None)  # no client-side limit: Progress bounds the wait
# A running process that used no CPU for this long is stuck, not slow: a loaded machine still gives every runnable
# process some CPU each second (at load 12 on 2 cores, about a sixth of a core).
STALL_S = 600


class Progress:
    """Whether a served process still works on what a test waits for: running, and the CPU time it and its
    children (vLLM's engine core, a compiler) have used changed within ``stall_s``. For a server in the test's
    own process, the CPU time of its threads but the waiting one counts."""

    def __init__(self, pid: int | None = None, log: Path | None = None, stall_s: float = STALL_S):
        self.process, self.log, self.stall_s = psutil.Process(pid), log, stall_s
        self.used, self.since = None, time.monotonic()

    def _used(self) -> float:
        if self.process.pid == os.getpid():
            waiting = threading.get_native_id()
            return sum(t.user_time + t.system_time for t in self.process.threads() if t.id != waiting)
        total = 0.0
        with contextlib.suppress(psutil.Error):
            for process in [self.process, *self.process.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):  # a child may end while it is read
                    total += sum(process.cpu_times()[:2])
        return total

    def _tail(self) -> str:
        return f"; its log ends: {self.log.read_text()[-3000:]}" if self.log and self.log.exists() else ""

    def check(self, what: str) -> None:
        """Fail, naming ``what`` was awaited, if the process has exited or has used no CPU for ``stall_s``."""
        try:
            running = self.process.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            running = False
        assert running, f"the server exited while the test waited for {what}{self._tail()}"
        used, now = self._used(), time.monotonic()
        if used != self.used:  # (!=, not >: a child that ends takes its CPU time out of the sum)
            self.used, self.since = used, now
        assert now - self.since < self.stall_s, \
            f"the server used no CPU for {self.stall_s:g} s while the test waited for {what}: stuck{self._tail()}"


def until(condition, what: str, progress: Progress, pause: float = 0.3):
    """``condition()``'s first truthy value, waited for as long as ``progress`` holds."""
    while not (found := condition()):
        progress.check(what)
        time.sleep(pause)
    return found


def patiently(call, what: str, progress: Progress):
    """``call()``'s result (or its exception), waited for as long as ``progress`` holds: a request made with no
    client timeout, which a server that dies or hangs must still not leave waiting forever."""
    outcome = concurrent.futures.Future()

    def run():
        try:
            outcome.set_result(call())
        except BaseException as error:  # noqa: BLE001 - handed to the waiting thread as it is
            outcome.set_exception(error)

    threading.Thread(target=run, daemon=True).start()
    while not concurrent.futures.wait([outcome], timeout=1).done:
        progress.check(what)
    return outcome.result()


def served(method: str, url: str, progress: Progress, **kwargs) -> httpx.Response:
    """One HTTP request to a served process, with no client timeout, waited for while ``progress`` holds."""
    return patiently(lambda: httpx.request(method, url, timeout=PATIENT, **kwargs), f"{method} {url}", progress)


@functools.cache
def _app_client_class():
    from gradio_client.client import Client  # (where it is defined: a test may stand in for gradio_client.Client)

    class AppClient(Client):
        progress: Progress

        def predict(self, *args, **kwargs):
            job = self.submit(*args, **kwargs)
            until(job.done, f"the answer of {kwargs.get('api_name') or 'a call'}", self.progress, pause=0.1)
            return job.result()

    return AppClient


def app_client(url: str, progress: Progress):
    """A gradio_client for the app at ``url`` (as users call its API) whose requests carry no timeout (its default
    is httpx's 5 s) and whose ``predict`` waits for its answer as long as ``progress`` holds."""
    client = patiently(lambda: _app_client_class()(url, verbose=False, httpx_kwargs={"timeout": PATIENT}),
                       f"the app's config at {url}", progress)
    client.progress = progress
    return client


class _Pieces(httpx.SyncByteStream):
    def __init__(self, pieces, close):
        self._pieces, self._close = pieces, close

    def __iter__(self):
        return self._pieces

    def close(self):
        self._close()


class WaitingTransport(httpx.HTTPTransport):
    """An httpx transport that waits for each answer, and each piece of a streamed body, as long as ``progress``
    holds: for clients that take an ``httpx.Client`` (openai's), made with ``timeout=None``."""

    def __init__(self, progress: Progress):
        super().__init__()
        self.progress = progress

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        what = f"{request.method} {request.url}"
        response = patiently(lambda: super(WaitingTransport, self).handle_request(request), what, self.progress)
        body = response.stream

        def pieces():
            chunks = iter(body)
            while (chunk := patiently(lambda: next(chunks, None), f"the rest of {what}", self.progress)) is not None:
                yield chunk

        return httpx.Response(response.status_code, headers=response.headers, stream=_Pieces(pieces(), body.close),
                              extensions=response.extensions)
