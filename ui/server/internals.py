"""The private APIs of Gradio and the ``mcp`` package that the app relies on, each behind one function here, and only
here, but for Gradio's built front end, which only ``ui.server.page_assets`` reads (``gcs/`` never imports Gradio: torch's
and vLLM's are in ``gcs/runtime/internals.py``).

When one is missing, or its shape changed (a new release renamed or replaced it), the app falls back to what does not
need it and logs a WARNING that names what is lost. Outside the Gradio versions tested (``TESTED_GRADIO``, the range
requirements.txt and pyproject.toml pin) every function here falls back as if its API were missing: private APIs may
change in any release. ``tests/test_serving.py`` and ``tests/test_http_guard.py`` check their shape on the versions we
pin, and fail if one changed.

| private API | what the app does with it | without it |
| --- | --- | --- |
| ``Queue.push`` (its arguments and its ``(ok, message, kind)`` answer) and ``Queue.event_queue_per_concurrency_id[lane].queue`` | each lane's own waiting limit, a request counted as it arrives; a call with too few values refused before it is queued (``guard_queue_push``, for ``ui.server.serving.guard_queue``) | Gradio's ``max_size`` bounds every lane together (a full model lane refuses the coupling explorer too); a call with too few values is queued, then fails listing every value it was sent |
| ``Queue.pending_messages_per_session``, ``event_ids_to_events``, ``pending_event_ids_session`` | a stream of a session or event the server does not hold gets 404 and one sentence (``held_streams``, for ``ui.server.serving.stream_lookup`` and ``ui.server.http_guard.KnownStreams``) | Gradio answers it: a 200 stream holding an error, ended by ``ui.server.http_guard.LastResort`` |
| ``Queue.event_queue_per_concurrency_id`` (a lane's ``current_concurrency``, ``queue``, ``start_times_per_fn``, ``concurrency_limit``) and ``Queue.process_time_per_fn`` | a run waiting for the model is told its place in the queue and its wait (``lane_reader``, for ``ui.server.serving.lane_standing``) | the page says only "Working…" |
| ``Queue.sleep_when_free``, ``Queue.progress_update_sleep_when_free`` | the queue looks for work every 10 ms and for progress to send every 50 ms, not every 1 and 10 ms (``slow_queue_polls``, for ``ui.server.serving.calm_queue``): the idle app uses about 0.01 of a core, not 0.05, and leaves the cores to the generation | Gradio's polls: a run starts up to 9 ms sooner, and the server's event loop wakes a thousand times a second, idle or not |
| ``Blocks.preprocess_data`` | a value the components refuse (a dropdown value outside its choices) is one sentence quoting at most ~100 characters and one log line (``wrap_preprocess_data``, for ``ui.server.serving.quiet_input_errors``) | a traceback in the log, and the value quoted whole |
| ``GradioMCPServer._get_or_create_client`` (its ``_client_instance``), ``_execute_tool_with_progress``, ``_execute_tool_without_progress`` | an MCP tool call stops when its client leaves, as an HTTP call does (``wrap_mcp_tool_calls``, for ``ui.server.mcp_calls.stop_abandoned_mcp_calls``) | the call runs to its end, holding the model lane |
| ``GradioMCPServer._prepare_tool_call_args`` (its ``tool_to_endpoint``), ``create_mcp_server`` (its server's ``request_handlers``) and ``get_block_fn_from_endpoint_name`` (a prompt's ``_mcp_type``, ``_mcp_name``); mcp's ``Server._make_error_result`` | no MCP error quotes back what a call sent whole, and ``prompts/get`` of an unknown name is an error naming it (``wrap_mcp_errors``, for ``ui.server.mcp_calls.brief_mcp_errors``) | an MCP error may quote a 100,000-character name or value whole; ``prompts/get`` of an unknown name runs a tool (the app's coupling) |
| ``gradio.networking.url_ok`` | the launch's reachability check waits for the page's answer (``replace_url_ok``, for ``ui.server.startup.patient_launch_check``) | Gradio's 3 s limit: a loaded machine may stop the app at start |
| the status tracker's timer loop in Gradio's front end (``statustracker-*.js``: ``W&&ze()``) | the page's own loading tracker, removed once the page has loaded, no longer leaves its timer asking for an animation frame 60 times a second for the life of the tab, and a pending output's timer redraws once a second (``ui.server.page_assets.quiet_status_trackers``) | every open tab runs that loop: about 0.045 of a core here, idle or not; a tab waiting in the queue about 0.16 |
| HighlightedText's colour conversion in Gradio's front end (its ``Index-*.js``: a function drawing a colour on a fresh canvas) | each colour of a response column's colour map is converted to rgba once per page, not at every update of every column (``ui.server.page_assets.highlighted_text_colours``) | 20 canvases drawn per column at every streamed beat: the browser's renderer used 5.9-6.9 CPU seconds a side by side here against 3.5-4.7 with the patch (``docs/benchmarks.md``) |
"""  # noqa: E501 (a table's rows cannot wrap)

from __future__ import annotations

import collections
import functools
import re
import threading
from collections.abc import Callable
from typing import NamedTuple

import anyio
import gradio as gr
from gradio import networking

from ui.shared.logs import logger

TESTED_GRADIO = ((6, 0), (7, 0))  # [from, to): the range requirements.txt pins
GRADIO_URL_OK = getattr(networking, "url_ok", None)  # Gradio's own check, as imported (before any patch)


def gradio_tested(version: str = gr.__version__) -> bool:
    """Whether ``version`` is in the range the private APIs here were tested on.

    >>> gradio_tested("6.31.0"), gradio_tested("7.0.0"), gradio_tested("5.49.1")
    (True, False, False)
    """
    major_minor = tuple(int(part) for part in re.findall(r"\d+", version)[:2])
    return TESTED_GRADIO[0] <= major_minor < TESTED_GRADIO[1]


def _queue_has(demo: gr.Blocks, parts: tuple[str, ...]) -> bool:
    return gradio_tested() and all(hasattr(getattr(demo, "_queue", None), part) for part in parts)


# -- the queue ------------------------------------------------------------------------------------------------------
def guard_queue_push(demo: gr.Blocks, waiting_limits: dict[str, int],
                     refusal: Callable[[object, object], tuple[str, str] | None]) -> bool:
    """Wrap ``Queue.push``: ``refusal(body, event)`` (the request's event, or None) may refuse a request before it is
    queued, as ``(message, kind)``; a request of a lane in ``waiting_limits`` is counted from the moment it arrives
    (before Gradio's awaits, so a burst cannot slip in between a check and its admission) and refused ("queue_full":
    HTTP 503) when its lane already holds its limit. Whether the wrap holds; False, with a WARNING, where the queue's
    API changed (the caller then bounds the queue with Gradio's ``max_size``)."""
    queue = getattr(demo, "_queue", None)
    if not gradio_tested() or not all(hasattr(queue, part) for part in ("push", "event_queue_per_concurrency_id")):
        logger.warning("gradio %s: the queue's per-lane waiting limits are off (Queue.push or "
                       "Queue.event_queue_per_concurrency_id changed): Gradio's max_size=%d bounds every lane together",
                       gr.__version__, sum(waiting_limits.values()))
        return False
    push, arriving = queue.push, collections.Counter()

    async def guarded_push(body, request, username):
        function = demo.fns.get(body.fn_index) if body.fn_index is not None else None
        refused = refusal(body, function)
        if refused is not None:
            return (False, *refused)
        lane = getattr(function, "concurrency_id", None)
        if lane not in waiting_limits:
            return await push(body=body, request=request, username=username)
        # No await between this check and the count: on the event loop, check-and-admit is one step.
        waiting = len(getattr(queue.event_queue_per_concurrency_id.get(lane), "queue", ())) + arriving[lane]
        if waiting >= waiting_limits[lane]:
            return False, f"the {lane} queue is full ({waiting} waiting); please try again shortly", "queue_full"
        arriving[lane] += 1
        try:
            return await push(body=body, request=request, username=username)
        finally:  # admitted (now in the lane's queue) or refused by Gradio: no longer arriving either way
            arriving[lane] -= 1

    queue.push = guarded_push
    return True


def held_streams(demo: gr.Blocks):
    """``held(session_hash=S)`` / ``held(event_id=E)``: whether the queue holds that session's stream, or that event's
    (its session found as Gradio's stream routes find it), read from ``pending_messages_per_session``,
    ``event_ids_to_events`` and ``pending_event_ids_session``; where they changed, None and a WARNING."""
    parts = ("pending_messages_per_session", "event_ids_to_events", "pending_event_ids_session")
    if not _queue_has(demo, parts):
        logger.warning("gradio %s: an event stream for an unknown session or event is answered by Gradio (a 200 "
                       "stream holding an error, ended by ui.server.http_guard.LastResort: Queue.%s changed)",
                       gr.__version__, ", ".join(parts))
        return None

    def held(session_hash: str | None = None, event_id: str | None = None) -> bool:
        queue = demo._queue  # read each time: demo.queue() may replace it
        if event_id is not None:  # as Gradio's route: a running event, then a finished one not yet read, then itself
            event = queue.event_ids_to_events.get(event_id)
            session_hash = event.session_hash if event is not None else next(
                (session for session, ids in queue.pending_event_ids_session.items() if event_id in ids), event_id)
        return session_hash in queue.pending_messages_per_session

    return held


def slow_queue_polls(demo: gr.Blocks, work_s: float, progress_s: float) -> bool:
    """Set how often the queue looks for work to start (``Queue.sleep_when_free``, Gradio's 1 ms) and for progress
    to send (``progress_update_sleep_when_free``, 10 ms) to ``work_s`` and ``progress_s``. Whether it holds; False,
    with a WARNING, where they changed."""
    parts = ("sleep_when_free", "progress_update_sleep_when_free")
    if not _queue_has(demo, parts) or not all(isinstance(getattr(demo._queue, part), float) for part in parts):
        logger.warning("gradio %s: the queue keeps looking for work every millisecond, idle or not (Queue.%s "
                       "changed)", gr.__version__, ", ".join(parts))
        return False
    demo._queue.sleep_when_free, demo._queue.progress_update_sleep_when_free = work_s, progress_s
    return True


class Lane(NamedTuple):
    """A lane of the queue as it stands: its runs running and waiting, when each running one started (``time.time``),
    its concurrency limit, and its events' past runs (mean seconds, count) where there were any."""

    running: int
    waiting: int
    starts: list[float]
    limit: int | None
    past: list[tuple[float, int]]


def lane_reader(demo: gr.Blocks) -> Callable[[str], Lane | None] | None:
    """``read(lane)``: the ``Lane`` as the queue holds it now (None for a lane it has not met), read from
    ``event_queue_per_concurrency_id`` and ``process_time_per_fn``; where they changed, None and a WARNING."""
    parts = ("event_queue_per_concurrency_id", "process_time_per_fn")
    if not _queue_has(demo, parts):
        logger.warning("gradio %s: a request waiting for the model is not told its place in the queue (Queue.%s "
                       "changed)", gr.__version__, ", ".join(parts))
        return None

    def read(lane: str) -> Lane | None:
        queue = demo._queue
        line = queue.event_queue_per_concurrency_id.get(lane)
        if line is None:
            return None
        past = [(t.avg_time, t.count) for fn, t in list(queue.process_time_per_fn.items())
                if getattr(fn, "concurrency_id", None) == lane and t.count]
        starts = [start for starts in list(line.start_times_per_fn.values()) for start in list(starts)]
        return Lane(line.current_concurrency, len(line.queue), starts, line.concurrency_limit, past)

    return read


def wrap_preprocess_data(demo: gr.Blocks, refused: Callable[[Exception], Exception]) -> bool:
    """Wrap ``Blocks.preprocess_data``: whatever it raises (a value the components refuse, before any handler runs) is
    replaced by ``refused(error)``. Whether the wrap holds; False, with a WARNING, where it changed."""
    preprocess = getattr(demo, "preprocess_data", None)
    if preprocess is None or not gradio_tested():
        logger.warning("gradio %s: a value its components refuse (a dropdown value outside its choices) is logged "
                       "with a traceback and quoted whole (Blocks.preprocess_data changed)", gr.__version__)
        return False

    async def preprocess_briefly(block_fn, inputs, state, explicit_call=False):
        try:
            return await preprocess(block_fn, inputs, state, explicit_call)
        except Exception as error:  # noqa: BLE001 - nothing has run yet: whatever failed, the inputs were refused
            raise refused(error) from None

    demo.preprocess_data = preprocess_briefly
    return True


# -- the MCP server -------------------------------------------------------------------------------------------------
def wrap_mcp_tool_calls(cancelled_with_caller: Callable) -> bool:
    """Wrap ``GradioMCPServer``'s tool calls: each gets a loopback ``gradio_client`` of its own (a session of its own,
    since Gradio's cancel route stops every running job of a session and endpoint, closed with its one job), and its
    wait for the job's result is ``cancelled_with_caller(job, waiting)`` (it cancels the job when the wait is
    cancelled). Whether that holds; False where the mcp package is missing, and with a WARNING where the methods
    changed."""
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


def wrap_mcp_errors(unknown_tool: Callable[[str], str], unknown_prompt: Callable[[str, list[str]], str],
                    cut: Callable[[str], str]) -> bool:
    """Wrap the MCP server's errors: ``GradioMCPServer._prepare_tool_call_args`` refuses a tool name it does not serve
    with ``unknown_tool(name)`` (a ValueError), the mcp ``Server._make_error_result`` that every tool error passes
    through cuts the message with ``cut``, and every other request's handler (``GradioMCPServer.create_mcp_server``'s)
    raises its error cut the same way; ``prompts/get`` of a name no endpoint serves as a prompt is refused with
    ``unknown_prompt(name, served)`` (Gradio's handler ran the last endpoint it looked at: any tool). Whether that
    holds; False where the mcp package is missing, and with a WARNING where they changed."""
    try:
        from gradio.mcp import GradioMCPServer
        from mcp.server.lowlevel import Server
        from mcp.types import GetPromptRequest
    except ImportError:  # no mcp package: no tools, no errors
        return False
    parts = ("_prepare_tool_call_args", "create_mcp_server", "get_block_fn_from_endpoint_name")
    if not gradio_tested() or not all(hasattr(GradioMCPServer, part) for part in parts) \
            or not hasattr(Server, "_make_error_result"):
        logger.warning("gradio %s: an MCP tool error may quote what the call sent whole, and prompts/get of an unknown "
                       "name may run a tool (GradioMCPServer.%s or mcp's Server._make_error_result changed)",
                       gr.__version__, ", ".join(parts))
        return False
    if getattr(Server, "errors_are_brief", False):
        return True
    prepare, error_result = GradioMCPServer._prepare_tool_call_args, Server._make_error_result

    @functools.wraps(prepare)
    def known_tool_first(self, name, arguments):
        if name not in getattr(self, "tool_to_endpoint", {name: None}):
            raise ValueError(unknown_tool(name))
        return prepare(self, name, arguments)

    @functools.wraps(error_result)
    def brief_error_result(self, error_message):
        return error_result(self, cut(error_message))

    create = GradioMCPServer.create_mcp_server

    @functools.wraps(create)
    def with_brief_handlers(self):
        server = create(self)
        for kind, handler in list(getattr(server, "request_handlers", {}).items()):
            if kind is GetPromptRequest:
                handler = _served_prompts_only(self, handler, unknown_prompt)
            server.request_handlers[kind] = _briefly(handler, cut)
        return server

    GradioMCPServer._prepare_tool_call_args = known_tool_first
    GradioMCPServer.create_mcp_server = with_brief_handlers
    Server._make_error_result = brief_error_result
    Server.errors_are_brief = True
    return True


def served_prompts(gradio_server) -> list[str]:
    """The names ``prompts/get`` serves: an endpoint's function marked as a prompt (``gr.mcp.prompt``), by the name
    Gradio's handler matches (its ``_mcp_type`` and ``_mcp_name``)."""
    functions = [getattr(gradio_server.get_block_fn_from_endpoint_name(endpoint), "fn", None)
                 for endpoint in gradio_server.tool_to_endpoint.values()]
    return [function._mcp_name for function in functions if getattr(function, "_mcp_type", None) == "prompt"]


def _served_prompts_only(gradio_server, handler, unknown_prompt: Callable[[str, list[str]], str]):
    @functools.wraps(handler)
    async def served_prompt(request):
        if request.params.name not in (served := served_prompts(gradio_server)):
            raise ValueError(unknown_prompt(request.params.name, served))
        return await handler(request)

    return served_prompt


def _briefly(handler, cut: Callable[[str], str]):
    """An MCP request handler whose error messages are cut: the mcp package answers any other request's error
    (``resources/read`` of an unknown URI, ``prompts/get`` of an unknown name: Gradio quotes them whole) with
    ``str(error)``, past ``_make_error_result``."""
    @functools.wraps(handler)
    async def brief_handler(request):
        try:
            return await handler(request)
        except Exception as error:  # noqa: BLE001 - re-raised with its message cut, as the mcp package answers it
            raise ValueError(cut(str(error))) from None

    return brief_handler


# -- the launch -----------------------------------------------------------------------------------------------------
def replace_url_ok(check: Callable[[str], bool]) -> bool:
    """Make ``check(url)`` the reachability check ``Blocks.launch`` runs on its own page (``gradio.networking.url_ok``);
    whether it is. False, with a WARNING, where it is gone: Gradio's own check (3 s) stays."""
    if not gradio_tested() or not callable(getattr(networking, "url_ok", None)):
        logger.warning("gradio %s: the launch's reachability check keeps Gradio's 3 s limit (gradio.networking.url_ok "
                       "changed): a loaded machine may stop the app at start", gr.__version__)
        return False
    networking.url_ok = check
    return True
