"""A keyword nothing takes is refused by every entry point with one message, naming the nearest name, before any
model loads; the names transformers' generate takes are known without importing it; every entry point builds its
``SamplingSettings`` one way, and bounds ``batch_rows`` alike."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

import gcs
from conftest import tiny_gcs_model
from gcs.engines.models import _load
from gcs.runtime.keywords import GENERATE_OPTIONS

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ["What is DNA?", "Explain what DNA is."]


def test_the_generate_options_are_those_of_the_installed_transformers():
    """The list gcs reads instead of importing transformers: GenerationConfig's fields and generate's own arguments
    (update GENERATE_OPTIONS in gcs/runtime/keywords.py when transformers changes them)."""
    from transformers import GenerationConfig
    from transformers.generation.utils import GenerationMixin

    fields = {name for name in vars(GenerationConfig()) if not name.startswith("_")}
    arguments = {name for name, parameter in inspect.signature(GenerationMixin.generate).parameters.items()
                 if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)} - {"self", "inputs"}
    assert GENERATE_OPTIONS == fields | arguments, (sorted(GENERATE_OPTIONS - fields - arguments),
                                                     sorted((fields | arguments) - GENERATE_OPTIONS))


TYPOS = {  # entry point -> (a call with the keyword, the keyword, the name it should suggest); model None: the
    # embedded model, which a check after loading would load
    "compare": (lambda **k: gcs.compare(PROMPTS, **k), "temprature", "temperature"),
    "compare max_tokens": (lambda **k: gcs.compare(PROMPTS, **k), "max_tokens", "max_new_tokens"),
    "stream_compare": (lambda **k: next(gcs.stream_compare(PROMPTS, **k)), "temprature", "temperature"),
    "generate": (lambda **k: gcs.generate(PROMPTS, **k), "temprature", "temperature"),
    "stream": (lambda **k: next(gcs.stream(PROMPTS, **k)), "sed", "seed"),
    "sweep": (lambda **k: gcs.sweep([PROMPTS], **k), "temprature", "temperatures"),
    "compare_rounds": (lambda **k: gcs.compare_rounds(PROMPTS, **k), "temprature", "temperature"),
    "style_responses": (lambda **k: gcs.style_responses(PROMPTS, **k), "seed", "seeds"),
    "ab": (lambda **k: gcs.ab(PROMPTS, gcs.Variant(), gcs.Variant(system="Be brief."), **k), "methods", "method"),
    "trace": (lambda **k: gcs.trace(PROMPTS, **k), "temprature", "temperature"),
    "counterfactual": (lambda **k: gcs.counterfactual(PROMPTS[0], "DNA is", at=1, replacement=" a", **k), "seeds",
                       "seed"),
    "SamplingSettings": (lambda **k: gcs.SamplingSettings(**k), "method", "methods"),
    "SamplingSettings.replace": (lambda **k: gcs.SamplingSettings().replace(**k), "temprature", "temperature"),
}


@pytest.mark.parametrize("entry_point", TYPOS)
def test_a_typo_is_refused_with_the_nearest_name_before_any_model_loads(entry_point):
    """gcs.compare(temprature=0.7) loaded the model and failed in transformers after 42 s, with no suggestion;
    gcs.ab(methods=...) and SamplingSettings(method=...) got Python's plain error."""
    call, keyword, nearest = TYPOS[entry_point]
    loads = _load.cache_info()
    with pytest.raises(TypeError) as refused:
        call(**{keyword: 3})
    name = "gcs." + entry_point.split()[0].split(".")[0]
    assert str(refused.value) == f"{name} got an unexpected keyword argument '{keyword}' (did you mean '{nearest}'?)"
    after = _load.cache_info()
    assert (after.hits, after.misses) == (loads.hits, loads.misses)  # no model was looked up, let alone loaded


def test_a_keyword_far_from_every_name_is_refused_without_a_suggestion():
    with pytest.raises(TypeError, match=r"^gcs.compare got an unexpected keyword argument 'zzz'$"):
        gcs.compare(PROMPTS, zzz=1)


@pytest.mark.parametrize("keyword, value, why", [
    ("num_beams", 2, "another decoding strategy"), ("return_dict_in_generate", True, "lay out, sample and stream"),
    ("logits_processor", [], "lay out, sample and stream"), ("min_p", 0.1, "transformers' sampling and its warpers"),
    ("do_sample", True, "transformers' sampling and its warpers"),
])
def test_a_generate_option_gcs_sets_itself_is_refused_with_why(keyword, value, why):
    """Passed on, num_beams=2 failed inside transformers ("Sizes of tensors must match"), return_dict_in_generate
    and logits_processor with a TypeError, all after the model had loaded; min_p was ignored without a word."""
    loads = _load.cache_info()
    with pytest.raises(TypeError) as refused:
        gcs.generate(PROMPTS, **{keyword: value})
    assert str(refused.value).startswith(f"gcs.generate got an unexpected keyword argument '{keyword}'; "
                                         f"transformers' '{keyword}' is gcs's to set: ") and why in str(refused.value)
    after = _load.cache_info()
    assert (after.hits, after.misses) == (loads.hits, loads.misses)


def test_the_generate_options_gcs_passes_on_shape_the_answer():
    """What the check lets through reaches transformers' generate and acts there: a token banned by bad_words_ids
    appears in no row, where the same rows without it held it."""
    arguments = {"methods": "is,gcswr", "seeds": 2, "max_new_tokens": 6, "model": tiny_gcs_model()}
    plain = gcs.compare(PROMPTS, **arguments)
    banned = int(plain["token_ids"][0][0])
    without = gcs.compare(PROMPTS, **arguments, bad_words_ids=[[banned]])
    assert any(banned in ids for ids in plain["token_ids"])
    assert not any(banned in ids for ids in without["token_ids"])


@pytest.mark.slow  # a process of its own
def test_the_check_imports_nothing_heavy():
    """Finding gcs's option names imported every public module (plotly and the figures included): 20 s for a
    suggestion; reaching gcs.compare still imported torch, transformers and pandas (tests/test_fronts.py holds every
    entry point's front). Neither check needs them."""
    code = """if True:
        import json, sys
        import gcs
        messages = []
        for call in (lambda: gcs.SamplingSettings(temprature=0.5), lambda: gcs.compare(["q"], seed=3)):
            try:
                call()
            except TypeError as error:
                messages.append(str(error))
        print(json.dumps({"messages": messages, "loaded": sorted(sys.modules)}))"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, cwd=ROOT).stdout
    seen = json.loads(out.strip().splitlines()[-1])
    assert seen["messages"] == [
        "gcs.SamplingSettings got an unexpected keyword argument 'temprature' (did you mean 'temperature'?)",
        "gcs.compare got an unexpected keyword argument 'seed' (did you mean 'seeds'?)"]
    loaded = set(seen["loaded"])
    assert "gcs.settings" in loaded  # the checks ran
    assert not {"torch", "transformers", "pandas", "plotly", "gcs.generation.responses", "gcs.experiments.figures",
                "gcs.abtest.answers", "gcs.scoring.e5"} & loaded


@pytest.mark.parametrize("call", [
    lambda rows: gcs.sweep([PROMPTS], batch_rows=rows),
    lambda rows: gcs.style_responses(PROMPTS, batch_rows=rows),
    lambda rows: gcs.ab(PROMPTS, gcs.Variant(), gcs.Variant(system="Be brief."), batch_rows=rows),
])
def test_batch_rows_has_one_bound_everywhere(call):
    """gcs.ab refused more than 1,000,000 rows per batch; gcs.sweep and gcs.style_responses took any number."""
    loads = _load.cache_info()
    with pytest.raises(ValueError, match=r"^batch_rows must be a positive whole number of rows \(at most 1,000,000"):
        call(1_000_001)
    after = _load.cache_info()
    assert (after.hits, after.misses) == (loads.hits, loads.misses)
