"""ASGI helpers: a request's body read once, up to a size, and handed on to the application unchanged. ``gcs
vllm-serve``'s middleware (``gcs.cli.vllm_server.StrictGcsArgs``) and the app's body limit (``ui.http_limits``) read
bodies this way."""

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


def replaying(messages: list[dict], receive):
    """A ``receive`` that hands on ``messages`` (already read), then whatever comes next."""
    pending = iter(messages)

    async def replay():
        return next(pending, None) or await receive()

    return replay
