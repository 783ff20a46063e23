"""requirements.txt is what the app needs to serve and nothing else: a Hugging Face Space installs it alone, before
the repository is there (docs/deploy.md), so it must name every runtime package gcs, ui/ and app.py import, and it
must not drag in the test, lint, docs and notebook stack (requirements-dev.txt). tests/test_space.py installs it the
way a Space does and serves the app from it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

from conftest import ROOT

SERVING_EXTRAS = ("scoring", "app", "kernel")  # what the Space serves with; "vllm", "docs" and "test" it does not


def canonical(name: str) -> str:
    """A distribution's name as pip compares it.

    >>> canonical("Sentence_Transformers")
    'sentence-transformers'
    """
    return re.sub(r"[-_.]+", "-", name).lower()


def requirements_in(path: Path) -> dict[str, Requirement]:
    """The requirements a requirements file names, by canonical name (comments, options and ``-e`` lines left out).

    >>> import tempfile, os
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     _ = Path(folder, "r.txt").write_text("# a comment\\n-e .\\ntorch==2.13.0  # pinned\\nGradio[mcp]>=6,<7\\n")
    ...     sorted(requirements_in(Path(folder, "r.txt")))
    ['gradio', 'torch']
    """
    found = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            requirement = Requirement(line)
            found[canonical(requirement.name)] = requirement
    return found


def serving_requirements() -> dict[str, Requirement]:
    """pyproject.toml's dependencies and its serving extras, ``gcs[...]`` self-references expanded."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras, found, todo = project["optional-dependencies"], {}, [*project["dependencies"]]
    todo += [line for extra in SERVING_EXTRAS for line in extras[extra]]
    while todo:
        requirement = Requirement(todo.pop())
        if canonical(requirement.name) == "gcs":
            todo += [line for extra in requirement.extras for line in extras[extra]]
        else:
            found[canonical(requirement.name)] = requirement
    return found


def dev_names() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = {canonical(Requirement(line).name) for extra in ("test", "docs") for line in extras[extra]}
    return (declared | set(requirements_in(ROOT / "requirements-dev.txt"))) - {"httpx"}  # (httpx: gcs needs it too)


def test_requirements_txt_names_exactly_the_serving_dependencies():
    listed, needed = requirements_in(ROOT / "requirements.txt"), serving_requirements()
    assert not needed.keys() - listed.keys(), f"requirements.txt lacks {sorted(needed.keys() - listed.keys())}"
    assert not listed.keys() - needed.keys(), \
        f"requirements.txt names {sorted(listed.keys() - needed.keys())}, which pyproject.toml's dependencies and " \
        f"extras {SERVING_EXTRAS} do not"
    for name, requirement in needed.items():  # the same range, or one version inside it (torch, the model packages)
        mine = listed[name]
        pins = [spec.version for spec in mine.specifier if spec.operator == "=="]
        same = mine.specifier == requirement.specifier or (pins and requirement.specifier.contains(pins[0]))
        assert same and mine.extras >= requirement.extras, f"requirements.txt: {mine} against pyproject's {requirement}"


def test_requirements_txt_holds_nothing_from_the_dev_stack():
    listed, dev = set(requirements_in(ROOT / "requirements.txt")), dev_names()
    assert {"pytest", "ruff", "mkdocs", "jupytext"} <= dev  # (the comparison below sees the dev stack)
    assert not listed & dev, f"requirements.txt holds the dev stack's {sorted(listed & dev)}: requirements-dev.txt"
    lines = (ROOT / "requirements.txt").read_text().splitlines()
    assert not [line for line in lines if line.strip().startswith("-")], \
        "requirements.txt names packages only (no -e ., no options): a Space installs it with nothing beside it"


def test_requirements_txt_covers_every_import_of_gcs_ui_and_app(tmp_path):
    """deptry reads requirements.txt alone (a folder with the code and no [project] table, or it would read
    pyproject.toml's), with pyproject.toml's deptry settings; vLLM is an extra the Space does not install."""
    for part in ("gcs", "ui"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    for part in ("app.py", "requirements.txt"):
        shutil.copy(ROOT / part, tmp_path / part)
    settings = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["deptry"]
    ignores = {**settings["per_rule_ignores"]}
    for rule in ("DEP001", "DEP003"):  # imported lazily, by the vLLM engine and plugin only
        ignores[rule] = [*ignores.get(rule, []), "vllm"]
    lines = ["[tool.deptry]", f"known_first_party = {json.dumps(settings['known_first_party'])}",
             "[tool.deptry.per_rule_ignores]", *(f"{rule} = {json.dumps(names)}" for rule, names in ignores.items()),
             "[tool.deptry.package_module_name_map]",
             *(f"{json.dumps(name)} = {json.dumps(module)}"
               for name, module in settings["package_module_name_map"].items())]
    (tmp_path / "pyproject.toml").write_text("\n".join(lines) + "\n")
    result = subprocess.run([sys.executable, "-m", "deptry", "."], cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0 and "Success" in result.stdout + result.stderr, \
        (result.stdout + result.stderr)[-3000:]
