"""A wrong type is a TypeError, a bad value a ValueError, and both name the argument: the library's rule, checked at
its public entry points (the names ``import gcs`` offers).

Each case passes one argument twice: once of a wrong type, which must raise TypeError (``gcs.checks.
ArgumentTypeError``: a ValueError too, so that the app and the CLI still refuse it as bad input) naming the argument,
and once of the right type with a bad value, which must raise a ValueError that is not a TypeError, naming it too.
Every check runs before any model work, so no model is loaded (``model="nonexistent"`` would fail to load, not
download, if one were asked for) and the whole file runs in seconds.
"""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch

import gcs
from gcs.runtime.arguments import ArgumentTypeError

NO_MODEL = "nonexistent"  # a model name that cannot load: a call that reached the model would fail on it, not hang
SCORES = pd.DataFrame({"method": ["is", "gcswr"] * 2, "seed": [0, 0, 1, 1], "metric": ["e5"] * 4,
                       "consistency": [0.5, 0.6, 0.4, 0.7]})
PAIR = ["What is DNA?", "Explain what DNA is."]


def first(iterator):
    """The first item of a generator: its checks run when it starts."""
    return next(iter(iterator))


# (label, the argument's name, call(value), a value of the wrong type, a bad value of the right type)
CASES = [
    ("generate top_k", "top_k", lambda v: gcs.generate(PAIR, top_k=v, model=NO_MODEL), "5", 0),
    ("generate top_p", "top_p", lambda v: gcs.generate(PAIR, top_p=v, model=NO_MODEL), "0.9", 1.5),
    ("generate temperature", "temperature", lambda v: gcs.generate(PAIR, temperature=v, model=NO_MODEL), "1.0", -1.0),
    ("generate max_new_tokens", "max_new_tokens", lambda v: gcs.generate(PAIR, max_new_tokens=v, model=NO_MODEL),
     2.5, 0),
    ("generate seed", "seed", lambda v: gcs.generate(PAIR, seed=v, model=NO_MODEL), "0", -1),
    ("generate method", "method", lambda v: gcs.generate(PAIR, method=v, model=NO_MODEL), 5, "beam"),
    ("generate prompts", "prompts", lambda v: gcs.generate(v, model=NO_MODEL), 5, []),
    ("generate engine", "engine", lambda v: gcs.generate(PAIR, engine=v, model=NO_MODEL), 5, "tpu"),
    ("generate ensemble", "ensemble", lambda v: gcs.generate(PAIR, ensemble=v, model=NO_MODEL), "two", [["x"]]),
    ("generate ensemble count", "ensemble", lambda v: gcs.generate(PAIR, ensemble=v, model=NO_MODEL), 2.0, 9),
    ("stream top_k", "top_k", lambda v: first(gcs.stream(PAIR, top_k=v, model=NO_MODEL)), 2.0, -3),
    ("compare seeds", "seeds", lambda v: gcs.compare(PAIR, seeds=v, model=NO_MODEL), "0,1", []),
    ("compare methods", "methods", lambda v: gcs.compare(PAIR, methods=v, model=NO_MODEL), 5, []),
    ("stream_compare max_new_tokens", "max_new_tokens",
     lambda v: first(gcs.stream_compare(PAIR, max_new_tokens=v, model=NO_MODEL)), True, 10**6),
    ("compare_rounds futility", "futility",
     lambda v: first(gcs.compare_rounds(PAIR, methods="is,gcswr", futility=v, model=NO_MODEL)), "0.1", 1.5),
    ("compare_rounds seeds", "seeds",
     lambda v: first(gcs.compare_rounds(PAIR, methods="is,gcswr", seeds=v, model=NO_MODEL)), "four", 0),
    ("compare_rounds settings", "settings",
     lambda v: first(gcs.compare_rounds(PAIR, settings=v, model=NO_MODEL)), {"seeds": 4},
     gcs.SamplingSettings(methods="is,gcs", ensemble=2)),
    ("sweep ensemble", "ensemble", lambda v: gcs.sweep([PAIR], ensemble=v, model=NO_MODEL), "yes", []),
    ("sweep resume", "resume", lambda v: gcs.sweep([PAIR], resume=v, model=NO_MODEL), 5, [("only", "two")]),
    ("generate settings", "settings", lambda v: gcs.generate(PAIR, settings=v, model=NO_MODEL), "gcs",
     gcs.SamplingSettings(methods="is,gcs")),
    ("sweep temperatures", "temperatures", lambda v: gcs.sweep([PAIR], temperatures=v, model=NO_MODEL), object(), []),
    ("sweep groups", "groups", lambda v: gcs.sweep(v, model=NO_MODEL), 5, []),
    ("ab metrics", "metrics", lambda v: gcs.ab(PAIR, gcs.Variant(name="A"), gcs.Variant(name="B"), metrics=v), 5, []),
    ("ab seeds", "seeds", lambda v: gcs.ab(PAIR, gcs.Variant(name="A"), gcs.Variant(name="B"), seeds=v), "16", 0),
    ("Variant system", "system", lambda v: gcs.Variant(system=v), 5, "  "),
    ("Variant model", "model", lambda v: gcs.Variant(model=v), 5, " "),
    ("Variant template", "template", lambda v: gcs.Variant(template=v), 5, "{prompt} {style}"),
    ("parting method", "method", lambda v: gcs.parting(gcs.Variant(), gcs.Variant(), "Why?", seed=0, method=v), 5,
     "is"),
    ("ab_report frame", "frame", lambda v: gcs.ab_report(v), [], pd.DataFrame()),
    ("trace top", "top", lambda v: gcs.trace(PAIR, top=v, model=NO_MODEL), "10", 0),
    ("hindsight prompt", "prompt", lambda v: gcs.hindsight(v, "Blue.", PAIR, model=NO_MODEL), 5, "  "),
    ("counterfactual prompt", "prompt", lambda v: gcs.counterfactual(v, "Blue.", 0, " Red", model=NO_MODEL), 5, ""),
    ("counterfactual seed", "seed", lambda v: gcs.counterfactual("Why?", "Blue.", 0, " Red", seed=v, model=NO_MODEL),
     1.0, 2**64),
    ("make_sampler seed", "seed", lambda v: gcs.make_sampler("gcs", seed=v), "1", -1),
    ("make_sampler method", "method", lambda v: gcs.make_sampler(v), 5, "beam"),
    ("Sampler.force index", "index", lambda v: gcs.make_sampler("gcs").force(v, [0]), "1", -1),
    ("SamplingSettings top_p", "top_p", lambda v: gcs.SamplingSettings(top_p=v), "0.9", 0),
    ("SamplingSettings ensemble", "ensemble", lambda v: gcs.SamplingSettings(ensemble=v), "2", 9),
    ("similarity metric", "metric", lambda v: gcs.similarity(["a", "b"], metric=v), 5, "nope"),
    ("similarity texts", "texts", lambda v: gcs.consistency(v, metric="jaccard", tokenizer=str.split), "ab", ["a"]),
    ("embedder metric", "metric", lambda v: gcs.embedder(v), 5, "nope"),
    ("verdict confidence", "confidence", lambda v: gcs.verdict(SCORES, confidence=v), "0.95", 1.5),
    ("verdict scores", "scores", lambda v: gcs.verdict(v), [1, 2], SCORES.drop(columns="seed")),
    ("paired_tests confidence", "confidence", lambda v: gcs.paired_tests(SCORES, confidence=v), True, 0.2),
    ("sequential_plan max_seeds", "max_seeds", lambda v: gcs.sequential_plan(v), 16.0, 0),
    ("sequential_plan confidence", "confidence", lambda v: gcs.sequential_plan(confidence=v), "0.95", 0.3),
    ("sequential_plan spending", "spending", lambda v: gcs.sequential_plan(spending=v), 5, "greedy"),
    ("fewest_seeds alpha", "alpha", lambda v: gcs.fewest_seeds(v), "0.05", 1.5),
    ("coupling_curve trials", "trials", lambda v: gcs.coupling_curve([0.5, 0.5], trials=v), "10", 0),
    ("coupling_curve p", "p", lambda v: gcs.coupling_curve(v), "abc", [1.0]),
    ("coupling_curve epsilons", "epsilons", lambda v: gcs.coupling_curve([0.5, 0.5], epsilons=v), ["x"], [-1.0]),
    ("perturb epsilon", "epsilon", lambda v: gcs.perturb([0.5, 0.5], epsilon=v), "0.5", -1.0),
    ("agreement_probability method", "method",
     lambda v: gcs.agreement_probability([0.5, 0.5], [0.5, 0.5], method=v), 5, "beam"),
    ("agreement_probability p", "p", lambda v: gcs.agreement_probability(v, [0.5, 0.5]), ["a", "b"], [0.5, 0.6]),
    ("p_repeat labels", "labels", lambda v: gcs.p_repeat(v), ["a", "b"], [2, 3]),
    ("geometric_ensemble logits", "logits", lambda v: gcs.geometric_ensemble(v), [[0.0, 1.0]], torch.zeros(3)),
    ("check_seeds seeds", "seeds", lambda v: gcs.check_seeds(v), "3", 0),
    ("check_seeds a seed", "seeds", lambda v: gcs.check_seeds([v]), 1.5, -1),
    ("check_methods methods", "methods", lambda v: gcs.check_methods(v), 5, []),
    ("check_sampling_settings top_k", "top_k", lambda v: gcs.check_sampling_settings(1.0, v, None), True, 0),
    ("check_engine engine", "engine", lambda v: gcs.check_engine(v), ["vllm"], "cuda"),
    ("style_responses questions", "questions", lambda v: gcs.style_responses(v, model=NO_MODEL), "Why?", []),
    ("style_responses seeds", "seeds", lambda v: gcs.style_responses(["Why?"], seeds=v, model=NO_MODEL), "3", 0),
    ("Classifier name", "name", lambda v: gcs.Classifier(v, lambda question, response: True), 5, " "),
    ("LLMJudge prompt", "prompt", lambda v: gcs.LLMJudge("judge", v, ["yes", "no"]), 5, "Is it terse?"),
    ("LLMJudge choices", "choices", lambda v: gcs.LLMJudge("judge", "{response}", v), [1, 2], ["yes", " "]),
    ("reword n", "n", lambda v: gcs.reword(PAIR, n=v, model=NO_MODEL), "2", 0),
    ("reword seed", "seed", lambda v: gcs.reword(PAIR, seed=v, model=NO_MODEL), None, -1),
    ("posterior logits", "logits", lambda v: gcs.posterior("gcs", v, torch.zeros(1, 2, dtype=torch.long)),
     [[[0.0, 1.0]]], torch.zeros(1, 5, 3)),
    ("posterior method", "method", lambda v: gcs.posterior(v, torch.zeros(1, 2, 3), torch.zeros(1, 2)), 5, "beam"),
    ("excess_surprise responses", "responses", lambda v: gcs.excess_surprise(PAIR, v, model=NO_MODEL), 5, ["Blue."]),
    ("load_model name", "name", lambda v: gcs.load_model(v), 5, "  "),
    ("GumbelLogitsProcessor top_k", "top_k", lambda v: gcs.GumbelLogitsProcessor(top_k=v), 5.0, 0),
]

# Arguments of one type, with no bad value of it to refuse (a flag, a function, an object): a wrong type only.
WRONG_TYPES = [
    ("sweep progress", "progress", lambda v: gcs.sweep([PAIR], progress=v, model=NO_MODEL), 3),
    ("style_responses progress", "progress", lambda v: gcs.style_responses(["w?"], progress=v, model=NO_MODEL), "x"),
    ("ab a", "a", lambda v: gcs.ab(PAIR, v, gcs.Variant(name="B")), "A"),
    ("ab control", "control", lambda v: gcs.ab(PAIR, gcs.Variant(name="A"), gcs.Variant(name="B"), control=v), 1),
    ("ab scorer", "scorer", lambda v: gcs.ab(PAIR, gcs.Variant(name="A"), gcs.Variant(name="B"), scorer=v), "len"),
    ("trace system", "system", lambda v: gcs.trace(PAIR, system=v, model=NO_MODEL), 5),
    ("hindsight finished", "finished", lambda v: gcs.hindsight("Why?", "Blue.", PAIR, finished=v, model=NO_MODEL),
     "yes"),
    ("counterfactual finished", "finished",
     lambda v: gcs.counterfactual("Why?", "Blue.", 0, " Red", finished=v, model=NO_MODEL), 1),
    ("compare settings", "settings", lambda v: gcs.compare(PAIR, settings=v, model=NO_MODEL), {"seeds": 2}),
    ("similarity_to text", "text", lambda v: gcs.similarity_to(v, ["a"], metric="jaccard"), 5),
    ("common_prefix_length tokenizer", "tokenizer", lambda v: gcs.common_prefix_length(["a", "b"], tokenizer=v), 5),
    ("load_groups source", "source", lambda v: gcs.load_groups(v), 5),
    ("parse_groups fmt", "fmt", lambda v: gcs.parse_groups('{"id": 1, "prompt": "Why?"}', v), 5),
    ("parse_groups text", "text", lambda v: gcs.parse_groups(v, "jsonl"), b'{"id": 1}'),
    ("Classifier label", "label", lambda v: gcs.Classifier("terse", v), "is_terse"),
    ("style_consistency classifiers", "classifiers", lambda v: gcs.label_responses(pd.DataFrame(), classifiers=v), 5),
    ("GumbelLogitsProcessor sampler", "sampler", lambda v: gcs.GumbelLogitsProcessor(sampler=v), "gcs"),
    ("GumbelLogitsProcessor observer", "observer", lambda v: gcs.GumbelLogitsProcessor(observer=v), 5),
    ("posterior response", "response", lambda v: gcs.posterior("gcs", torch.zeros(1, 2, 3), v), [[0, 0]]),
]


def test_a_plain_value_error_is_not_a_type_error():
    """What the table tells apart: a refusal of a bad value is no TypeError, and a check that expected TypeError
    would fail on it; a wrong type (ArgumentTypeError) is both, so ``except ValueError`` still refuses it."""
    with pytest.raises(ValueError) as escaped, pytest.raises(TypeError):
        gcs.check_seeds(0)  # 0 seeds: a bad value, a plain ValueError, which pytest.raises(TypeError) lets by
    assert type(escaped.value) is ValueError
    with pytest.raises(ValueError) as refused:
        gcs.check_seeds(0)
    assert not isinstance(refused.value, TypeError)
    with pytest.raises(ValueError) as refused:
        gcs.check_seeds("3")
    assert isinstance(refused.value, TypeError) and isinstance(refused.value, ArgumentTypeError)
    assert issubclass(ArgumentTypeError, TypeError) and issubclass(ArgumentTypeError, ValueError)


@pytest.mark.parametrize("label, name, call, wrong_type, bad_value", CASES, ids=[case[0] for case in CASES])
def test_a_wrong_type_is_a_type_error_naming_the_argument(label, name, call, wrong_type, bad_value):
    with pytest.raises(TypeError, match=rf"\b{re.escape(name)}\b") as refused:
        call(wrong_type)
    assert isinstance(refused.value, ArgumentTypeError), repr(refused.value)


@pytest.mark.parametrize("label, name, call, wrong_type", WRONG_TYPES, ids=[case[0] for case in WRONG_TYPES])
def test_a_wrong_type_of_a_flag_or_function_is_a_type_error_naming_it(label, name, call, wrong_type):
    with pytest.raises(TypeError, match=rf"\b{re.escape(name)}\b") as refused:
        call(wrong_type)
    assert isinstance(refused.value, ArgumentTypeError), repr(refused.value)


@pytest.mark.parametrize("label, name, call, wrong_type, bad_value", CASES, ids=[case[0] for case in CASES])
def test_a_bad_value_is_a_value_error_naming_the_argument(label, name, call, wrong_type, bad_value):
    with pytest.raises(ValueError, match=rf"\b{re.escape(name)}\b") as refused:
        call(bad_value)
    assert not isinstance(refused.value, TypeError), repr(refused.value)
