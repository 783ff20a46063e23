"""The experiment CLI on the real embedded model: in-process (``gcs.cli.commands.main``, what ``python -m gcs`` calls)
but
where a test is about the process itself (a SIGKILL mid-run, the ``python -m gcs`` entry point)."""

import contextlib
import io
import json
import signal
import subprocess
import sys
import time
from types import SimpleNamespace

import pandas as pd
import pytest

import gcs
from gcs.cli import commands as cli
from gcs.experiments.results import ResultsLog

pytestmark = pytest.mark.slow  # the real model, and processes of their own

RUN = ["run", "--data", "general", "--limit", "3", "--methods", "is,gcswr", "--temperatures", "0,1", "--seeds", "2",
       "--metrics", "e5,jaccard", "--max-new-tokens", "6", "--batch-rows", "6", "--quiet"]


def gcs_cli(*args):
    """``python -m gcs ARGS``, run in this process: its exit status and what it printed."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(args))
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "out"
    result = gcs_cli(*RUN, "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


def _rows(out):
    frame = pd.read_csv(out / "results.csv")
    return frame.sort_values(["group", "method", "seed", "temperature", "metric"]).reset_index(drop=True)


@pytest.mark.slow
def test_run_writes_every_file(finished_run):
    assert {p.name for p in finished_run.iterdir()} >= {"results.csv", "summary.md", "figure.html", "run.json"}
    rows = _rows(finished_run)
    assert len(rows) == 3 * 2 * 2 * 2 * 2
    assert not rows.duplicated(["group", "method", "seed", "temperature", "metric"]).any()
    summary = (finished_run / "summary.md").read_text()
    assert "Table 1 layout" in summary and "| GCSwR" in summary and "jaccard" in summary
    assert "plotly" in (finished_run / "figure.html").read_text()
    assert json.loads((finished_run / "run.json").read_text())["metrics"] == ["e5", "jaccard"]


@pytest.mark.slow
def test_rerun_skips_finished_rows_and_extends(finished_run, tmp_path):
    before = (finished_run / "results.csv").read_bytes()
    result = gcs_cli(*RUN, "--out", str(finished_run))
    assert result.returncode == 0 and (finished_run / "results.csv").read_bytes() == before
    changed = gcs_cli(*[a if a != "e5,jaccard" else "e5" for a in RUN], "--out", str(finished_run))
    assert changed.returncode == 2 and "other settings" in changed.stderr


@pytest.mark.slow
@pytest.mark.parametrize("option", [["--engine", "vllm"], ["--dtype", "other"]])
def test_resuming_with_another_engine_or_dtype_is_refused(finished_run, embedded_model, option, capsys):
    """Rows computed by another engine or in another dtype differ: they must not join the same results.csv."""
    import torch

    recorded = json.loads((finished_run / "run.json").read_text())
    assert recorded["engine"] == "transformers" and recorded["dtype"] == str(embedded_model.model.dtype)[6:]
    if option[0] == "--dtype":  # whichever of float32 and bfloat16 "auto" did not choose on this machine
        option = ["--dtype", "float32" if embedded_model.model.dtype == torch.bfloat16 else "bfloat16"]
    before = (finished_run / "results.csv").read_bytes()
    assert cli.main([*RUN, *option, "--out", str(finished_run)]) == 2
    error = capsys.readouterr().err
    assert "other settings" in error and f"{option[0][2:]}: " in error, error
    assert (finished_run / "results.csv").read_bytes() == before


@pytest.mark.slow
def test_a_run_recorded_by_an_older_gcs_is_not_resumed_as_if_its_engine_were_known(tmp_path, capsys):
    out = tmp_path / "old"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"command": "run"}))
    assert cli.main([*RUN, "--out", str(out)]) == 2
    assert "engine: not recorded there, 'transformers' now" in capsys.readouterr().err


# ``python -m gcs`` whose first write of results is followed by a pause that lasts until the process is killed:
# the kill lands mid-run on any machine (a run of this size can end within a poll interval of its first write).
HELD_AFTER_FIRST_WRITE = """
import sys, threading
from gcs.cli import commands as cli
from gcs.experiments import results
append, marker = results.ResultsLog.append, sys.argv.pop(1)

def append_then_hold(self, frame):
    append(self, frame)
    open(marker, "w").close()
    threading.Event().wait()

results.ResultsLog.append = append_then_hold
sys.exit(cli.main())
"""


@pytest.mark.slow
def test_sigkill_mid_run_then_resume_loses_and_duplicates_nothing(finished_run, tmp_path):
    out, held = tmp_path / "killed", tmp_path / "first-write-done"
    child = subprocess.Popen([sys.executable, "-c", HELD_AFTER_FIRST_WRITE, str(held), *RUN, "--out", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 900  # generous: a busy machine is slow, not broken
        while not held.exists():
            assert child.poll() is None, f"the run ended before its first write: {child.stderr.read()[-2000:]}"
            assert time.time() < deadline, "no results were written within 900 s"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    partial = (out / "results.csv").read_text().count("\n") - 1
    assert 0 < partial < 48, f"the kill should land mid-run, after the first write: {partial} rows"
    resumed = gcs_cli(*RUN, "--out", str(out))
    assert resumed.returncode == 0, resumed.stderr
    pd.testing.assert_frame_equal(_rows(out), _rows(finished_run), check_exact=False, atol=1e-6)


@pytest.mark.slow
def test_interrupted_writes_are_repaired(tmp_path):
    path = tmp_path / "results.csv"
    log = ResultsLog(path, ["key", "metric", "value"], ["key"], rows_per_unit=2, types={"value": float})
    log.append(pd.DataFrame({"key": ["a", "a"], "metric": ["x", "y"], "value": [1.0, 2.0]}))
    with open(path, "ab") as file:  # a unit cut short, then half a line
        file.write(b"b,x,3.0\nb,y,4")
    assert log.done() == {("a",)}
    assert path.read_text() == "key,metric,value\na,x,1.0\na,y,2.0\n"
    log.append(pd.DataFrame({"key": ["b", "b"], "metric": ["x", "y"], "value": [3.0, 4.0]}))
    assert log.load()["value"].tolist() == [1.0, 2.0, 3.0, 4.0]


@pytest.mark.slow
def test_style_command(tmp_path):
    out = tmp_path / "style"
    result = gcs_cli("style", "--data", "lists", "--limit", "3", "--seeds", "2", "--max-new-tokens", "8", "--quiet",
                     "--out", str(out))
    assert result.returncode == 0, result.stderr
    summary = (out / "summary.md").read_text()
    assert "is_terse" in summary and "GCSwR" in summary
    assert len(pd.read_csv(out / "results.csv")) == 3 * 2 * 2 and (out / "labels.csv").exists()


@pytest.mark.parametrize(
    "content, message",
    [('{"id": "a", "prompts": ["x", "y"]}\n{oops}\n', "line 2: not valid JSON"),
     ('{"id": "a", "prompts": ["only one"]}\n', "at least 2")],
)
@pytest.mark.slow
def test_bad_data_gives_a_clear_error_and_writes_nothing(tmp_path, content, message):
    data = tmp_path / "mine.jsonl"
    data.write_text(content)
    out = tmp_path / "out"
    result = gcs_cli("run", "--data", str(data), "--out", str(out), "--quiet")
    assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr
    assert not out.exists()


@pytest.mark.slow
def test_argument_errors():
    with pytest.raises(SystemExit):
        cli.main(["run", "--data", "general", "--out", "x", "--temperatures", "hot"])
    assert cli.main(["run", "--data", "general", "--out", "x", "--limit", "0"]) == 2


@pytest.mark.slow
def test_compare_command_prints_each_method():
    """Through the entry point users type, in a process of its own."""
    result = subprocess.run([sys.executable, "-m", "gcs", "compare", "What is DNA?", "Explain DNA.", "--max-new-tokens",
                             "4", "--methods", "is,gcswr"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "== is" in result.stdout and "== gcswr" in result.stdout and "> Explain DNA." in result.stdout
    assert "E5 consistency of seed 0's answers" in result.stdout and "is an anecdote" in result.stdout


@pytest.mark.slow
def test_compare_over_seeds_prints_the_first_seed_s_answers_and_the_paired_verdict():
    """One seed's E5 consistency, printed per method, read as a finding: with --seeds the verdict over them follows."""
    result = gcs_cli("compare", "What is DNA?", "Explain DNA.", "--max-new-tokens", "4", "--methods", "is,gcswr",
                     "--seeds", "3,4,5")
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("== ") == 2 and "E5 consistency of seed 3's answers" in result.stdout
    lines = [line for line in result.stdout.splitlines() if line.startswith("- ")]
    assert len(lines) == 2 and all("over 3 seeds" in line and "too few for any claim" in line for line in lines)
    refused = gcs_cli("compare", "What is DNA?", "Explain DNA.", "--seed", "-1")
    assert refused.returncode == 2 and "--seed must be a whole number from 0" in refused.stderr


def test_the_version_is_the_package_s(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["--version"])
    assert done.value.code == 0 and capsys.readouterr().out.strip() == f"gcs {gcs.__version__}"
