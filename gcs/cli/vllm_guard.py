"""``gcs vllm-serve``'s outermost middleware, ``ServedRoutes``: which routes the server serves at all, which need the
key, and how large a body it reads, all decided before any body is read; and the ranges of the sampling fields a
body may hold (``out_of_range``, checked by ``gcs.cli.vllm_server.StrictGcsArgs``).

vLLM's own key check (``--api-key``, ``VLLM_API_KEY``) covers paths under ``/v1`` (and a few other prefixes) only:
``POST /invocations`` (which takes completion and chat bodies), ``/tokenize`` and ``/detokenize`` answered anyone,
as did ``/scale_elastic_ep``. And a body was read whole before any check: a client without the key made the server
hold 300 MB before its 401.

>>> SERVED["POST", "/v1/completions"], SERVED["GET", "/health"], ("POST", "/invocations") in SERVED
('key', 'open', False)
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
from http import HTTPStatus

from gcs.runtime.asgi import read_body, replaying

# What the server serves: (method, path) -> "key" (needs the key, where one is set) or "open" (health, readiness and
# monitoring: a load balancer or Prometheus asks without it; they hold no text and run nothing). Everything else vLLM
# would serve gets 404: the SageMaker routes (/invocations), the Responses, Anthropic Messages, render, scoring,
# token-in-token-out, elastic-scaling and load routes, and the API's documentation pages.
SERVED = {
    ("POST", "/v1/completions"): "key", ("POST", "/v1/chat/completions"): "key", ("GET", "/v1/models"): "key",
    ("POST", "/tokenize"): "key", ("POST", "/detokenize"): "key", ("GET", "/version"): "key",
    ("GET", "/health"): "open", ("GET", "/ping"): "open", ("GET", "/metrics"): "open",
}
# The largest legitimate body: a prompt of max-model-len token ids. A model with 1,048,576 tokens of context (the
# longest common ones) written as ids of up to 6 digits and a separator ("151935, ") takes 8 MiB; the rest leaves room
# for every other field (a logit_bias over a 152,000-token vocabulary is about 2.5 MB).
MAX_BODY_BYTES = 16 << 20
INT64 = (-(2**63), 2**63 - 1)
# The integer fields of completion and chat bodies. vLLM bounds some (seed, priority) and checks most against the
# model, but an integer past 2**64 - 1 in top_k or stream_interval was an HTTP 500 (its engine core holds them as
# 64-bit): each is held to int64, as vLLM's own bounded fields are.
INTEGER_FIELDS = ("top_k", "max_tokens", "max_completion_tokens", "min_tokens", "n", "best_of", "seed", "logprobs",
                  "top_logprobs", "prompt_logprobs", "stream_interval", "priority", "truncate_prompt_tokens",
                  "routed_experts_prompt_start", "thinking_token_budget")


def out_of_range(payload) -> str | None:
    """The first integer field of a completion or chat body (``INTEGER_FIELDS``) outside int64, or None. A boolean
    (chat's ``logprobs``) or a value of another type is vLLM's to judge.

    >>> out_of_range({"top_k": 10**20, "n": 1}), out_of_range({"seed": -(2**63), "logprobs": True, "top_k": "x"})
    ('top_k', None)
    """
    if not isinstance(payload, dict):
        return None
    return next((field for field in INTEGER_FIELDS if isinstance(value := payload.get(field), (int, float))
                 and not isinstance(value, bool) and not INT64[0] <= value <= INT64[1]), None)


def range_error(field: str, value) -> str:
    """The 400's message for ``field`` out of range: a number of 5,000 digits is counted, not quoted.

    >>> range_error("top_k", 10**20)
    'top_k must be a whole number from -2**63 to 2**63 - 1 (vLLM holds no more), got 100000000000000000000'
    """
    text = str(value)
    shown = text if len(text) <= 40 else f"a number of {len(text.lstrip('-')):,} digits"
    return f"{field} must be a whole number from -2**63 to 2**63 - 1 (vLLM holds no more), got {shown}"


async def refuse(send, status: int, message: str, param: str | None = None, headers: tuple = ()) -> None:
    """Answer with OpenAI's error shape (vLLM's: its ``type`` named from the status), before vLLM sees the request."""
    kind = HTTPStatus(status).phrase.replace(" ", "").replace("-", "") + "Error"
    body = json.dumps({"error": {"message": message, "type": kind, "param": param, "code": status}}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


def _digest(key: str | bytes) -> bytes:
    return hashlib.sha256(key.encode() if isinstance(key, str) else key).digest()


def served_keys(scope) -> list[bytes]:
    """The digests of the keys the server takes, as vLLM finds them: ``--api-key`` (its parsed arguments, which it
    keeps in ``app.state.args``), else ``VLLM_API_KEY`` (where ``gcs vllm-serve`` puts the one ``--api-key`` it is
    given, out of ``ps``). Empty where there is none."""
    args = getattr(getattr(scope.get("app"), "state", None), "args", None)
    keys = getattr(args, "api_key", None) or [os.environ.get("VLLM_API_KEY")]
    return [_digest(key) for key in keys if key]


def bearer_matches(headers, digests: list[bytes]) -> bool:
    """Whether the request's first ``Authorization: Bearer KEY`` names one of the keys, compared in constant time
    (``hmac.compare_digest`` over SHA-256 digests, every key tried: neither a key's length nor which one matched
    shows in the time taken).

    >>> bearer_matches([(b"authorization", b"bearer s3cret")], [_digest("s3cret")])
    True
    >>> bearer_matches([(b"authorization", b"Basic s3cret")], [_digest("s3cret")]), bearer_matches([], [])
    (False, False)
    """
    value = next((value for name, value in headers if name.lower() == b"authorization"), b"")
    scheme, _, token = value.partition(b" ")
    given = _digest(token.strip() if scheme.lower() == b"bearer" else b"\0not a bearer key")
    matched = False
    for digest in digests:
        matched |= hmac.compare_digest(given, digest)
    return matched


def has_body(scope) -> bool:
    """Whether an HTTP request declares a body (a Content-Length but 0, or a Transfer-Encoding): one refused unread
    is answered with ``Connection: close``, so that its client cannot go on sending it."""
    return any(name == b"transfer-encoding" or (name == b"content-length" and value.strip() != b"0")
               for name, value in scope.get("headers") or [])


class ServedRoutes:
    """ASGI middleware for ``gcs vllm-serve``, its outermost: a request for a route not in ``SERVED`` gets 404 (a
    WebSocket is closed: none is served), one for a ``"key"`` route without the server's key (where one is set) gets
    401, and a body over ``MAX_BODY_BYTES`` gets 413 (at once for a declared Content-Length, else once that many
    bytes are read), each before the body is read, whoever sends it (``has_body``: a refused body's connection is
    closed). ``OPTIONS`` (a browser's CORS preflight) passes without the key, as vLLM's own check lets it. Other
    requests are handed on with their body, read once here."""

    def __init__(self, app):
        self.app = app
        self.digests: list[bytes] | None = None  # read at the first request: vLLM sets its state up before serving

    async def __call__(self, scope, receive, send):
        if scope["type"] == "websocket":
            return await send({"type": "websocket.close", "code": 1008})
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if self.digests is None:
            self.digests = served_keys(scope)
        method, path = scope.get("method", ""), scope["path"].removeprefix(scope.get("root_path", "")) or "/"
        access = next((access for (m, p), access in SERVED.items() if p == path), None) if method == "OPTIONS" \
            else SERVED.get((method, path))
        close = ((b"connection", b"close"),) if has_body(scope) else ()
        if access is None:
            routes = ", ".join(f"{m} {p}" for m, p in SERVED)
            return await refuse(send, 404, f"this server serves only: {routes}", headers=close)
        if access == "key" and method != "OPTIONS" and self.digests \
                and not bearer_matches(scope.get("headers") or [], self.digests):
            return await refuse(send, 401, "this route needs the server's key: send 'Authorization: Bearer KEY'",
                                headers=(*close, (b"www-authenticate", b"Bearer")))
        messages = await read_body(scope, receive, MAX_BODY_BYTES)
        if messages is None:
            return await refuse(send, 413, f"the request body is over {MAX_BODY_BYTES:,} bytes, this server's limit",
                                headers=close)
        await self.app(scope, replaying(messages, receive), send)
