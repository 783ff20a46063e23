"""Every dotted name the docs give (`gcs.X`, `gcs.X.Y`, `ui.X`) resolves as a reader would type it: the package, then
one attribute after another. A name that raises here would raise in the reader's session (a function that shares
its module's name, ``gcs.verdict``, hides that module's other names from ``gcs.stats.paired.NAME``)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]  # (CHANGELOG.md names removed things too)
# inside `code`: a dotted name starting at gcs or ui, not part of a path (gcs/x.py) and not a wildcard (gcs.style_*)
DOTTED = re.compile(r"(?<![\w./])((?:gcs|ui)(?:\.[A-Za-z_]\w*)+)(?![\w*/])")


def dotted_names() -> dict[str, str]:
    found: dict[str, str] = {}
    for page in PAGES:
        for code in re.findall(r"`[^`\n]+`", page.read_text()):
            for name in DOTTED.findall(code):
                found.setdefault(name, page.name)
    return found


def resolve(name: str):
    """``name`` as a reader reaches it: import the longest module prefix (so submodules exist), then walk the
    attributes from the top package down."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        try:
            importlib.import_module(".".join(parts[:end]))
            break
        except ImportError:
            continue
    value = importlib.import_module(parts[0])
    for part in parts[1:]:
        value = getattr(value, part)
    return value


NAMES = dotted_names()


def test_the_docs_name_things():
    assert len(NAMES) > 50  # the scan finds the docs' names (a broken pattern would pass every case below vacuously)


@pytest.mark.parametrize("name", sorted(NAMES))
def test_a_dotted_name_in_the_docs_resolves(name):
    resolve(name)  # AttributeError / ImportError: the docs name something a reader cannot reach
