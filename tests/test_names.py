"""Lists of names follow one rule (gcs.runtime.names): the rule once, then each caller shown to go through it (a
name typed with capitals and spaces, a trailing comma, and the parser's own "did you mean")."""

from __future__ import annotations

import gradio as gr
import pandas as pd
import pytest

import gcs
from gcs.abtest.scores import check_scores
from gcs.checks import check_methods
from gcs.cli import commands as cli
from gcs.experiments.classifiers import check_classifiers
from gcs.experiments.comparison import compare_report
from gcs.runtime.names import parse_names, split_names
from gcs.stats.paired import paired_tests
from ui.shared.links import parse_value
from ui.tabs.ab import run_ab

KNOWN = ["is", "gcs", "gcswr"]


@pytest.mark.parametrize("names, expected", [
    ("gcs", ["gcs"]),
    ("IS , gcswr", ["is", "gcswr"]),  # case and surrounding spaces
    ("is,gcs,", ["is", "gcs"]),  # a trailing comma
    ("is,,gcs, ,", ["is", "gcs"]),  # empty items
    ("gcs,GCS,is,gcs", ["gcs", "is"]),  # a repeat kept once, where it first appears
    (["GCSwR ", " is"], ["gcswr", "is"]),  # a list: the same rule
    (("gcs" for _ in range(2)), ["gcs"]),  # any iterable
])
def test_the_rule(names, expected):
    assert parse_names(names, KNOWN, what="method") == expected


@pytest.mark.parametrize("names, error, message", [
    ("gcsw", ValueError, "unknown method 'gcsw' (did you mean 'gcswr'?): expected one of is, gcs, gcswr"),
    ("beam", ValueError, "unknown method 'beam': expected one of is, gcs, gcswr"),  # nothing near: no guess
    (" , ", ValueError, "methods must name at least one method: one of is, gcs, gcswr"),
    ([], ValueError, "methods must name at least one method"),
    (["gcs,is"], ValueError, "unknown method 'gcs,is'"),  # a list's item is one name
    (5, TypeError, "methods must be a list of methods or a comma-separated string, got int 5"),
    (b"gcs", TypeError, "got bytes"),
    (["gcs", 3], TypeError, "methods[1] must be a method (a string), got int 3"),
])
def test_the_rule_refuses(names, error, message):
    with pytest.raises(error) as raised:
        parse_names(names, KNOWN, what="method")
    assert message in str(raised.value)


def test_arguments_keep_their_case_and_the_registry_is_bounded_in_a_message():
    assert parse_names("E5:Org/Model, e5", ["e5"], what="metric", arguments=True) == ["e5:Org/Model", "e5"]
    assert parse_names("", KNOWN, empty_ok=True) == []
    with pytest.raises(ValueError) as raised:
        parse_names("nope", [f"name{i}" for i in range(100)])
    assert "and 80 more" in str(raised.value) and len(str(raised.value)) < 400
    assert split_names(" 5, 9,,5") == ["5", "9", "5"]  # the rule's first half: no registry, repeats kept


# Each caller, through the parser: capitals, spaces and a trailing comma accepted; a near miss named.

def test_methods():
    assert check_methods("IS , gcswr,") == ["is", "gcswr"]
    with pytest.raises(ValueError, match=r"did you mean 'gcswr'\?"):
        gcs.compare(["a", "b"], methods="is, gcsw", model="no/such-model")  # refused before any model loads
    with pytest.raises(ValueError, match=r"unknown method 'GCSR' \(did you mean 'gcswr'\?\): expected one of is,"):
        gcs.generate(["a"], method="GCSR", model="no/such-model")  # one method: the same message


FRAME = pd.DataFrame({"prompt_index": [0, 1] * 4, "prompt": ["p", "q"] * 4, "ensemble": 0,
                      "seed": [0, 0, 0, 0, 1, 1, 1, 1], "method": ["is", "is", "gcswr", "gcswr"] * 2,
                      "response": ["a b c", "a x y", "a b c", "a b d", "a b", "c d", "a b", "a b"]})


def test_metrics_in_compare_report_and_the_scored_metrics_in_its_tests():
    report = compare_report(FRAME, metrics="Jaccard , ALIGNED,", tokenizer=str.split)
    assert list(dict.fromkeys(report.scores["metric"])) == ["jaccard", "aligned"]
    assert set(paired_tests(report.scores, metrics=" Aligned ,")["metric"]) == {"aligned"}
    with pytest.raises(ValueError, match=r"unknown scored metric 'aligne' \(did you mean 'aligned'\?\)"):
        paired_tests(report.scores, metrics="aligne")
    with pytest.raises(ValueError, match=r"unknown metric 'jacard' \(did you mean 'jaccard'\?\)"):
        compare_report(FRAME, metrics="jacard", tokenizer=str.split)


def test_ab_scores():
    arm, pair = check_scores("Length , contains:Paris, ALIGNED,")
    assert [score.label for score in arm] == ["length", "contains:Paris"] and pair == ["aligned"]
    with pytest.raises(ValueError, match=r"did you mean 'e5_between'\?"):
        check_scores("e5_betwen")


def test_classifiers():
    assert [c.name for c in check_classifiers("List_Style , is_terse,")] == ["list_style", "is_terse"]
    with pytest.raises(ValueError, match=r"unknown classifier 'list_styles' \(did you mean 'list_style'\?\)"):
        check_classifiers(["is_terse", "list_styles"])


@pytest.mark.parametrize("option, value, message", [
    ("--metrics", "E5 , minilmm,", "unknown metric 'minilmm' (did you mean 'minilm'?)"),
    ("--methods", "IS, gcsw", "unknown method 'gcsw' (did you mean 'gcswr'?)"),
])
def test_the_command_line(option, value, message, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["run", "--data", "general", "--limit", "2", "--out", str(out), "--quiet", option, value]) == 2
    assert message in capsys.readouterr().err  # the first name, typed "E5 " or "IS", passed
    assert not out.exists()


def test_the_app_s_ab_scores_and_a_link_s_choices():
    variant = gcs.Variant(system="Be brief.")
    with pytest.raises(ValueError, match=r"unknown score 'alignd' \(did you mean 'aligned'\?\)"):
        run_ab(["q"], variant, variant, 2, "gcswr", "Length , alignd", 8)
    box = gr.CheckboxGroup(choices=[("IS", "is"), ("GCSwR", "gcswr")])
    assert parse_value(box, " GCSwR ,is,") == ["gcswr", "is"]
    with pytest.raises(ValueError, match=r"did you mean 'gcswr'\?"):
        parse_value(box, "gcsw")
