"""The suite's session-wide rules, for every test and doctest under this folder (tests/, gcs/, ui/): the environment
set before anything imports torch, the slow tier's marker and its rule, the order files start in, the fused kernel
built once before any test. Fixtures and statistical helpers: tests/conftest.py.
"""

from __future__ import annotations

import os
import warnings
from collections import OrderedDict

# No hub here: fail fast instead of retrying for a minute when a test names an unknown model.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# pytest-xdist (`-n 2`, the README's command): each worker gets its share of the cores for torch's threads (and the
# processes it starts), so that workers do not oversubscribe the machine; set before torch is imported.
if (_workers := int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))) > 1:
    _cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1  # not macOS
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, _cores // _workers)))

import gcs  # (first: it sets OpenMP's idle threads before torch loads, gcs.runtime.openmp)

# isort: split
import pytest
from keyed_server import APP_FILES, SHARING_FILES  # (tests/, on pytest's pythonpath: pyproject.toml)

# Every run measures its memory and time and prints them at its end, fails a full run in which one test takes too large
# a share, and leaves no process behind (tests/suite_resources.py, tests/suite_processes.py; docs/testing.md);
# pytester runs small suites for the tests of that plugin (tests/test_suite_resources.py).
pytest_plugins = ["suite_resources", "pytester"]

# Tests that need the real embedded model, a server, a browser, vLLM or a process of their own are the slow tier:
# `python -m pytest -m "not slow"` runs the rest (docs/testing.md). A slow test says so itself
# (@pytest.mark.slow); one that uses one of these fixtures without saying so is a collection error, so no heavy test
# slips into the fast tier and no fixture's name decides a tier. A doctest is slow when its docstring says it runs
# "On the embedded model".
SLOW_FIXTURES = {"embedded_model", "app_model", "app_server", "app_url", "app_log", "client", "page", "llm", "model",
                 "server", "vllm_served", "run_bench", "finished_run", "held_lane_app", "sky", "trace", "small_sweep",
                 "server_a", "server_b", "b_starting", "keyed_server"}


def pytest_configure(config):
    """The slow marker; and GCSwR's fused CPU kernel built before any test (once per machine, in the controller,
    before pytest-xdist starts a worker), so that no start-up (the app, the CLI's subprocesses) pays for it or
    builds it beside another process."""
    config.addinivalue_line("markers", "slow: needs the real model, a server, a browser, vLLM or a process of its own "
                                       "(the fast tier, pytest -m 'not slow', leaves these out)")
    if not hasattr(config, "workerinput") and gcs.sampling.kernels.kernel_mode() != "off":
        gcs.sampling.kernels.cpu_kernel()


# The files that take longest start first, so that pytest-xdist's two workers (the README's command; files go to
# workers whole in collection order: --dist loadfile --no-loadscope-reorder) end together instead of one worker
# finishing a long file alone.
# Measured with --durations=0 (2026-11-27, quiet, per file: browser 148 s, hindsight 128 s, the wheel 126 s, vllm 85 s,
# docs 78 s, generation 73 s, vllm-serve 72 s, threads 61 s, counterfactual 53 s, cli 50 s, bench 47 s; mypy over
# gcs/ about 50 s cold; endpoints 285 s alone, its servers starting, measured 2026-11-27 apart from the rest; examples
# 383 s alone at load 5-8, 171 s of CPU: the lesson 105 s, its vLLM server 90 s); the image's build (2026-11-29: 517 s
# quiet, tests/test_docker.py) and the Space's (471-515 s at load 5-9, tests/test_space.py) first (both heavy: one
# worker takes them one after the other, ``MEMORY_HEAVY`` below, while the other starts with the fullest light files
# that fit beside them, ``HELD_GIB``).
LONGEST_FIRST = ("test_docker.py", "test_space.py", "test_packaging.py", "test_endpoints.py", "test_browser.py",
                 "test_examples.py", "test_hindsight.py", "test_vllm.py", "test_docs.py", "test_generation.py",
                 "test_vllm_serve.py", "test_threads.py", "test_lint.py", "test_counterfactual.py", "test_cli.py",
                 "test_bench.py")


# Files that share one server (tests/keyed_server.py: SHARING_FILES share the keyed vLLM server, APP_FILES the app)
# form one scope of pytest-xdist's --dist loadfile, named by the group's first file, and sort beside it, so that one
# worker runs them one after the other and starts the server once.
SHARED_SCOPES = {f"tests/{name}": f"tests/{files[0]}" for files in (SHARING_FILES, APP_FILES) for name in files[1:]}
APP_SCOPE = f"tests/{APP_FILES[0]}"

# Files whose tests hold gigabytes beyond a worker's own: vLLM engines and servers, an image's or a Space's build and
# its app. Two of them at once on two workers made the run's peak (18.2 GiB: test_vllm.py's engines beside
# serve_and_ask's server), so a worker is given one whenever no other worker has one to run, and never while another
# has, as long as a lighter file is left to give it instead (docs/testing.md, "Memory and time"): one worker runs them
# one after another from the start. Named by scope: test_vllm_serve.py is in test_endpoints.py's (``SHARED_SCOPES``).
MEMORY_HEAVY = {"test_docker.py", "test_space.py", "test_endpoints.py", "test_examples.py", "test_vllm.py",
                "test_bench.py", "test_resources.py"}


def scope_of(path: str) -> str:
    """The scope of the test file at ``path`` (as a node id names it): the first file of the ones it shares a server
    with, else itself.

    >>> scope_of("tests/test_vllm_serve.py"), scope_of("tests/test_app.py"), scope_of("tests/test_cli.py")
    ('tests/test_endpoints.py', 'tests/test_browser.py', 'tests/test_cli.py')
    """
    return SHARED_SCOPES.get(path, path)


# What each scope holds at its highest: its worker with every process its tests start, in GiB (the summary's "files
# that held most", ``peak_of_each_file`` in --suite-json), the most seen in four runs (3c10b44 and f190c28 quiet,
# b41dbc6 quiet and busy), rounded up; a file not listed held at most ``LIGHT_GIB`` there (a worker's own memory,
# mostly: the same doctests held 2.8-3.3 GiB by what their worker had run before). A light file is given beside the
# other worker's files and beside the heavy file due next only where their figures fit ``MEMORY_BUDGET_GIB``, the
# fullest such file first: so the light files that hold most (the CLI's and the docs' examples, hindsight's replays, a
# fresh process's fixed runs) run beside the image's build, never beside the endpoints' file, and none is left for the
# end beside the app's files (taken in the suite's order instead, test_cli.py was: tests/test_scheduling.py). Whether
# a worker gets a heavy or a light file is ``MEMORY_HEAVY``'s rule alone: the heavy files are never left for the end,
# where two would meet (a scheduler by these figures alone did that: 14.3 GiB, docs/benchmarks.md; docs/testing.md,
# "Two files at once").
HELD_GIB = {"test_endpoints.py": 8.1, "test_examples.py": 7.6, "test_browser.py": 7.4, "test_bench.py": 6.8,
            "test_vllm.py": 6.8, "test_docker.py": 6.3, "test_resources.py": 6.3, "test_space.py": 5.2,
            "test_cli.py": 5.0, "test_hindsight.py": 4.7, "test_docs.py": 4.5, "test_generation.py": 4.5,
            "test_surprise.py": 3.7, "test_ab.py": 3.5, "test_invariance.py": 3.4, "test_counterfactual.py": 3.4,
            "test_threads.py": 3.4}
LIGHT_GIB = 3.3
MEMORY_BUDGET_GIB = HELD_GIB["test_endpoints.py"] + LIGHT_GIB  # the endpoints' file beside a light one


def memory_heavy(path: str) -> bool:
    """Whether the test file at ``path`` (as a node id names it) is in a ``MEMORY_HEAVY`` scope.

    >>> memory_heavy("tests/test_vllm_serve.py"), memory_heavy("tests/test_lanes.py")
    (True, False)
    """
    return scope_of(path).rpartition("/")[2] in MEMORY_HEAVY


def held_gib(path: str) -> float:
    """What the scope of the test file at ``path`` (as a node id names it) holds at its highest, in GiB.

    >>> held_gib("tests/test_vllm_serve.py") == HELD_GIB["test_endpoints.py"], held_gib("tests/test_lanes.py")
    (True, 3.3)
    """
    return HELD_GIB.get(scope_of(path).rpartition("/")[2], LIGHT_GIB)


def pytest_xdist_make_scheduler(config, log):
    """--dist loadfile with the files of ``SHARED_SCOPES`` in one scope, the ``MEMORY_HEAVY`` ones kept apart, and
    each file given beside one it fits with (``HELD_GIB``) where the queue has one (None: pytest-xdist's own, for
    other modes)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SuiteScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return scope_of(super()._split_scope(nodeid))

        def _assign_work_unit(self, node) -> None:
            """The first heavy file left when no other worker has a heavy file not yet done (or only heavy ones are
            left); else the fullest light file (the first of those) that fits beside the other workers' unfinished
            files and beside the heavy file due next, or the light one of least figure (a worker never idles)."""
            queue, assigned = getattr(self, "workqueue", None), getattr(self, "assigned_work", None)
            if not (isinstance(queue, OrderedDict) and isinstance(assigned, dict)):  # (pytest-xdist's internals)
                warnings.warn("pytest-xdist's scheduler has no workqueue or assigned_work any more: heavy test files "
                              "may run on both workers at once (MEMORY_HEAVY, the root conftest.py)", stacklevel=1)
            elif queue:
                beside = {other: [scope for scope, unit in work.items() if not all(unit.values())]
                          for other, work in assigned.items() if other is not node}
                heavy_beside = any(memory_heavy(scope) for scopes in beside.values() for scope in scopes)
                heavy_left = [scope for scope in queue if memory_heavy(scope)]
                if heavy_left and (not heavy_beside or len(heavy_left) == len(queue)):
                    chosen = heavy_left[0]
                else:
                    held_beside = sum(max(map(held_gib, scopes), default=0) for scopes in beside.values())
                    # (and the heavy file due next: a light file may outlast the heavy one it starts beside)
                    room = MEMORY_BUDGET_GIB - max(held_beside, held_gib(heavy_left[0]) if heavy_left else 0)
                    light = [scope for scope in queue if not memory_heavy(scope)]
                    fitting = [scope for scope in light if held_gib(scope) <= room]
                    chosen = max(fitting, key=held_gib) if fitting else min(light, key=held_gib)
                queue.move_to_end(chosen, last=False)
            super()._assign_work_unit(node)

    return SuiteScheduling(config, log)


def started_at(path: str) -> int:
    """Where the test file at ``path`` (as a node id names it) starts: its scope's place in ``LONGEST_FIRST``, after
    them if not listed (the sort is stable: those keep collection order).

    >>> started_at("tests/test_docker.py"), started_at("tests/test_vllm_serve.py"), started_at("tests/test_cli.py")
    (0, 3, 14)
    """
    name = scope_of(path).rpartition("/")[2]
    return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: started_at(item.nodeid.partition("::")[0]))  # stable: the others keep their order
    using_the_app = {item.nodeid.partition("::")[0] for item in items
                     if "app_server" in getattr(item, "fixturenames", ())}
    apart = sorted(path for path in using_the_app if scope_of(path) != APP_SCOPE)
    if apart:  # (each would start an app of its own, beside the shared one)
        raise pytest.UsageError("these files use the app (app_server) but are not in its scope: add them to "
                                f"APP_FILES (tests/keyed_server.py): {apart}")
    unmarked = []
    for item in items:
        examples = getattr(getattr(item, "dtest", None), "docstring", None) or ""
        if "On the embedded model" in examples:
            item.add_marker(pytest.mark.slow)
        heavy = SLOW_FIXTURES & set(getattr(item, "fixturenames", ()))
        if heavy and item.get_closest_marker("slow") is None:
            unmarked.append(f"{item.nodeid} (uses {', '.join(sorted(heavy))})")
    if unmarked:
        raise pytest.UsageError("mark these tests @pytest.mark.slow (they use the slow tier's fixtures):\n  "
                                + "\n  ".join(unmarked))


def pytest_report_header(config):
    """Whether the fused kernel is on (built in ``pytest_configure``)."""
    return gcs.kernel_status()
