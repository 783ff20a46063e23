"""What a served endpoint (``gcs.engines.endpoints``) answers, read within bounds and checked before gcs uses any of
it: a server is trusted to sample, not to answer well-formed.

    status, body = exchange(endpoint, http, "GET", "/v1/models")      # a whole answer, at most 256 KB
    ids, reason = checked_event(event, have, max_tokens, vocabulary, ended)   # one event of a streamed row

Each request goes through ``gcs.runtime.http_reads``: ``timeout`` bounds every wait (keep-alive comments and
half-sent events are no progress), a whole answer is read up to ``MOST_ANSWER_BYTES``, an error answer's first
16 KB, a stream's event up to ``event_bytes`` (an event of 2,000,000 token ids for an 8-token request is refused once
a few KB of it are read, never parsed). Then its shape: a model list of names, a tokenization of whole numbers, a
completion of one choice (index 0) whose token ids are whole numbers (not floats, not booleans) inside the local
model's vocabulary, never more than ``max_tokens`` of them, ending with "stop", or "length" at ``max_tokens``
tokens exactly. Anything else is an ``EndpointError`` naming the endpoint and what was wrong, in a few hundred
characters; so is a redirect (not followed: a server could send the key elsewhere).

Before any row is sent, each endpoint is checked once per local model (``connect``): it serves the model (the only
one it serves, or the one named), its tokenizer reads a probe text as the local one does and its chat template
writes the same prompt, and its plugin is there: a request with an unknown ``gcs_method`` must be refused (a server
without the plugin would sample it without shared noise), and two requests coupled by one ``gcs_seed`` must get the
same answer. That pair leaves penalties unset, so a server whose generation config sets them is refused too (the
plugin refuses penalties); every request then names all sampling fields, so no server default changes them.
"""

from __future__ import annotations

import threading
from typing import Any, Protocol

import httpx

from gcs.engines.models import Model
from gcs.engines.prompts import format_prompt
from gcs.runtime.http_reads import BadAnswer, Stalled, error_text, parse_json, read_whole, watched
from gcs.runtime.quoting import quoted

MOST_ANSWER_BYTES = 256 * 1024  # a whole answer: a model list, a prompt's token ids, an 8-token probe
SAID_CHARACTERS = 300  # what an error quotes of a server's sentence
# one event of a streamed answer: its JSON around the tokens, the prompt's ids (the first event echoes them) and,
# should a slow reader let the server merge steps, every new token's id and text
EVENT_BYTES, PROMPT_TOKEN_BYTES, NEW_TOKEN_BYTES = 8192, 12, 160
FINISH_REASONS = ("stop", "length")
PROBE_TEXT = "Gumbel consistency: ¿qué es el ADN? 3.14 — 漢字 <b>ok</b>\n\tend"
PROBE_QUESTION = "What is DNA?"
NOT_A_METHOD = "not-a-gcs-method"


class EndpointError(ConnectionError):
    """A served endpoint could not do its part, or answered what vLLM does not send: it names the endpoint (never
    its key) and what the server said or what was wrong with its answer, in a few hundred characters."""


class Server(Protocol):
    """What these checks read of a ``gcs.Endpoint``."""

    url: str
    model: str | None
    timeout: float

    @property
    def has_key(self) -> bool: ...

    def redact(self, text: str) -> str: ...


def event_bytes(prompt_tokens: int, max_tokens: int) -> int:
    """The most one event of a streamed answer may take.

    >>> event_bytes(10, 8)
    9592
    """
    return EVENT_BYTES + PROMPT_TOKEN_BYTES * prompt_tokens + NEW_TOKEN_BYTES * max_tokens


def vocabulary_size(model: Model) -> int:
    """How many token ids the local model reads (its embedding's rows): a server samples from the model's whole
    output, which may be wider than its tokenizer (Qwen2.5: 151,936 rows, 151,665 tokens)."""
    network: Any = model.model
    return int(getattr(network.get_input_embeddings(), "num_embeddings", None) or network.config.vocab_size)


def cut(text: str, most: int = SAID_CHARACTERS) -> str:
    return text if len(text) <= most else text[:most] + "…"


def exchange(endpoint: Server, http: httpx.Client, method: str, path: str, **kwargs) -> tuple[int, Any]:
    """One request's HTTP status and answer, read whole within the endpoint's timeout and ``MOST_ANSWER_BYTES``: a
    2xx answer's JSON, an error answer's sentence (``said``); an ``EndpointError`` naming the endpoint for no
    answer, a stalled or malformed one, or a redirect."""
    try:
        with watched(endpoint.timeout) as watch, \
                http.stream(method, path, extensions=watch.extensions, **kwargs) as answer:
            watch.progress()
            if answer.is_redirect:
                raise EndpointError(f"endpoint {endpoint.url} answered {path} with {redirected(endpoint, answer)}")
            if answer.status_code >= 400:
                return answer.status_code, said(endpoint, answer)
            return answer.status_code, parse_json(read_whole(answer, MOST_ANSWER_BYTES))
    except Stalled as stalled:
        raise EndpointError(f"endpoint {endpoint.url} did not answer {path}: {stalled}") from None
    except BadAnswer as bad:
        raise EndpointError(f"endpoint {endpoint.url} answered {path} with {bad}") from None
    except (httpx.HTTPError, httpx.StreamError) as error:
        raise EndpointError(f"endpoint {endpoint.url} did not answer {path}: "
                            f"{cut(endpoint.redact(str(error))) or type(error).__name__}") from None


def call(endpoint: Server, http: httpx.Client, method: str, path: str, check=None, *args, **kwargs) -> Any:
    """The JSON answer of one request (``exchange``), ``check(answer, *args)`` when given; an ``EndpointError``
    naming the endpoint for an error answer (what it said) or a malformed one (what was wrong)."""
    status, body = exchange(endpoint, http, method, path, **kwargs)
    if status >= 400:
        hint = ""
        if status == 401:
            hint = ("; the key sent was refused" if endpoint.has_key else
                    "; it wants a key: give api_key= (on the command line and in the app, GCS_ENDPOINT_KEY)")
        raise EndpointError(f"endpoint {endpoint.url} answered {path} with HTTP {status}: {body}{hint}")
    try:
        return body if check is None else check(body, *args)
    except BadAnswer as bad:
        raise EndpointError(f"endpoint {endpoint.url} answered {path} with {bad}") from None


def said(endpoint: Server, answer: httpx.Response) -> str:
    """What an error answer says, from its first 16 KB, in at most 300 characters, without the key."""
    return cut(" ".join(endpoint.redact(error_text(answer)).split()))


def redirected(endpoint: Server, answer: httpx.Response) -> str:
    """What a redirect is, which gcs does not follow (a server could send the key elsewhere), in a few words."""
    location = endpoint.redact(answer.headers.get("location", ""))
    return (f"a redirect (HTTP {answer.status_code}) to {quoted(location, 100)}; gcs does not follow redirects: "
            "give the address it redirects to")


# --- shapes -----------------------------------------------------------------------------------------------------

def _field(body: Any, key: str, kind: type, what: str) -> Any:
    if not isinstance(body, dict):
        raise BadAnswer(f"{what} that is not a JSON object but {type(body).__name__}")
    if not isinstance(body.get(key), kind):
        raise BadAnswer(f"{what} whose {key!r} is {type(body.get(key)).__name__ if key in body else 'missing'}, "
                        f"not a {kind.__name__}")
    return body[key]


def token_ids(value: list, vocabulary: int | None, what: str) -> list[int]:
    """``value``'s token ids: whole numbers (not floats, not booleans) in [0, ``vocabulary``)."""
    for i in value:
        if type(i) is not int:
            raise BadAnswer(f"{what} with a token id that is {type(i).__name__} {quoted(i, 30)}, not a whole number")
        if i < 0 or (vocabulary is not None and i >= vocabulary):
            raise BadAnswer(f"{what} with token id {quoted(i, 30)}, outside the vocabulary [0, {vocabulary})")
    return value


def model_names(body: Any) -> list[str]:
    """The names a ``/v1/models`` answer lists."""
    entries = _field(body, "data", list, "a model list")
    return [_field(entry, "id", str, "a model list with an entry") for entry in entries]


def tokenized(body: Any) -> list[int]:
    """The token ids a ``/tokenize`` answer gives."""
    return token_ids(_field(body, "tokens", list, "a tokenization"), None, "a tokenization")


def whole_completion(body: Any, max_tokens: int, vocabulary: int) -> list[int]:
    """The token ids of a whole (not streamed) answer to a one-row completion request."""
    choices = _field(body, "choices", list, "a completion")
    if len(choices) != 1:
        raise BadAnswer(f"a completion of {len(choices):,} choices for a request of one")
    return _choice(choices[0], 0, max_tokens, vocabulary)[0]


def checked_event(event: Any, have: int, max_tokens: int, vocabulary: int, ended: bool) -> tuple[list[int], str | None]:
    """The new token ids and finish reason (None: not yet) of one event of a row's streamed answer, once its shape,
    its token ids and their count (``have`` so far) are checked; a usage event without choices adds nothing."""
    choices = _field(event, "choices", list, "an event")
    if not choices:
        return [], None
    if len(choices) > 1:
        raise BadAnswer(f"an event of {len(choices):,} choices for a request of one")
    ids, reason = _choice(choices[0], have, max_tokens, vocabulary)
    if ended and (ids or reason):
        raise BadAnswer("more of an answer after its finish_reason")
    return ids, reason


def _choice(choice: Any, have: int, max_tokens: int, vocabulary: int) -> tuple[list[int], str | None]:
    index = _field(choice, "index", int, "a choice")
    if type(index) is not int or index != 0:
        raise BadAnswer(f"a choice for index {quoted(index, 30)}, where the request asked for one (index 0)")
    reason = choice.get("finish_reason")
    if reason is not None and reason not in FINISH_REASONS:
        raise BadAnswer(f"finish_reason {quoted(reason, 40)}, which is neither 'stop' nor 'length'")
    count = have + len(_field(choice, "token_ids", list, "a choice"))
    if count > max_tokens:
        raise BadAnswer(f"{count:,} tokens for a request of at most {max_tokens}")
    ids = token_ids(choice["token_ids"], vocabulary, "a choice")
    if reason == "length" and count != max_tokens:
        raise BadAnswer(f"finish_reason 'length' after {count} of {max_tokens} tokens (a server whose context "
                        "window, --max-model-len, is shorter than the prompt and max_new_tokens ends early)")
    return ids, reason


# --- the checks at connect -----------------------------------------------------------------------------------------

_CONNECTED: dict[tuple, str] = {}
_CONNECTING = threading.Lock()


def connect(endpoint: Server, client, model: Model) -> str:
    """The name ``endpoint`` serves ``model`` under, once it passed the checks (module docstring), ``client()`` its
    HTTP client; else a ValueError saying what differs, or an ``EndpointError``."""
    key = (endpoint, model.name, id(model.tokenizer))
    with _CONNECTING:
        if key not in _CONNECTED:
            with client() as http:
                served = _served_model(endpoint, http)
                _check_tokenizer(endpoint, http, served, model)
                _check_plugin(endpoint, http, served, model)
            _CONNECTED[key] = served
        return _CONNECTED[key]


def _listed(names: list[str], shown: int = 5) -> str:
    more = f" and {len(names) - shown:,} more" if len(names) > shown else ""
    return ", ".join(quoted(name, 60) for name in names[:shown]) + more


def _first(ids: list[int], shown: int = 12) -> str:
    return f"{len(ids):,} tokens [{', '.join(map(str, ids[:shown]))}{', ...' if len(ids) > shown else ''}]"


def _served_model(endpoint: Server, http: httpx.Client) -> str:
    names = call(endpoint, http, "GET", "/v1/models", model_names)
    if endpoint.model is not None:
        if endpoint.model not in names:
            raise ValueError(f"endpoint {endpoint.url} does not serve model {quoted(endpoint.model)}; it serves "
                             f"{_listed(names)}")
        return endpoint.model
    if len(names) != 1:
        raise ValueError(f"endpoint {endpoint.url} serves {len(names):,} models ({_listed(names)}): name one with "
                         "Endpoint(url, model=...)")
    return names[0]


def _check_tokenizer(endpoint: Server, http: httpx.Client, served: str, model: Model) -> None:
    """The server's tokenizer reads ``PROBE_TEXT`` as the local one does, and its chat template writes the probe
    question's prompt as the local one does."""
    tokenizer: Any = model.tokenizer
    theirs = call(endpoint, http, "POST", "/tokenize", tokenized,
                  json={"model": served, "prompt": PROBE_TEXT, "add_special_tokens": False})
    ours = tokenizer(PROBE_TEXT, add_special_tokens=False)["input_ids"]
    if theirs != ours:
        raise ValueError(f"endpoint {endpoint.url} serves {quoted(served)} with another vocabulary than the local "
                         f"model {quoted(model.name)}: it reads {quoted(PROBE_TEXT)} as {_first(theirs)}, the local "
                         f"tokenizer as {_first(ours)}")
    if model.is_chat:
        prompt = format_prompt(PROBE_QUESTION, tokenizer=tokenizer, is_chat=True)
        ours = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        theirs = call(endpoint, http, "POST", "/tokenize", tokenized, json={
            "model": served, "messages": [{"role": "user", "content": PROBE_QUESTION}], "add_generation_prompt": True})
        if theirs != ours:
            raise ValueError(f"endpoint {endpoint.url} serves {quoted(served)} with another chat template than the "
                             f"local model {quoted(model.name)}: {quoted(PROBE_QUESTION)} becomes {_first(theirs)} "
                             f"there, {_first(ours)} here")


def _check_plugin(endpoint: Server, http: httpx.Client, served: str, model: Model) -> None:
    """The plugin refuses an unknown method and couples a pair; a server without it samples both freely."""
    tokenizer: Any = model.tokenizer
    prompt = tokenizer(PROBE_QUESTION, add_special_tokens=False)["input_ids"]
    request = {"model": served, "prompt": prompt, "max_tokens": 8, "temperature": 1.5, "ignore_eos": True,
               "return_token_ids": True}
    status, answer = exchange(endpoint, http, "POST", "/v1/completions",
                              json={**request, "max_tokens": 1, "vllm_xargs": {"gcs_method": NOT_A_METHOD}})
    if status < 400 or "unknown method" not in answer:
        raise ValueError(f"endpoint {endpoint.url} has no gcs plugin: it answered a request with gcs_method="
                         f"{NOT_A_METHOD!r} with HTTP {status} instead of refusing it, so it would "
                         "sample without shared noise; serve it with gcs vllm-serve")
    tokens = []
    for _ in range(2):
        status, answer = exchange(endpoint, http, "POST", "/v1/completions",
                                  json={**request, "vllm_xargs": {"gcs_method": "gcswr", "gcs_seed": 7}})
        if status >= 400:
            raise ValueError(f"endpoint {endpoint.url} refused gcs's probe (HTTP {status}: {answer}); a server "
                             "whose generation config sets penalties or min_p changes the distribution: start it "
                             "with --generation-config vllm")
        try:
            tokens.append(whole_completion(answer, request["max_tokens"], vocabulary_size(model)))
        except BadAnswer as bad:
            raise EndpointError(f"endpoint {endpoint.url} answered /v1/completions with {bad}") from None
    if tokens[0] != tokens[1]:
        raise ValueError(f"endpoint {endpoint.url} does not couple requests: two with one gcs_seed got "
                         f"{_first(tokens[0])} and {_first(tokens[1])}; serve it with gcs vllm-serve")
