"""The shared keyed server's plumbing (tests/keyed_server.py): pytest-xdist sends the files that share it to one
worker as one scope, and the server stops once the next test is in another file. (That it serves both files' tests
is what tests/test_endpoints.py and test_vllm_serve.py check.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from keyed_server import SHARING_FILES, SharedServer

ROOT = Path(__file__).resolve().parent.parent


def root_conftest():
    spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def loadfile_scheduler(conftest, pytestconfig, monkeypatch):
    """The scheduler ``conftest`` (the root one) gives the README's command: -n 2, --dist loadfile,
    --no-loadscope-reorder (pyproject.toml)."""
    monkeypatch.setattr(pytestconfig.option, "dist", "loadfile")
    monkeypatch.setattr(pytestconfig.option, "tx", ["2*popen"])  # (what -n 2 sets)
    monkeypatch.setattr(pytestconfig.option, "loadscopereorder", False)
    return conftest.pytest_xdist_make_scheduler(pytestconfig, None)


def test_the_files_that_share_the_server_are_one_scope_of_loadfile_and_the_others_their_own(pytestconfig,
                                                                                           monkeypatch):
    conftest = root_conftest()
    scheduler = loadfile_scheduler(conftest, pytestconfig, monkeypatch)
    scopes = {name: scheduler._split_scope(f"tests/{name}::test_x[1]") for name in SHARING_FILES}
    assert len(set(scopes.values())) == 1, scopes
    assert set(conftest.SHARED_SCOPES) | set(conftest.SHARED_SCOPES.values()) == {f"tests/{name}"
                                                                                  for name in SHARING_FILES}
    assert scheduler._split_scope("tests/test_cli.py::test_y") == "tests/test_cli.py"
    monkeypatch.setattr(pytestconfig.option, "dist", "load")
    assert conftest.pytest_xdist_make_scheduler(pytestconfig, None) is None  # pytest-xdist's own


class Item:
    def __init__(self, name: str):
        self.path = ROOT / "tests" / name


@pytest.mark.parametrize("following, stops", [("test_vllm_serve.py", False), ("test_cli.py", True), (None, True)])
def test_the_server_stops_when_the_next_test_is_in_no_file_that_shares_it(monkeypatch, following, stops):
    import conftest as tests_conftest  # (tests/conftest.py: the teardown hook)

    closed = []
    shared = SharedServer()
    shared.wait, shared.close = (lambda: None), (lambda: closed.append(True))  # (running, without a process)
    monkeypatch.setattr(tests_conftest, "SHARED", shared)
    tests_conftest.pytest_runtest_teardown(Item("test_endpoints.py"), following and Item(following))
    assert closed == ([True] if stops else [])
