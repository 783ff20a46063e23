"""The app's MCP tools, served by Gradio's MCP server: a tool call stops when its client leaves, as an HTTP call
does, and no MCP error quotes back what a call sent whole. Both wrap private APIs of Gradio and the ``mcp`` package,
checked on the installed versions (``tests/test_serving.py``, ``tests/test_http_guard.py``): where one changed, a
WARNING names what is lost."""

from __future__ import annotations

import functools
import threading

import anyio
import gradio as gr

from .limits import quoted
from .logs import logger
from .messages import brief
from .serving import gradio_tested


def stop_abandoned_mcp_calls() -> bool:
    """Make an MCP tool call stop when its client leaves, as an HTTP call does; whether that holds here.

    Gradio runs each queued tool call as a job of one shared loopback ``gradio_client`` and waits for its result
    in a thread that nothing cancels: a client that disconnects (or cancels the call) leaves the job running to
    its end, holding the model lane. Wrapped (``GradioMCPServer``, private): each call gets a loopback client of
    its own (a session of its own, since Gradio's cancel route stops every running job of a session and
    endpoint), the wait can be cancelled, and a cancelled wait cancels its job; Gradio then closes the handler's
    generator, ``run_cancellable`` sets ``stop`` and the log says "abandoned" as for HTTP."""
    try:
        from gradio.mcp import GradioMCPServer
    except ImportError:  # no mcp package: no tools to stop
        return False
    parts = ("_get_or_create_client", "_execute_tool_without_progress", "_execute_tool_with_progress")
    if not gradio_tested() or not all(hasattr(GradioMCPServer, part) for part in parts):
        logger.warning("gradio %s: an MCP tool call runs to its end when its client leaves (GradioMCPServer.%s "
                       "changed)", gr.__version__, ", ".join(parts))
        return False
    if getattr(GradioMCPServer, "stops_abandoned_calls", False):
        return True
    shared_client, with_progress, creating = GradioMCPServer._get_or_create_client, \
        GradioMCPServer._execute_tool_with_progress, threading.Lock()

    def own_client(self):
        with creating:  # Gradio keeps the client it builds in _client_instance: build a fresh one per call
            self._client_instance = None
            client = shared_client(self)
            self._client_instance = None
        submit = client.submit

        def submit_once(*args, **kwargs):
            job = submit(*args, **kwargs)
            job.add_done_callback(lambda _: client.close())  # its session ends with its one job
            return job

        client.submit = submit_once
        return client

    async def without_progress(self, job):
        return [await cancelled_with_caller(job, anyio.to_thread.run_sync(job.result, abandon_on_cancel=True))]

    async def progressing(self, job, progress_token):
        return await cancelled_with_caller(job, with_progress(self, job, progress_token))

    GradioMCPServer._get_or_create_client = own_client
    GradioMCPServer._execute_tool_without_progress = without_progress
    GradioMCPServer._execute_tool_with_progress = progressing
    GradioMCPServer.stops_abandoned_calls = True
    return True


def brief_mcp_errors() -> bool:
    """Keep an MCP tool call's error short whatever the call sent; whether that holds here. Gradio's "Unknown tool"
    error quoted the whole name (a 100,000-character name came back in a 100,034-character error), and the mcp
    package's schema check quotes the whole value it refuses. Wrapped (private): ``GradioMCPServer.
    _prepare_tool_call_args`` refuses an unknown name quoting at most ~100 characters of it, and the mcp ``Server.
    _make_error_result`` that every tool error passes through cuts it to ``MESSAGE_CHARACTERS``, and every other
    request's handler (``GradioMCPServer.create_mcp_server``'s) raises its error cut the same way."""
    try:
        from gradio.mcp import GradioMCPServer
        from mcp.server.lowlevel import Server
    except ImportError:  # no mcp package: no tools, no errors
        return False
    if not gradio_tested() or not all(hasattr(GradioMCPServer, part) for part in ("_prepare_tool_call_args",
                                                                              "create_mcp_server")) \
            or not hasattr(Server, "_make_error_result"):
        logger.warning("gradio %s: an MCP tool error may quote what the call sent whole (GradioMCPServer."
                       "_prepare_tool_call_args or mcp's Server._make_error_result changed)", gr.__version__)
        return False
    if getattr(Server, "errors_are_brief", False):
        return True
    prepare, error_result = GradioMCPServer._prepare_tool_call_args, Server._make_error_result

    @functools.wraps(prepare)
    def known_tool_first(self, name, arguments):
        if name not in getattr(self, "tool_to_endpoint", {name: None}):
            raise ValueError(f"Unknown tool for this Gradio app: {quoted(name)}")
        return prepare(self, name, arguments)

    @functools.wraps(error_result)
    def brief_error_result(self, error_message):
        return error_result(self, brief(error_message))

    create = GradioMCPServer.create_mcp_server

    @functools.wraps(create)
    def with_brief_handlers(self):
        server = create(self)
        for kind, handler in list(getattr(server, "request_handlers", {}).items()):
            server.request_handlers[kind] = _briefly(handler)
        return server

    GradioMCPServer._prepare_tool_call_args = known_tool_first
    GradioMCPServer.create_mcp_server = with_brief_handlers
    Server._make_error_result = brief_error_result
    Server.errors_are_brief = True
    return True


def _briefly(handler):
    """An MCP request handler whose error messages are cut: the mcp package answers any other request's error
    (``resources/read`` of an unknown URI, ``prompts/get`` of an unknown name: Gradio quotes them whole) with
    ``str(error)``, past ``_make_error_result``."""
    @functools.wraps(handler)
    async def brief_handler(request):
        try:
            return await handler(request)
        except Exception as error:  # noqa: BLE001 - re-raised with its message cut, as the mcp package answers it
            raise ValueError(brief(str(error))) from None

    return brief_handler


async def cancelled_with_caller(job, waiting):
    """Await ``waiting`` (a loopback job's result); if the wait is cancelled (the MCP client left), cancel the job."""
    try:
        return await waiting
    except anyio.get_cancelled_exc_class():
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(job.cancel)
        raise
