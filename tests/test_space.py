"""The Space as Hugging Face builds it: scripts/check_space.py installs requirements.txt alone in a clean venv, then
Gradio at the front matter's version, copies the repository, serves app.py with a Space's environment and has a
browser read a verdict from it (docs/deploy.md, "Hugging Face Spaces"). A failing step is named."""

from __future__ import annotations

import doctest
import os
import subprocess
import sys

import pytest

from conftest import ROOT, check_space_module


def test_a_requirements_file_that_needs_the_repository_fails_the_step_that_installs_it(tmp_path):
    """What the Space's build did before requirements.txt lost its ``-e .``: pip, in a folder holding only the file,
    finds no project; the check says which step failed and why."""
    check = check_space_module()
    (tmp_path / "requirements.txt").write_text("-e .\n")
    with pytest.raises(check.StepFailed) as failed:
        check.run_step("requirements", [sys.executable, "-m", "pip", "install", "--no-index", "-r", "requirements.txt"],
                       tmp_path, tmp_path / "pip.log")
    message = str(failed.value)
    assert message.startswith("check-space: step 'requirements' failed:"), message
    assert "does not appear to be a Python project" in message, message


def test_the_check_reads_the_space_settings_from_the_front_matter():
    check = check_space_module()
    assert check.front_matter("sdk") == "gradio" and check.front_matter("app_file") == "app.py"
    assert check.front_matter("sdk_version").count(".") == 2  # what the builder installs Gradio at
    with pytest.raises(ValueError, match="no 'no_such_field'"):
        check.front_matter("no_such_field")


def test_the_checks_examples_hold():
    """Its docstrings' examples (scripts/ is outside the suite's doctest paths): the front matter, the pins, and which
    tracebacks in the app's log fail the check."""
    results = doctest.testmod(check_space_module(), optionflags=doctest.ELLIPSIS)
    assert results.attempted >= 3 and results.failed == 0, results


@pytest.mark.slow
@pytest.mark.max_share(0.5)
def test_the_space_builds_from_requirements_txt_alone_serves_and_gives_a_browser_a_verdict():
    # mostly pip, a venv and one app's start: in the suite (not before it) so that pytest-xdist runs it beside others
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    result = subprocess.run([sys.executable, "scripts/check_space.py"], cwd=ROOT, capture_output=True, text=True,
                            env=env)
    print(result.stdout)  # each step's time (pytest -rP shows it; docs/deploy.md reports them)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    for step in ("venv", "requirements", "gradio", "model", "copy", "serve", "browser"):
        assert f"check-space: {step}: ok" in result.stdout, result.stdout[-4000:]
    assert "over 4 seeds" in result.stdout.split("check-space: browser: ok", 1)[1], result.stdout[-4000:]
    assert result.stdout.rstrip().endswith("check-space: ok"), result.stdout[-2000:]
