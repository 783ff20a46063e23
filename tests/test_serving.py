"""The private Gradio APIs that ``ui.server.internals`` wraps, and only it (for ``ui.server.serving.guard_queue``,
``quiet_input_errors`` and ``ui.server.mcp_calls.stop_abandoned_mcp_calls``), checked on the installed Gradio: if an
upgrade changes one, this fails instead of the lanes' waiting limits, the one-line refusals or the MCP calls'
cancellation going soft without a word. (The stream check's and the MCP errors' internals: tests/test_http_guard.py.)"""

from __future__ import annotations

import ast
import asyncio
import inspect
import os
import time
from pathlib import Path

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import gradio as gr  # noqa: E402
import pytest  # noqa: E402
from gradio.queueing import EventQueue  # noqa: E402

from ui.server import internals, mcp_calls, page_assets, serving  # noqa: E402


def test_the_installed_gradio_is_in_the_tested_range_that_requirements_pin():
    assert internals.gradio_tested(), f"gradio {gr.__version__} is outside {internals.TESTED_GRADIO}"
    requirements = open(os.path.join(os.path.dirname(__file__), "..", "requirements.txt")).read()
    low, high = internals.TESTED_GRADIO
    assert f"gradio[mcp]>={low[0]}.{low[1]},<{high[0]}" in requirements


@pytest.mark.parametrize("version, tested", [("6.0.0", True), ("6.31.0", True), ("6.99", True), ("7.0.0", False),
                                             ("5.49.1", False), ("10.1", False)])
def test_gradio_tested_reads_major_and_minor(version, tested):
    assert internals.gradio_tested(version) is tested


def private_names(path: Path) -> list[str]:
    """The private names (one leading underscore) ``path`` reads or writes on anything but its own objects (``self``,
    ``cls``): as attributes, or by name through ``getattr``, ``hasattr``, ``setattr`` or ``delattr``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(f"{path.name}:{node.lineno} .{node.attr}")
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr", "setattr",
                                                                               "delattr"):
            found += [f"{path.name}:{node.lineno} {node.func.id}({arg.value!r})" for arg in node.args[1:2]
                      if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
                      and arg.value.startswith("_") and not arg.value.startswith("__")]
    return found


def test_only_ui_internals_reaches_into_private_names():
    """Every private name of Gradio or mcp the app uses sits in ui/server/internals.py, behind one function that warns
    when it changed (its docstring's table); no other module of the app reaches into one."""
    root = Path(__file__).resolve().parent.parent
    app = [root / "app.py", *sorted((root / "ui").rglob("*.py"))]
    assert private_names(root / "ui" / "server" / "internals.py")  # the check sees them where they are
    assert [name for path in app if path.name != "internals.py" for name in private_names(path)] == []


def test_the_queue_api_the_guard_wraps_has_the_shape_it_expects():
    with gr.Blocks() as demo:
        box = gr.Textbox()
        box.submit(lambda text: text, box, box, concurrency_id="lane", concurrency_limit=1)
    demo.queue(max_size=None)
    queue = demo._queue
    assert inspect.iscoroutinefunction(queue.push)
    assert list(inspect.signature(queue.push).parameters) == ["body", "request", "username"]
    queue.create_event_queue_for_fn(demo.fns[0])  # what Gradio does for every event when the app starts
    lane = queue.event_queue_per_concurrency_id["lane"]
    assert isinstance(lane, EventQueue) and lane.queue == []  # what the guard counts: a lane's waiting events
    serving.guard_queue(demo, {"lane": 2})
    assert queue.push.__name__ == "guarded_push"


def test_the_preprocessing_the_input_errors_wrap_has_the_shape_they_expect():
    with gr.Blocks() as demo:
        choice = gr.Radio(["a", "b"])
        choice.change(lambda value: value, choice, choice)
    assert inspect.iscoroutinefunction(demo.preprocess_data)
    assert list(inspect.signature(demo.preprocess_data).parameters) == ["block_fn", "inputs", "state", "explicit_call"]
    serving.quiet_input_errors(demo)
    assert demo.preprocess_data.__name__ == "preprocess_briefly"
    with pytest.raises(gr.Error) as refused:
        asyncio.run(demo.preprocess_data(demo.fns[0], ["z" * 1_000], None))
    assert refused.value.print_exception is False and len(refused.value.message) < 300
    assert "is not one of this input's choices" in refused.value.message


def test_the_mcp_server_api_the_cancellation_wraps_has_the_shape_it_expects():
    from gradio.mcp import GradioMCPServer

    assert list(inspect.signature(GradioMCPServer._execute_tool_without_progress).parameters) == ["self", "job"]
    assert list(inspect.signature(GradioMCPServer._execute_tool_with_progress).parameters) == \
        ["self", "job", "progress_token"]
    assert mcp_calls.stop_abandoned_mcp_calls() and GradioMCPServer.stops_abandoned_calls
    assert "_client_instance" in inspect.getsource(GradioMCPServer.__init__)  # the client Gradio keeps, per call now


# each patched bundle of Gradio's front end: what finds it, what the build holds and what the page gets in its place
BUNDLE_PATCHES = {"status tracker": (page_assets.quiet_status_trackers, page_assets.TIMER_LOOP,
                                     page_assets.TIMER_LOOP_WHILE_PENDING, "statustracker-Xy1.js",
                                     "keeps Gradio's status tracker timer loop"),
                  "highlighted text": (page_assets.highlighted_text_colours, page_assets.COLOR_TO_RGBA,
                                       page_assets.COLOR_TO_RGBA_ONCE, "Index-Xy1.js",
                                       "draw their colours on a new canvas at every update")}


@pytest.mark.parametrize("bundle", BUNDLE_PATCHES)
def test_a_patched_bundle_differs_from_gradio_s_build_there_and_only_there(bundle):
    """Gradio's front end, as installed: one bundle holds the code the patch replaces (the status tracker's timer loop
    going on while ``W``, its timer, runs, with no look at the status; HighlightedText's colour drawn on a new canvas
    at each call), once; the served copy differs from it there and only there, and the app serves both."""
    find, built, patched_code, _, _ = BUNDLE_PATCHES[bundle]
    [(name, patched)] = find().items()
    original = (page_assets.FRONTEND_ASSETS / name).read_text(encoding="utf-8")
    assert original.count(built) == 1 and patched_code not in original
    assert patched.decode() == original.replace(built, patched_code)
    assert page_assets.patched_bundles()[name] == patched


@pytest.mark.parametrize("bundle", BUNDLE_PATCHES)
def test_another_build_of_a_patched_bundle_is_served_as_gradio_built_it_with_a_warning(bundle, tmp_path, caplog):
    import logging

    find, built, _, name, lost = BUNDLE_PATCHES[bundle]
    (tmp_path / name).write_text(f"x{built[1:]}", encoding="utf-8")  # a build whose code differs by a character
    with caplog.at_level(logging.WARNING):
        assert find(tmp_path) == {}
    assert lost in caplog.text


def test_a_changed_queue_api_falls_back_to_gradio_s_bound_with_a_warning(monkeypatch, caplog):
    """Where the private Queue API is gone, the app still serves, bounded by Gradio's public max_size, and says what
    is lost (tested by taking the attribute away from a real queue)."""
    import logging

    with gr.Blocks() as demo:
        gr.Button().click(lambda: None, concurrency_id="lane")
    demo.queue(max_size=None)
    monkeypatch.delattr(type(demo._queue), "push")
    with caplog.at_level(logging.WARNING):
        serving.guard_queue(demo, {"lane": 2, "other": 3})
    assert "per-lane waiting limits are off" in caplog.text and demo._queue.max_size == 5


def queued_demo() -> gr.Blocks:
    """The smallest app with a queue: one button, one event."""
    with gr.Blocks() as demo:
        gr.Button().click(lambda: None)
    demo.queue()
    return demo


def idle_looks(demo: gr.Blocks, monkeypatch, seconds: float = 0.5) -> tuple[int, float]:
    """How often Gradio's queue loop looked for work (``len(queue)``, once per pass) while it ran idle for about
    ``seconds``, and the seconds it ran."""
    queue, looks = demo._queue, []
    counted = type(queue).__len__
    monkeypatch.setattr(type(queue), "__len__", lambda self: looks.append(1) or counted(self))

    async def idle():
        queue.stopped = False
        loop, started = asyncio.create_task(queue.start_processing()), time.perf_counter()
        await asyncio.sleep(seconds)
        queue.stopped = True
        await loop
        return time.perf_counter() - started

    ran = asyncio.run(idle())
    return len(looks), ran


def test_a_calm_queue_looks_for_work_every_10_ms_not_every_millisecond(monkeypatch):
    """Gradio's queue loop sleeps ``Queue.sleep_when_free`` between looks (1 ms: 0.05 of a core, idle); calmed, it
    looks at most once per ``QUEUE_POLL_S`` (each pass sleeps that long, so a slow machine only looks less often),
    and Gradio's own loop looks far more often: this fails where the calming does not reach the loop."""
    demo = queued_demo()
    gradio_looks, gradio_ran = idle_looks(demo, monkeypatch)
    serving.calm_queue(demo)
    assert (demo._queue.sleep_when_free, demo._queue.progress_update_sleep_when_free) == \
        (serving.QUEUE_POLL_S, serving.PROGRESS_POLL_S)
    looks, ran = idle_looks(demo, monkeypatch)
    assert 0 < looks <= ran / serving.QUEUE_POLL_S + 1
    assert gradio_looks > 2 * (gradio_ran / serving.QUEUE_POLL_S + 1)  # the check above can fail


def test_a_changed_queue_poll_keeps_gradio_s_with_a_warning(monkeypatch, caplog):
    import logging

    demo = queued_demo()
    monkeypatch.delattr(demo._queue, "progress_update_sleep_when_free")
    with caplog.at_level(logging.WARNING):
        serving.calm_queue(demo)
    assert "keeps looking for work every millisecond" in caplog.text and demo._queue.sleep_when_free == 0.001


def test_a_wake_brings_the_next_beat_without_waiting_for_the_half_second(monkeypatch):
    """With the beat interval made long, only ``wake`` can bring a beat soon: each of the work's three landings is
    acknowledged by a beat (with a broken wake the work gives up waiting, before any interval's beat, and says so;
    its end sets ``wake`` too, so the run ends at once either way)."""
    import threading

    monkeypatch.setattr(serving, "HEARTBEAT_S", 120.0)
    wake, landed, acknowledged = threading.Event(), [], []
    for _ in range(3):
        acknowledged.append(threading.Event())

    def work(stop):
        for ack in acknowledged:
            landed.append(len(landed))
            wake.set()
            if not ack.wait(30):  # a liveness bound, far above the delay of a set event even on a loaded machine
                return f"landing {len(landed)} got no beat"
        return "every landing got its beat"

    def beat():
        for index in landed:
            acknowledged[index].set()
        return len(landed)

    updates = serving.run_cancellable(work, heartbeat=beat, wake=wake)
    seen = []
    try:
        while True:
            seen.append(next(updates))
    except StopIteration as done:
        result = done.value
    assert result == "every landing got its beat"
    assert seen[-1] == 3 and seen == sorted(seen)


def beats_sent(heartbeat_values: list, quiet_beat_s: float, monkeypatch) -> tuple[list, int]:
    """What ``run_cancellable`` yields for a work that ends once its heartbeat was asked for every value in
    ``heartbeat_values`` (in order; the beat interval made tiny), and how many beats were asked for."""
    import threading

    monkeypatch.setattr(serving, "HEARTBEAT_S", 0.001)
    monkeypatch.setattr(serving, "QUIET_BEAT_S", quiet_beat_s)
    asked, all_asked = [], threading.Event()

    def beat():
        asked.append(None)
        if len(asked) >= len(heartbeat_values):
            all_asked.set()
        return heartbeat_values[min(len(asked), len(heartbeat_values)) - 1]

    def work(stop):
        return "ended" if all_asked.wait(60) else "the beats stopped"  # a liveness bound, not a timing

    updates, seen = serving.run_cancellable(work, heartbeat=beat), []
    try:
        while True:
            seen.append(next(updates))
    except StopIteration as done:
        assert done.value == "ended"
    return seen, len(asked)


def test_a_beat_repeating_the_last_one_sent_waits_for_the_quiet_interval(monkeypatch):
    """Each message costs the visitor's browser: a beat that says nothing new is not sent (the quiet interval made
    far longer than the run), a beat with news is, in order; with no quiet interval every beat goes, as before."""
    values = [{}, {}, {}, {"status": "round 1"}, {"status": "round 1"}, {}, {}, {"status": "[1] 12"}]
    seen, asked = beats_sent(values, 1e9, monkeypatch)
    assert seen == [{}, {"status": "round 1"}, {}, {"status": "[1] 12"}] and asked >= len(values)
    seen, asked = beats_sent(values, 0.0, monkeypatch)
    assert len(seen) == asked >= len(values)


def test_a_beat_whose_values_cannot_be_compared_counts_as_news():
    import numpy as np

    assert not serving._same({"scores": np.zeros(3)}, {"scores": np.zeros(3)})
    assert serving._same({"status": "working"}, {"status": "working"}) and not serving._same({}, {"status": "x"})
