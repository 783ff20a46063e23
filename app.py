"""gcs dashboard: IS / GCS / GCSwR side by side, consistency vs temperature, a coupling explorer.

    python app.py            # http://127.0.0.1:7860 (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT to change)
                             # MCP tools at /gradio_api/mcp/ (GCS_MCP=0 turns them off)

The Hugging Face Spaces entry point (README front matter). Each tab lives in the ``ui``
package beside this file; every computation comes from the ``gcs`` library. Runs on CPU
with the embedded model, on CUDA when present, and on ZeroGPU.
"""

from __future__ import annotations

from gcs.environment import QUEUE_SIZE, check_environment, env_count, setting  # (touches no CUDA)

try:  # every setting read once, before anything loads: a typo stops the app here, in one sentence naming it
    check_environment()
except ValueError as error:
    raise SystemExit(f"gcs: {error}") from None

import ui  # noqa: E402  (before anything touches CUDA: it imports ZeroGPU's `spaces`)

# isort: split

import logging  # noqa: E402
import sys  # noqa: E402

import gradio as gr  # noqa: E402

from ui.server.startup import patient_launch_check  # noqa: E402
from ui.shared.logs import RedactingStream, RedactSecrets  # noqa: E402

demo = ui.build(queue_size=env_count(*QUEUE_SIZE))

if __name__ == "__main__":
    # what anything prints (Gradio echoes a refused call's inputs) is redacted and cut too, like the logs
    sys.stdout, sys.stderr = RedactingStream(sys.stdout), RedactingStream(sys.stderr)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactSecrets())
    logging.getLogger("httpx").setLevel(logging.WARNING)  # not a line per request (MCP's loopback calls included)
    if setting("GCS_TIMINGS") == "on":  # where a run's time goes (bench/bench_browser.py reads it)
        logging.getLogger("gcs.timing").setLevel(logging.DEBUG)
    ui.warm_up()
    patient_launch_check()  # a loaded machine answers the launch's own check late, not never
    demo.launch(theme=gr.themes.Soft(), css=ui.CSS, **ui.launch_options(demo))
