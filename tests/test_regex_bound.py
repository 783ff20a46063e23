"""A/B regex scores are bounded (issue 44, item 8): a pattern that backtracks exponentially is stopped after
``gcs.abtest.scores.REGEX_SECONDS`` per answer with a ValueError that names the pattern (quoted briefly) and the bound,
in the library and in ``gcs ab``. ``regex:(a+)+$`` on 24 "a" and a "!" took 5.9 s with ``re``, four times longer for
every two more characters, with nothing to stop it. (The app does not offer regex scores; the operator's runs still
deserve a bound.) No test here times anything: a bound that held is a ValueError."""

from __future__ import annotations

import re

import pytest

import gcs
from conftest import tiny_gcs_model
from gcs.abtest.scores import check_scores

# backtracks 4^n steps on any text of n characters without 9 digits in a row (a model's answer, "a" * 40)
EXPONENTIAL = r"(.|.|.|.)*\d{9}"


def bound_refusal(pattern: str) -> str:
    return (f"metric {re.escape(repr('regex:' + pattern))}: the search took over "
            f"{gcs.abtest.scores.REGEX_SECONDS:g} s on .*, the bound for one answer")


def test_an_exponential_pattern_is_stopped_naming_it_and_the_bound():
    (score,), _ = check_scores([f"regex:{EXPONENTIAL}"])
    with pytest.raises(ValueError, match=bound_refusal(EXPONENTIAL)):
        score.of(["a" * 40], [40], where=lambda i: f"answer {i}")


def test_the_attacks_pattern_answers_and_ordinary_patterns_still_match():
    (nested, digits, case), _ = check_scores(["regex:(a+)+$", r"regex:\d+", "regex:(?i)dna"])
    assert nested.of(["a" * 24 + "!", "aaa"], [1, 1]).tolist() == [0.0, 1.0]
    assert digits.of(["in 1953", "never"], [1, 1]).tolist() == [1.0, 0.0]
    assert case.of(["DNA is", "RNA is"], [1, 1]).tolist() == [1.0, 0.0]


def test_a_long_pattern_is_quoted_briefly():
    pattern = EXPONENTIAL + "x?" * 500
    (score,), _ = check_scores([f"regex:{pattern}"])
    with pytest.raises(ValueError) as refused:
        score.of(["a" * 40], [40])
    assert len(str(refused.value)) < 400 and "(1,021 characters)" in str(refused.value)


def test_ab_stops_on_the_bound_naming_the_answer():
    model = tiny_gcs_model(seed=3)  # its answers are words such as "w12 w5 w40": 16 of them are ~60 characters
    with pytest.raises(ValueError, match=bound_refusal(EXPONENTIAL).replace(".*", "A's answer to prompt 0 under "
                                                                                  "seed 0 \\(gcswr\\)")):
        gcs.ab(["w5 w6"], gcs.Variant(model=model), gcs.Variant(model=model, temperature=0.5), seeds=1,
               metrics=[f"regex:{EXPONENTIAL}"], max_new_tokens=16, control=False)


@pytest.mark.slow
def test_the_ab_command_stops_on_the_bound(embedded_model, tmp_path):
    from test_cli import gcs_cli

    result = gcs_cli("ab", "--data", "general", "--limit", "1", "--seeds", "2", "--max-new-tokens", "16", "--quiet",
                     "--metrics", f"length,regex:{EXPONENTIAL}", "--out", str(tmp_path / "ab"))
    assert result.returncode == 2 and re.search(bound_refusal(EXPONENTIAL), result.stderr), result.stderr
