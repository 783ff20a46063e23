"""The code's own checks: ruff's rule sets and mypy on gcs/ as pyproject.toml states them, and no FutureWarning from
the engine (transformers' current cache argument). Each check is shown able to fail on a planted finding first."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import gcs
from conftest import tiny_gcs_model

ROOT = Path(__file__).resolve().parents[1]


def run(*command: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, input=stdin, capture_output=True, text=True)


@pytest.mark.parametrize(("source", "rule"), [
    ("import sys\nimport os\n\nprint(os, sys)\n", "I001"),
    ("def pairs(a, b):\n    return list(zip(a, b))\n", "B905"),
    ("from typing import List\n\nx: List[int] = []\n", "UP006"),
    ("import os\n", "F401"),
    ("x = 1\n" + "y = '" + "a" * 130 + "'\n", "E501"),
])
def test_ruff_reads_the_rule_sets_from_pyproject(source, rule):
    result = run("ruff", "check", "--no-cache", "--stdin-filename", "gcs/planted.py", "-", stdin=source)
    assert result.returncode == 1 and rule in result.stdout, result.stdout + result.stderr


def test_ruff_finds_nothing_in_the_repository():
    result = run("ruff", "check", "--no-cache", ".")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_mypy_reads_its_settings_and_fails_on_planted_errors(tmp_path):
    planted = tmp_path / "planted.py"  # the unused ignore is an error only under pyproject.toml's warn_unused_ignores
    planted.write_text("def twice(x: int) -> int:\n    return x * 2\n\n\ntwice('a')\ny: int = 1  # type: ignore\n")
    result = run("mypy", "--no-incremental", str(planted))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "[arg-type]" in result.stdout and "[unused-ignore]" in result.stdout, result.stdout


def test_mypy_passes_on_gcs(tmp_path):
    result = run("mypy", "--cache-dir", str(tmp_path))  # the files and strictness: [tool.mypy] in pyproject.toml
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


def test_a_future_warning_from_gcs_code_fails_the_test_that_meets_it():
    with pytest.raises(FutureWarning):
        warnings.warn_explicit("a deprecated argument", FutureWarning, "gcs/engines/transformers.py", 1,
                               module="gcs.engines.transformers")
    with warnings.catch_warnings(record=True) as caught:  # another package's warning is reported, not raised
        warnings.warn_explicit("a deprecated argument", FutureWarning, "elsewhere.py", 1, module="elsewhere")
    assert [str(warning.message) for warning in caught] == ["a deprecated argument"]


def test_the_engine_raises_no_future_warning_from_any_module():
    """A shared prefill and the cached decode: the cache goes in as transformers' ``past_key_values`` object."""
    model = tiny_gcs_model()
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        frame = gcs.compare(["w5 w6 w7", "w5 w6 w8"], methods=["is", "gcswr"], seeds=2, max_new_tokens=6, model=model)
    assert len(frame) == 8
