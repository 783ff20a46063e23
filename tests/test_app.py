"""The Gradio app, launched as users launch it (``python app.py``), driven through gradio_client."""

from __future__ import annotations

import math
import re
import sys
from pathlib import Path

import pytest

import gcs

ROOT = Path(__file__).resolve().parent.parent
PARAPHRASES = "What is DNA?\nExplain what DNA is.\nDescribe DNA."


@pytest.mark.slow
def test_api_lists_the_endpoints(client):
    endpoints = client.view_api(print_info=False, return_format="dict")["named_endpoints"]
    assert {"/compare", "/sweep", "/coupling", "/trace", "/hindsight"} <= set(endpoints)
    names = [p["parameter_name"] for p in endpoints["/compare"]["parameters"]]
    assert names == ["paraphrases", "temperature", "max_new_tokens", "seeds", "top_p", "methods", "ensemble", "model",
                     "rounds"]  # seeds: a count or the seeds, as everywhere in gcs


@pytest.mark.slow
def test_compare_endpoint(client):
    result = client.predict(PARAPHRASES, 1.0, 12, 4, api_name="/compare")  # a count: seeds 0 to 3, in rounds
    assert result["paraphrases"] == PARAPHRASES.splitlines() and result["settings"]["seeds"] == [0, 1, 2, 3]
    assert set(result["responses"]) == {"is", "gcs", "gcswr"}
    assert all(len(r) == 3 and all(isinstance(t, str) for t in r) for r in result["responses"].values())
    for scores in result["scores"].values():
        assert set(scores) == {"e5", "jaccard", "minilm", "aligned"} and all(-1 <= v <= 1 for v in scores.values())
    assert len(result["per_seed"]) == 3 * 4 and {r["seed"] for r in result["per_seed"]} == {0, 1, 2, 3}
    assert all(len(r["responses"]) == 3 for r in result["per_seed"])
    summary = {(r["method"], r["metric"]): r for r in result["summary"]}
    per_seed = {(r["method"], r["seed"]): r for r in result["per_seed"]}
    gain = summary[("gcswr", "e5")]
    paired = [per_seed[("gcswr", s)]["e5"] - per_seed[("is", s)]["e5"] for s in (0, 1, 2, 3)]
    assert gain["n"] == 4 and gain["pairs"] == 4 and gain["diff"] == pytest.approx(sum(paired) / 4)
    # the verdict, in rounds (the default): one line per method and metric against IS (E5 and aligned agreement),
    # then how many seeds it used and why it stopped; the stopping fields say the same
    lines = [line for line in result["verdict"].splitlines() if line.startswith("- ")]
    assert len(lines) == 5 and all("over 4 seeds" in line for line in lines[:4])
    assert sum("E5 points" in line for line in lines) == 2 and sum("aligned-agreement" in line for line in lines) == 2
    assert lines[-1].startswith("- Stopped: the maximum of 4 seeds reached")
    stopping = result["stopping"]
    assert stopping["seeds_used"] == 4 and stopping["in_rounds"] and len(stopping["tests"]) == 4
    again = client.predict(PARAPHRASES, 1.0, 12, [0, 7], 1.0, "gcswr", api_name="/compare")  # a list: one batch
    assert again["responses"] == {"gcswr": result["responses"]["gcswr"]}  # same seed, same responses
    assert again["settings"]["seeds"] == [0, 7] and not again["stopping"]["in_rounds"]


@pytest.mark.slow
def test_trace_and_hindsight_endpoints(client):
    trace = client.predict("Why is the sky blue?\nWhat makes the sky blue?", "gcswr", 1, 1.0, 1.0, 6,
                           api_name="/trace")
    assert len(trace["responses"]) == 2
    winners = [step for step in trace["steps"] if step["won"]]
    assert {step["paraphrase"] for step in winners} == {0, 1}
    assert all(step["noise_after"] is not None for step in winners)
    answers = client.predict("Why is the sky blue?", "Because of Rayleigh scattering", "What makes the sky blue?",
                             api_name="/hindsight")
    assert len(answers["answers"]) == 1 and answers["method"] == "gcswr"
    with pytest.raises(Exception, match="exactly 2 paraphrases"):
        client.predict("just one", api_name="/trace")
    with pytest.raises(Exception, match="enter the response"):
        client.predict("Why?", "  ", "How come?", api_name="/hindsight")
    with pytest.raises(Exception, match="seeds per run must be a whole number from 1 to 16"):
        client.predict(PARAPHRASES, 1.0, 8, 17, api_name="/compare")


@pytest.mark.slow
def test_greedy_compare_agrees_across_methods(client):
    result = client.predict(PARAPHRASES, 0.0, 8, 1, api_name="/compare")
    assert result["responses"]["is"] == result["responses"]["gcs"] == result["responses"]["gcswr"]


@pytest.mark.slow
def test_sweep_endpoint(client):
    result = client.predict("builtin:2", "0, 1", 1, "is,gcswr", "jaccard", 8, api_name="/sweep")
    assert len(result["rows"]) == 2 * 2 * 2 and {r["temperature"] for r in result["curve"]} == {0.0, 1.0}
    mine = client.predict("Why is the sky blue?\nWhat makes the sky blue?", "1", 1, "gcswr", "e5", 8,
                          api_name="/sweep")
    assert len(mine["rows"]) == 1 and 0 < mine["rows"][0]["consistency"] <= 1


@pytest.mark.slow
def test_coupling_endpoint(client):
    result = client.predict("0.5, 0.3, 0.2", "", 2.0, 2000, 2000, 1, api_name="/coupling")
    curve = result["curve"]
    assert len(curve) == 11 and curve[0]["theorem1"] == pytest.approx(1.0)
    for point in curve:  # Monte Carlo within 4.5 standard errors of the exact values
        assert abs(point["monte_carlo_shared"] - point["theorem1"]) <= 4.5 * max(point["stderr_shared"], 1e-3)
        assert abs(point["monte_carlo_independent"] - point["independent"]) <= 4.5 * point["stderr_independent"]
    assert result["recycling_chi_square_p"] > 1e-3


BAD_COMPARE = [
    ("empty", dict(paraphrases=""), "enter 2 to 8 paraphrases"),
    ("whitespace", dict(paraphrases="   \n \t\n"), "enter 2 to 8 paraphrases"),
    ("single", dict(paraphrases="What is DNA?"), "got 1"),
    ("hundred", dict(paraphrases="\n".join(f"Question {i}?" for i in range(100))), "at most 8 paraphrases"),
    ("20k characters", dict(paraphrases="What is DNA?\n" + "x" * 20_000), "paraphrase 2 has 20,000 characters"),
    ("control characters", dict(paraphrases="What is DNA?\nWhat\x07 is DNA?"), "control characters"),
    ("temperature negative", dict(temperature=-1.0), "temperature must be between 0 and 2"),
    ("temperature 1e6", dict(temperature=1e6), "temperature must be between 0 and 2"),
    ("top_p 0", dict(top_p=0.0), "top_p must be in (0, 1]"),
    ("seed negative", dict(seeds=[-1]), "seed must be a whole number"),
    ("seed above 2^63", dict(seeds=[2**63 + 10]), "seed must be a whole number"),
    ("no seeds", dict(seeds=0), "seeds per run must be a whole number from 1 to 16"),
    ("ensemble 3", dict(ensemble=3), "ensemble must be a whole number from 0 to 2"),
    ("max_new_tokens 0", dict(max_new_tokens=0), "max_new_tokens must be a whole number from 1"),
    ("max_new_tokens 10^6", dict(max_new_tokens=10**6), "max_new_tokens must be a whole number from 1"),
    ("unknown method", dict(methods="beam"), "unknown method"),
    ("model not offered", dict(model="gpt2"), "is not offered here"),
    ("remote-code model", dict(model="microsoft/phi-1_5-remote-code"), "is not offered here"),
]


@pytest.mark.slow
@pytest.mark.parametrize("case, changes, message", BAD_COMPARE, ids=[c[0] for c in BAD_COMPARE])
def test_bad_compare_input_is_a_clear_error_and_the_app_keeps_serving(client, case, changes, message):
    arguments = dict(paraphrases=PARAPHRASES, temperature=1.0, max_new_tokens=8, seeds=1, top_p=1.0, methods="gcswr")
    arguments.update(changes)
    with pytest.raises(Exception, match=re.escape(message)):
        client.predict(**arguments, api_name="/compare")
    assert client.predict(api_name="/coupling", trials=500, steps=500)["curve"]  # still serving


def test_nan_temperature_is_refused_by_the_app_itself():
    """JSON cannot carry NaN (gradio_client refuses to send it), so check the app's own validation."""
    sys.path.insert(0, str(ROOT))
    from ui.tabs.side_by_side import compare

    with pytest.raises(ValueError, match="temperature must be a number"):
        compare.compare_inputs("a\nb", math.nan, 8, [0], 1.0, "gcswr", 0, "x")
    with pytest.raises(ValueError, match="top_p must be a number"):
        compare.compare_inputs("a\nb", 1.0, 8, [0], math.inf * 0, "gcswr", 0, "x")


@pytest.mark.slow
def test_emoji_and_right_to_left_text_work(client, embedded_model):
    """Emoji and Arabic reach the model intact: the app echoes them unchanged and answers them exactly as the library
    does with the same seed (the same model, dtype and kernels on this machine)."""
    prompts = ["What is DNA? 🧬", "ما هو الحمض النووي؟"]
    result = client.predict("\n".join(prompts), 1.0, 8, 1, 1.0, "gcswr", api_name="/compare")
    assert result["paraphrases"] == prompts
    expected = gcs.compare(prompts, methods="gcswr", seeds=[0], max_new_tokens=8, model=embedded_model)
    assert result["responses"]["gcswr"] == list(expected["response"]) and all(expected["response"].str.strip())


@pytest.mark.parametrize(
    "arguments, message",
    [(("builtin:2", "hot", 1, "is", "e5", 8), "temperatures must be numbers"),
     (("builtin:2", "0,1", 0, "is", "e5", 8), "seeds must be a whole number"),
     (("builtin:50", "0,0.5,1", 10, "is,gcs,gcswr", "e5", 8), "the limit here is"),
     (("only one group line", "1", 1, "is", "e5", 8), "enter 2 to 8 paraphrases"),
     (("builtin:2", "1", 1, "is", "bleu", 8), "metric 'bleu' is not offered here")],
)
@pytest.mark.slow
def test_bad_sweep_input(client, arguments, message):
    with pytest.raises(Exception, match=message):
        client.predict(*arguments, api_name="/sweep")


@pytest.mark.parametrize(
    "arguments, message",
    [(("0.5, -0.5", "", 3.0, 1000, 1000, 0), "non-negative"),
     (("0.5, abc", "", 3.0, 1000, 1000, 0), "p must be numbers"),
     (("1", "", 3.0, 1000, 1000, 0), "2 to 64"),
     (("0.5, 0.5", "0.2, 0.3, 0.5", 3.0, 1000, 1000, 0), "same number of categories"),
     (("0.5, 0.5", "", 3.0, 10**7, 1000, 0), "trials must be a whole number from 100 to 20,000")],
)
@pytest.mark.slow
def test_bad_coupling_input(client, arguments, message):
    with pytest.raises(Exception, match=message):
        client.predict(*arguments, api_name="/coupling")
