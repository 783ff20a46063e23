"""The Dockerfile built and served for real (issue 69): ``scripts/check-docker.sh`` builds it with buildah (no Docker
daemon, no registry: the base image's stand-in is made from Debian's packages, once, and kept), the image's own command
serves from a container of it, and a real browser clicks Generate and reads a verdict. Every step that fails says which
it was; every wait is on a process's progress, never a clock; the image and container are removed by their ids.

Needs root, buildah and debootstrap (``scripts/install-system-deps.sh``) and Debian's mirror and the package index.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from servers import free_port, running_server
from suite_processes import marked
from waiting import Progress

from conftest import check_space_module

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "check-docker.sh"

pytestmark = pytest.mark.slow


def check_docker(arguments: list[str], log: Path, what: str, env: dict | None = None) -> str:
    """The last line ``check-docker.sh arguments`` prints (an id), waited for while it works (``waiting.Progress``);
    a failure names ``what`` and the script's own "<step> failed" line. What it says goes to ``log``, what it prints
    beside it (``.out``)."""
    printed = log.with_suffix(".out")
    with open(log, "w") as errors, open(printed, "w") as output:
        process = subprocess.Popen(["bash", str(SCRIPT), *arguments], cwd=ROOT, env=marked(env or dict(os.environ)),
                                   stdout=output, stderr=errors)
    progress = Progress(process.pid, log)
    while process.poll() is None:
        try:
            progress.check(what)
        except AssertionError:
            if process.poll() is None:  # (not merely ended between the two looks)
                process.kill()
                raise
        time.sleep(0.3)
    if process.returncode != 0:
        said = log.read_text()
        failed = [line for line in said.splitlines() if line.startswith("check-docker:") and "failed" in line]
        pytest.fail(f"{what}: {(failed or ['check-docker.sh exited ' + str(process.returncode)])[-1][:800]}"
                    f"\n{said[-2000:]}", pytrace=False)
    lines = printed.read_text().splitlines()
    return lines[-1].strip() if lines else ""


def removed(kind: str, ids: list[str], log: Path) -> None:
    """``ids`` (containers or images) removed; what the clean-up could not remove fails the test, named."""
    if ids:
        check_docker([f"remove-{kind}", *ids], log, f"removing the test's {kind} {' '.join(ids)}")


@pytest.fixture(scope="module")
def image(tmp_path_factory):
    """The image's id, built fresh from the checkout's Dockerfile; removed after."""
    logs = tmp_path_factory.mktemp("docker")
    started = time.monotonic()
    built = check_docker(["build"], logs / "build.log", "building the image (scripts/check-docker.sh build)")
    print(f"test_docker: image {built[:12]} built in {time.monotonic() - started:.0f} s")
    assert re.fullmatch(r"[0-9a-f]{64}", built), f"the build printed no image id: {built!r}"
    try:
        yield built
    finally:
        removed("image", [built], logs / "remove-image.log")


@pytest.mark.max_share(0.6)  # one build of the whole image (minutes): its work cannot be split
def test_the_image_serves_and_a_browser_reads_a_verdict(image, tmp_path):
    browser_step = check_space_module()  # the Space's check reads a verdict the same way
    container = check_docker(["container", image], tmp_path / "container.log", "creating a container of the image")
    try:
        port = free_port()
        url = f"http://127.0.0.1:{port}/"
        started = time.monotonic()
        with running_server(["bash", str(SCRIPT), "serve", container, str(port)], tmp_path / "serve.log", url,
                            dict(os.environ), fail_on="Traceback (most recent call last)") as (_, progress):
            try:
                # 4 seeds decide nothing (too few for a claim): the verdict says so, over 4 seeds, once the run is done
                verdict = browser_step.verdict_in_browser(url, progress)
            except browser_step.StepFailed as failed:
                pytest.fail(f"the page served from the image: {failed}", pytrace=False)
            print(f"test_docker: command started to first verdict: {time.monotonic() - started:.0f} s "
                  f"({verdict[:80]!r})", file=sys.stderr)
    finally:
        removed("container", [container], tmp_path / "remove-container.log")


def test_a_missing_tool_is_named(tmp_path):
    """Without buildah on the PATH the check stops at its first step, saying what is missing and what installs it."""
    bin_folder = tmp_path / "bin"  # bash and what the script runs before its check, without buildah or debootstrap
    bin_folder.mkdir()
    for tool in ("bash", "id", "dirname", "mkdir"):
        (bin_folder / tool).symlink_to(shutil.which(tool))
    env = {**os.environ, "PATH": str(bin_folder), "GCS_DOCKER_STORE": str(tmp_path / "store")}
    result = subprocess.run([str(bin_folder / "bash"), str(SCRIPT), "build"], cwd=ROOT, env=env, capture_output=True,
                            text=True)
    assert result.returncode != 0
    assert "the requirements check failed: no buildah: bash scripts/install-system-deps.sh installs it" \
        in result.stderr, result.stderr


def test_an_unreachable_mirror_is_named(tmp_path):
    """With no base cached and Debian's mirror not answering, the base's step says so (here: a closed local port)."""
    env = {**os.environ, "GCS_DOCKER_STORE": str(tmp_path / "store"),
           "GCS_DEBIAN_MIRROR": f"http://127.0.0.1:{free_port()}/debian"}
    result = subprocess.run(["bash", str(SCRIPT), "base"], cwd=ROOT, env=marked(env), capture_output=True, text=True)
    assert result.returncode != 0
    assert "the base image's stand-in (reaching Debian's mirror http://127.0.0.1:" in result.stderr, result.stderr
    assert "failed: Debian's mirror does not answer" in result.stderr, result.stderr


def test_a_failing_build_step_is_named(tmp_path):
    """A Dockerfile whose step fails stops the build there, and the failure names that step."""
    (tmp_path / "Dockerfile").write_text("FROM python:3.11-slim\nRUN python -c 'raise SystemExit(3)'\n")
    env = {**os.environ, "GCS_DOCKER_CONTEXT": str(tmp_path)}
    with pytest.raises(pytest.fail.Exception) as failure:
        check_docker(["build"], tmp_path / "build.log", "building a failing Dockerfile", env)
    message = str(failure.value)
    assert message.startswith("building a failing Dockerfile: check-docker: the image's build"), message
    assert "failed: building at STEP \"RUN python -c 'raise SystemExit(3)'\": exit status 3" in message, message


def test_no_root_is_named(tmp_path):
    """Run as another user than root, the check stops at once, saying it needs root."""
    setpriv = shutil.which("setpriv")
    assert setpriv, "setpriv (util-linux) is missing"
    result = subprocess.run([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "bash", str(SCRIPT), "build"],
                            cwd="/", env=marked({**os.environ, "GCS_DOCKER_STORE": str(tmp_path / "store")}),
                            capture_output=True, text=True)
    assert result.returncode != 0
    assert "the requirements check failed: needs root" in result.stderr, result.stderr
