"""Python 3.12, the Space's version (README front matter), checked without a 3.12 interpreter (none is reachable
here; the suite runs on the machine's Python): ruff's rules and mypy's typeshed set to 3.12 on the code. What ran on
which version: docs/deploy.md, "Hugging Face Spaces"."""

from __future__ import annotations

import json
import subprocess
import sys

from conftest import ROOT

# What differs from the 3.10 floor's run by design: pyupgrade's suggestions of 3.12's own syntax (type statements, type
# parameters), which 3.10 cannot run, and the import blocks' order, which follows what is in the standard library
# (tomllib is from 3.11 on: its import sorts as a third-party one under the 3.10 target, tests/test_requirements.py),
# and typing_extensions' Unpack, in typing from 3.11 on (UP035)
TARGET_DEPENDENT = {"UP035", "UP040", "UP046", "UP047", "I001"}


def run(*command: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *command], cwd=ROOT, capture_output=True, text=True)


def test_ruff_set_to_python_3_12_finds_nothing_but_what_follows_the_target():
    result = run("ruff", "check", "--no-cache", "--target-version", "py312", "--output-format", "json", ".")
    findings = json.loads(result.stdout)
    other = [f"{f['filename']}:{f['location']['row']}: {f['code']} {f['message']}" for f in findings
             if f["code"] not in TARGET_DEPENDENT]
    assert not other, "\n".join(other[:20])


def test_mypy_set_to_python_3_12_sees_what_3_12_removed(tmp_path):
    planted = tmp_path / "planted.py"  # configparser.SafeConfigParser: gone in 3.12, there in 3.10
    planted.write_text("import configparser\n\nparser = configparser.SafeConfigParser()\n")
    assert run("mypy", "--no-incremental", str(planted)).returncode == 0
    result = run("mypy", "--no-incremental", "--python-version", "3.12", str(planted))
    assert result.returncode == 1 and "SafeConfigParser" in result.stdout, result.stdout + result.stderr


def test_mypy_set_to_python_3_12_passes_on_gcs(tmp_path):
    result = run("mypy", "--python-version", "3.12", "--cache-dir", str(tmp_path))  # files: [tool.mypy]
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
