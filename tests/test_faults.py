"""Faults and security: failures injected into the real model, remote code, a full queue. (Secrets in the log:
tests/test_log_safety.py; the sweep tab's uploads: tests/test_uploads.py.)

Faults are injected with a forward hook on the real embedded model (it raises on a chosen
call), then removed: the app function must answer with a clear message (an API's gr.Error; a UI
handler's toast and status line, keeping earlier results) and the next request must work.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import gradio as gr
import pytest
import torch
from waiting import app_client, served, until

import gcs
from conftest import call_outcome, refused_in_ui

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import dataclasses  # noqa: E402

from ui.server import serving  # noqa: E402  (the app's tabs, in-process)
from ui.shared import deployment  # noqa: E402  (the app's tabs, in-process)
from ui.tabs.side_by_side import compare  # noqa: E402  (the app's tabs, in-process)

PARAPHRASES = "What is DNA?\nExplain what DNA is."


pytestmark = pytest.mark.usefixtures("transformers_engine")  # (tests/conftest.py: the page on vLLM is not theirs)


@pytest.fixture
def app_model() -> gcs.Model:
    """The model object the app's tabs use (its default dtype), to inject faults into."""
    return deployment.load_allowed_model(gcs.DEFAULT_MODEL)


def final(generator):
    """The last value a streaming handler yields (its result), running it to the end as Gradio does."""
    *_, last = generator
    return last


@contextmanager
def failing_forward(model: gcs.Model, error: Exception, on_call: int):
    """The model's forward raises ``error`` on its ``on_call``-th call (1 = the prompt)."""
    calls = [0]

    def hook(module, inputs):
        calls[0] += 1
        if calls[0] == on_call:
            raise error

    handle = model.model.model.layers[0].register_forward_pre_hook(hook)
    try:
        yield calls
    finally:
        handle.remove()


def compare_ui(**changes):
    arguments = dict(paraphrases=PARAPHRASES, temperature=1.0, max_new_tokens=8, seed=0, top_p=1.0,
                     methods=["gcswr"], ensembling=False, model_name=gcs.DEFAULT_MODEL)
    arguments.update(changes)
    return list(compare.compare_stream(*arguments.values()))


@pytest.mark.slow
def test_out_of_memory_during_generation_is_reported_and_the_app_recovers(app_model):
    out_of_memory = torch.OutOfMemoryError("CUDA out of memory (simulated)")
    with failing_forward(app_model, out_of_memory, on_call=3):
        refused_in_ui(compare_ui, "out of memory for this request")
    with failing_forward(app_model, out_of_memory, on_call=3), pytest.raises(gr.Error, match="out of memory"):
        final(compare.compare(PARAPHRASES, 1.0, 8, 16))
    updates = compare_ui()
    assert updates[-1]["status"] == "Done."


@pytest.mark.slow
def test_exception_inside_a_streamed_generation(app_model, caplog):
    with failing_forward(app_model, RuntimeError("kernel exploded"), on_call=4) as calls:
        with caplog.at_level(logging.ERROR, logger="gcs.app"):
            refused_in_ui(compare_ui, "generation failed (RuntimeError)")
    assert calls[0] == 4  # it failed mid-stream, after tokens had been streamed
    assert "kernel exploded" in caplog.text  # the details go to the log, not to the user
    assert not any(t.name == "gcs-generate" for t in threading.enumerate())
    assert compare_ui()[-1]["status"] == "Done."


def test_model_load_failure_is_a_clear_error(monkeypatch):
    offered = (*deployment.SETTINGS.allowed_models, "no-such-org/no-such-model")
    monkeypatch.setattr(deployment, "SETTINGS", dataclasses.replace(deployment.SETTINGS, allowed_models=offered))
    with pytest.raises(gr.Error, match="could not load model 'no-such-org/no-such-model'"):
        final(compare.compare(PARAPHRASES, 1.0, 8, 16, model="no-such-org/no-such-model"))
    assert final(compare.compare(PARAPHRASES, 0.0, 4, 16, methods="gcswr"))["responses"]["gcswr"]


def test_a_model_that_needs_remote_code_is_refused(tmp_path):
    folder = tmp_path / "remote-code-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({
        "model_type": "my_custom_arch", "architectures": ["MyCustomModel"],
        "auto_map": {"AutoConfig": "configuration_custom.MyConfig", "AutoModelForCausalLM": "modeling_custom.MyModel"},
    }))
    (folder / "modeling_custom.py").write_text("raise SystemExit('remote code ran')\n")
    (folder / "configuration_custom.py").write_text("raise SystemExit('remote code ran')\n")
    with pytest.raises(ValueError, match="could not load model"):
        gcs.load_model(str(folder))
    with pytest.raises(gr.Error, match="is not offered here"):  # and the app never even tries
        final(compare.compare(PARAPHRASES, 1.0, 8, 16, model=str(folder)))


@pytest.mark.slow
def test_full_queue_is_told_clearly_and_the_server_keeps_serving(app_url, app_progress):
    """The app process as users start it, with GCS_QUEUE_SIZE=4 (the fixture's): while a long job holds the model
    lane, 8 clients arrive at once; exactly 4 wait and 4 are told the queue is full. The holder is then cancelled,
    the 4 are served, and the server goes on serving. (tests/test_lanes.py holds the lane in-process for as long as
    it likes; here the holder is a real job of 96 rows x 256 tokens, checked to still run when the burst is
    placed.) A busy machine is slow, not broken: no client gives up on it, each waits on the app's progress."""
    status = lambda: served("GET", app_url.rstrip("/") + "/gradio_api/queue/status", app_progress).json()  # noqa: E731
    holder = app_client(app_url, app_progress).submit(PARAPHRASES, 1.0, 256, 16, api_name="/compare")
    until(lambda: holder.outputs() or holder.done(), "the long job's first heartbeat", app_progress)
    assert not holder.done(), f"the long job did not start: {holder.exception()}"  # it runs, and holds the lane
    outcomes, lock = [], threading.Lock()

    def one_client():
        outcome = call_outcome(app_url, app_progress, PARAPHRASES, 1.0, 4, 1, api_name="/compare")
        with lock:
            outcomes.append(outcome)

    threads = [threading.Thread(target=one_client) for _ in range(8)]
    for thread in threads:
        thread.start()
    until(lambda: len(outcomes) + status()["queue_size"] >= 8, f"the burst to be placed ({outcomes})", app_progress)
    assert not holder.done(), "the long job ended before the burst was placed: nothing held the lane"
    assert status()["queue_size"] == 4 and outcomes == ["queue full"] * 4, outcomes
    holder.cancel()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["queue full"] * 4 + ["served"] * 4, outcomes
    assert app_client(app_url, app_progress).predict(api_name="/coupling", trials=500, steps=500)["curve"]


def test_download_folders_are_bounded():
    folders = [serving.download_folder("gcs-test-") for _ in range(serving.KEPT_DOWNLOADS + 6)]
    assert sum(folder.exists() for folder in folders) == serving.KEPT_DOWNLOADS
    assert not folders[0].exists() and folders[-1].exists()


@pytest.mark.slow
def test_a_vllm_engine_that_cannot_start_falls_back_to_transformers(monkeypatch, app_model, caplog):
    """Where vLLM is installed but its engine fails to start, the demo keeps answering, on transformers."""
    import gcs.engines.vllm

    def broken(model, **kwargs):
        raise RuntimeError("no engine today")

    monkeypatch.setattr(deployment.ENGINE, "name", "vllm")
    monkeypatch.setattr(gcs.engines.vllm, "engine", broken)
    with caplog.at_level(logging.ERROR, logger="gcs.app"):
        deployment.ENGINE.start(app_model)
    assert deployment.ENGINE.name == "transformers" and deployment.ENGINE.for_request(False) == "transformers"
    assert "no engine today" in caplog.text
    assert compare_ui()[-1]["status"] == "Done."


def test_a_bad_setting_stops_the_app_at_start_with_a_sentence_naming_each_one():
    import os
    import subprocess

    env = {**os.environ, "GCS_THREADS": "fast", "GCS_QUEUE_SIZE": "lots", "GCS_DTYPE": "int8", "GCS_ENGINE": ""}
    result = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr and result.stdout == ""
    message = result.stderr.strip()
    assert message.startswith("gcs: bad settings in the environment: ") and "\n" not in message, message
    for named in ("GCS_THREADS='fast'", "GCS_QUEUE_SIZE='lots'", "GCS_DTYPE='int8'"):
        assert named in message
    assert "GCS_ENGINE" not in message  # blank is unset: the default, not an error


def test_the_start_check_knows_every_dtype_the_loader_takes():
    from gcs.environment import DTYPE_NAMES, check_environment

    assert set(DTYPE_NAMES) == set(gcs.engines.models.DTYPES)  # one list of names for the loader and the start check
    for name in DTYPE_NAMES:
        check_environment({"GCS_DTYPE": name.upper()})  # no error: the loader reads it too
        assert gcs.engines.models.check_dtype(name.upper()) is not None
