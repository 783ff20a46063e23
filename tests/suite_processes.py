"""Never an orphan: every process a test starts dies with the pytest process that started it, even when the kernel's
out-of-memory killer ends that pytest process with SIGKILL (then no Python cleanup runs: no fixture's ``finally``).

Each pytest process that runs tests or starts workers (a ``-n 0`` run, each pytest-xdist worker, the controller)
marks itself at start: ``GCS_TEST_OWNER=<pid>.<random>`` in its environment, which every process it starts inherits,
and their own children after them (a vLLM server's engine core, Chromium's renderers). It also starts a watchdog: a
small process of its own (this file run as a script, no site-packages) that sleeps until the owner ends, however it
ends, and then kills with SIGKILL every process whose environment carries the owner's mark (read from
``/proc/PID/environ``, which keeps the environment a process started with). The owner itself, at the end of its
session, names and kills what is still running with its mark: a process a fixture forgot to stop.

Why not ``prctl(PR_SET_PDEATHSIG)``: it fires when the *thread* that started a child exits, and servers start in
threads that end at once (``early`` in tests/test_endpoints.py), and it reaches only the direct child, not a
server's engine core. Why not the xdist controller alone: a ``-n 0`` run has none, and the controller's own death
would leave everything. Linux only (``/proc``); elsewhere nothing is marked.

    GCS_TEST_OWNER=4242.9f3c0a1b  # in a server's environment: it dies with process 4242
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

OWNER = "GCS_TEST_OWNER"
PROC = Path("/proc")
ROUNDS = 5  # sweeps until none is found: a process may start a child while it is being killed


def marked_processes(mark: str) -> list[int]:
    """The processes (pids) that started with ``GCS_TEST_OWNER=mark`` in their environment (other users' processes
    and those that end while they are read are left out).

    >>> marked_processes("no-such-mark")
    []
    """
    wanted, found = f"{OWNER}={mark}".encode(), []
    for entry in os.scandir(PROC):
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                environment = (PROC / entry.name / "environ").read_bytes()
            except OSError:  # ended, or another user's
                continue
            if wanted in environment.split(b"\0"):
                found.append(int(entry.name))
    return found


def command_of(pid: int) -> str:
    """``pid``'s command line, its program by name alone, cut to 120 characters ("?" once it has ended).

    >>> import subprocess, sys
    >>> child = subprocess.Popen([sys.executable, "-c", "print('up', flush=True); import time; time.sleep(60)"],
    ...                          stdout=subprocess.PIPE, text=True)
    >>> child.stdout.readline().strip()  # (it has replaced the forked copy of this process by then)
    'up'
    >>> command_of(child.pid).startswith("python"), command_of(child.pid).endswith("time.sleep(60)")
    (True, True)
    >>> child.kill(), child.wait(), child.stdout.close()
    (None, -9, None)

    (Not this process's own: a pytest-xdist worker renames itself "[pytest-xdist running] ..." where setproctitle is
    installed.)
    """
    try:
        program, *arguments = (PROC / str(pid) / "cmdline").read_bytes().decode(errors="replace").split("\0")
    except (OSError, ValueError):
        return "?"
    return " ".join([os.path.basename(program), *arguments]).replace("\n", " ").strip()[:120]


def kill_marked(mark: str, spare: tuple[str, ...] = ()) -> dict[int, str]:
    """SIGKILL every process marked with ``mark`` but those whose command line holds one of ``spare``, sweeping
    again until none is left (at most ``ROUNDS`` times): {pid: its command line} of those killed."""
    killed: dict[int, str] = {}
    for _ in range(ROUNDS):
        found = [(pid, command_of(pid)) for pid in marked_processes(mark)]
        found = [(pid, command) for pid, command in found if not any(name in command for name in spare)]
        if not found:
            break
        for pid, command in found:
            # the first reading: a process killed in an earlier round can still be found, dying, with its command line
            # already empty (it named a leak "pid 12876: " in a loaded full run)
            killed.setdefault(pid, command)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return killed


def own_mark() -> str | None:
    """This process's mark, if it set one (a mark inherited from the pytest process that started this one is not
    this process's)."""
    mark = os.environ.get(OWNER, "")
    return mark if mark.split(".")[0] == str(os.getpid()) else None


def own_processes() -> str | None:
    """Mark this process's future children and start the watchdog that kills them once this process ends: its mark
    (None where there is no ``/proc``). Calling it again returns the same mark and starts nothing."""
    if (mark := own_mark()) is not None or not PROC.is_dir():
        return mark
    mark = f"{os.getpid()}.{secrets.token_hex(4)}"
    os.environ[OWNER] = mark
    clean = {name: value for name, value in os.environ.items() if name != OWNER}  # the watchdog is nobody's to kill
    # -I -S: no site-packages, no user environment: the watchdog is a bare interpreter, a few MB (and never measured
    # by coverage); its own session: a Ctrl-C to the terminal's group does not end it before its owner
    subprocess.Popen([sys.executable, "-I", "-S", __file__, str(os.getpid()), mark], env=clean,
                     stdin=subprocess.DEVNULL, start_new_session=True)
    return mark


def marked(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this process's mark, for a process started with an environment of its own making.

    >>> marked({"A": "1"})["A"]
    '1'
    """
    mark = own_mark()
    return {**env, OWNER: mark} if mark else dict(env)


# Helpers a Python process keeps for its lifetime, not a test's: each ends by itself when its process ends.
LIFELONG = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


def left_running() -> dict[int, str]:
    """Kill what still runs with this process's mark (a process a test or fixture started and did not stop, not one
    of the ``LIFELONG``): {pid: its command line} of those killed."""
    mark = own_mark()
    return kill_marked(mark, spare=LIFELONG) if mark else {}


def _wait_for_end(owner: int) -> None:
    """Return once ``owner`` (this process's parent when it started) has ended: a pidfd becomes readable when its
    process ends; where there is none, the parent changes (this process is handed to another) when the owner ends."""
    if os.getppid() != owner:
        return
    try:
        import select

        descriptor = os.pidfd_open(owner)
    except (AttributeError, OSError):
        while os.getppid() == owner:
            time.sleep(0.5)
        return
    select.select([descriptor], [], [])


def _watch(owner: int, mark: str) -> None:
    """The watchdog: wait for ``owner`` to end, then kill every process it marked."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _wait_for_end(owner)
    kill_marked(mark)


if __name__ == "__main__":
    _watch(int(sys.argv[1]), sys.argv[2])
