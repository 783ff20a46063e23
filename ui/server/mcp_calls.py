"""The app's MCP tools, served by Gradio's MCP server: a tool call stops when its client leaves, as an HTTP call
does, and no MCP error quotes back what a call sent whole. Both wrap private APIs of Gradio and the ``mcp`` package,
in ``ui.server.internals`` (``wrap_mcp_tool_calls``, ``wrap_mcp_errors``), checked on the installed versions
(``tests/test_serving.py``, ``tests/test_http_guard.py``): where one changed, a WARNING names what is lost."""

from __future__ import annotations

import anyio

from ui.server import internals
from ui.shared.limits import quoted
from ui.shared.messages import brief


def stop_abandoned_mcp_calls() -> bool:
    """Make an MCP tool call stop when its client leaves, as an HTTP call does; whether that holds here.

    Gradio runs each queued tool call as a job of one shared loopback ``gradio_client`` and waits for its result
    in a thread that nothing cancels: a client that disconnects (or cancels the call) leaves the job running to
    its end, holding the model lane. Wrapped (``GradioMCPServer``, private:
    ``ui.server.internals.wrap_mcp_tool_calls``): each call gets a loopback client of its own (a session of its own,
    since Gradio's cancel route stops every running job of a session and endpoint), the wait can be cancelled, and a
    cancelled wait cancels its job; Gradio then closes the handler's generator, ``run_cancellable`` sets ``stop`` and
    the log says "abandoned" as for HTTP."""
    return internals.wrap_mcp_tool_calls(cancelled_with_caller)


def brief_mcp_errors() -> bool:
    """Keep an MCP tool call's error short whatever the call sent; whether that holds here. Gradio's "Unknown tool"
    error quoted the whole name (a 100,000-character name came back in a 100,034-character error), and the mcp
    package's schema check quotes the whole value it refuses. Wrapped (private:
    ``ui.server.internals.wrap_mcp_errors``):
    ``GradioMCPServer._prepare_tool_call_args`` refuses an unknown name quoting at most ~100 characters of it, and the
    mcp ``Server._make_error_result`` that every tool error passes through cuts it to ``MESSAGE_CHARACTERS``, and every
    other request's handler (``GradioMCPServer.create_mcp_server``'s) raises its error cut the same way. ``prompts/get``
    of a name the app serves as no prompt is an error naming it (Gradio ran the coupling tool for it)."""
    return internals.wrap_mcp_errors(unknown_tool, unknown_prompt, brief)


def unknown_tool(name: str) -> str:
    """The error for a tool name the server does not serve, quoting at most ~100 characters of it."""
    return f"Unknown tool for this Gradio app: {quoted(name)}"


def unknown_prompt(name: str, served: list[str]) -> str:
    """The error for a prompt name the server does not serve, quoting at most ~100 characters of it.

    >>> unknown_prompt("summarise", [])
    "Unknown prompt for this Gradio app: 'summarise' (it serves no prompts: its endpoints are tools)"
    """
    serves = f"it serves {', '.join(map(quoted, served[:8]))}" if served else \
        "it serves no prompts: its endpoints are tools"
    return f"Unknown prompt for this Gradio app: {quoted(name)} ({serves})"


async def cancelled_with_caller(job, waiting):
    """Await ``waiting`` (a loopback job's result); if the wait is cancelled (the MCP client left), cancel the job."""
    try:
        return await waiting
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(job.cancel)
        raise
