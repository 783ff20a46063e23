"""Hardening II: allowlisted metrics, caps on total work, abandoned calls, lanes, CSV injection, redaction, markup.

API cases go through gradio_client against the real app (``python app.py``); the rest run in-process.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd
import pytest
from conftest import error_text, free_port
from waiting import Progress, app_client, served, until

import gcs
from gcs import cli

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from ui import compare, logs, messages  # noqa: E402
from ui.startup import patient_launch_check  # noqa: E402

PARAPHRASES = "What is DNA?\nExplain what DNA is."


# 1. /sweep's metric is allowlisted; no error reveals the server's filesystem
@pytest.mark.slow
def test_sweep_metric_cannot_name_a_server_path(client, tmp_path):
    existing, missing = str(Path.home()), str(tmp_path / "no-such-folder")
    messages = [error_text(lambda m=m: client.predict(PARAPHRASES, "1", 1, "is", m, 4, api_name="/sweep"))
                for m in (f"minilm:{existing}", f"minilm:{missing}", f"e5:{existing}", "e5:intfloat/e5-large-v2")]
    for message in messages:
        assert "is not offered here" in message
        for leak in ("Unrecognized model", "not a directory", "is a file", "not found", "No such file"):
            assert leak not in message


# 2. repeated methods run once; the total work and each paraphrase's tokens are capped
@pytest.mark.slow
def test_repeated_methods_run_once(client):
    result = client.predict(PARAPHRASES, 0.0, 4, 0, 1.0, ",".join(["is"] * 150), api_name="/compare")
    assert list(result["responses"]) == ["is"] and len(result["responses"]["is"]) == 2


@pytest.mark.slow
def test_total_work_is_capped(client):
    eight = "\n".join(f"Question number {i}: " + "why is the sky blue and not green? " * 12 for i in range(8))
    message = error_text(lambda: client.predict(eight, 1.0, 256, 0, 1.0, "is,gcs,gcswr", True,
                                                 api_name="/compare"))
    assert "tokens of work" in message and "the limit here is 32,768" in message
    long_one = "What is DNA?\n" + "1 2 3 4 5 6 7 8 9 " * 55  # under 1,000 characters, ~500 tokens
    assert "tokens long as the model sees it" in error_text(lambda: client.predict(long_one, 1.0, 8, 0,
                                                                                    api_name="/compare"))


# 3. an abandoned call stops generating and frees the model lane: test_hardening_more.py


# 4. light endpoints have their own capacity: a full model lane does not refuse them
def _queue_size(app_url, progress) -> int:
    return served("GET", app_url.rstrip("/") + "/gradio_api/queue/status", progress).json()["queue_size"]


HOLD = "Hold the model lane until the test lets go.\nHold it, please."


@pytest.fixture
def held_lane_app(monkeypatch):
    """(url, release, progress): the app as ``app.py`` builds it (the fixture's waiting limit of 4), served in this
    process, where a /compare of the ``HOLD`` paraphrases streams progress until the test sets ``release``: a model
    job that provably holds the lane, however fast the machine. Every other request runs as usual."""
    import ui

    release, run = threading.Event(), compare._run

    def held(prompts, settings, model, streaming, stop=None):
        if "\n".join(prompts) != HOLD:
            yield from run(prompts, settings, model, streaming, stop)
            return
        while not release.wait(0.05):
            yield None  # a step: the handler streams progress
        raise ValueError("released by the test")

    monkeypatch.setattr(compare, "_run", held)
    patient_launch_check()  # (as app.py launches: its check of its own page waits for the answer)
    demo = ui.build(queue_size=4)
    _, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), prevent_thread_lock=True, quiet=True)
    try:
        yield url, release, Progress()  # (served in this process: its threads' work is the app's progress)
    finally:
        release.set()
        demo.close()


@pytest.mark.slow
def test_coupling_answers_while_the_model_lane_is_full(held_lane_app):
    """A model job holds the lane until released; a burst of 10 more arrives at once: exactly 4 (the waiting limit)
    wait and 6 are told the queue is full, while the coupling explorer answers in its own lane. Released, the
    lane serves the 4 waiting ones. Nothing here depends on how fast the machine is."""
    url, release, progress = held_lane_app  # no client gives up on a busy machine: each waits on the app's progress
    holder = app_client(url, progress).submit(HOLD, 1.0, 8, 0, seeds=1, rounds=False, api_name="/compare")
    until(lambda: holder.outputs() or holder.done(), "the held job to stream progress", progress)
    assert not holder.done(), holder.exception()
    outcomes, lock = [], threading.Lock()

    def one_client():
        try:
            app_client(url, progress).predict(PARAPHRASES, 0.0, 4, 0, seeds=1, api_name="/compare")
            outcome = "served"
        except Exception as error:
            outcome = "queue full" if "queue is full" in str(error).lower() else f"other: {error}"
        with lock:
            outcomes.append(outcome)

    with ThreadPoolExecutor(10) as burst:
        for _ in range(10):
            burst.submit(one_client)
        until(lambda: len(outcomes) + _queue_size(url, progress) >= 10, "every request of the burst to be placed",
              progress)
        assert _queue_size(url, progress) == 4 and sorted(outcomes) == ["queue full"] * 6, outcomes
        light = app_client(url, progress)
        for _ in range(3):
            assert light.predict(api_name="/coupling", trials=500, steps=500)["curve"]
        assert _queue_size(url, progress) == 4 and not holder.done(), "the held job left the lane before its release"
        release.set()
    assert sorted(outcomes) == ["queue full"] * 6 + ["served"] * 4, outcomes
    with pytest.raises(Exception, match="released by the test"):
        holder.result()


# 5. CSV formula injection
@pytest.mark.parametrize("text", ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "@SUM(A1)", "-2+3", "\tx", "'q"])
def test_csv_cells_cannot_start_a_formula(tmp_path, text):
    frame = pd.DataFrame({"prompt": [text], "consistency": [-0.5]})
    path = gcs.write_csv(frame, tmp_path / "out.csv")
    written = pd.read_csv(path, dtype=str, keep_default_na=False)
    assert written.loc[0, "prompt"] == "'" + text and written.loc[0, "consistency"] == "-0.5"
    log = gcs.results.ResultsLog(tmp_path / "log.csv", ["prompt", "seed"], ["prompt"], types={"seed": int})
    log.append(pd.DataFrame({"prompt": [text], "seed": [3]}))
    assert log.load().loc[0, "prompt"] == text  # the CLI reads its own files back exactly


def compare_outputs() -> set[str]:
    """The output names the side-by-side run's event wires (the page as ``ui.build`` lays it out)."""
    import ui

    event = next(fn for fn in ui.build().fns.values() if fn.name == "compare_stream")
    assert list(event.outputs) == list(event.fn.components.values())  # the adapter's names are the event's outputs
    return set(event.fn.components)


@pytest.mark.slow
def test_side_by_side_downloads_are_spreadsheet_safe(embedded_model):
    updates = list(compare.compare_stream('=HYPERLINK("http://x")\n@SUM(A1)', 0.0, 4, 0, 1.0, ["gcswr"], False,
                                          gcs.DEFAULT_MODEL))
    wired = compare_outputs()
    assert all(set(update) <= wired for update in updates)  # streamed and final updates alike
    final = updates[-1]
    assert set(final) == wired  # the finished run sets every output
    files, status = final["downloads"], final["status"]
    assert status == "Done."
    csv_path, json_path = files
    prompts = pd.read_csv(csv_path, dtype=str)["prompt"].tolist()
    assert prompts == ['\'=HYPERLINK("http://x")', "'@SUM(A1)"] * compare.DEFAULT_SEEDS
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    run = json.loads(Path(json_path).read_text(), parse_constant=refuse)  # strict JSON: no bare NaN or Infinity
    assert run["responses"][0]["prompt"] == '=HYPERLINK("http://x")'  # exact
    assert run["responses"][0]["top_p"] is None and run["summary"]


# 6. the CLI summarises exactly the requested cells
def test_cli_summary_covers_only_the_requested_cells(tmp_path, capsys):
    out = str(tmp_path / "run")
    common_args = ["run", "--data", "general", "--out", out, "--quiet", "--max-new-tokens", "4", "--metrics", "jaccard"]
    assert cli.main([*common_args, "--limit", "2", "--methods", "is,gcswr", "--temperatures", "0,1",
                     "--seeds", "2"]) == 0
    results = Path(out) / "results.csv"
    with open(results, "a") as file:  # a hand-added row for a group nobody asked for
        file.write("stranger,is,0,1.0,False,jaccard,0.5,[]\n")
    assert cli.main([*common_args, "--limit", "1", "--methods", "is", "--temperatures", "1", "--seeds", "1"]) == 0
    summary = (Path(out) / "summary.md").read_text()
    assert "(1 groups)" in summary and "1 cells." in summary and "GCSwR" not in summary
    curve_rows = [line for line in summary.split("consistency vs temperature")[1].splitlines() if line.startswith("|")]
    assert len(curve_rows) == 2 + 1  # header, separator and the one requested (method, temperature)


# 7. log redaction covers tracebacks and more secret shapes
def test_redaction_covers_tracebacks_and_headers():
    handler_output = []

    class Collect(logging.Handler):
        def emit(self, record):
            handler_output.append(self.format(record))

    handler = Collect()
    handler.addFilter(logs.RedactSecrets())
    logger = logging.getLogger("gcs.test-redaction")
    logger.addHandler(handler)
    try:
        try:
            raise RuntimeError('failed with token=abc123 HF_TOKEN=hf_abcdefghijklmnopqrstuvwx {"token": "s3cr3t"}')
        except RuntimeError:
            logger.exception("Authorization: Bearer eyJhbGciOi.payload.sig for user")
    finally:
        logger.removeHandler(handler)
    (text,) = handler_output
    assert "Traceback" in text
    for secret in ("abc123", "hf_abcdefghijklmnopqrstuvwx", "s3cr3t", "eyJhbGciOi"):
        assert secret not in text


# 8. user text is shown as text (plot labels; error messages)
@pytest.mark.slow
def test_markup_in_user_text_is_escaped(embedded_model):
    final = list(compare.compare_stream('<a href="http://evil.example">x</a>\n<b>bold</b>', 0.0, 4, 0, 1.0, ["gcswr"],
                                        False, gcs.DEFAULT_MODEL))[-1]
    heatmap = final["heatmap-gcswr"]
    labels = [str(text) for row in heatmap.data[0].customdata for text in row]  # the paraphrases, on hover
    assert all("<a" not in label and "<b>" not in label for label in labels)
    assert any("&lt;a href" in label for label in labels)
    error = messages.user_error(ValueError('p must be numbers, got \'<img src="http://evil.example/x.png">\''))
    assert "<img" not in str(error.message) and "&lt;img" in str(error.message)


# 9. smaller bad inputs
@pytest.mark.parametrize(
    "endpoint, arguments, message",
    [("/coupling", ("0.5, 0.5", "", 3.0, 1000, 1000, 1.5), "coupling seed must be a whole number"),
     ("/sweep", ("builtin:-1", "1", 1, "is", "e5", 8), "builtin:N needs a whole number"),
     ("/compare", (PARAPHRASES, 1.0, 8, 0, 1.0, "gcswr", "yes"), "ensembling must be true or false"),
     ("/compare", (PARAPHRASES, 1.0, 8, 0, 1.0, 5), "methods must be")],
)
@pytest.mark.slow
def test_small_bad_inputs(client, endpoint, arguments, message):
    assert message in error_text(lambda: client.predict(*arguments, api_name=endpoint))


def test_deeply_nested_json_upload_is_a_clear_error():
    with pytest.raises(ValueError, match="line 1: JSON nested too deeply"):
        gcs.parse_groups("[" * 100_000 + "]" * 100_000, "jsonl")


def test_damaged_results_file_names_the_line(tmp_path, capsys):
    out = tmp_path / "run"
    arguments = ["run", "--data", "general", "--limit", "1", "--methods", "is", "--temperatures", "1", "--seeds", "1",
                 "--max-new-tokens", "4", "--metrics", "jaccard", "--out", str(out), "--quiet"]
    assert cli.main(arguments) == 0
    results = out / "results.csv"
    lines = results.read_text().splitlines()
    results.write_text("\n".join([lines[0], lines[1].replace(",is,0,", ",is,zero,")]) + "\n")
    assert cli.main(arguments) == 2
    assert "results.csv line 2: seed 'zero' is damaged" in capsys.readouterr().err


def test_full_disk_is_a_clear_error(tmp_path, capsys, monkeypatch):
    def full(descriptor):  # every results write ends in an fsync: the disk fills there
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(gcs.results.os, "fsync", full)
    status = cli.main(["run", "--data", "general", "--limit", "1", "--methods", "is", "--temperatures", "1",
                       "--seeds", "1", "--max-new-tokens", "4", "--metrics", "jaccard", "--out", str(tmp_path / "r"),
                       "--quiet"])
    assert status == 2 and "gcs: error: No space left on device" in capsys.readouterr().err


# 10. a user error is logged in one line, never with a traceback
@pytest.mark.slow
def test_a_refused_request_logs_one_line(client, app_log, app_progress):
    before = app_log.read_text()
    message = error_text(lambda: client.predict("only one line", 1.0, 8, 0, api_name="/compare"))
    assert "enter 2 to 8 paraphrases" in message
    # the log is written by another process: wait for the line, however slow
    until(lambda: "refused: enter 2 to 8 paraphrases" in app_log.read_text()[len(before):], "the refusal's line",
          app_progress)
    added = app_log.read_text()[len(before):]
    assert "Traceback" not in added, added[-3000:]
    assert len([line for line in added.splitlines() if "enter 2 to 8" in line]) == 1, added[-3000:]
