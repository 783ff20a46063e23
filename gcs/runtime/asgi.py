"""ASGI helpers: a request's body read once, up to a size, and handed on to the application unchanged. ``gcs
vllm-serve``'s middleware (``gcs.cli.vllm_guard.ServedRoutes``, ``gcs.cli.vllm_server.StrictGcsArgs``) and the app's
body limit (``ui.server.http_limits``) read bodies this way."""

from __future__ import annotations


async def read_messages(receive, max_bytes: float = float("inf")) -> list[dict] | None:
    """An HTTP request's messages up to the end of its body; None once the body passes ``max_bytes``."""
    messages, size = [], 0
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request":
            return messages
        size += len(message.get("body", b""))
        if size > max_bytes:
            return None
        if not message.get("more_body", False):
            return messages


async def read_body(scope, receive, max_bytes: int) -> list[dict] | None:
    """An HTTP request's messages up to the end of its body (``read_messages``); None where the body is over
    ``max_bytes``: at once where a Content-Length says so (nothing read), else once that many bytes are read."""
    declared = [value.strip() for name, value in scope.get("headers") or [] if name == b"content-length"]
    if any(not value.isdigit() or len(value) > 18 or int(value) > max_bytes for value in declared):
        return None  # (a length of 5,000 digits is no int Python will parse)
    return await read_messages(receive, max_bytes)


def replaying(messages: list[dict], receive):
    """A ``receive`` that hands on ``messages`` (already read), then whatever comes next."""
    pending = iter(messages)

    async def replay():
        return next(pending, None) or await receive()

    return replay
