"""``gcs.NAME`` is typed: the ``if TYPE_CHECKING:`` imports of gcs/__init__.py name every public name from the module
``_EXPORTS`` loads it from, so an editor and mypy see each one's real signature, while ``import gcs`` stays lazy."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

import gcs

ROOT = Path(__file__).resolve().parents[1]


def typed_names(source: str) -> dict[str, str]:
    """name -> module (without "gcs.") of every ``from gcs.X import NAME as NAME`` under ``if TYPE_CHECKING:``;
    an import under another alias, or from outside gcs, is returned as ``"!" + what it is``, which no module holds."""
    found = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for statement in node.body:
                assert isinstance(statement, ast.ImportFrom), ast.dump(statement)
                module = statement.module or ""
                for alias in statement.names:
                    exact = alias.asname == alias.name and module.startswith("gcs.")  # "as NAME": re-exported
                    found[alias.asname or alias.name] = module.removeprefix("gcs.") if exact else f"!{module}"
    return found


def test_the_check_finds_a_name_missing_renamed_or_from_another_module():
    source = "if TYPE_CHECKING:\n    from gcs.checks import METHODS as METHODS, check_seeds\n" \
             "    from gcs.stats.paired import verdict as verdict\n"
    assert typed_names(source) == {"METHODS": "checks", "check_seeds": "!gcs.checks", "verdict": "stats.paired"}


def test_every_public_name_is_typed_from_the_module_it_is_loaded_from():
    typed = typed_names((ROOT / "gcs" / "__init__.py").read_text())
    exported = {name: module for module, names in gcs._EXPORTS.items() for name in names}
    assert typed == exported, {name: (typed.get(name), exported.get(name)) for name in set(typed) | set(exported)
                               if typed.get(name) != exported.get(name)}


USER_SCRIPT = """\
import gcs

frame = gcs.compare(["What is DNA?", "Explain DNA."], methods="is,gcswr", seeds=2, max_new_tokens=4,
                    min_new_tokens=2)  # transformers' own option, passed on
settings = gcs.SamplingSettings(methods="gcs", seeds=[1, 2], temperature=0.7)
answers = gcs.generate(["What is DNA?"], settings=settings.replace(seeds=[1]))
print(frame, answers, gcs.verdict)
"""

WRONG_SCRIPT = """\
import gcs

gcs.compare(["What is DNA?"], seeds="x")
gcs.ab(["What is DNA?"], gcs.Variant(), gcs.Variant(system="Be brief."), methods="gcs")
gcs.SamplingSettings(method="gcs")
gcs.compare(["What is DNA?"], temprature=0.7)
gcs.sweep([["What is DNA?"]], min_new_tokens=2, temperature=0.5)
"""


@pytest.mark.slow  # a process of its own: mypy reads gcs and torch's types (about a minute)
def test_mypy_checks_a_users_calls_through_gcs(tmp_path):
    (tmp_path / "user_script.py").write_text(USER_SCRIPT)
    (tmp_path / "wrong_script.py").write_text(WRONG_SCRIPT)
    result = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                             str(tmp_path / "user_script.py"), str(tmp_path / "wrong_script.py")],
                            cwd=ROOT, capture_output=True, text=True)
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors if "user_script.py" in line] == [], result.stdout[-4000:]
    wrong = {line.split(":")[1]: line for line in errors if "wrong_script.py" in line}
    assert set(wrong) == {"3", "4", "5", "6", "7"}, result.stdout[-4000:]
    assert '"seeds"' in wrong["3"] and '"methods"' in wrong["4"] and '"method"' in wrong["5"], wrong
    # the extra keywords are transformers' generate options (GenerateOptions): a typo, or a sampling setting that
    # sweep takes by another name, is flagged
    assert '"temprature"' in wrong["6"] and '"temperature"' in wrong["7"], wrong
