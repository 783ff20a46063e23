"""The CLI's results files: a summary covers exactly the cells the run asked for (not every row a results file
holds), a damaged results file is an error naming its line, and a full disk is a clear error, not a traceback.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import gcs
from gcs.cli import commands as cli


def test_cli_summary_covers_only_the_requested_cells(tmp_path, capsys):
    out = str(tmp_path / "run")
    common_args = ["run", "--data", "general", "--out", out, "--quiet", "--max-new-tokens", "4", "--metrics", "jaccard"]
    assert cli.main([*common_args, "--limit", "2", "--methods", "is,gcswr", "--temperatures", "0,1",
                     "--seeds", "2"]) == 0
    results = Path(out) / "results.csv"
    with open(results, "a") as file:  # a hand-added row for a group nobody asked for
        file.write("stranger,is,0,1.0,0,jaccard,0.5,[]\n")
    assert cli.main([*common_args, "--limit", "1", "--methods", "is", "--temperatures", "1", "--seeds", "1"]) == 0
    summary = (Path(out) / "summary.md").read_text()
    assert "(1 groups)" in summary and "1 cells." in summary and "GCSwR" not in summary
    curve_rows = [line for line in summary.split("consistency vs temperature")[1].splitlines() if line.startswith("|")]
    assert len(curve_rows) == 2 + 1  # header, separator and the one requested (method, temperature)


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

    monkeypatch.setattr(gcs.experiments.results.os, "fsync", full)
    status = cli.main(["run", "--data", "general", "--limit", "1", "--methods", "is", "--temperatures", "1",
                       "--seeds", "1", "--max-new-tokens", "4", "--metrics", "jaccard", "--out", str(tmp_path / "r"),
                       "--quiet"])
    assert status == 2 and "gcs: error: No space left on device" in capsys.readouterr().err
