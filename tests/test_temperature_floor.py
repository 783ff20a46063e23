"""The temperature floor (issue 44, item 5): a temperature above 0 but below ``gcs.MIN_TEMPERATURE`` (1e-4) is refused
before any work, naming the floor, by the library and by the app; 0 keeps meaning greedy. 1e-300 and 5e-324 divided
every logit into infinity, and each of /trace, /compare, /hindsight, /counterfactual, /sweep and /ab worked 0.6 to
3.3 s before failing with "logits row 0 has no valid distribution (max logit inf)", which named no temperature."""

from __future__ import annotations

import sys
from pathlib import Path

import gradio as gr
import pytest

import gcs
from conftest import tiny_gcs_model

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

TINY = ["w5 w6 w7", "w9 w10"]
BELOW = [1e-300, 5e-324, 5e-5]
FLOOR_NAMED = "at least 0.0001"


@pytest.fixture(scope="module")
def tiny():
    return tiny_gcs_model(seed=3)


ENTRY_POINTS = {
    "generate": lambda t, m: gcs.generate(TINY, method="gcswr", seed=0, temperature=t, max_new_tokens=4, model=m),
    "stream": lambda t, m: list(gcs.stream(TINY, method="is", seed=0, temperature=t, max_new_tokens=4, model=m)),
    "compare": lambda t, m: gcs.compare(TINY, temperature=t, max_new_tokens=4, model=m),
    "trace": lambda t, m: gcs.trace(TINY, temperature=t, max_new_tokens=4, model=m),
    "hindsight": lambda t, m: gcs.hindsight("w5 w6", "w7 w8", ["w9"], temperature=t, max_new_tokens=4, model=m),
    "counterfactual": lambda t, m: gcs.counterfactual("w5 w6", "w7 w8", 0, "w9", temperature=t, max_new_tokens=4,
                                                      model=m),
    "sweep": lambda t, m: gcs.sweep([TINY], temperatures=[1.0, t], methods="is", seeds=1, metrics=["jaccard"],
                                    model=m, max_new_tokens=4),
    "ab": lambda t, m: gcs.ab(TINY, gcs.Variant(model=m), gcs.Variant(model=m, temperature=t), seeds=2,
                              metrics=["length"], max_new_tokens=4),
    "settings": lambda t, m: gcs.SamplingSettings(temperature=t),
    "processor": lambda t, m: gcs.GumbelLogitsProcessor("gcswr", temperature=t),
}


@pytest.mark.parametrize("temperature", BELOW)
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_the_library_refuses_a_temperature_below_the_floor_naming_it(entry, temperature, tiny):
    with pytest.raises(ValueError, match=f"temperature must be a finite number, 0 \\(greedy\\) or {FLOOR_NAMED}"):
        ENTRY_POINTS[entry](temperature, tiny)


def test_the_floor_itself_and_greedy_are_accepted(tiny):
    assert gcs.MIN_TEMPERATURE == 1e-4 and gcs.SamplingSettings(temperature=0).temperature == 0.0
    greedy = gcs.generate(TINY, method="gcswr", seed=0, temperature=0, max_new_tokens=6, model=tiny)
    assert gcs.generate(TINY, method="is", seed=5, temperature=gcs.MIN_TEMPERATURE, max_new_tokens=6,
                        model=tiny) == greedy


def test_the_apps_limits_table_states_the_floor():
    from ui.shared import limits

    for temperature in BELOW:
        with pytest.raises(ValueError, match=r"temperature must be between 0 and 2 \(0 or at least 0.0001\), got "):
            limits.check("temperature", temperature)
    assert limits.check("temperature", 0) == 0.0 and limits.check("temperature", 1e-4) == 1e-4


# each endpoint with a temperature below the floor, the rest of a small valid request
ENDPOINT_CALLS = {
    "compare": dict(paraphrases="What is DNA?\nExplain DNA.", temperature=1e-300, max_new_tokens=2, seeds=1),
    "trace": dict(paraphrases="What is DNA?\nExplain DNA.", temperature=5e-324, max_new_tokens=2),
    "hindsight": dict(prompt="Why is the sky blue?", response="Scattering.", paraphrases="Why blue?",
                      temperature=1e-300, max_new_tokens=2),
    "counterfactual": dict(prompt="Why is the sky blue?", response="Scattering.", at=0, replacement=" Air",
                           temperature=5e-324, max_new_tokens=2),
    "sweep": dict(paraphrases="What is DNA?\nExplain DNA.", temperatures="1, 1e-300", seeds=1, methods="is",
                  metric="jaccard", max_new_tokens=2),
    "ab": dict(prompts="What is DNA?", b_temperature=1e-300, seeds=2, scores="length", max_new_tokens=2),
}


@pytest.mark.slow  # the app's endpoints load the app's model
@pytest.mark.parametrize("endpoint", ENDPOINT_CALLS)
def test_every_endpoint_refuses_a_temperature_below_the_floor_before_work(endpoint, monkeypatch):
    """Refused by the limits table before any generation (every generation lays out a ``Batch``: one here would
    fail the test)."""
    import ui

    def no_generation(*args, **kwargs):
        raise AssertionError("a generation started")

    monkeypatch.setattr(gcs.engines.batch.Batch, "__init__", no_generation)
    with pytest.raises(gr.Error, match=r"temperature must be between 0 and 2 \(0 or at least 0.0001\), got "):
        list(ui.ENDPOINTS[endpoint][0](**ENDPOINT_CALLS[endpoint]))  # (/sweep checks in its worker, after a beat)
