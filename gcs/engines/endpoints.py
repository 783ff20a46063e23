"""Served vLLM endpoints as gcs's engine: ``gcs.Endpoint`` is one server, a list of them is one engine.

    gcs.compare(["What is DNA?"], engine=gcs.Endpoint("https://gpu.example:8000", api_key=key))
    gcs.sweep(groups, engine=[gcs.Endpoint("http://a:8000"), gcs.Endpoint("http://b:8000")])

A server is ``gcs vllm-serve`` (or ``vllm serve`` with the gcs plugin loaded). The client lays out each batch as on
any engine, with its own tokenizer (the ``model`` argument: the same family as the served one), and sends every row
as one completion request of token ids whose ``vllm_xargs`` carry ``gcs_method``, ``gcs_seed`` and, for IS,
``gcs_stream``: the server's plugin draws every token with the same samplers, and the answer comes back as token ids
(``gcs.engines.remote``), so hindsight, counterfactuals and A/B pairing read it as a local answer.

Before any row is sent, each endpoint is checked once per local model (``connect``): it serves the model (the only
one it serves, or the one named), its tokenizer reads a probe text as the local one does and its chat template
writes the same prompt, and its plugin is there: a request with an unknown ``gcs_method`` must be refused (a server
without the plugin would sample it without shared noise), and two requests coupled by one ``gcs_seed`` must get the
same answer. That pair leaves penalties unset, so a server whose generation config sets them is refused too (the
plugin refuses penalties); every request then names all sampling fields, so no server default changes them.

What several endpoints promise: the frame of one endpoint, row for row, where each server answers a request inside a
burst as it answers it alone. ``gcs vllm-serve`` on CPU does not promise that (``max_requests=1`` sends one request
at a time to each server, which it does); vLLM's ``VLLM_BATCH_INVARIANT=1`` on supported GPUs does
(``gcs vllm-serve --batch-invariant``).
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import httpx

from gcs.checks import check_url
from gcs.engines.models import Model
from gcs.engines.prompts import format_prompt
from gcs.environment import env_text, env_urls
from gcs.runtime.arguments import ArgumentTypeError, is_integer
from gcs.runtime.quoting import quoted

DEFAULT_TIMEOUT = 120.0  # seconds a server may take to answer, or between two tokens of a streamed answer
DEFAULT_MAX_REQUESTS = 16  # requests in flight at once per endpoint
PROBE_TEXT = "Gumbel consistency: ¿qué es el ADN? 3.14 — 漢字 <b>ok</b>\n\tend"
PROBE_QUESTION = "What is DNA?"
NOT_A_METHOD = "not-a-gcs-method"


class EndpointError(ConnectionError):
    """A served endpoint could not do its part: it names the endpoint (never its key) and what the server said."""


class Endpoint:
    """One vLLM server with the gcs plugin (``gcs vllm-serve``), as an engine.

    Pass it (or a list of them: several servers, one engine) as ``engine=`` to ``gcs.compare``,
    ``gcs.stream_compare``, ``gcs.compare_rounds``, ``gcs.sweep`` or ``gcs.ab``. The served model, tokenizer, chat
    template and plugin are checked when it connects.

    Args:
        url: the server's address (``http(s)://host:port``, with or without ``/v1``); TLS certificates are verified.
        model: the served model's name (None: the only one it serves).
        api_key: sent as a bearer token, never shown (not in ``repr``, errors or logs).
        timeout: seconds an answer, or the next token of one, may take.
        max_requests: requests in flight at once on this server; a server that does not answer a request inside a
            burst as it answers it alone (``gcs vllm-serve`` on CPU) gives the same answer for a seed only at 1.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a URL that is not http(s) with a host, or carries credentials, a query or a fragment; a bad
            timeout or max_requests.

    Examples:
        >>> Endpoint("http://127.0.0.1:8000/v1/", api_key="secret")
        Endpoint('http://127.0.0.1:8000')
        >>> Endpoint("ftp://host")
        Traceback (most recent call last):
        ...
        ValueError: url must start with http:// or https:// and name a host, got 'ftp://host'
    """

    def __init__(self, url: str, *, model: str | None = None, api_key: str | None = None,
                 timeout: float = DEFAULT_TIMEOUT, max_requests: int = DEFAULT_MAX_REQUESTS):
        self.url = check_url(url)
        if model is not None and not (isinstance(model, str) and model.strip()):
            raise (ValueError if isinstance(model, str) else ArgumentTypeError)(
                f"model must be a served model's name or None, got {type(model).__name__} {quoted(model)}")
        if api_key is not None and not isinstance(api_key, str):
            raise ArgumentTypeError(f"api_key must be a string or None, got {type(api_key).__name__}")
        if api_key is not None and (not api_key.strip() or any(c in api_key for c in "\r\n")):
            raise ValueError("api_key must be one line of text, not empty")  # (never quoted: it is a secret)
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

    def __repr__(self) -> str:
        options = "".join(f", {name}={value!r}" for name, value in
                          (("model", self.model), ("timeout", self.timeout), ("max_requests", self.max_requests))
                          if value not in (None, DEFAULT_TIMEOUT, DEFAULT_MAX_REQUESTS))
        return f"Endpoint({self.url!r}{options})"

    def _key(self) -> tuple:
        return self.url, self.model, self._api_key, self.timeout, self.max_requests

    def __eq__(self, other) -> bool:
        return isinstance(other, Endpoint) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def as_engine(self, *more: Endpoint) -> Endpoints:
        """This endpoint and ``more`` as one engine (what ``gcs.check_engine`` makes of an endpoint or a list)."""
        return Endpoints((self, *more))

    def client(self) -> httpx.Client:
        """An HTTP client of the server (its key in the headers; certificates verified; no redirects followed, so
        that a server cannot send the key elsewhere)."""
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        return httpx.Client(base_url=self.url, headers=headers, verify=True, follow_redirects=False,
                            timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 30.0)))

    def redact(self, text: str) -> str:
        """``text`` with the key, should a server or a library echo it, replaced by ``***``."""
        return text.replace(self._api_key, "***") if self._api_key else text


# What a public call's ``engine`` takes (gcs.compare, gcs.sweep, gcs.ab, ...): an engine's name ("transformers",
# "vllm") or served endpoints, one or a list of them (gcs.checks.check_engine reads it)
EngineChoice = str | Endpoint | Sequence[Endpoint]


def endpoints_from(urls: Sequence[str], environ: Mapping[str, str] = os.environ) -> Endpoints:
    """The endpoints an operator named (``--endpoint``, ``GCS_ENDPOINTS``), each with the key in
    ``$GCS_ENDPOINT_KEY`` (none when unset).

    >>> endpoints_from(["http://a:8000", "http://b:8000"], environ={"GCS_ENDPOINT_KEY": "secret"})
    Endpoints(Endpoint('http://a:8000'), Endpoint('http://b:8000'))
    """
    key = env_text("GCS_ENDPOINT_KEY", environ=environ) or None
    return Endpoints([Endpoint(url, api_key=key) for url in urls])


def configured_endpoints(environ: Mapping[str, str] = os.environ) -> Endpoints | None:
    """The app's endpoints: ``$GCS_ENDPOINTS`` (comma-separated URLs) with ``$GCS_ENDPOINT_KEY``; None when unset.

    >>> configured_endpoints({"GCS_ENDPOINTS": "http://a:8000"}), configured_endpoints({})
    (Endpoints(Endpoint('http://a:8000')), None)
    """
    urls = env_urls("GCS_ENDPOINTS", environ)
    return endpoints_from(urls, environ) if urls else None


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
        """The endpoints' addresses (never their keys), for a page or a log."""
        return ", ".join(endpoint.url for endpoint in self.endpoints)

    def connect(self, model: Model) -> dict[Endpoint, str]:
        """Each endpoint's served model name, checked against ``model`` (once per endpoint and model)."""
        return {endpoint: connect(endpoint, model) for endpoint in self.endpoints}


_CONNECTED: dict[tuple, str] = {}
_CONNECTING = threading.Lock()


def connect(endpoint: Endpoint, model: Model) -> str:
    """The name ``endpoint`` serves ``model`` under, once it passed the checks (module docstring); else a
    ValueError saying what differs, or an ``EndpointError`` when the server cannot be reached."""
    key = (endpoint, model.name, id(model.tokenizer))
    with _CONNECTING:
        if key not in _CONNECTED:
            with endpoint.client() as http:
                served = _served_model(endpoint, http)
                _check_tokenizer(endpoint, http, served, model)
                _check_plugin(endpoint, http, served, model)
            _CONNECTED[key] = served
        return _CONNECTED[key]


def call(endpoint: Endpoint, http: httpx.Client, method: str, path: str, **kwargs) -> Any:
    """The JSON answer of one request; ``EndpointError`` naming the endpoint and what it said otherwise."""
    try:
        answer = http.request(method, path, **kwargs)
    except httpx.HTTPError as error:
        raise EndpointError(f"endpoint {endpoint.url} did not answer {path}: "
                            f"{endpoint.redact(str(error)) or type(error).__name__}") from None
    if answer.status_code >= 400:
        hint = ""
        if answer.status_code == 401:
            hint = ("; the key sent was refused" if endpoint._api_key else
                    "; it wants a key: give api_key= (on the command line and in the app, GCS_ENDPOINT_KEY)")
        raise EndpointError(f"endpoint {endpoint.url} answered {path} with HTTP {answer.status_code}: "
                            f"{said(endpoint, answer)}{hint}")
    return answer.json()


def said(endpoint: Endpoint, answer: httpx.Response) -> str:
    """What an error answer says, in at most 300 characters (its ``error.message`` where it is OpenAI's shape)."""
    try:
        body = answer.json()
        error = body.get("error", body)
        text = str(error.get("message", error) if isinstance(error, dict) else error)
    except (ValueError, KeyError, TypeError, AttributeError):
        text = answer.text or answer.reason_phrase
        if text.lstrip()[:1] == "<":  # a web page, not vLLM's JSON: quoting its markup helps nobody
            text = f"{answer.reason_phrase} (an HTML page, not vLLM's JSON: is this a gcs vllm-serve server?)"
    text = " ".join(endpoint.redact(text).split())
    return text if len(text) <= 300 else text[:300] + "…"


def _served_model(endpoint: Endpoint, http: httpx.Client) -> str:
    names = [entry["id"] for entry in call(endpoint, http, "GET", "/v1/models")["data"]]
    if endpoint.model is not None:
        if endpoint.model not in names:
            raise ValueError(f"endpoint {endpoint.url} does not serve model {quoted(endpoint.model)}; it serves "
                             f"{', '.join(map(quoted, names))}")
        return endpoint.model
    if len(names) != 1:
        raise ValueError(f"endpoint {endpoint.url} serves {len(names)} models ({', '.join(map(quoted, names))}): "
                         "name one with Endpoint(url, model=...)")
    return names[0]


def _check_tokenizer(endpoint: Endpoint, http: httpx.Client, served: str, model: Model) -> None:
    """The server's tokenizer reads ``PROBE_TEXT`` as the local one does, and its chat template writes the probe
    question's prompt as the local one does."""
    tokenizer: Any = model.tokenizer
    theirs = call(endpoint, http, "POST", "/tokenize", json={"model": served, "prompt": PROBE_TEXT,
                                                            "add_special_tokens": False})["tokens"]
    ours = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    if theirs != ours:
        raise ValueError(f"endpoint {endpoint.url} serves {quoted(served)} with another vocabulary than the local "
                         f"model {quoted(model.name)}: it reads {quoted(PROBE_TEXT)} as {_first(theirs)}, the local "
                         f"tokenizer as {_first(ours)}")
    if model.is_chat:
        prompt = format_prompt(PROBE_QUESTION, tokenizer=tokenizer, is_chat=True)
        ours = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        theirs = call(endpoint, http, "POST", "/tokenize", json={
            "model": served, "messages": [{"role": "user", "content": PROBE_QUESTION}],
            "add_generation_prompt": True})["tokens"]
        if theirs != ours:
            raise ValueError(f"endpoint {endpoint.url} serves {quoted(served)} with another chat template than the "
                             f"local model {quoted(model.name)}: {quoted(PROBE_QUESTION)} becomes {_first(theirs)} "
                             f"there, {_first(ours)} here")


def _first(ids: list[int], shown: int = 12) -> str:
    return f"{len(ids)} tokens [{', '.join(map(str, ids[:shown]))}{', ...' if len(ids) > shown else ''}]"


def _check_plugin(endpoint: Endpoint, http: httpx.Client, served: str, model: Model) -> None:
    """The plugin refuses an unknown method and couples a pair; a server without it samples both freely."""
    tokenizer: Any = model.tokenizer
    prompt = tokenizer(PROBE_QUESTION, add_special_tokens=False)["input_ids"]
    request = {"model": served, "prompt": prompt, "max_tokens": 8, "temperature": 1.5, "ignore_eos": True,
               "return_token_ids": True}
    bogus = http.post("/v1/completions", json={**request, "max_tokens": 1,
                                               "vllm_xargs": {"gcs_method": NOT_A_METHOD}})
    if bogus.status_code < 400 or "unknown method" not in said(endpoint, bogus):
        raise ValueError(f"endpoint {endpoint.url} has no gcs plugin: it answered a request with gcs_method="
                         f"{NOT_A_METHOD!r} with HTTP {bogus.status_code} instead of refusing it, so it would "
                         "sample without shared noise; serve it with gcs vllm-serve")
    pair = [http.post("/v1/completions", json={**request, "vllm_xargs": {"gcs_method": "gcswr", "gcs_seed": 7}})
            for _ in range(2)]
    for answer in pair:
        if answer.status_code >= 400:
            raise ValueError(f"endpoint {endpoint.url} refused gcs's probe (HTTP {answer.status_code}: "
                             f"{said(endpoint, answer)}); a server whose generation config sets penalties or "
                             "min_p changes the distribution: start it with --generation-config vllm")
    tokens = [answer.json()["choices"][0].get("token_ids") for answer in pair]
    if tokens[0] is None or tokens[0] != tokens[1]:
        raise ValueError(f"endpoint {endpoint.url} does not couple requests: two with one gcs_seed got "
                         f"{tokens[0]} and {tokens[1]}; serve it with gcs vllm-serve")
