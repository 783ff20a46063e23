"""A batch on served endpoints (``gcs.engines.endpoints``): every row is one streamed completion request of token
ids, spread over the endpoints, its tokens read back as they come.

    runner = EndpointRunner(batch)      # batch.engine: gcs.engines.endpoints.Endpoints
    for token_ids in runner.steps():    # every row's token ids so far, as answers arrive
        ...

Each endpoint runs up to ``max_requests`` rows at once, taking the next row waiting when one ends. Every event of an
answer is read within bounds and checked before its tokens are used (``gcs.engines.endpoint_answers``). Faults:

- HTTP 429 and 503 (busy, starting) are retried ``RETRIES`` times, waiting ``BACKOFF_S`` doubled each time (or the
  server's ``Retry-After``, at most ``MOST_WAIT_S``); so are another 5xx, a connection that fails and an answer
  cut before its end;
- a request that stalls (no answer, or no next token, within the endpoint's ``timeout``: keep-alive comments and
  half-sent events are no progress), an answer that is not what vLLM sends (the first bad event ends it), an error
  event and a redirect are not retried: the endpoint is dropped at once;
- a dropped endpoint's open requests are closed and its rows start again on the others (a row's tokens depend on
  its seed, not on where it runs); when none is left the run ends with an ``EndpointError`` naming each endpoint
  and what it did;
- any other 4xx is the request's fault, not the endpoint's: the run ends with a ValueError quoting the server's
  sentence;
- ``stop``, or closing the iterator, closes every open connection, and vLLM aborts a request whose connection
  closes.

So a run whose endpoints stall ends within ``len(endpoints) × timeout`` of its last token: a request's connection
and its answer's start share one ``timeout`` (the connection's own limit, ``min(timeout, 30)`` s, is inside it), each
endpoint dropped hands its rows to the others, whose requests stall within ``timeout`` of their start, and none is
tried twice (the checks at connect stop the run at the first request that stalls). Busy answers add at most
``RETRIES`` waits of at most ``MOST_WAIT_S`` to a request.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Iterator

import httpx
import torch

from gcs.engines.endpoint_answers import (
    EndpointError,
    checked_event,
    cut,
    event_bytes,
    redirected,
    said,
    vocabulary_size,
)
from gcs.engines.endpoints import Endpoint
from gcs.engines.padding import padded
from gcs.runtime.http_reads import BadAnswer, Stalled, Watch, events, watched

logger = logging.getLogger(__name__)

RETRIED = (429, 503)
RETRIES = 4
BACKOFF_S = 0.5
MOST_WAIT_S = 30.0
NAMED = 5  # endpoints a run's error names, each with what it did


class _Failed(Exception):
    """The endpoint failed this row (after its retries, if any): it is dropped and the row goes to the others."""


class _Refused(Exception):
    """The server refused the request itself (a 4xx): no endpoint would take it."""


class EndpointRunner:
    """A ``gcs.engines.batch.Batch`` on ``gcs.engines.endpoints.Endpoints``: rows spread over the endpoints."""

    def __init__(self, batch):
        self.batch = batch
        self.endpoints = batch.engine.endpoints

    def requests(self) -> list[dict]:
        """Each row's completion request but its ``model``: its prompt as token ids, every sampling field named
        (no server default applies), and its gcs arguments in ``vllm_xargs``."""
        batch = self.batch
        temperature, top_k, top_p = batch.settings.warping
        mask = batch.inputs["attention_mask"].bool().cpu()
        prompts = [ids[keep].tolist() for ids, keep in zip(batch.inputs["input_ids"].cpu(), mask, strict=True)]
        return [{"prompt": prompt, "max_tokens": batch.settings.max_new_tokens, "temperature": temperature,
                 "top_k": top_k or 0, "top_p": top_p or 1.0, "min_p": 0.0, "presence_penalty": 0.0,
                 "frequency_penalty": 0.0, "repetition_penalty": 1.0, "n": 1, "stop_token_ids": list(batch.stop_ids),
                 "stream": True, "return_token_ids": True,
                 "vllm_xargs": {"gcs_method": method, "gcs_seed": seed, **({"gcs_stream": stream} if method == "is"
                                                                            else {})}}
                for prompt, method, seed, stream in zip(prompts, batch.methods, batch.seeds, batch.streams,
                                                        strict=True)]

    def steps(self, stop: threading.Event | None = None) -> Iterator[list[list[int]]]:
        """Every row's token ids so far, each time answers arrive. Closing the iterator early, or setting ``stop``,
        closes the requests in flight (the server aborts them)."""
        served = self.batch.engine.connect(self.batch.model)
        work = _Work(self.requests(), self.batch.stop_ids, len(self.endpoints), vocabulary_size(self.batch.model))
        threads = [threading.Thread(target=work.serve, args=(endpoint, served[endpoint]), daemon=True,
                                    name=f"gcs-endpoint-{i}-{j}")
                   for i, endpoint in enumerate(self.endpoints)
                   for j in range(min(endpoint.max_requests, len(work.tokens)))]
        for thread in threads:
            thread.start()
        try:
            while work.wait(stop):
                yield work.tokens
            if stop is None or not stop.is_set():
                work.raise_fault(self.endpoints)
                yield work.tokens
        finally:
            work.halt()
            for thread in threads:
                thread.join()

    def run(self, stop: threading.Event | None = None) -> torch.Tensor:
        """The last step: token ids [rows, new tokens], padded with a stop token like the other runners'."""
        last: list[list[int]] = []
        for token_ids in self.steps(stop):
            last = token_ids
        return padded(last, self.batch.stop_ids[0])


class _Work:
    """The rows of one run and who does which: the threads of every endpoint take rows from ``waiting``."""

    def __init__(self, bodies: list[dict], stop_ids: list[int], endpoints: int, vocabulary: int):
        self.bodies, self.stop_ids, self.endpoints, self.vocabulary = bodies, stop_ids, endpoints, vocabulary
        self.tokens: list[list[int]] = [[] for _ in bodies]
        self.waiting = deque(range(len(bodies)))
        self.ended: set[int] = set()  # rows whose answer finished
        self.changed = False
        self.dead: dict[Endpoint, str] = {}  # endpoint -> what it did
        self.refused: str | None = None
        self.open: dict[Watch, Endpoint] = {}  # the requests in flight, by the endpoint they ask
        self.halted = False
        self.lock = threading.Condition()

    def over(self) -> bool:
        """Every row finished, or none can: halted, a request refused, or every endpoint dead."""
        return (self.halted or self.refused is not None or len(self.ended) == len(self.bodies)
                or len(self.dead) == self.endpoints)

    def wait(self, stop: threading.Event | None) -> bool:
        """Wait for news: True to yield it, False once the run is over or ``stop`` is set (checked every 0.1 s)."""
        with self.lock:
            while not (self.over() or (stop is not None and stop.is_set())):
                if self.changed:
                    self.changed = False
                    return True
                self.lock.wait(0.1)
            return False

    def raise_fault(self, endpoints: tuple[Endpoint, ...]) -> None:
        """The run's fault, if it did not finish: the request refused, or what each endpoint did."""
        if self.refused is not None:
            raise ValueError(self.refused)
        if len(self.ended) < len(self.bodies):
            lines = "; ".join(f"{endpoint.url}: {self.dead.get(endpoint, 'no answer')}" for endpoint in
                              endpoints[:NAMED]) + (f"; and {len(endpoints) - NAMED} more" if len(endpoints) > NAMED
                                                    else "")
            raise EndpointError(f"{len(self.bodies) - len(self.ended)} of {len(self.bodies)} rows could not be "
                                f"generated: every endpoint failed ({lines})")

    def halt(self) -> None:
        with self.lock:
            self.halted = True
            self.lock.notify_all()
            watches = list(self.open)
        for watch in watches:  # from this thread: a reader blocked on its socket wakes up now
            watch.cut()

    def _take(self, endpoint: Endpoint) -> int | None:
        """The next row waiting (a dead endpoint's rows come back here), or None once there is no more to do."""
        with self.lock:
            while not self.waiting and not self.over():
                self.lock.wait()
            if self.over() or endpoint in self.dead:
                return None
            return self.waiting.popleft()

    def serve(self, endpoint: Endpoint, served: str) -> None:
        """One thread's share of ``endpoint``'s work: rows until none is left or the endpoint failed."""
        with endpoint.client() as http:
            while (row := self._take(endpoint)) is not None:
                try:
                    self._row(endpoint, http, served, row)
                except _Refused as refused:
                    with self.lock:
                        self.refused = str(refused)
                        self.lock.notify_all()
                    return
                except Exception as failed:  # _Failed, or a fault of ours: the row must not be lost either way
                    if not self.halted:
                        self._drop(endpoint, row, failed)
                    return

    def _drop(self, endpoint: Endpoint, row: int, failed: Exception) -> None:
        """``endpoint`` is dead: ``row`` and the rows of its other requests, closed now, go back to the others."""
        with self.lock:
            first = endpoint not in self.dead
            if first:
                self.dead[endpoint] = cut(str(failed), 320)
            if row not in self.ended:
                self.tokens[row] = []
                self.waiting.appendleft(row)
            others = [watch for watch, asked in self.open.items() if asked is endpoint]
            self.changed = True
            self.lock.notify_all()
        if first:
            logger.warning("endpoint %s failed; its rows move to the others: %s", endpoint.url, self.dead[endpoint],
                           exc_info=not isinstance(failed, _Failed))
        for watch in others:
            watch.cut()

    def _row(self, endpoint: Endpoint, http: httpx.Client, served: str, row: int) -> None:
        """Generate ``row`` on ``endpoint``, retrying as the module says; ``_Failed`` or ``_Refused`` otherwise."""
        body = {**self.bodies[row], "model": served}
        for attempt in range(RETRIES + 1):
            with self.lock:
                self.tokens[row] = []
                if self.halted or endpoint in self.dead:
                    raise _Failed(self.dead.get(endpoint, "stopped"))
            try:
                with watched(endpoint.timeout) as watch:
                    retry = self._attempt(endpoint, http, body, row, watch)
            except Stalled as stalled:
                raise _Failed(str(stalled)) from None
            except BadAnswer as bad:
                raise _Failed(f"it answered with {bad}") from None
            except (httpx.HTTPError, httpx.StreamError) as error:
                if self.halted:
                    return None
                with self.lock:
                    if endpoint in self.dead:
                        raise _Failed(self.dead[endpoint]) from None
                retry = (cut(endpoint.redact(str(error))) or type(error).__name__, None)
            if retry is None:
                return None
            message, wait = retry
            if attempt < RETRIES:
                with self.lock:  # (a halt wakes it)
                    self.lock.wait_for(lambda: self.halted, min(MOST_WAIT_S, wait if wait is not None
                                                               else BACKOFF_S * 2**attempt))
        raise _Failed(message)

    def _attempt(self, endpoint: Endpoint, http: httpx.Client, body: dict, row: int,
                 watch: Watch) -> tuple[str, float | None] | None:
        """One request for ``row``: None once it finished, else what went wrong and how long to wait (None: the
        backoff) before the next."""
        with self.lock:
            self.open[watch] = endpoint
            if self.halted or endpoint in self.dead:
                watch.cut()
        try:
            with http.stream("POST", "/v1/completions", json=body, extensions=watch.extensions) as answer:
                watch.progress()
                if answer.is_redirect:
                    raise _Failed(f"it answered with {redirected(endpoint, answer)}")
                if answer.status_code >= 400:
                    message = f"HTTP {answer.status_code}: {said(endpoint, answer)}"
                    if answer.status_code < 500 and answer.status_code not in RETRIED:
                        raise _Refused(f"endpoint {endpoint.url} refused a request with {message}")
                    return message, _retry_after(answer) if answer.status_code in RETRIED else None
                if self._read(answer, endpoint, row, watch):
                    return None
                return "its answer stopped before its end", None
        finally:
            with self.lock:
                self.open.pop(watch, None)

    def _read(self, answer: httpx.Response, endpoint: Endpoint, row: int, watch: Watch) -> bool:
        """Read a streamed answer's token ids into ``row``, each event checked first, until its end; whether it
        finished. A token, or the end, is progress (``watch``)."""
        max_tokens = self.bodies[row]["max_tokens"]
        for event in events(answer, event_bytes(len(self.bodies[row]["prompt"]), max_tokens)):
            if isinstance(event, dict) and "error" in event:
                error = event["error"]
                text = error.get("message", error) if isinstance(error, dict) else error
                raise _Failed(f"its answer ended with an error: {cut(' '.join(endpoint.redact(str(text)).split()))}")
            ids, reason = checked_event(event, len(self.tokens[row]), max_tokens, self.vocabulary, row in self.ended)
            if ids or reason:
                watch.progress()
                self._add(row, ids, reason, max_tokens)
        return row in self.ended

    def _add(self, row: int, ids: list[int], reason: str | None, max_tokens: int) -> None:
        with self.lock:
            tokens = self.tokens[row]
            tokens.extend(ids)
            if reason == "stop" and len(tokens) < max_tokens and not (tokens and tokens[-1] in self.stop_ids):
                tokens.append(self.stop_ids[0])  # a stop the server did not send back as a token
            if reason is not None:
                self.ended.add(row)
            self.changed = True
            self.lock.notify_all()


def _retry_after(answer: httpx.Response) -> float | None:
    try:
        return max(0.0, float(answer.headers.get("retry-after", "")))
    except ValueError:
        return None
