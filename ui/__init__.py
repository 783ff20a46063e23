"""The gcs dashboard's UI; ``app.py`` builds and launches it. Three folders, each importing only the ones before it:

- ``ui.shared``: what the tabs share (the ``Tab`` shape, the deployment's settings, the limits table and input
  parsing, messages, highlights, links, the log).
- ``ui.server``: what every request passes around a tab's handler (HTTP limits and guard, argument types, lanes
  and cancellable work, MCP calls, the private Gradio APIs behind one module, ZeroGPU).
- ``ui.tabs``: one module per tab (side by side is a folder of its parts); a tab never imports another.

This module lays the tabs out on one page and wires the server around them. Every computation comes from ``gcs``;
the UI lays out, checks and displays.
"""

from __future__ import annotations

from ui.server.zerogpu import gpu  # first: ZeroGPU's `spaces` must be imported before CUDA is touched

# isort: split

import importlib.metadata
import threading

import gradio as gr
from starlette.middleware import Middleware

import gcs
from gcs.engines.transformers import probe_threads
from gcs.environment import setting
from gcs.stats.sequential import DEFAULT_ROUNDS
from ui.server.arguments import typed
from ui.server.http_guard import EXCEPTION_HANDLERS, KnownStreams, LastResort, StrictJson
from ui.server.http_limits import (
    CLEANUP_EVERY_S,
    FILE_AGE_S,
    SESSIONS_KEPT,
    BodyLimit,
    KnownCalls,
    QueuedOnly,
    UploadQuota,
    UrlLimit,
    trusted_proxies,
)
from ui.server.mcp_calls import brief_mcp_errors, stop_abandoned_mcp_calls
from ui.server.page_assets import PatchedBundles
from ui.server.serving import calm_queue, guard_queue, lane_standing, quiet_input_errors
from ui.shared.deployment import DEFAULT_MODEL, ENGINE, load_allowed_model
from ui.shared.links import Links
from ui.shared.logs import logger
from ui.shared.messages import say_slider_ranges, strict_json, watch_lanes
from ui.tabs import ab, coupling, hindsight, stepthrough, sweep
from ui.tabs.about import ABOUT
from ui.tabs.side_by_side import compare

__all__ = ["build", "warm_up", "mcp_server", "launch_options", "gpu", "CSS", "ENDPOINTS"]

CSS = """
.method-column { min-width: 260px; }
/* in a row of equal-height columns gradio grows every block of a shorter column: only the response box grows, so
   the three boxes start (and end) level under their headings */
.method-column > .method-heading { flex-grow: 0 !important; }
#status { min-height: 1.5em; }
.caption { color: var(--body-text-color-subdued); margin-top: -0.5em; }
/* responses wrap between words, never inside one (gradio lays tokens out as flex items and breaks anywhere) */
.response-text .textfield { display: block !important; word-break: normal !important; overflow-wrap: break-word; }
.response-text .token-container, .response-text .token { display: inline !important; }
.response-text .token.highlighted { margin: 0 !important; padding: 0 !important; }
.response-text .line-break { display: block; height: 0.6em; }
"""

TAB_IDS = {"Side by side": "compare", "Inside the sampler": "trace", "Hindsight": "hindsight",
           "Consistency vs temperature": "sweep", "A/B": "ab", "Coupling explorer": "coupling", "About": "about"}


def _selected_tab(event: gr.SelectData) -> str:
    return TAB_IDS.get(event.value, "compare")


def _examples() -> list[list[str]]:
    return [["\n".join(g.prompts)] for g in gcs.load_groups("general")[:6]]


# The public API: endpoint name -> (function, lane). An endpoint is named after its function, since Gradio names an
# MCP tool after its function; each checks its arguments' types first (``typed``). The model lane runs one request at
# a time.
ENDPOINTS = {function.__name__: (typed(function), lane) for function, lane in (
    (compare.compare, "model"), (stepthrough.trace, "model"), (hindsight.hindsight, "model"),
    (hindsight.counterfactual, "model"), (sweep.sweep, "model"), (ab.ab, "model"), (coupling.coupling, "coupling"))}

COUPLING_WAITING = 64  # the coupling lane's own bound on waiting requests (each is small and capped)


def build(queue_size: int = 16) -> gr.Blocks:
    """The app. ``queue_size`` bounds the requests waiting for the model; the coupling explorer has its own lane."""
    # delete_cache: gradio's copies of downloads and uploads go after an hour (ui.server.http_limits.UploadQuota counts
    # on it).
    with gr.Blocks(title="Gumbel Consistency Sampling", delete_cache=(CLEANUP_EVERY_S, FILE_AGE_S)) as demo:
        gr.Markdown("# Gumbel Consistency Sampling\nAsk one question several ways. Independent sampling (IS) "
                    "answers each rewording with its own luck; GCS and GCSwR share the randomness, so answers agree "
                    "more — while each one is still an exact sample from the model. Pick an example or type your "
                    "own rewordings, then press **Generate** below (about a minute on a small CPU).")
        with gr.Row():
            share = gr.Button("Copy a link to this tab's settings", size="sm", scale=1, min_width=260,
                              elem_id="share")
            link = gr.Textbox(show_label=False, placeholder="the link appears here", buttons=["copy"], scale=4,
                              elem_id="share-link")
        selected = gr.State("compare")
        with gr.Tabs() as tabs:
            built = {"compare": compare.build(_examples()), "trace": stepthrough.build()}
            built["hindsight"] = hindsight.build(built["compare"].shared["compare-run"])
            built.update(sweep=sweep.build(), ab=ab.build(), coupling=coupling.build())
            with gr.Tab("About", id="about"):
                gr.Markdown(ABOUT)
        tabs.select(_selected_tab, None, selected, api_visibility="private")
        say_slider_ranges([block for block in demo.blocks.values() if isinstance(block, gr.Slider)])
        links = Links(tabs, {name: tab.links for name, tab in built.items()}, selected)
        load = links.wire(demo, share, link)
        for tab in built.values():
            if tab.on_load is not None:
                tab.on_load(load, selected)
        for name, (function, lane) in ENDPOINTS.items():  # NaN and infinities as null: every answer is JSON
            gr.api(strict_json(function), api_name=name, concurrency_id=lane,
                   concurrency_limit=4 if lane == "coupling" else 1)
    # No global queue bound: each lane has its own, so a full model lane never refuses the coupling explorer.
    demo.queue(max_size=None, default_concurrency_limit=1)
    guard_queue(demo, {"model": queue_size, "coupling": COUPLING_WAITING, "browse": COUPLING_WAITING})
    calm_queue(demo)
    watch_lanes(lane_standing(demo))  # a run that waits for the model says where it stands at once
    quiet_input_errors(demo)
    stop_abandoned_mcp_calls()
    brief_mcp_errors()
    return demo


def warm_up() -> None:
    """Load the default model, its vLLM engine (when the demo uses vLLM), the embedding models and GCSwR's CPU
    kernel in the background, so the page serves at once (requests meanwhile wait for what they need)."""

    def in_background():
        try:
            model = load_allowed_model(DEFAULT_MODEL)
        except Exception:  # shows up again, as that request's error, when someone asks for it
            logger.exception("could not load the default model %r", DEFAULT_MODEL)
            return
        ENGINE.start(model)
        if ENGINE.name == "transformers":  # each round of the side by side's defaults (3 paraphrases), probed now
            try:
                probe_threads(model, [len(gcs.METHODS) * 3 * size for size in DEFAULT_ROUNDS])
            except Exception:  # a bad GCS_THREADS: requests will show the error; the rest still warms up
                logger.exception("could not probe the decode steps' threads")
        try:
            gcs.cpu_kernel()  # compiled once unless cached; GCSwR requests meanwhile wait for it
            logger.info(gcs.kernel_status())
        except Exception:  # GCS_CPU_KERNEL=on without a compiler: GCSwR requests will show the error
            logger.exception("GCSwR's fused CPU kernel is not available")
        try:
            for metric in ("e5", "minilm"):
                gcs.embedder(metric)
        except Exception:  # a missing optional model shows up later, as that request's error
            logger.exception("could not preload an embedding model")

    threading.Thread(target=in_background, daemon=True, name="gcs-warm-up").start()


def mcp_server() -> bool:
    """Whether the app also serves its endpoints as MCP tools (at /gradio_api/mcp/): on unless ``GCS_MCP=0``, and
    only where Gradio's MCP server can run (it needs the ``mcp`` package 1.x: ``pip install "gradio[mcp]"``)."""
    if setting("GCS_MCP") == "off":
        return False
    try:
        found = importlib.metadata.version("mcp")
    except importlib.metadata.PackageNotFoundError:
        logger.warning("MCP tools off: the mcp package is missing (pip install \"gradio[mcp]\")")
        return False
    if int(found.split(".")[0]) >= 2:
        logger.warning("MCP tools off: Gradio's MCP server needs mcp 1.x, found %s (pip install \"mcp<2\")", found)
        return False
    return True


def launch_options(demo: gr.Blocks) -> dict:
    """How ``app.py`` launches ``demo`` (and tests and benchmarks that launch it in their own process): uploads of at
    most 1 MB, at most ``SESSIONS_KEPT`` sessions' state, the MCP tools where they can run, forwarded client
    addresses believed only from ``GCS_TRUSTED_PROXIES``, and the middleware that answers over-long URLs (414),
    oversized bodies (413, before parsing), non-finite JSON numbers (400), uploads past their bounds (429, 503),
    calls to unknown endpoints (404), streams of unknown sessions or events (404) and Gradio's routes around its
    queue (404) before Gradio sees them; fields of the wrong shape get FastAPI's 422 without the input quoted back,
    and whatever escapes the app ends its request plainly (``ui.server.http_guard.LastResort``, the outermost); Gradio's
    status tracker (its timer stopped once nothing is pending) and HighlightedText (each colour converted once) are
    served patched (``ui.server.page_assets``)."""
    trusted_proxies()
    middleware = [Middleware(LastResort), Middleware(UrlLimit), Middleware(BodyLimit), Middleware(StrictJson),
                  Middleware(UploadQuota), Middleware(KnownCalls, demo=demo), Middleware(KnownStreams, demo=demo),
                  Middleware(QueuedOnly, demo=demo), Middleware(PatchedBundles)]
    return {"max_file_size": "1mb", "show_error": True, "mcp_server": mcp_server(),
            "state_session_capacity": SESSIONS_KEPT,
            "app_kwargs": {"middleware": middleware, "exception_handlers": EXCEPTION_HANDLERS}}
