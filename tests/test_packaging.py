"""The package declares what it imports: deptry over the library, the app and its UI (configured in pyproject.toml
for the dependencies used indirectly). scripts/check-wheel.sh, in the README's test command, installs the wheel into
a clean venv and runs import gcs, the README's example and the doctests there."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_every_runtime_import_is_declared_and_every_declared_package_is_used():
    result = subprocess.run([sys.executable, "-m", "deptry", "."], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success" in result.stdout + result.stderr
