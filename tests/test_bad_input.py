"""Bad input, one case per row, through the Python API, the CLI and the UI handler.

The gradio_client API runs the same table in test_app.py. Every refusal names the
problem; the library accepts what is merely unusual (a 20,000-character prompt that fits
the context window, a temperature of 1e6, control characters), the public app is stricter.
"""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

import gcs
from conftest import refused_in_ui
from gcs.cli import commands as cli
from gcs.generation import cores

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from ui.tabs.side_by_side import compare  # noqa: E402

GOOD = ["What is DNA?", "Explain what DNA is."]

# case: (prompts, settings, message the Python API gives or None if accepted, message the app gives)
CASES = {
    "empty": ([], {}, "must not be empty", "enter 2 to 8 paraphrases"),
    "whitespace": (["   ", "\t"], {}, "is blank", "enter 2 to 8 paraphrases"),
    "single paraphrase": (["What is DNA?"], {}, None, "got 1"),
    "100 paraphrases": ([f"Question {i}?" for i in range(100)], {}, None, "at most 8 paraphrases"),
    "20,000 characters": (["What is DNA? " + "x" * 20_000, GOOD[1]], {}, None, "20,013 characters"),
    "control characters": (["What\x07 is DNA?", GOOD[1]], {}, None, "control characters"),
    "emoji and right-to-left": (["What is DNA? 🧬", "ما هو الحمض النووي؟"], {}, None, None),
    "temperature NaN": (GOOD, {"temperature": math.nan}, "temperature must be a finite number",
                        "temperature must be a number"),
    "temperature negative": (GOOD, {"temperature": -1.0}, "temperature must be a finite number", "between 0 and 2"),
    "temperature 1e6": (GOOD, {"temperature": 1e6}, None, "between 0 and 2"),
    "top_p 0": (GOOD, {"top_p": 0.0}, "top_p must be None or a number in (0, 1]", "top_p must be in (0, 1]"),
    "seed negative": (GOOD, {"seed": -1}, "seed", "seed must be a whole number"),
    "seed above 2^63": (GOOD, {"seed": 2**63 + 5}, "seed", "seed must be a whole number"),
    "max_new_tokens 0": (GOOD, {"max_new_tokens": 0}, "max_new_tokens must be an integer in [1, 1024]",
                         "from 1 to 256"),
    "max_new_tokens 10^6": (GOOD, {"max_new_tokens": 10**6}, "max_new_tokens must be an integer in [1, 1024]",
                            "from 1 to 256"),
    "unknown model": (GOOD, {"model": "no-such-org/no-such-model"}, "could not load model", "is not offered here"),
}


def _python(prompts, settings, embedded_model):
    settings = {"seed": 0, "temperature": 1.0, "max_new_tokens": 1, "model": embedded_model, **settings}
    return gcs.compare(prompts, seeds=[settings.pop("seed")], **settings)


HEAVY = {"100 paraphrases", "20,000 characters"}  # accepted; generating them on 2 cores takes minutes


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_python_api(case, embedded_model):
    prompts, settings, message, _ = CASES[case]
    if message is None and case in HEAVY:  # validation and batching accept it (nothing generated)
        batch, _ = cores.prepare(prompts, gcs.SamplingSettings(max_new_tokens=1), embedded_model)
        assert len(batch.rows) == 3 * len(prompts)
    elif message is None:
        frame = _python(prompts, settings, embedded_model)
        assert len(frame) == 3 * len(prompts)
    else:
        with pytest.raises(ValueError, match=re.escape(message)):
            _python(prompts, settings, embedded_model)


@pytest.mark.slow  # the app's handlers, on the app's model
@pytest.mark.usefixtures("transformers_engine")  # (tests/conftest.py)
@pytest.mark.parametrize("case", CASES)
def test_ui_handler(case):
    prompts, settings, _, message = CASES[case]
    arguments = {"paraphrases": "\n".join(prompts), "temperature": 1.0, "max_new_tokens": 4, "seed": 0, "top_p": 1.0,
                 "methods": ["gcswr"], "ensembling": False, "model_name": gcs.DEFAULT_MODEL}
    arguments.update({("model_name" if k == "model" else k): v for k, v in settings.items()})
    if message is None:
        assert list(compare.compare_stream(*arguments.values()))[-1]["status"] == "Done."
    else:
        refused_in_ui(lambda: list(compare.compare_stream(*arguments.values())), message)


CLI_CASES = {
    "temperature NaN": (["--temperatures", "nan"], "temperature"),
    "temperature negative": (["--temperatures=-1"], "temperature"),
    "top_p 0": (["--top-p", "0"], "top_p"),
    "seed negative": (["--seeds=-1,2"], "seed"),
    "seed above 2^63": (["--seeds", f"{2**63},1"], "seed"),
    "no seeds": (["--seeds", "0"], "seeds (a count) must be an integer in [1, 10000]"),
    "max_new_tokens 0": (["--max-new-tokens", "0"], "max_new_tokens"),
    "max_new_tokens 10^6": (["--max-new-tokens", "1000000"], "max_new_tokens"),
    "unknown model": (["--model", "no-such-org/no-such-model"], "could not load model"),
    "unknown metric": (["--metrics", "bleu"], "unknown metric"),
    "unknown method": (["--methods", "beam"], "method"),
}


@pytest.mark.parametrize("case", CLI_CASES)
def test_cli(case, tmp_path, capsys):
    arguments, message = CLI_CASES[case]
    out = tmp_path / "out"
    status = cli.main(["run", "--data", "general", "--limit", "2", "--out", str(out), "--quiet", *arguments])
    assert status == 2 and message in capsys.readouterr().err
    assert not out.exists()  # refused before anything was written


@pytest.mark.parametrize(
    "name, content, message",
    [("bad.jsonl", b'{"id": "a", "prompts": ["x", "y"]}\n{oops\n', "line 2: not valid JSON"),
     ("columns.csv", b"group,text\na,x\n", "missing column"),
     ("empty.jsonl", b"", "no groups"),
     ("binary.jsonl", bytes(range(256)) * 8, "not UTF-8"),
     ("empty group.jsonl", b'{"id": "a", "prompts": []}\n', "has no prompts")],
)
def test_cli_bad_data_files(tmp_path, capsys, name, content, message):
    data = tmp_path / name
    data.write_bytes(content)
    out = tmp_path / "out"
    assert cli.main(["run", "--data", str(data), "--out", str(out), "--quiet"]) == 2
    assert message in capsys.readouterr().err and not out.exists()
