"""Served vLLM endpoints as gcs's engine: ``gcs.Endpoint`` is one server, a list of them is one engine.

    gcs.compare(["What is DNA?"], engine=gcs.Endpoint("https://gpu.example:8000", api_key=key))
    gcs.sweep(groups, engine=[gcs.Endpoint("http://a:8000"), gcs.Endpoint("http://b:8000")])

A server is ``gcs vllm-serve`` (or ``vllm serve`` with the gcs plugin loaded). The client lays out each batch as on
any engine, with its own tokenizer (the ``model`` argument: the same family as the served one), and sends every row
as one completion request of token ids whose ``vllm_xargs`` carry ``gcs_method``, ``gcs_seed`` and, for IS,
``gcs_stream``: the server's plugin draws every token with the same samplers, and the answer comes back as token ids
(``gcs.engines.remote``), so hindsight, counterfactuals and A/B pairing read it as a local answer.

Before any row is sent, each endpoint is checked once per local model: the model it serves, its tokenizer, chat
template and plugin (``gcs.engines.endpoint_answers.connect``).

What several endpoints promise: the frame of one endpoint, row for row, where each server answers a request inside a
burst as it answers it alone. ``gcs vllm-serve`` on CPU does not promise that (``max_requests=1`` sends one request
at a time to each server, which it does); vLLM's ``VLLM_BATCH_INVARIANT=1`` on supported GPUs does
(``gcs vllm-serve --batch-invariant``).

Every answer is read within bounds and checked before it is used (``gcs.engines.endpoint_answers``): an answer that
is not what vLLM sends (a wrong shape, a token id outside the vocabulary, more tokens than asked, a redirect) is an
``EndpointError`` naming the endpoint and what was wrong, in a few hundred characters, and so is a wait past
``timeout``. An error names the endpoint by its URL, for the operator; ``Endpoints.for_visitors`` writes its name
instead (the app names its endpoints "endpoint 1", "endpoint 2", ...).
"""

from __future__ import annotations

import html
import json
import math
import os
import re
import unicodedata
import urllib.parse
from collections.abc import Mapping, Sequence

import httpx

from gcs.checks import check_url
from gcs.engines.endpoint_answers import EndpointError, connect
from gcs.engines.models import Model
from gcs.environment import env_text, env_urls
from gcs.runtime.arguments import ArgumentTypeError, is_integer
from gcs.runtime.quoting import quoted

DEFAULT_TIMEOUT = 120.0  # seconds a server may take to answer, or between two tokens of a streamed answer
MOST_NAME_CHARACTERS = 100
DEFAULT_MAX_REQUESTS = 16  # requests in flight at once per endpoint

__all__ = ["DEFAULT_MAX_REQUESTS", "DEFAULT_TIMEOUT", "Endpoint", "EndpointError", "Endpoints", "EngineChoice",
           "configured_endpoints", "endpoints_from"]


class Endpoint:
    """One vLLM server with the gcs plugin (``gcs vllm-serve``), as an engine.

    Pass it (or a list of them: several servers, one engine) as ``engine=`` to ``gcs.compare``,
    ``gcs.stream_compare``, ``gcs.compare_rounds``, ``gcs.sweep`` or ``gcs.ab``. The served model, tokenizer, chat
    template and plugin are checked when it connects.

    Args:
        url: the server's address (``http(s)://host:port``, with or without ``/v1``); TLS certificates are verified.
        model: the served model's name (None: the only one it serves).
        api_key: sent as a bearer token (printable ASCII, what an HTTP header carries), never shown: not in
            ``repr``, errors or logs, nor escaped, JSON-, percent- or HTML-encoded (``redact``).
        timeout: seconds any wait may take: for a connection and an answer's start together, then for each next
            token (or the end) of a streamed answer; keep-alive comments and half-sent events do not count. A
            stalled request is not retried: its endpoint is dropped (``gcs.engines.remote`` says what that bounds).
        max_requests: requests in flight at once on this server; a server that does not answer a request inside a
            burst as it answers it alone (``gcs vllm-serve`` on CPU) gives the same answer for a seed only at 1.
        name: what a page shows for it instead of its URL (``Endpoints.for_visitors``; the app's are "endpoint 1",
            "endpoint 2", ...): one line of at most 100 characters; None is the URL. Errors raised here name the
            URL, for the operator; the name is not part of equality.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a URL that is not http(s) with a host, or carries credentials, a query or a fragment; a bad
            timeout, max_requests, key or name.

    Examples:
        >>> Endpoint("http://127.0.0.1:8000/v1/", api_key="secret")
        Endpoint('http://127.0.0.1:8000')
        >>> Endpoint("ftp://host")
        Traceback (most recent call last):
        ...
        ValueError: url must start with http:// or https:// and name a host, got 'ftp://host'
    """

    def __init__(self, url: str, *, model: str | None = None, api_key: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, max_requests: int = DEFAULT_MAX_REQUESTS, name: str | None = None):
        self.url = check_url(url)
        self.name = self.url if name is None else _checked_name(name)
        if model is not None and not (isinstance(model, str) and model.strip()):
            raise (ValueError if isinstance(model, str) else ArgumentTypeError)(
                f"model must be a served model's name or None, got {type(model).__name__} {quoted(model)}")
        if api_key is not None and not isinstance(api_key, str):
            raise ArgumentTypeError(f"api_key must be a string or None, got {type(api_key).__name__}")
        if api_key is not None and (not api_key.strip() or not all(" " <= c <= "~" or c == "\t" for c in api_key)):
            # (never quoted: it is a secret) httpx sends ASCII only, and h11 would quote a control character's key
            raise ValueError("api_key must be printable ASCII (spaces and tabs inside), what an HTTP header carries")
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
            raise ArgumentTypeError(f"timeout must be a number of seconds, got {type(timeout).__name__}")
        if not (math.isfinite(timeout) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds, got {quoted(timeout)}")
        if not is_integer(max_requests):
            raise ArgumentTypeError(f"max_requests must be an integer, got {type(max_requests).__name__}")
        if not 1 <= max_requests <= 1024:
            raise ValueError(f"max_requests must be 1 to 1024, got {max_requests}")
        self.model, self.timeout, self.max_requests = model and model.strip(), float(timeout), max_requests
        self._api_key = api_key.strip() if api_key else None
        self._secret = _forms_of(self._api_key) if self._api_key else None

    def __repr__(self) -> str:
        options = "".join(f", {name}={value!r}" for name, value in
                          (("model", self.model), ("timeout", self.timeout), ("max_requests", self.max_requests),
                           ("name", None if self.name == self.url else self.name))
                          if value not in (None, DEFAULT_TIMEOUT, DEFAULT_MAX_REQUESTS))
        return f"Endpoint({self.url!r}{options})"

    def _key(self) -> tuple:
        return self.url, self.model, self._api_key, self.timeout, self.max_requests

    def __eq__(self, other) -> bool:
        return isinstance(other, Endpoint) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    @property
    def has_key(self) -> bool:
        """Whether it sends a key (never which)."""
        return self._api_key is not None

    def as_engine(self, *more: Endpoint) -> Endpoints:
        """This endpoint and ``more`` as one engine (what ``gcs.check_engine`` makes of an endpoint or a list)."""
        return Endpoints((self, *more))

    def client(self) -> httpx.Client:
        """An HTTP client of the server (its key in the headers; certificates verified; no redirects followed, so
        that a server cannot send the key elsewhere)."""
        # (a connection per request: the watchdog learns each one's socket as it is made, runtime.http_reads.Watch;
        # no compression: a small answer could inflate to gigabytes)
        headers = {"Accept-Encoding": "identity", **({"Authorization": f"Bearer {self._api_key}"} if self._api_key
                                                     else {})}
        return httpx.Client(base_url=self.url, headers=headers, verify=True, follow_redirects=False,
                            timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 30.0)),
                            limits=httpx.Limits(max_keepalive_connections=0))

    def redact(self, text: str) -> str:
        r"""``text`` with the key replaced by ``***``, should a server or a library echo it: as typed, as Python,
        JSON or HTML escape it, percent-encoded (any case).

        >>> Endpoint("http://a:1", api_key='k"e y').redact(r'said: k\"e y, k%22e%20y, k%22E+y')
        'said: ***, ***, ***'
        """
        return self._secret.sub("***", text) if self._secret else text


def _checked_name(name) -> str:
    if not isinstance(name, str):
        raise ArgumentTypeError(f"name must be a string or None, got {type(name).__name__}")
    if not name.strip() or len(name.strip()) > MOST_NAME_CHARACTERS or \
            any(unicodedata.category(c)[0] == "C" for c in name):
        raise ValueError(f"name must be one line of 1 to {MOST_NAME_CHARACTERS} printable characters, got "
                         f"{quoted(name)}")
    return name.strip()


def _forms_of(key: str) -> re.Pattern:
    """The key as servers and libraries may write it back: as typed, as Python's repr (of text and of bytes) and
    JSON escape it inside a string (each quote escaped or not), HTML-escaped, and percent-encoded."""
    escaped = {key, key.encode("unicode_escape").decode("ascii"), repr(key)[1:-1], repr(key.encode())[2:-1],
               json.dumps(key)[1:-1], json.dumps(key, ensure_ascii=False)[1:-1]}
    forms = {form for text in escaped for form in (text, text.replace("\\'", "'"), text.replace('\\"', '"'),
                                                     text.replace("'", "\\'"), text.replace('"', '\\"'))}
    forms |= {html.escape(key), html.escape(key, quote=False), urllib.parse.quote(key), urllib.parse.quote(key, ""),
              urllib.parse.quote_plus(key), urllib.parse.quote_plus(key, "")}
    return re.compile("|".join(map(re.escape, sorted(forms, key=len, reverse=True))), re.IGNORECASE)


# What a public call's ``engine`` takes (gcs.compare, gcs.sweep, gcs.ab, ...): an engine's name ("transformers",
# "vllm") or served endpoints, one or a list of them (gcs.checks.check_engine reads it)
EngineChoice = str | Endpoint | Sequence[Endpoint]


def endpoints_from(urls: Sequence[str], environ: Mapping[str, str] = os.environ,
                   names: Sequence[str | None] | None = None) -> Endpoints:
    """The endpoints an operator named (``--endpoint``, ``GCS_ENDPOINTS``), each with the key in
    ``$GCS_ENDPOINT_KEY`` (none when unset) and its name in ``names`` (None: its URL).

    >>> endpoints_from(["http://a:8000", "http://b:8000"], environ={"GCS_ENDPOINT_KEY": "secret"})
    Endpoints(Endpoint('http://a:8000'), Endpoint('http://b:8000'))
    """
    key = env_text("GCS_ENDPOINT_KEY", environ=environ) or None
    return Endpoints([Endpoint(url, api_key=key, name=name)
                      for url, name in zip(urls, names or [None] * len(urls), strict=True)])


def configured_endpoints(environ: Mapping[str, str] = os.environ) -> Endpoints | None:
    """The app's endpoints: ``$GCS_ENDPOINTS`` (comma-separated URLs) with ``$GCS_ENDPOINT_KEY``; None when unset.
    A visitor sees them named "endpoint 1", "endpoint 2", ... in that order, never by their URLs.

    >>> configured_endpoints({"GCS_ENDPOINTS": "http://a:8000"}), configured_endpoints({})
    (Endpoints(Endpoint('http://a:8000', name='endpoint 1')), None)
    """
    urls = env_urls("GCS_ENDPOINTS", environ)
    return endpoints_from(urls, environ, [f"endpoint {i + 1}" for i in range(len(urls))]) if urls else None


class Endpoints:
    """Several endpoints as one engine: rows spread over them (``gcs.engines.remote``).

    >>> Endpoint("http://a:1").as_engine(Endpoint("http://b:1"))
    Endpoints(Endpoint('http://a:1'), Endpoint('http://b:1'))
    """

    def __init__(self, endpoints: Sequence[Endpoint]):
        if not endpoints:
            raise ValueError("engine must name at least one endpoint")
        if len(set(endpoints)) != len(endpoints):
            raise ValueError("engine names an endpoint twice: give each server once (max_requests sets its share)")
        self.endpoints = tuple(endpoints)

    def __repr__(self) -> str:
        return f"Endpoints({', '.join(map(repr, self.endpoints))})"

    def __eq__(self, other) -> bool:
        return isinstance(other, Endpoints) and self.endpoints == other.endpoints

    def __hash__(self) -> int:
        return hash(self.endpoints)

    def as_engine(self) -> Endpoints:
        return self

    @property
    def batch_rows(self) -> int:
        """Rows per batch by default: every endpoint's share of requests, four times over (a failed run keeps the
        batches before it: sweeps and A/B tests resume from there)."""
        return 4 * sum(endpoint.max_requests for endpoint in self.endpoints)

    @property
    def promise(self) -> str:
        """What the endpoints promise about batches, as a verdict's sentence says it.

        >>> Endpoint("http://a:1", max_requests=1).as_engine().promise
        'each request ran alone on its server (max_requests=1): the answers of one endpoint, row for row'
        """
        if all(endpoint.max_requests == 1 for endpoint in self.endpoints):
            return "each request ran alone on its server (max_requests=1): the answers of one endpoint, row for row"
        return ("requests ran in bursts: the answers of one request at a time only where every server runs "
                "batch-invariant (gcs vllm-serve --batch-invariant, on GPUs vLLM supports; not gcs vllm-serve on CPU)")

    def describe(self) -> str:
        """The endpoints' addresses (never their keys), for the operator's log."""
        return ", ".join(endpoint.url for endpoint in self.endpoints)

    def for_visitors(self, text: str) -> str:
        """``text`` (an error) with each endpoint named by its name, not its URL or address, and no key.

        >>> Endpoint("http://gpu:8000", name="endpoint 1").as_engine().for_visitors(
        ...     "endpoint http://gpu:8000 refused a request (http://gpu:8000/v1/completions, gpu:8000)")
        'endpoint 1 refused a request (endpoint 1/v1/completions, endpoint 1)'
        """
        for endpoint in sorted(self.endpoints, key=lambda endpoint: -len(endpoint.url)):
            address = re.escape(urllib.parse.urlsplit(endpoint.url).netloc)
            named = re.compile(rf"(endpoint )?(https?://)?{address}(?!\.?[\w-]|:\d)", re.IGNORECASE)
            text = named.sub(endpoint.name.replace("\\", "\\\\"), endpoint.redact(text))
        return text

    def connect(self, model: Model) -> dict[Endpoint, str]:
        """Each endpoint's served model name, checked against ``model`` (once per endpoint and model: ``connect``)."""
        return {endpoint: connect(endpoint, endpoint.client, model) for endpoint in self.endpoints}
