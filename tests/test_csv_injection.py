"""Spreadsheet safety: no CSV cell the library or the app writes can start a formula (a cell that starts with =, +,
-, @, a tab or a quote gets a leading quote), the CLI reads its own files back exactly, and the side-by-side run's
downloads are spreadsheet-safe CSV and strict JSON (no bare NaN or Infinity) that keep the user's text exact.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import pytest

import gcs

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from ui.tabs.side_by_side import compare  # noqa: E402

pytestmark = pytest.mark.usefixtures("transformers_engine")  # (tests/conftest.py: the page on vLLM is not theirs)


@pytest.mark.parametrize("text", ['=HYPERLINK("http://x","y")', "+cmd|' /C calc'!A0", "@SUM(A1)", "-2+3", "\tx", "'q"])
def test_csv_cells_cannot_start_a_formula(tmp_path, text):
    frame = pd.DataFrame({"prompt": [text], "consistency": [-0.5]})
    path = gcs.write_csv(frame, tmp_path / "out.csv")
    written = pd.read_csv(path, dtype=str, keep_default_na=False)
    assert written.loc[0, "prompt"] == "'" + text and written.loc[0, "consistency"] == "-0.5"
    log = gcs.experiments.results.ResultsLog(tmp_path / "log.csv", ["prompt", "seed"], ["prompt"], types={"seed": int})
    log.append(pd.DataFrame({"prompt": [text], "seed": [3]}))
    assert log.load().loc[0, "prompt"] == text  # the CLI reads its own files back exactly


def compare_outputs() -> set[str]:
    """The output names the side-by-side run's event wires (the page as ``ui.build`` lays it out)."""
    import ui

    event = next(fn for fn in ui.build().fns.values() if fn.name == "compare_stream")
    assert list(event.outputs) == list(event.fn.components.values())  # the adapter's names are the event's outputs
    return set(event.fn.components)


@pytest.mark.slow
def test_side_by_side_downloads_are_spreadsheet_safe(embedded_model):
    updates = list(compare.compare_stream('=HYPERLINK("http://x")\n@SUM(A1)', 0.0, 4, 0, 1.0, ["gcswr"], False,
                                          gcs.DEFAULT_MODEL))
    wired = compare_outputs()
    assert all(set(update) <= wired for update in updates)  # streamed and final updates alike
    final = updates[-1]
    assert set(final) == wired  # the finished run sets every output
    files, status = final["downloads"], final["status"]
    assert status == "Done."
    csv_path, json_path = files
    prompts = pd.read_csv(csv_path, dtype=str)["prompt"].tolist()
    assert prompts == ['\'=HYPERLINK("http://x")', "'@SUM(A1)"] * compare.DEFAULT_SEEDS
    def refuse(constant):
        raise ValueError(f"{constant} is not JSON")

    run = json.loads(Path(json_path).read_text(), parse_constant=refuse)  # strict JSON: no bare NaN or Infinity
    assert run["responses"][0]["prompt"] == '=HYPERLINK("http://x")'  # exact
    assert run["responses"][0]["top_p"] is None and run["summary"]
