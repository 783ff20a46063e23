"""The site's formulas are typeset by scripts and fonts served with the site (docs/assets/katex), none from a CDN: a
site read offline, or behind a firewall, still shows its formulas (mkdocs build --strict: tests/test_docs_site.py)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def site_assets() -> list[str]:
    """The scripts and style sheets mkdocs.yml adds to every page."""
    # mkdocs.yml holds a !!python tag (the slugify function): read it without constructing anything
    loader = type("Plain", (yaml.SafeLoader,), {})
    loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda *_: None)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"), Loader=loader)
    return [*config.get("extra_javascript", []), *config.get("extra_css", [])]


def missing_fonts(css: Path) -> list[str]:
    """The first font of each @font-face in a KaTeX style sheet (the one a browser loads) that is not beside it."""
    firsts = re.findall(r"src:url\(([^)]+)\)", css.read_text(encoding="utf-8"))
    return [font for font in firsts if not (css.parent / font).is_file()]


def test_every_script_and_style_sheet_is_served_with_the_site():
    assets = site_assets()
    assert any("katex" in asset for asset in assets), assets
    assert not [asset for asset in assets if "//" in asset], "an asset from another site"
    assert not [asset for asset in assets if not (DOCS / asset).is_file()], assets


def test_katex_s_fonts_are_served_beside_its_style_sheet(tmp_path):
    css = DOCS / "assets" / "katex" / "katex.min.css"
    assert len(re.findall(r"src:url\(", css.read_text(encoding="utf-8"))) >= 20 and not missing_fonts(css)
    planted = tmp_path / "katex.min.css"  # the same sheet without its fonts: every one is missing
    planted.write_text(css.read_text(encoding="utf-8"), encoding="utf-8")
    assert len(missing_fonts(planted)) >= 20
