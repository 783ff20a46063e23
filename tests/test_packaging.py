"""The package declares what it imports: deptry over the library, the app and its UI (configured in pyproject.toml
for the dependencies used indirectly), and the wheel as a user gets it: scripts/check-wheel.sh installs it into a clean
venv and runs import gcs, the README's example and the doctests there."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import ROOT


def test_every_runtime_import_is_declared_and_every_declared_package_is_used():
    result = subprocess.run([sys.executable, "-m", "deptry", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout + result.stderr


@pytest.mark.slow
def test_the_wheel_installs_alone_and_runs_the_readme_example_and_the_doctests():
    # mostly pip and a venv: in the suite (not before it) so that pytest-xdist runs it beside other tests
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    result = subprocess.run(["bash", "scripts/check-wheel.sh"], cwd=ROOT, capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "import gcs (core dependencies only): ok" in result.stdout
    assert "the README's library example ran" in result.stdout
    assert result.stdout.rstrip().endswith("check-wheel: ok"), result.stdout[-2000:]
