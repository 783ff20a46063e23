"""The reference site (mkdocs.yml): the guides in docs/ and an API reference generated from the docstrings.

Every name in ``gcs.__all__`` has a ``::: gcs.MODULE.NAME`` block under docs/reference/ (its defining module, as
``gcs._EXPORTS`` says), a docstring, and docstrings on its public methods; ``mkdocs build --strict`` passes, and is
shown failing on a planted broken link, a missing anchor, a reference that does not resolve and a docstring that
documents a parameter the signature does not have.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import gcs

griffe = pytest.importorskip("griffe", reason="the docs site's packages: pip install -r requirements-dev.txt")
pytest.importorskip("mkdocs", reason="the docs site's packages: pip install -r requirements-dev.txt")

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"
IDENTIFIER = re.compile(r"^::: (\S+)\s*$", re.MULTILINE)


def references() -> dict[str, str]:
    """Each ``:::`` identifier of the reference pages, and the page it is on."""
    return {identifier: page.name for page in sorted(REFERENCE.glob("*.md"))
            for identifier in IDENTIFIER.findall(page.read_text(encoding="utf-8"))}


def test_every_public_name_is_in_the_reference_under_its_own_module():
    found = references()
    expected = {f"gcs.{module}.{name}" for name, module in gcs._MODULE_OF.items()}
    missing = sorted(expected - set(found))
    assert not missing, f"public names with no ::: block under docs/reference/: {missing}"
    # a gcs.* block that is no public name documents something a reader cannot reach as gcs.NAME (the vLLM plugin's
    # page is the exception: vLLM loads it by its entry point)
    strays = sorted(i for i in set(found) - expected if not i.startswith("gcs.vllm."))
    assert not strays, f"::: blocks that are not public names: {strays}"
    assert len(found) >= len(gcs.__all__)


def test_every_public_name_and_its_public_methods_have_a_docstring():
    package = griffe.load("gcs", search_paths=[str(ROOT)], docstring_parser="google")
    missing = []
    for name, module in gcs._MODULE_OF.items():
        obj = package[f"{module}.{name}"]
        if not obj.docstring:
            missing.append(name)
        if obj.is_class:
            missing += [f"{name}.{member.name}" for member in obj.members.values()
                        if not member.name.startswith("_") and not member.is_alias
                        and (member.is_function or member.is_class) and not member.docstring]
    assert not missing, f"public names without a docstring: {missing}"


# Classes whose docstrings are still prose, not yet Google style (Args: for a constructor a caller calls,
# Attributes: for a result): this set only shrinks.
CLASSES_IN_PROSE: set[str] = set()


def google_style_gaps(obj) -> list[str]:
    """What a public function's or class's docstring lacks of the Google style: every parameter under Args:,
    Returns: (or Yields:) unless it returns None, and an Examples: section that doctest runs; a class, Args: or
    Attributes: (an exception, neither: its docstring says when it is raised)."""
    kind = griffe.DocstringSectionKind
    sections = obj.docstring.parse("google", warn_missing_types=False) if obj.docstring else []
    kinds = {section.kind for section in sections}
    if obj.is_class:
        exception = any(str(base).endswith(("Error", "Exception")) for base in obj.bases)
        return [] if exception or kinds & {kind.parameters, kind.attributes} else ["Args: or Attributes:"]
    if not obj.is_function:
        return []
    documented = {parameter.name.lstrip("*") for section in sections
                  if section.kind in (kind.parameters, kind.other_parameters) for parameter in section.value}
    gaps = [f"Args: {name}" for parameter in obj.parameters
            if (name := parameter.name.lstrip("*")) not in documented and name not in ("self", "cls")]
    if str(obj.returns) != "None" and not kinds & {kind.returns, kind.yields}:
        gaps.append("Returns:")
    if kind.examples not in kinds:
        gaps.append("Examples:")
    return gaps


def test_google_style_finds_what_a_docstring_lacks():
    planted = griffe.visit("planted", Path("planted.py"), 'def f(x, *, y=1) -> int:\n    """F.\n\n    Args:\n'
                           '        x: a number.\n    """\n')
    assert google_style_gaps(planted["f"]) == ["Args: y", "Returns:", "Examples:"]


def test_every_public_name_is_documented_in_google_style():
    package = griffe.load("gcs", search_paths=[str(ROOT)], docstring_parser="google")
    gaps = {name: found for name, module in gcs._MODULE_OF.items()
            if (found := google_style_gaps(package[f"{module}.{name}"])) and name not in CLASSES_IN_PROSE}
    assert not gaps, f"public names whose docstrings lack Google-style sections: {gaps}"
    converted = sorted(name for name in CLASSES_IN_PROSE
                       if not google_style_gaps(package[f"{gcs._MODULE_OF[name]}.{name}"]))
    assert not converted, f"in Google style now: take them off CLASSES_IN_PROSE: {converted}"


def mkdocs_build(config: Path, site: Path) -> subprocess.CompletedProcess:
    environment = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(config),
                           "--site-dir", str(site)], cwd=config.parent, capture_output=True, text=True,
                          env=environment)


@pytest.mark.slow
def test_the_site_builds_in_strict_mode_without_a_warning(tmp_path):
    result = mkdocs_build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert result.returncode == 0, result.stderr[-4000:]
    assert not re.search(r"^(WARNING|ERROR)", result.stderr, re.MULTILINE), result.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "sampling" / "index.html").is_file()


@pytest.mark.slow
@pytest.mark.parametrize(("page", "message"), [
    ("[gone](missing.md)", "contains a link 'missing.md', but the target is not found"),
    ("[gone](index.md#no-such-heading)", "there is no such anchor"),
    ("::: gcs.checks.no_such_name", "Could not collect 'gcs.checks.no_such_name'"),
    ("::: planted.twice", "Parameter 'y' does not appear in the function signature"),
])
def test_the_strict_build_fails_on_a_planted_fault(tmp_path, page, message):
    """The project's settings (INHERIT), one planted page, the code beside it (mkdocstrings' ``paths: [.]``)."""
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "index.md").write_text(f"# Planted\n\n{page}\n", encoding="utf-8")
    (tmp_path / "gcs").symlink_to(ROOT / "gcs")
    (tmp_path / "planted.py").write_text('def twice(x: int) -> int:\n    """Twice.\n\n    Args:\n        x: a number.\n'
                                         '        y: a parameter that the signature lost.\n    """\n    return 2 * x\n')
    config = tmp_path / "mkdocs.yml"
    config.write_text(f"INHERIT: {ROOT / 'mkdocs.yml'}\ndocs_dir: docs\nnav: [index.md]\n", encoding="utf-8")
    result = mkdocs_build(config, tmp_path / "site")
    assert result.returncode != 0 and message in result.stderr, result.stderr[-4000:]
