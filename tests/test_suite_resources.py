"""The suite's own guards (tests/suite_resources.py, tests/suite_processes.py), each run on a small suite of its own
(pytester, in a process of its own as the README's run is): the memory summary names the test and the process that
raised memory, a full run fails when one test takes too large a share of the time (and a partial one does not), and
no process a test started outlives the pytest worker that started it, even one killed with SIGKILL as the kernel's
out-of-memory killer kills."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import suite_processes

TESTS = Path(__file__).resolve().parent
GONE_WITHIN_S = 10  # a bound on the wait for a killed process to end, not a measure of how fast it ends


@pytest.fixture
def suite(pytester, monkeypatch):
    """pytester with this folder on the sub-runs' path, so that ``-p suite_resources`` (and ``conftest``) load."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")]))
    return pytester


def sub_run(suite, *arguments):
    """``python -m pytest -p suite_resources ARGUMENTS`` in ``suite``'s folder, without the plugins this suite does not
    use (hypothesis's takes 2 s to import)."""
    return suite.runpytest_subprocess("-p", "suite_resources", "-p", "no:hypothesispytest", "-p", "no:benchmark",
                                      *arguments)


def gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie has: it holds no memory and waits only to be reaped)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until_gone(pid: int) -> bool:
    deadline = time.monotonic() + GONE_WITHIN_S
    while not gone(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    return gone(pid)


TEN_TESTS = """
import time

def test_sleeps():
    time.sleep(2)

{quick}
""".format(quick="\n".join(f"def test_quick_{i}():\n    pass\n" for i in range(9)))


@pytest.mark.slow  # pytest in processes of its own
def test_a_full_run_fails_when_one_test_takes_too_large_a_share_and_a_partial_run_does_not(suite):
    suite.makepyprojecttoml('[tool.pytest.ini_options]\ntestpaths = ["."]\nmax_test_share = "0.3"\n')
    suite.makepyfile(test_ten=TEN_TESTS)
    full = sub_run(suite, "-n", "2")  # the README's run: two workers
    assert full.ret == pytest.ExitCode.TESTS_FAILED, full.stdout.str()[-3000:]
    full.assert_outcomes(passed=10)
    full.stdout.fnmatch_lines(["*the 10 longest tests*", "*test_ten.py::test_sleeps*", "*the 1 longest files*",
                               "all 10 tests: *", "FAILED (the suite's time): test_ten.py::test_sleeps took * % of the*"
                               "more than the 30 % it may take (max_test_share)*"])
    for partial in (["test_ten.py"], ["-k", "not quick_0"]):  # a file named, some deselected: not the full run
        run = sub_run(suite, *partial)
        assert run.ret == pytest.ExitCode.OK, run.stdout.str()[-3000:]
        run.stdout.fnmatch_lines(["*the * longest tests*"])
        run.stdout.no_fnmatch_line("FAILED (the suite's time)*")
    chosen = sub_run(suite, "test_ten.py", "--max-test-share", "0.3")
    assert chosen.ret == pytest.ExitCode.TESTS_FAILED  # asked for: checked in any run
    chosen.stdout.fnmatch_lines(["FAILED (the suite's time): test_ten.py::test_sleeps took *"])
    suite.makepyfile(test_ten=TEN_TESTS.replace("def test_sleeps", "import pytest\n\n@pytest.mark.max_share(1.0)\n"
                                                                  "def test_sleeps"))
    marked = sub_run(suite, "-n", "2")  # its own share travels from the worker that ran it to the controller
    assert marked.ret == pytest.ExitCode.OK, marked.stdout.str()[-3000:]
    marked.stdout.no_fnmatch_line("FAILED (the suite's time)*")
    suite.makepyfile(test_ten=TEN_TESTS.replace("def test_sleeps", "import pytest\n\n@pytest.mark.max_share(0.1)\n"
                                                                  "def test_sleeps"))
    tighter = sub_run(suite, "-n", "2")
    assert tighter.ret == pytest.ExitCode.TESTS_FAILED, tighter.stdout.str()[-3000:]
    tighter.stdout.fnmatch_lines(["FAILED (the suite's time): test_ten.py::test_sleeps took * more than the 10 % it "
                                  "may take (its own max_share mark)*"])


@pytest.mark.slow  # pytest in a process of its own
def test_the_memory_summary_names_the_test_and_the_process_that_raised_memory(suite):
    suite.makepyfile(test_memory="""
        import subprocess, sys, time

        import pytest

        HELD = []
        GROWS = "import sys, time; sys.stdin.readline(); b = bytearray(200 << 20); print(1, flush=True); time.sleep(60)"

        @pytest.fixture(scope="module")
        def child():
            process = subprocess.Popen([sys.executable, "-c", GROWS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                       text=True)
            yield process
            process.kill()
            process.wait()

        def test_starts_a_process(child):
            pass

        def test_holds_300_mib():
            HELD.append(bytearray(300 << 20))  # (zeroed, so resident)

        def test_the_process_grows_by_200_mib(child, request):
            sampler = request.config.pluginmanager.get_plugin("suite-resources").sampler
            child.stdin.write("grow\\n")
            child.stdin.flush()
            child.stdout.readline()  # (it holds its memory now)
            deadline = time.monotonic() + 120  # (a bound on the wait, not a measure of the sampler's speed)
            while not any(key[0] == child.pid and size > 200 << 20 for key, size in sampler.values.items()
                          if key != "self") and time.monotonic() < deadline:
                time.sleep(0.1)  # until the sampler has seen it
    """)
    run = sub_run(suite)
    assert run.ret == pytest.ExitCode.OK, run.stdout.str()[-3000:]
    run.stdout.fnmatch_lines(["*memory (resident)*", "run's peak: * GiB, all of the run's processes at one instant*",
                              "this process: * at its peak, in *(rose most in test_memory.py::test_holds_300_mib, "
                              "+0.* GiB)",
                              "processes the tests started, the 1 largest of 1*",
                              "*GiB  this process  python* -c import sys, time; sys.stdin.readline()*(started in "
                              "test_memory.py::test_starts_a_process; rose most in "
                              "test_memory.py::test_the_process_grows_by_200_mib, +0.* GiB)",
                              "tests that raised memory most*",
                              "*+0.* GiB  test_memory.py::test_holds_300_mib (this process)"])


def test_the_summary_gives_the_highest_each_file_held_with_the_processes_it_started(suite, tmp_path):
    """A file whose test starts a process of 200 MiB held that much more at its highest than the file before it,
    which starts none (the JSON's ``peak_of_each_file``); the summary lists it first."""
    suite.makepyfile(test_a_before="def test_nothing():\n    pass\n", test_b_starts="""
        import subprocess, sys, time

        HOLDS = "import sys, time; b = bytearray(200 << 20); print(1, flush=True); time.sleep(60)"

        def test_a_process_of_200_mib(request):
            sampler = request.config.pluginmanager.get_plugin("suite-resources").sampler
            child = subprocess.Popen([sys.executable, "-c", HOLDS], stdout=subprocess.PIPE, text=True)
            try:
                child.stdout.readline()  # (it holds its memory now)
                deadline = time.monotonic() + 120  # (a bound on the wait, not a measure of the sampler's speed)
                while not any(key != "self" and size > 200 << 20 for key, size in sampler.values.items()) \\
                        and time.monotonic() < deadline:
                    time.sleep(0.1)  # until the sampler has seen it
            finally:
                child.kill()
                child.wait()
    """)
    written = tmp_path / "suite.json"
    run = sub_run(suite, "--suite-json", str(written), "test_a_before.py", "test_b_starts.py")
    assert run.ret == pytest.ExitCode.OK, run.stdout.str()[-3000:]
    files = json.loads(written.read_text())["memory"]["workers"]["main"]["peak_of_each_file"]
    assert files["test_b_starts.py"] > files["test_a_before.py"] + (150 << 20), files
    run.stdout.fnmatch_lines(["files that held most (a worker with its processes, at its highest while the file's "
                              "tests ran):", "*GiB  test_b_starts.py (this process)"])


def test_this_run_marks_the_processes_it_starts_and_watches_them():
    """The plugin is on in this very run: this pytest process marked itself, and its watchdog waits for it."""
    mark = suite_processes.own_mark()
    assert mark is not None and mark.startswith(f"{os.getpid()}."), os.environ.get(suite_processes.OWNER)
    children = psutil.Process().children()
    watchdogs = [child for child in children if child.cmdline()[-2:] == [str(os.getpid()), mark]]
    assert len(watchdogs) == 1 and not gone(watchdogs[0].pid), [child.cmdline() for child in children]


KILLED_WORKER = """
import os, signal, subprocess, sys, threading
from pathlib import Path

import pytest
from servers import free_port, running_server

def test_started_then_killed(tmp_path):
    plain = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    port = free_port()
    started = {}

    def serve():  # in a thread that ends once the server serves, as tests/test_endpoints.py's ``early`` does
        server = running_server([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"],
                                tmp_path / "server.log", f"http://127.0.0.1:{port}/", dict(os.environ))
        started["server"], started["held"] = server.__enter__()[0], server  # (held: not closed when collected)

    thread = threading.Thread(target=serve)
    thread.start()
    thread.join()
    Path(os.environ["PIDS"]).write_text(f"{plain.pid} {started['server'].pid}")
    os.kill(os.getpid(), signal.SIGKILL)  # as the out-of-memory killer does: no cleanup runs
"""


@pytest.mark.slow  # pytest in a process of its own, a worker killed
def test_processes_die_with_the_worker_that_started_them_even_when_it_is_killed(suite, monkeypatch, tmp_path):
    """A pytest-xdist worker starts a process itself and a server through ``running_server`` in a thread that has
    ended, and is then killed with SIGKILL: both processes end (its watchdog kills them), while the run goes on."""
    monkeypatch.setenv("PIDS", str(tmp_path / "pids"))
    suite.makepyfile(test_killed=KILLED_WORKER)
    run = sub_run(suite, "-n", "1", "--max-worker-restart", "0")
    run.stdout.fnmatch_lines(["*worker 'gw0' crashed*", "gw0: died without a report (killed?)*"])
    pids = [int(pid) for pid in (tmp_path / "pids").read_text().split()]
    assert all(wait_until_gone(pid) for pid in pids), [suite_processes.command_of(pid) for pid in pids]


@pytest.mark.slow  # pytest in a process of its own
def test_a_process_left_running_at_the_end_of_a_session_is_named_and_killed(suite, monkeypatch, tmp_path):
    monkeypatch.setenv("PIDS", str(tmp_path / "pids"))
    suite.makepyfile(test_leaky="""
        import os, subprocess, sys
        from pathlib import Path

        def test_starts_and_forgets():
            child = subprocess.Popen([sys.executable, "-c", "print(1, flush=True); import time; time.sleep(600)"],
                                     stdout=subprocess.PIPE)
            child.stdout.readline()  # (it runs)
            Path(os.environ["PIDS"]).write_text(str(child.pid))
    """)
    run = sub_run(suite)
    assert run.ret == pytest.ExitCode.OK, run.stdout.str()[-3000:]
    pid = int((tmp_path / "pids").read_text())
    run.stdout.fnmatch_lines([f"left running at the end of the session, killed: this process, pid {pid}: python* -c "
                              "print(1, flush=True); import time; time.sleep(600)*"])
    assert wait_until_gone(pid)


def test_the_watchdog_kills_the_marked_processes_once_its_owner_ends(tmp_path):
    """The watchdog alone, as the suite starts it: an owner (a bare Python) marks itself, starts a process that waits,
    and ends with SIGKILL; the process ends too, and a process without the mark is left alone."""
    owner = psutil.Popen([sys.executable, "-c", f"import sys; sys.path.insert(0, {str(TESTS)!r}); "
                          "import subprocess, suite_processes; suite_processes.own_processes(); "
                          "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); "
                          "print(child.pid, flush=True); import time; time.sleep(600)"],
                         stdout=subprocess.PIPE, text=True)
    unmarked = psutil.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        child = int(owner.stdout.readline())
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        assert wait_until_gone(child), suite_processes.command_of(child)
        assert not gone(unmarked.pid)
    finally:
        unmarked.kill()
        unmarked.wait()


def test_each_premise_test_docs_testing_md_names_is_a_test_of_its_file():
    """docs/testing.md's "Premise tests" name the tests no speed-up may drop: a renamed or removed one fails here."""
    import ast
    import re

    page = (TESTS.parent / "docs" / "testing.md").read_text()
    section = page.split("## Premise tests", 1)[1].split("\n## ", 1)[0]
    named = re.findall(r"`(tests/test_\w+\.py)::(test_\w+)`", section)
    assert len(named) >= 14, named
    missing = []
    for path, name in named:
        tree = ast.parse((TESTS.parent / path).read_text())
        if name not in {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}:
            missing.append(f"{path}::{name}")
    assert not missing, f"docs/testing.md names premise tests that are gone: {missing}"


def test_a_process_found_again_while_it_dies_keeps_the_command_first_read(monkeypatch):
    """``kill_marked`` sweeps until no marked process is left; one killed in a round can be found again in the next,
    dying, its command line already empty: what it reports is the command read before the kill."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    sweeps = iter([[child.pid], [child.pid], []])
    commands = iter(["python -c import time; time.sleep(600)", ""])
    monkeypatch.setattr(suite_processes, "marked_processes", lambda mark: next(sweeps))
    monkeypatch.setattr(suite_processes, "command_of", lambda pid: next(commands))
    try:
        assert suite_processes.kill_marked("mark") == {child.pid: "python -c import time; time.sleep(600)"}
    finally:
        child.kill()
        child.wait()
