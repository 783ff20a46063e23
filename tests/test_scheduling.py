"""The order pytest-xdist's two workers get files in (the root conftest.py's ``SuiteScheduling``): the files that
hold gigabytes (``MEMORY_HEAVY``) run on one worker at a time while a lighter file is left for the other, and no two
files run at once whose figures (``HELD_GIB``: what each held at its highest) add up past ``MEMORY_BUDGET_GIB``.

The scheduler is driven as pytest-xdist's controller drives it (``schedule``, then ``mark_test_complete`` as each test
ends) with two workers that take a set time per test; a worker here is what the scheduler sees of one: the tests sent
to it."""

from __future__ import annotations

import doctest
import heapq
import json
from collections import Counter
from pathlib import Path

import pytest
from test_keyed_server import loadfile_scheduler, root_conftest

# The suite's files as a quiet run of f190c28 ran them (tests, seconds each on average), in collection order:
# tests/suite_shape.json, from that run's --suite-json ("time", "seconds"); the scheduler sees them sorted as the root
# conftest.py sorts them. Taken in that order, a light file that holds more than most (test_cli.py) was left for the
# end, beside the app's files (12.4 GiB by their figures): the fullest light file that fits goes first.
SUITE = json.loads((Path(__file__).parent / "suite_shape.json").read_text())
# A light file that fits beside the heavy file running (the Space's) but not beside the next (the endpoints'): it waits
# for a heavy file it fits beside, or the end
NEXT_HEAVY = {"tests/test_space.py": [2, 50], "tests/test_endpoints.py": [8, 40], "tests/test_generation.py": [10, 15],
              **{f"tests/test_light_{i}.py": [5, 4] for i in range(160)}}


class Worker:
    """The part of a pytest-xdist worker the scheduler uses: the tests (indexes) sent to it, in order."""

    shutting_down = False

    def __init__(self, name: str):
        self.name, self.sent, self.done = name, [], 0
        self.gateway = type("Gateway", (), {"id": name})()  # (named in the scheduler's messages)

    def send_runtest_some(self, indexes) -> None:
        self.sent.extend(indexes)

    def shutdown(self) -> None:
        self.shutting_down = True


def run(schedule, collection: list[str], seconds: list[float]) -> list[tuple[float, str, str]]:
    """Every test run to its end by two workers, each taking the next test it was sent; (start, worker, node id) of
    each, in the order they started."""
    workers = [Worker("gw0"), Worker("gw1")]
    for worker in workers:
        schedule.add_node(worker)
        schedule.add_node_collection(worker, collection)
    schedule.schedule()
    started, running = [], []  # running: (end, order, worker)

    def start(worker: Worker, now: float) -> None:
        if worker.done < len(worker.sent):
            index = worker.sent[worker.done]
            started.append((now, worker.name, collection[index]))
            heapq.heappush(running, (now + seconds[index], len(started), worker))

    for worker in workers:
        start(worker, 0.0)
    while running:
        now, _, worker = heapq.heappop(running)
        schedule.mark_test_complete(worker, worker.sent[worker.done])
        worker.done += 1
        start(worker, now)
        for idle in workers:  # (a worker sent more while it had nothing: it starts now)
            if idle is not worker and not any(w is idle for *_, w in running):
                start(idle, now)
    return started


def spans(started, collection_seconds) -> dict[str, tuple[str, float, float]]:
    """Each file's worker and when it started and ended."""
    files: dict[str, tuple[str, float, float]] = {}
    for begin, worker, nodeid in started:
        path = nodeid.split("::")[0]
        end = begin + collection_seconds[nodeid]
        first = files.get(path, (worker, begin, end))
        files[path] = (worker, min(first[1], begin), max(first[2], end))
    return files


@pytest.mark.parametrize("shape", [SUITE, NEXT_HEAVY], ids=["the-suite", "the-next-heavy-file"])
@pytest.mark.parametrize("rule", [True, False], ids=["apart-and-within-the-budget", "without-the-rule"])
def test_heavy_files_never_meet_and_no_two_files_pass_the_memory_budget_and_the_workers_end_together(
        pytestconfig, monkeypatch, rule, shape):
    conftest = root_conftest()
    collection, seconds = [], []
    for path in sorted(shape, key=conftest.started_at):  # (stable: the others keep their order)
        count, each = shape[path]
        collection += [f"{path}::test_{i}" for i in range(count)]
        seconds += [each] * count
    schedule = loadfile_scheduler(conftest, pytestconfig, monkeypatch)
    if not rule:  # pytest-xdist's own order (this test must be able to fail)
        monkeypatch.setattr(type(schedule), "_assign_work_unit",
                            type(schedule).__mro__[1]._assign_work_unit)
    started = run(schedule, collection, seconds)
    assert sorted(nodeid for *_, nodeid in started) == sorted(collection)  # each test once
    files = spans(started, dict(zip(collection, seconds, strict=True)))
    meeting = [(a, b) for a in files for b in files if a < b and files[a][0] != files[b][0]
               and files[a][1] < files[b][2] and files[b][1] < files[a][2]]
    heavy = [(a, b) for a, b in meeting if conftest.memory_heavy(a) and conftest.memory_heavy(b)]
    past = [(a, b) for a, b in meeting if conftest.held_gib(a) + conftest.held_gib(b) > conftest.MEMORY_BUDGET_GIB]
    if not rule:  # pytest-xdist's own order lets files meet past the budget
        assert past and (heavy or shape is NEXT_HEAVY), (heavy, past)
        return
    assert not heavy and not past, (heavy, past)
    # and the workers end together, as near as the longest light scope allows (the app's files: no heavy file fits
    # beside them, so they wait for the heavy files' end)
    light_scopes: Counter[str] = Counter()
    for path, (count, each) in shape.items():
        if not conftest.memory_heavy(path):
            light_scopes[conftest.scope_of(path)] += count * each
    ends = [max(end for worker, _, end in files.values() if worker == name) for name in ("gw0", "gw1")]
    assert abs(ends[0] - ends[1]) <= max(light_scopes.values()), ends


def test_the_root_conftest_s_examples_hold():
    """(The root conftest.py is no module of testpaths: its docstrings' examples run here.)"""
    results = doctest.testmod(root_conftest())
    assert results.attempted >= 3 and results.failed == 0, results
