"""Stylistic consistency: rule classifiers, the p_repeat pipeline (by simulation) and a real run."""

import numpy as np
import pandas as pd
import pytest

import gcs
from gcs.experiments import classifiers

PY = "Sure!\n```python\ndef add(a, b):\n    # sum\n    return a + b\n```"
JS = "```\nfunction add(a, b) {\n  return a + b;\n}\nconsole.log(add(1, 2));\n```\nThat is all."
CPP = "Here:\n```cpp\n#include <iostream>\nint main() { std::cout << 1; }\n```"


@pytest.mark.parametrize(
    "function, response, expected",
    [
        (classifiers.has_code_block, PY, True),
        (classifiers.has_code_block, "Use a loop over the list.", False),
        (classifiers.code_language, PY, "python"),
        (classifiers.code_language, JS, "javascript"),
        (classifiers.code_language, CPP, "c++"),
        (classifiers.code_language, "```\nimport os\nprint(os.sep)\n```", "python"),
        (classifiers.code_language, "No code here.", "none"),
        (classifiers.starts_with_code, JS, True),
        (classifiers.starts_with_code, PY, False),
        (classifiers.code_has_comments, PY, True),
        (classifiers.code_has_comments, JS, False),
        (classifiers.code_has_comments, "```cpp\nint x = 1; // one\n```", True),
        (classifiers.code_has_comments, "```python\nprint('#not a comment'.strip())\n```", False),
        (classifiers.code_has_comments, "```python\nx = 1\n", False),  # unclosed fence, no comment
        (classifiers.list_style, "1. Paris\n2. Rome\n3) Oslo", "numbered"),
        (classifiers.list_style, "- Paris\n- Rome\n* Oslo", "bulleted"),
        (classifiers.list_style, "a. Paris\nb. Rome", "lettered"),
        (classifiers.list_style, "Paris, Rome, Oslo, Madrid and Lisbon.", "none"),
        (classifiers.list_style, "1. Only one item", "none"),
        (classifiers.is_terse, "Paris, Rome, Oslo, Madrid, Lisbon.", True),
        (classifiers.is_terse, " ".join(["word"] * classifiers.TERSE_WORDS), False),
    ],
)
def test_rule_classifiers(function, response, expected):
    assert function(response) == expected


def test_p_repeat_is_unbiased_by_simulation():
    """Each seed g has its own p_g; the pipeline's mean estimate must match E_g[p_g^2 + (1-p_g)^2]."""
    rng = np.random.default_rng(7)
    seeds, questions = 4000, 5
    p_g = rng.beta(0.6, 0.6, size=seeds)
    labels = rng.random((seeds, questions)) < p_g[:, None]
    frame = pd.DataFrame({"seed": np.repeat(np.arange(seeds), questions), "method": "gcswr",
                          "prompt": "q", "response": "r", "terse": labels.reshape(-1)})
    result = gcs.style_consistency(frame, classifiers=[gcs.Classifier("terse", lambda q, r: True)]).iloc[0]
    truth = np.mean(p_g**2 + (1 - p_g) ** 2)
    z = (result["p_repeat"] - truth) / result["stderr"]
    assert abs(z) < 4.5, (result["p_repeat"], truth)
    # The plug-in estimate is biased upwards by (1 - p_repeat) / (N - 1) on average: far outside the noise.
    plug_in = np.mean([(row.mean() ** 2 + (1 - row.mean()) ** 2) for row in labels])
    assert (plug_in - truth) / result["stderr"] > 10


def test_multi_valued_dimensions_and_table():
    frame = pd.DataFrame({"seed": [0, 0, 1, 1] * 2, "method": ["is"] * 4 + ["gcswr"] * 4, "prompt": "q",
                          "response": ["1. a\n2. b", "- a\n- b", "x", "y", "1. a\n2. b", "1. c\n2. d", "x", "y"]})
    labelled = gcs.label_responses(frame, classifiers=["list_style"])
    result = gcs.style_consistency(labelled, classifiers=["list_style"])
    numbered = result[(result.dimension == "list_style = numbered")].set_index("method")["p_repeat"]
    assert numbered["gcswr"] == 1.0 and numbered["is"] == 0.5  # seed 0 disagrees (0), seed 1 agrees (1)
    table = gcs.style_table(result)
    assert list(table.columns) == ["IS", "GCSwR"] and "list_style = bulleted" in table.index
    assert len(gcs.style_figure(result).data) == 2


def test_classifier_validation():
    with pytest.raises(ValueError, match="unknown classifier"):
        classifiers.check_classifiers(["is_python"])
    with pytest.raises(ValueError, match="function"):
        gcs.Classifier("x", "not callable")
    with pytest.raises(ValueError, match="placeholder"):
        gcs.LLMJudge("terse", "Is it terse?", ["terse", "not terse"])


@pytest.mark.slow
def test_llm_judge_plugs_in(embedded_model):
    judge = gcs.LLMJudge(
        "terse", "Is the response terse or not?\nResponse:```{response}```.\nTo make your answer easy to extract "
        "respond with only one of the following options `terse`/`not terse`.", ["terse", "not terse"],
        model=embedded_model)
    assert judge._parse("It is NOT TERSE.") == "not terse" and judge._parse("terse") == "terse"
    assert judge._parse("maybe") == "unparsed"
    labels = judge.labels(["q", "q"], ["Paris.", "Well, " * 40])
    assert len(labels) == 2 and set(labels) <= {"terse", "not terse", "unparsed"}


@pytest.mark.slow
def test_style_responses_on_the_real_model(embedded_model):
    questions = gcs.load_groups("lists")[:3]
    frame = gcs.style_responses(questions, seeds=2, max_new_tokens=12, model=embedded_model, batch_rows=5)
    assert len(frame) == 3 * 2 * 2 and set(frame["method"]) == {"is", "gcswr"}
    again = gcs.style_responses(questions, methods=["gcswr"], seeds=[1], max_new_tokens=12, model=embedded_model)
    expected = frame[(frame.method == "gcswr") & (frame.seed == 1)]["response"].tolist()
    assert again["response"].tolist() == expected  # batch composition does not change a response
    result = gcs.style_consistency(gcs.label_responses(frame, classifiers=["is_terse"]), classifiers=["is_terse"])
    assert set(result["method"]) == {"is", "gcswr"} and result["p_repeat"].between(0, 1).all()
