"""The shared servers' plumbing (tests/keyed_server.py: the keyed vLLM server, the app): pytest-xdist sends the files
that share one to one worker as one scope, and the server stops once the next test is in another file. (That it
serves the files' tests is what the files themselves check.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from keyed_server import APP_FILES, SHARING_FILES, SharedServer

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
    for files in (SHARING_FILES, APP_FILES):
        scopes = {name: scheduler._split_scope(f"tests/{name}::test_x[1]") for name in files}
        assert set(scopes.values()) == {f"tests/{files[0]}"}, scopes
    assert set(conftest.SHARED_SCOPES) | set(conftest.SHARED_SCOPES.values()) == {f"tests/{name}"
                                                                                  for name in SHARING_FILES + APP_FILES}
    assert scheduler._split_scope("tests/test_cli.py::test_y") == "tests/test_cli.py"
    monkeypatch.setattr(pytestconfig.option, "dist", "load")
    assert conftest.pytest_xdist_make_scheduler(pytestconfig, None) is None  # pytest-xdist's own


class Item:
    def __init__(self, name: str):
        self.path = ROOT / "tests" / name


@pytest.mark.parametrize("files, following, stops", [
    (SHARING_FILES, "test_vllm_serve.py", False), (SHARING_FILES, "test_cli.py", True), (SHARING_FILES, None, True),
    (APP_FILES, "test_mcp.py", False), (APP_FILES, "test_vllm_serve.py", True), (APP_FILES, None, True)])
def test_a_server_stops_when_the_next_test_is_in_no_file_that_shares_it(monkeypatch, files, following, stops):
    import conftest as tests_conftest  # (tests/conftest.py: the teardown hook)

    closed = []
    shared = SharedServer(files=files)
    shared.wait, shared.close = (lambda: None), (lambda: closed.append(True))  # (running, without a process)
    monkeypatch.setattr(tests_conftest, "SHARED_SERVERS", (shared,))
    tests_conftest.pytest_runtest_teardown(Item(files[0]), following and Item(following))
    assert closed == ([True] if stops else [])


def test_every_file_that_uses_the_app_is_in_its_scope(pytester):
    """A file that uses the app outside ``APP_FILES``' scope would start an app of its own beside the shared one:
    collection refuses it, naming the file."""
    pytester.makeconftest((ROOT / "conftest.py").read_text())
    pytester.makepyfile(test_elsewhere="import pytest\n@pytest.fixture\ndef app_server(): ...\n"
                                       "@pytest.mark.slow\ndef test_x(app_server): ...\n")
    result = pytester.runpytest("-p", "no:randomly", "--collect-only")
    assert result.ret != 0
    result.stderr.fnmatch_lines(["*not in its scope*test_elsewhere.py*"])
