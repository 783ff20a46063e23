"""The suite's memory and time, measured in every run and printed at its end, and the guard that keeps them.

Memory: each pytest process (a ``-n 0`` run, each pytest-xdist worker, the controller) samples its own resident
memory (RSS) and that of every process tree it started, in a daemon thread every ``SAMPLE_S`` and at each test's start
and end (one read of ``/proc/PID/stat`` per process of the machine, about 2 ms a sample), and remembers which test
each rose most in. Workers send theirs to the controller (``workeroutput``), whose own samples give the whole run's
peak: the sum over all of the run's processes at one instant. Time: setup + call + teardown of each test (a module's
fixtures start in its first test's setup). The end of the run prints both (``--suite-json PATH`` or
``$GCS_SUITE_JSON`` also writes them as JSON); a full run (the configured ``testpaths``, nothing deselected, not
stopped early) fails when one test took more than ``max_test_share`` (pyproject.toml) of all tests' time together,
and ``--max-test-share F`` applies that check to any run. Processes left running are killed and named
(``suite_processes``). docs/testing.md, "Memory and time", says how to read the summary.

    python -m pytest -n 2 --suite-json suite.json   # the README's run, its figures kept
"""

from __future__ import annotations

import heapq
import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path

import psutil
import pytest
import suite_processes

SAMPLE_S = 1.0
SHOWN = 10  # tests and files in the time summary
SHOWN_PROCESSES, SHOWN_GROWTH, KEPT = 8, 5, 50  # lines in the memory summary; entries kept in the JSON
PROC = Path("/proc")
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
SELF = "self"


def processes(pids=None) -> dict[int, tuple[int, float, int]]:
    """The processes ``pids`` (None: all this user can read): {pid: (its parent, when it started (an id, with its
    pid, that a later process with the same pid does not share), its resident memory in bytes)}.

    >>> processes()[os.getpid()][0] == os.getppid()
    True
    """
    found: dict[int, tuple[int, float, int]] = {}
    if not PROC.is_dir():
        for process in psutil.process_iter(["pid", "ppid", "create_time", "memory_info"]):
            if (memory := process.info["memory_info"]) is not None and (pids is None or process.pid in pids):
                found[process.pid] = (process.info["ppid"], process.info["create_time"], memory.rss)
        return found
    for name in (os.listdir(PROC) if pids is None else map(str, pids)):
        if name.isdigit():
            try:
                stat = (PROC / name / "stat").read_bytes()
            except OSError:  # ended while read
                continue
            fields = stat[stat.rindex(b")") + 2:].split()  # after the command's name, which may hold spaces
            found[int(name)] = (int(fields[1]), int(fields[19]), int(fields[21]) * PAGE)
    return found


def children_of(pid: int) -> list[int]:
    """The processes ``pid`` started that still run, read from its threads' lists (a few reads, not a scan of every
    process).

    >>> children_of(os.getpid()) == [child.pid for child in psutil.Process().children()]
    True
    """
    tasks = PROC / str(pid) / "task"
    if not (tasks / str(pid) / "children").exists():  # (a kernel without CONFIG_PROC_CHILDREN, or no /proc)
        return [child.pid for child in psutil.Process(pid).children()]
    found = []
    for task in os.listdir(tasks):
        try:
            found += [int(child) for child in (tasks / task / "children").read_text().split()]
        except OSError:  # a thread that ended
            continue
    return sorted(found)


def gib(size: float) -> str:
    """A size in bytes for a reader.

    >>> gib(3 * 2**30), gib(300 * 2**20)
    ('3.0 GiB', '0.29 GiB')
    """
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**30:.2f} GiB"


class Sampler:
    """Resident memory of this process and of each process tree it started (keyed by the tree's first process),
    their peaks, and the test (``label``) during which each rose most. ``sample`` runs in a daemon thread and at
    each ``begin``/``end`` of a test."""

    def __init__(self, label: str):
        self.lock, self.label, self.pid, self.me = threading.Lock(), label, os.getpid(), psutil.Process()
        self.values: dict = {}  # key -> RSS now (SELF, or a tree's (pid, start time))
        self.commands: dict = {}  # key -> command line
        self.started_in: dict = {}  # key -> the label when it started
        self.peaks: dict = {}  # key -> (RSS, label)
        self.rises: dict = {}  # key -> (rise, label): its largest rise within one test
        self.total_peak: tuple = (0, label, {})  # (sum, label, {key: RSS} at that instant)
        self.at_start: dict = {}
        self.highest: dict = {}
        self.total_start = self.total_highest = 0
        self.growth: list = []  # (rise of the sum within a test, its label)
        self.after_file: dict = {}  # file -> (this process's RSS, with its process trees) after its last test
        self.file_peaks: dict = {}  # file -> the highest sum (this process and its trees) while its tests ran
        self.stop = threading.Event()

    def sample(self, self_only: bool = False) -> None:
        rss = self.me.memory_info().rss
        trees: dict = {}
        if not self_only:
            table = processes()
            children = defaultdict(list)
            for pid, (parent, _, _) in table.items():
                children[parent].append(pid)
            for child in children[self.pid]:
                key, stack, size = (child, table[child][1]), [child], 0
                while stack:
                    pid = stack.pop()
                    size += table[pid][2]
                    stack.extend(children[pid])
                trees[key] = size
                if not self.commands.get(key):  # (empty while it is replaced by the program it runs: read again)
                    self.commands[key] = suite_processes.command_of(child)
        with self.lock:
            if not self_only:
                self.values = {SELF: rss, **trees}
            self.values[SELF] = rss
            for key, value in self.values.items():
                self.started_in.setdefault(key, self.label)
                if value > self.peaks.get(key, (-1,))[0]:
                    self.peaks[key] = (value, self.label)
                self.highest[key] = max(self.highest.get(key, 0), value)
            total = sum(self.values.values())
            self.total_highest = max(self.total_highest, total)
            if total > self.total_peak[0]:
                self.total_peak = (total, self.label, dict(self.values))

    def begin(self, label: str) -> None:
        self.sample(self_only=True)
        with self.lock:
            self.label = label
            self.at_start, self.highest = dict(self.values), dict(self.values)
            self.total_start = self.total_highest = sum(self.values.values())

    def end(self) -> None:
        self.sample(self_only=True)
        started = [(pid, start) for pid, (parent, start, _) in processes(children_of(self.pid)).items()
                   if parent == self.pid]  # (those running now: this test started those the sampler has not seen)
        with self.lock:
            for key in started:
                self.started_in.setdefault(key, self.label)
            for key, value in self.highest.items():
                rise = value - self.at_start.get(key, 0)
                if rise > self.rises.get(key, (0,))[0]:
                    self.rises[key] = (rise, self.label)
            file = self.label.split("::")[0]
            self.after_file[file] = (self.values[SELF], sum(self.values.values()))
            self.file_peaks[file] = max(self.file_peaks.get(file, 0), self.total_highest)
            item = (self.total_highest - self.total_start, self.label)
            (heapq.heappush if len(self.growth) < KEPT else heapq.heappushpop)(self.growth, item)

    def run(self) -> None:
        while not self.stop.wait(SAMPLE_S):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a sample lost is no reason to stop measuring
                continue

    def report(self) -> dict:
        """What this process measured, as JSON-ready data."""
        with self.lock:
            trees = sorted((key for key in self.peaks if key != SELF), key=lambda k: -self.peaks[k][0])[:KEPT]
            return {
                "pid": self.pid, "peak": self.peaks.get(SELF, (0, ""))[0], "peak_in": self.peaks.get(SELF, (0, ""))[1],
                "rose_most": list(self.rises.get(SELF, (0, ""))),
                "total_peak": self.total_peak[0], "total_peak_in": self.total_peak[1],
                "total_peak_parts": {("self" if key == SELF else str(key[0])): value
                                     for key, value in self.total_peak[2].items()},
                "processes": [{"pid": key[0], "command": self.commands.get(key, "?"), "peak": self.peaks[key][0],
                               "started_in": self.started_in.get(key, ""),
                               "rose_most": list(self.rises.get(key, (0, "")))} for key in trees],
                "tests": [list(item) for item in sorted(self.growth, reverse=True)],
                "after_each_file": {name: list(sizes) for name, sizes in self.after_file.items()},
                "peak_of_each_file": dict(self.file_peaks),
            }


def memory_lines(run: dict, workers: dict[str, dict | None]) -> list[str]:
    """The memory summary: the run's peak (``run``: the controller's or a ``-n 0`` run's report) and, per worker
    (``workers``: id -> report, None for one that died without one), its peak, the processes its tests started and
    the tests that raised memory most."""
    names = {str(report["pid"]): name for name, report in workers.items() if report}
    watchdogs = {str(tree["pid"]) for tree in run["processes"] if suite_processes.__name__ in tree["command"]}
    parts = sorted(((pid, size) for pid, size in run["total_peak_parts"].items() if pid not in watchdogs),
                   key=lambda part: -part[1])
    where = ", ".join(f"{'this process' if pid == 'self' else names.get(pid, f'pid {pid}')}"
                      f"{' and its processes' if pid != 'self' else ''} {gib(size)}" for pid, size in parts[:4])
    lines = [f"run's peak: {gib(run['total_peak'])}, all of the run's processes at one instant ({where}), "
             f"while {run['total_peak_in']}"]
    started, growth = [], []
    for name, report in sorted(workers.items()):
        if report is None:
            lines.append(f"{name}: died without a report (killed?); the controller's view of each worker below")
            continue
        if not report["tests"]:
            lines.append(f"{name}: ran no test")
            continue
        rise, test = report["rose_most"]
        lines.append(f"{name}: {gib(report['peak'])} at its peak, in {report['peak_in']} (rose most in {test}, "
                     f"+{gib(rise)})")
        started += [(process, name) for process in report["processes"]
                    if suite_processes.__name__ not in process["command"]]  # (the watchdog)
        growth += [(rise, test, name) for rise, test in report["tests"]]
    if None in workers.values():  # the controller saw every worker's tree, a dead one's too
        lines += [f"  {gib(tree['peak']):>9}  pid {tree['pid']} and its processes, at its peak"
                  for tree in run["processes"] if str(tree["pid"]) not in names
                  and suite_processes.__name__ not in tree["command"]]
    started.sort(key=lambda entry: -entry[0]["peak"])
    lines.append(f"processes the tests started, the {min(SHOWN_PROCESSES, len(started))} largest of {len(started)} "
                 "(each with its children, at its peak):" if started else "processes the tests started: none")
    for process, name in started[:SHOWN_PROCESSES]:
        rise, test = process["rose_most"]
        rose = "" if not test else f", +{gib(rise)}" if test == process["started_in"] else \
            f"; rose most in {test}, +{gib(rise)}"
        lines.append(f"  {gib(process['peak']):>9}  {name}  {process['command'][:70] or '?'} (started in "
                     f"{process['started_in']}{rose})")
    lines.append("tests that raised memory most (a worker with its processes, from the test's start to its peak):")
    lines += [f"  {'+' + gib(rise):>10}  {test} ({name})"
              for rise, test, name in sorted(growth, reverse=True)[:SHOWN_GROWTH]]
    files = sorted(((peak, file, name) for name, report in workers.items() if report
                    for file, peak in report.get("peak_of_each_file", {}).items()), reverse=True)
    if files:  # (what two files on two workers at once can add up to: docs/testing.md, "Memory and time")
        lines.append("files that held most (a worker with its processes, at its highest while the file's tests ran):")
        lines += [f"  {gib(peak):>10}  {file} ({name})" for peak, file, name in files[:SHOWN_GROWTH]]
    return lines


def time_lines(seconds: dict[str, float], wall: float) -> list[str]:
    """The time summary: the ``SHOWN`` longest tests and files and the total (``seconds``: test -> its setup + call +
    teardown; ``wall``: the run from start to end).

    >>> time_lines({"a.py::x": 3.0, "a.py::y": 1.0}, 4.5)[-1]
    'all 2 tests: 4.0 s together, 4.5 s from start to end'
    """
    total = sum(seconds.values()) or 1.0
    files: dict[str, float] = defaultdict(float)
    for test, spent in seconds.items():
        files[test.split("::")[0]] += spent
    lines = [f"the {min(SHOWN, len(seconds))} longest tests (setup + call + teardown; a module's fixtures start in "
             "its first test's setup):"]
    lines += [f"  {spent:8.1f} s {100 * spent / total:5.1f} %  {test}" for test, spent in
              heapq.nlargest(SHOWN, seconds.items(), key=lambda entry: entry[1])]
    lines.append(f"the {min(SHOWN, len(files))} longest files:")
    lines += [f"  {spent:8.1f} s {100 * spent / total:5.1f} %  {name}" for name, spent in
              heapq.nlargest(SHOWN, files.items(), key=lambda entry: entry[1])]
    lines.append(f"all {len(seconds):,} tests: {sum(seconds.values()):,.1f} s together, {wall:,.1f} s from start to "
                 "end")
    return lines


def over_share(seconds: dict[str, float], limit: float, own: dict[str, float] | None = None) -> str | None:
    """Why the run fails when a test took more than its share of all tests' time (``limit``, or the test's own from
    ``@pytest.mark.max_share(F)``, in ``own``); None when none did. The test furthest over its share is named.

    >>> over_share({"a.py::x": 1.0, "a.py::y": 9.0}, 0.5)[:40]
    'a.py::y took 9.0 s, 90.0 % of the 10.0 s'
    >>> over_share({"a.py::x": 1.0, "a.py::y": 1.0}, 0.5) is None
    True
    >>> over_share({"a.py::x": 1.0, "a.py::y": 9.0}, 0.5, {"a.py::y": 0.95}) is None
    True
    """
    total = sum(seconds.values())
    if not seconds or total <= 0:
        return None
    own = own or {}
    test, spent = max(seconds.items(), key=lambda entry: entry[1] / own.get(entry[0], limit))
    allowed = own.get(test, limit)
    if spent <= allowed * total:
        return None
    whose = "its own max_share mark" if test in own else "max_test_share"
    return (f"{test} took {spent:.1f} s, {100 * spent / total:.1f} % of the {total:.1f} s all {len(seconds)} tests "
            f"took together: more than the {100 * allowed:g} % it may take ({whose}). A test that grows "
            "makes the run longer and the workers end apart: make it shorter or split it (docs/testing.md, \"Memory "
            "and time\")")


class SuiteResources:
    """The plugin in one pytest process: its memory sampler, and where it reports (the controller, or a ``-n 0``
    run) the workers' reports, the tests' durations and the verdict."""

    def __init__(self, config: pytest.Config):
        self.config, self.sampler = config, Sampler("(start-up)")
        self.owns_processes = suite_processes.own_mark() is None  # (a pytester run inside a test does not)
        suite_processes.own_processes()
        self.workers: dict[str, dict | None] = {}
        self.running: dict[str, str] = {}  # worker id -> the test it last set up
        self.seconds: dict[str, float] = defaultdict(float)
        self.own_shares: dict[str, float] = {}  # test -> its @pytest.mark.max_share
        self.deselected, self.started = 0, time.monotonic()
        self.verdict: str | None = None
        self.left_running: dict[str, dict] = {}  # who -> {pid: command}
        threading.Thread(target=self.sampler.run, name="suite-memory", daemon=True).start()

    @property
    def worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    @property
    def controller(self) -> bool:
        return self.config.pluginmanager.hasplugin("dsession")

    def pytest_sessionstart(self) -> None:
        self.started = time.monotonic()  # (the fused kernel's build, in pytest_configure, is not the tests' time)
        if self.controller:
            self.sampler.label = "(the controller)"

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item):
        if (mark := item.get_closest_marker("max_share")) is not None:
            item.user_properties.append(("max_share", own_share(mark, item.nodeid)))
        self.sampler.begin(item.nodeid)
        try:
            return (yield)
        finally:
            self.sampler.end()

    def pytest_deselected(self, items) -> None:
        self.deselected += len(items)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.worker:
            return
        self.seconds[report.nodeid] += report.duration
        for name, value in report.user_properties:  # (set where the item is: in the worker that ran it)
            if name == "max_share":
                self.own_shares[report.nodeid] = value
        node = getattr(report, "node", None)
        if node is not None and report.when == "setup":
            self.running[node.gateway.id] = report.nodeid
            self.sampler.label = "; ".join(f"{name} ran {test}" for name, test in sorted(self.running.items()))

    @pytest.hookimpl(optionalhook=True)  # (pytest-xdist's: a run without it has no workers)
    def pytest_testnodedown(self, node, error) -> None:
        report = getattr(node, "workeroutput", {}).get("suite_resources")
        self.workers[node.gateway.id] = report and report["memory"]
        if report:
            self.deselected = max(self.deselected, report["deselected"])
            if report["left_running"]:
                self.left_running[node.gateway.id] = report["left_running"]

    @pytest.hookimpl(trylast=True)  # after the runner's own sessionfinish has torn down the session's fixtures
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.owns_processes and not self.controller and (killed := suite_processes.left_running()):
            self.left_running["this process" if not self.worker else "worker"] = killed
        if self.worker:
            self.config.workeroutput["suite_resources"] = {  # type: ignore[attr-defined]
                "memory": self.sampler.report(), "deselected": self.deselected,
                "left_running": self.left_running.get("worker", {})}
            return
        chosen = self.config.getoption("max_test_share")
        full = (self.config.args_source == pytest.Config.ArgsSource.TESTPATHS and not self.deselected
                and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED)
                and not session.shouldstop and not session.shouldfail)
        if chosen is not None or full:
            self.verdict = over_share(self.seconds, share_limit(self.config), self.own_shares)
            if self.verdict and session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if path := self.config.getoption("suite_json"):
            Path(path).write_text(json.dumps(self.summary(full), indent=1))

    def summary(self, full: bool) -> dict:
        return {"memory": {"run": self.sampler.report(), "workers": self.workers or {"main": self.sampler.report()}},
                "time": {"seconds": dict(self.seconds), "wall": time.monotonic() - self.started, "full_run": full,
                         "max_test_share": share_limit(self.config), "own_shares": self.own_shares,
                         "verdict": self.verdict},
                "left_running": self.left_running}

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.worker or not self.seconds:  # (a worker reports to the controller; --collect-only ran nothing)
            return
        self.sampler.sample()
        report = self.sampler.report()
        terminalreporter.section("memory (resident)")
        for line in memory_lines(report, self.workers or {"this process": report}):
            terminalreporter.write_line(line)
        for who, killed in self.left_running.items():
            for pid, command in killed.items():
                terminalreporter.write_line(f"left running at the end of the session, killed: {who}, pid {pid}: "
                                            f"{command} (a test or fixture started it and did not stop it)",
                                            yellow=True)
        terminalreporter.section("time")
        for line in time_lines(self.seconds, time.monotonic() - self.started):
            terminalreporter.write_line(line)
        if self.verdict:
            terminalreporter.write_line(f"FAILED (the suite's time): {self.verdict}", red=True, bold=True)

    def pytest_unconfigure(self) -> None:
        self.sampler.stop.set()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("suite resources", "memory and time of the run (tests/suite_resources.py)")
    group.addoption("--suite-json", default=os.environ.get("GCS_SUITE_JSON"), metavar="PATH",
                    help="write the run's memory and time as JSON to PATH (default: $GCS_SUITE_JSON)")
    group.addoption("--max-test-share", type=float, default=None, metavar="F",
                    help="fail when one test takes more than F of all tests' time, in any run (without it: "
                         "max_test_share, and in a full run only)")
    parser.addini("max_test_share", "the largest share of all tests' time one test may take in a full run",
                  default="0.15")


def share_limit(config: pytest.Config) -> float:
    """The share one test may take: ``--max-test-share``, else the ini's ``max_test_share``."""
    chosen = config.getoption("max_test_share")
    try:
        limit = float(config.getini("max_test_share")) if chosen is None else chosen
    except ValueError:
        raise pytest.UsageError(f"max_test_share must be a fraction in (0, 1], got "
                                f"{str(config.getini('max_test_share'))[:40]!r}") from None
    if not 0 < limit <= 1:
        raise pytest.UsageError(f"max_test_share must be a fraction in (0, 1], got {limit!r}")
    return limit


def own_share(mark: pytest.Mark, test: str) -> float:
    """A test's own limit from ``@pytest.mark.max_share(F)``: for the few tests whose work cannot be split (a whole
    image's build), named where they are written rather than raising the limit of every test."""
    limit = mark.args[0] if len(mark.args) == 1 and not mark.kwargs else None
    if not isinstance(limit, float) or not 0 < limit <= 1:
        raise pytest.UsageError(f"{test}: max_share takes one fraction in (0, 1], got {mark.args!r}"[:160])
    return limit


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "max_share(F): this test may take the fraction F of all tests' time in a full "
                            "run, instead of max_test_share (tests/suite_resources.py)")
    share_limit(config)  # a bad share stops the run before any test
    config.pluginmanager.register(SuiteResources(config), "suite-resources")
