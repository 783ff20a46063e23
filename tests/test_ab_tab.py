"""The A/B tab (ui/tabs/ab.py) and its endpoint, run in-process on the embedded model: what it shows is gcs.ab's and
gcs.parting's answer, bad input is named and wipes nothing, and a link round-trips its settings."""

from __future__ import annotations

import math
import sys
import types
from pathlib import Path

import pandas as pd
import pytest

from conftest import refused_in_ui

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import gcs  # noqa: E402
from ui.shared import deployment, limits  # noqa: E402
from ui.tabs import ab  # noqa: E402

pytestmark = pytest.mark.slow

PROMPTS = "Why is the sky blue?\nWhat is DNA?"
A = dict(a_system="", a_template="{prompt}", a_temperature=1.0, a_top_p=1.0, a_model=gcs.DEFAULT_MODEL,
         a_precision="default")
B = dict(b_system="Answer in one word.", b_template="{prompt}", b_temperature=1.0, b_top_p=1.0,
         b_model=gcs.DEFAULT_MODEL, b_precision="default")


def ui_arguments(**changes) -> list:
    values = dict(source="my prompts", prompts_text=PROMPTS, builtin_count=2, **A, **B, seeds=2, method="gcswr",
                  scores=["length", "e5_between"], max_new_tokens=8)
    values.update(changes)
    return list(values.values())


def last(updates):
    return list(updates)[-1]


@pytest.fixture(scope="module")
def run():
    """One small A/B run through the tab's handler: its outputs, and the library's answer to the same request."""
    verdict, effects, pairs, pair, state, csv, status = last(ab.ab_ui(*ui_arguments()))
    model = deployment.load_allowed_model(gcs.DEFAULT_MODEL)
    library = gcs.ab(PROMPTS.splitlines(), gcs.Variant(model=model, name="A"),
                     gcs.Variant(model=model, system="Answer in one word.", name="B"), seeds=range(2),
                     max_new_tokens=8)
    return dict(verdict=verdict, effects=effects, pairs=pairs, pair=pair, state=state, csv=csv, status=status,
                library=library)


@pytest.mark.slow
def test_the_tab_shows_the_library_s_answers_and_report(run):
    assert run["status"] == "Done."
    library = run["library"][run["library"]["method"] == "gcswr"]
    assert list(run["pairs"]["A's answer"]) == [ab.one_paragraph(t.strip()) for t in library["answer_a"]]
    assert list(run["pairs"]["B's answer"]) == [ab.one_paragraph(t.strip()) for t in library["answer_b"]]
    assert list(run["pairs"]["identical"]) == list(library["identical"])
    report = gcs.ab_report(run["library"])
    assert run["verdict"].count("\n- ") == len(report.lines) - 1
    assert list(run["effects"]["score"]) == ["length"]  # e5_between is a pair score, not an arm's
    assert run["effects"]["B − A (mean over seeds)"].iloc[0] == pytest.approx(report.effects["diff"].iloc[0], abs=1e-3)
    frame = pd.read_csv(run["csv"])
    assert len(frame) == len(run["library"]) and "token_ids_a" not in frame


@pytest.mark.slow
def test_a_pair_shows_both_answers_and_where_they_part(run):
    choices = run["pair"]["choices"]
    assert len(choices) == 4  # 2 prompts x 2 seeds
    frame = run["state"]["frame"]
    for label, value in choices:
        row = ab._chosen_row(run["state"], value)
        diff, where = ab.pair_view(run["state"], value)
        assert diff[0] == ("[A] ", "paraphrase") and ("[B] ", "paraphrase") in diff
        if row["identical"]:
            assert "identical" in label and "same answer" in where
        else:
            assert f"part at token {int(row['parts_at'])}" in label and f"part at token {int(row['parts_at'])}" in where
    parted = frame[(frame["method"] == "gcswr") & ~frame["identical"]]
    assert len(parted), "a one-word system prompt changed no answer of 4: the test needs a change that shows"


@pytest.mark.slow
def test_why_they_parted_is_gcs_parting_s_race(run):
    frame = run["state"]["frame"]
    row = frame[(frame["method"] == "gcswr") & ~frame["identical"]].iloc[0]
    sentence, race = ab.why_ui(run["state"], f"{row['prompt_index']}/{row['seed']}")
    model = deployment.load_allowed_model(gcs.DEFAULT_MODEL)
    found = gcs.parting(gcs.Variant(model=model), gcs.Variant(model=model, system="Answer in one word."),
                        row["prompt"], seed=int(row["seed"]), method="gcswr", max_new_tokens=int(row["parts_at"]) + 1)
    assert found.position == int(row["parts_at"])
    assert sentence == ab.as_text(found.sentence)
    assert list(race["probability"]) == pytest.approx(list(found.frame()["probability"].round(4)))


@pytest.mark.parametrize("changes, message", [
    ({"prompts_text": ""}, "enter 1 to 8 prompts"),
    ({"prompts_text": "\n".join(f"q{i}" for i in range(9))}, "enter 1 to 8 prompts"),
    ({"b_template": "{prompt} {style}"}, "template must hold the field {prompt}"),
    ({"b_system": "a\x1b[2Jb"}, "B's system prompt contains control characters"),
    ({"b_model": "gpt2"}, "model 'gpt2' is not offered here"),
    ({"b_precision": "int4"}, "B's precision must be one of"),
    ({"seeds": 40}, "ab seeds must be a whole number from 2 to 16"),
    ({"a_top_p": 0}, "top_p must be in (0, 1]"),
    ({"method": "is"}, "method must be gcswr or gcs"),
    ({"scores": []}, "scores must name at least one score"),
    ({"max_new_tokens": 128, "source": "built-in set", "builtin_count": 8, "seeds": 16}, "tokens of work"),
])
@pytest.mark.slow
def test_bad_input_is_named_and_nothing_is_wiped(changes, message):
    refused_in_ui(lambda: list(ab.ab_ui(*ui_arguments(**changes))), message)


@pytest.mark.slow
def test_the_endpoint_answers_as_the_tab_and_refuses_as_it(run):
    answer = last(ab.ab(PROMPTS, b_system="Answer in one word.", seeds=2, max_new_tokens=8))
    rows = pd.DataFrame(answer["rows"])
    library = run["library"]
    assert list(rows["answer_b"]) == list(library["answer_b"]) and list(rows["identical"]) == list(library["identical"])
    assert answer["lines"] == gcs.ab_report(library).lines
    for bad, message in (({"prompts": "builtin:99999999"}, "builtin:N needs a whole number N from 1 to 8"),
                         ({"prompts": PROMPTS, "scores": "length,bogus"}, "unknown score 'bogus'")):
        with pytest.raises(Exception, match=message):
            last(ab.ab(**bad))
    assert limits.LIMITS["ab prompts"].high == 8


def test_the_effects_table_shows_whole_seeds_and_words_not_raw_flags():
    """It showed "17.806" seeds IS needs (an estimate of a count, read as precision it does not have) and a raw
    "true" for beyond noise."""
    effects = pd.DataFrame({"metric": ["length", "e5_between"], "n": [8, 8], "diff": [1.23456, 0.0],
                            "beyond_noise": [True, False], "is_seeds": [17.806, math.inf]})
    table = ab.effects_table(types.SimpleNamespace(effects=effects))
    assert table[ab.EFFECT_HEADERS["is_seeds"]].tolist() == [18, math.inf]
    assert table[ab.EFFECT_HEADERS["beyond_noise"]].tolist() == ["yes", "no"]
