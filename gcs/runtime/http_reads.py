"""An HTTP answer (httpx) read within bounds of time and size, for a server gcs does not trust to behave: served
endpoints (``gcs.engines.endpoint_answers``).

    with watched(timeout) as watch, http.stream("POST", path, json=body, extensions=watch.extensions) as answer:
        watch.progress()                          # its start: the next wait may take ``timeout`` again
        for event in events(answer, most=8192):   # each ``data:`` line's JSON, a line refused past ``most`` bytes
            watch.progress()

Time: ``watched`` bounds every wait by ``timeout``, from the request (or the last ``progress``) on. httpx's own read
timeout restarts with every byte, so a server that sends keep-alive comments, or trickles bytes that never complete
an event, would hold a reader forever: a watchdog thread shuts such a connection's socket at its deadline, which
wakes the reader blocked on it, and the exchange ends with ``Stalled``.

Size: a whole answer is refused past ``most`` bytes once that many are read, an error answer's first ``most`` are
read, a stream's line is refused once more than ``most`` bytes of it are read (never parsed), and a compressed answer
is refused (a small one could inflate to gigabytes: ask for none). What was wrong is a ``BadAnswer`` in a short
sentence; the caller names the server.
"""

from __future__ import annotations

import contextlib
import json
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx

from gcs.runtime.quoting import quoted


class BadAnswer(Exception):
    """An answer that is not what the protocol sends: what was wrong, in a short sentence."""


class Stalled(BadAnswer):
    """An exchange that made no progress within its timeout."""


_WATCHING = threading.Condition()
_WATCHED: set[Watch] = set()
_WATCHDOG: list[threading.Thread] = []


class Watch:
    """One exchange's deadline, ``timeout`` seconds after its start or its last ``progress``; past it the watchdog
    shuts the connection's socket. ``extensions`` (httpx's trace callback) tells it the connection once made, so
    the client must make one per request (no keep-alive); ``cut`` shuts it now (a run stopping)."""

    def __init__(self, timeout: float):
        self.timeout, self.due = timeout, time.monotonic() + timeout
        self.expired = self.cut_off = False
        self._socket: socket.socket | None = None
        self.extensions = {"trace": self._trace}

    def progress(self) -> None:
        """An answer's start, a token or its end: the next may take ``timeout`` again."""
        self.due = time.monotonic() + self.timeout  # (later only: the watchdog rereads it before it acts)

    def cut(self) -> None:
        with _WATCHING:
            self.cut_off = True
        self._shut()

    def _trace(self, event: str, info: dict) -> None:
        if event in ("connection.connect_tcp.complete", "connection.start_tls.complete"):
            with _WATCHING:  # (TLS wraps the TCP socket into another object: the last one is the one read)
                self._socket = info["return_value"].get_extra_info("socket")
                late = self.expired or self.cut_off
            if late:
                self._shut()

    def _shut(self) -> None:
        with _WATCHING:
            sock = self._socket
        if sock is not None:  # the operating system's shutdown, not TLS's: it wakes a reader in any layer
            with contextlib.suppress(OSError):
                socket.socket.shutdown(sock, socket.SHUT_RDWR)


def _watchdog() -> None:
    while True:
        with _WATCHING:
            now = time.monotonic()
            late = [watch for watch in _WATCHED if watch.due <= now]
            if not late:
                _WATCHING.wait(min((watch.due for watch in _WATCHED), default=now + 3600) - now)
                continue
            for watch in late:
                watch.expired = True
                _WATCHED.discard(watch)
        for watch in late:
            watch._shut()


@contextlib.contextmanager
def watched(timeout: float) -> Iterator[Watch]:
    """A ``Watch`` for the exchange inside: a stalled one (httpx's timeouts, whatever a reader raises once the
    watchdog shut its socket, or a close-delimited answer it cut short) ends with ``Stalled``."""
    watch = Watch(timeout)
    with _WATCHING:
        if not _WATCHDOG:
            _WATCHDOG.append(threading.Thread(target=_watchdog, daemon=True, name="gcs-http-watchdog"))
            _WATCHDOG[0].start()
        _WATCHED.add(watch)
        _WATCHING.notify()
    stalled = f"it made no progress for {timeout:g} s (its timeout)"
    try:
        yield watch
        if watch.expired:
            raise Stalled(stalled)
    except Exception as error:
        if isinstance(error, Stalled) or not (watch.expired or isinstance(error, httpx.TimeoutException)):
            raise
        raise Stalled(stalled) from None
    finally:
        with _WATCHING:
            _WATCHED.discard(watch)


def chunks(answer: httpx.Response) -> Iterator[bytes]:
    """The answer's body as it arrives (at most 64 KB a chunk); a compressed one is refused."""
    encoding = answer.headers.get("content-encoding", "identity").strip().lower()
    if encoding not in ("", "identity"):
        raise BadAnswer(f"a compressed answer (Content-Encoding {quoted(encoding, 40)}), which gcs did not ask for")
    yield from answer.iter_raw()


def read_whole(answer: httpx.Response, most: int) -> bytes:
    """The whole body, refused past ``most`` bytes (once that many are read)."""
    body = bytearray()
    for chunk in chunks(answer):
        body += chunk
        if len(body) > most:
            raise BadAnswer(f"an answer longer than {most:,} bytes, more than gcs reads of one")
    return bytes(body)


def read_start(answer: httpx.Response, most: int) -> bytes:
    """The body's first ``most`` bytes (an error answer: what follows is not shown)."""
    body = bytearray()
    for chunk in chunks(answer):
        body += chunk
        if len(body) >= most:
            break
    return bytes(body[:most])


def parse_json(data: bytes, what: str = "an answer") -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # (RecursionError: JSON nested thousands deep)
        raise BadAnswer(f"{what} that is not JSON: {quoted(data[:60])}") from None


def events(answer: httpx.Response, most: int) -> Iterator[Any]:
    """The JSON of each ``data:`` line of a stream of server-sent events as it completes, until ``[DONE]``; comments
    (keep-alives) and other fields skipped. A line is refused once more than ``most`` bytes of it are read."""
    buffer = bytearray()
    for chunk in chunks(answer):
        buffer += chunk
        while (end := buffer.find(b"\n", 0, most + 1)) >= 0:
            line = bytes(buffer[:end]).rstrip(b"\r")
            del buffer[: end + 1]
            if line.startswith(b"data:"):
                data = line[5:].strip()
                if data == b"[DONE]":
                    return
                yield parse_json(data, "an event")
        if len(buffer) > most:
            raise BadAnswer(f"an event longer than {most:,} bytes, more than this request's tokens take")


def error_text(answer: httpx.Response, most: int = 16 * 1024) -> str:
    """What an error answer says, from its first ``most`` bytes: its ``error.message`` where it has OpenAI's shape,
    else its text (a web page is named, not quoted). Not cut: the caller redacts it, then cuts."""
    data = read_start(answer, most)
    try:
        body = json.loads(data)
        error = body.get("error", body) if isinstance(body, dict) else body
        return str(error.get("message", error) if isinstance(error, dict) else error)
    except (ValueError, RecursionError):
        text = data.decode("utf-8", "replace") or answer.reason_phrase
        if text.lstrip()[:1] == "<":  # a web page, not vLLM's JSON: quoting its markup helps nobody
            return f"{answer.reason_phrase} (an HTML page, not vLLM's JSON: is this a gcs vllm-serve server?)"
        return text
