"""The gcs dashboard's UI, one module per tab; ``app.py`` builds and launches it.

- ``common``: the demo's limits table, input parsing, the model allowlist, errors, downloads.
- ``compare``: side by side (IS / GCS / GCSwR over several seeds, streamed, paired statistics).
- ``stepthrough``: inside the sampler, the race behind each token (``gcs.trace``).
- ``hindsight``: what a paraphrase would have got with a response's luck (``gcs.hindsight``), and what the
  response would have been had it said something else (``gcs.counterfactual``).
- ``sweep``: consistency vs temperature.
- ``coupling``: Theorem 1 and the recycling histogram.
- ``about``: what the demo shows.
- ``links``: every tab's settings in the page's query string, and a copy-link button.

Every computation comes from ``gcs``'s public names; these modules lay out and display.
"""

from __future__ import annotations

from .common import gpu  # first: ZeroGPU's `spaces` must be imported before CUDA is touched

import threading

import gradio as gr

import gcs

from . import compare, coupling, hindsight, stepthrough, sweep
from .about import ABOUT
from .common import DEFAULT_MODEL, guard_queue, load_allowed_model, logger, start_engine
from .links import Links

__all__ = ["build", "warm_up", "gpu", "CSS"]

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
           "Consistency vs temperature": "sweep", "Coupling explorer": "coupling", "About": "about"}


def _selected_tab(event: gr.SelectData) -> str:
    return TAB_IDS.get(event.value, "compare")


def _examples() -> list[list[str]]:
    return [["\n".join(g.prompts)] for g in gcs.load_groups("general")[:6]]


COUPLING_WAITING = 64  # the coupling lane's own bound on waiting requests (each is small and capped)


def build(queue_size: int = 16) -> gr.Blocks:
    """The app. ``queue_size`` bounds the requests waiting for the model; the coupling explorer has its own lane."""
    # delete_cache: gradio's copies of downloads and uploads go after an hour.
    with gr.Blocks(title="Gumbel Consistency Sampling", delete_cache=(3600, 3600)) as demo:
        gr.Markdown("# Gumbel Consistency Sampling\nAsk one question several ways. Independent sampling (IS) "
                    "answers each rewording with its own luck; GCS and GCSwR share the randomness, so answers agree "
                    "more — while each one is still an exact sample from the model.")
        with gr.Row():
            share = gr.Button("Copy a link to this tab's settings", size="sm", scale=1, min_width=260,
                              elem_id="share")
            link = gr.Textbox(show_label=False, placeholder="the link appears here", buttons=["copy"], scale=4,
                              elem_id="share-link")
        selected = gr.State("compare")
        with gr.Tabs() as tabs:
            compare_links, compare_run = compare.build(_examples())
            trace_links, follow_trace_link = stepthrough.build()
            hindsight_links = hindsight.build(compare_run)
            sweep_links = sweep.build()
            coupling_inputs, coupling_outputs, coupling_links = coupling.build()
            with gr.Tab("About", id="about"):
                gr.Markdown(ABOUT)
        tabs.select(_selected_tab, None, selected, api_visibility="private")
        links = Links(tabs, {"compare": compare_links, "trace": trace_links, "hindsight": hindsight_links,
                             "sweep": sweep_links, "coupling": coupling_links}, selected)
        load = links.wire(demo, share, link)
        load.then(coupling.coupling_ui, coupling_inputs, coupling_outputs, api_visibility="private",
                  concurrency_id="coupling", concurrency_limit=4)
        follow_trace_link(load, selected)
        gr.api(compare.api_compare, api_name="compare", concurrency_id="model", concurrency_limit=1)
        gr.api(stepthrough.api_trace, api_name="trace", concurrency_id="model", concurrency_limit=1)
        gr.api(hindsight.api_hindsight, api_name="hindsight", concurrency_id="model", concurrency_limit=1)
        gr.api(hindsight.api_counterfactual, api_name="counterfactual", concurrency_id="model", concurrency_limit=1)
        gr.api(sweep.api_sweep, api_name="sweep", concurrency_id="model", concurrency_limit=1)
        gr.api(coupling.api_coupling, api_name="coupling", concurrency_id="coupling", concurrency_limit=4)
    # No global queue bound: each lane has its own, so a full model lane never refuses the coupling explorer.
    demo.queue(max_size=None, default_concurrency_limit=1)
    guard_queue(demo, {"model": queue_size, "coupling": COUPLING_WAITING, "browse": COUPLING_WAITING})
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
        start_engine(model)
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


