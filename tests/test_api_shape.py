"""The API's shape: options are keyword-only after the data arguments.

Every public function (a plain function in ``gcs.__all__``) declares here the arguments its call is about: the texts,
prompts, response, scores, distributions, frame or matrix. Those, and only those, may be passed by position; every
option after them (method, seed, temperature, model, metrics, title, ...) is keyword-only, so that
``gcs.generate(prompts, "gcs")`` is a TypeError instead of a silent guess at what the second argument means. A new
public function fails this test until it is added to the table.
"""

from __future__ import annotations

import inspect

import pytest

import gcs

DATA_ARGUMENTS: dict[str, tuple[str, ...]] = {
    # checks and data
    "check_sampling_settings": ("temperature", "top_k", "top_p"),  # the settings it checks are its data
    "check_engine": ("engine",),
    "check_methods": ("methods",),
    "check_seeds": ("seeds",),
    "load_groups": ("source",),
    "parse_groups": ("text", "fmt"),  # the text and the format it is written in
    "csv_safe": ("frame",),
    "write_csv": ("frame", "path"),
    # noise, samplers, kernels, ensembles
    "gumbel": ("seeds", "token_ids", "draws"),  # the three keys the noise is a pure function of
    "make_sampler": ("method",),
    "kernel_status": (),
    "cpu_kernel": (),
    "geometric_ensemble": ("logits",),
    "grouped_geometric_ensemble": ("logits", "groups"),
    # models and prompts
    "load_model": ("name",),
    "embedded_model_installed": (),
    "close": (),
    "format_prompt": ("question",),
    "strip_followups": ("text",),
    "make_row_invariant": ("model",),
    "row_invariant_kernels": ("model",),
    "prompt_lengths": ("prompts",),
    # generation and what builds on it
    "generate": ("prompts",),
    "stream": ("prompts",),
    "compare": ("prompts",),
    "stream_compare": ("prompts",),
    "reword": ("prompts",),
    "reword_report": ("prompts",),
    "trace": ("prompts",),
    "carried_win": ("trace", "position", "row"),  # a trace and the place in it
    "posterior": ("method", "logits", "response"),
    "hindsight": ("prompt", "response", "paraphrases"),
    "hindsight_report": ("prompt", "response", "paraphrases"),
    "reads_back": ("ids",),
    "counterfactual": ("prompt", "response", "at", "replacement"),
    "response_tokens": ("response",),
    # theory
    "coupling_curve": ("p", "q"),
    "recycling_histogram": ("p",),
    "perturb": ("p",),
    "agreement_probability": ("p", "q"),
    "p_repeat": ("labels",),
    # scores and statistics
    "similarity": ("texts",),
    "similarity_to": ("text", "others"),
    "consistency": ("texts",),
    "shared_tokens": ("texts",),
    "aligned_spans": ("texts",),
    "common_prefix_length": ("texts",),
    "standard_error": ("values",),
    "mean_interval": ("values",),
    "seeds_for": ("spread",),
    "excess_surprise": ("prompts", "responses"),
    "verdict": ("scores",),
    "paired_tests": ("scores",),
    "sign_flip_p": ("differences",),
    "sign_flip_interval": ("differences",),
    "sign_flip_test": ("differences",),
    "fewest_seeds": ("alpha",),
    "sequential_plan": ("max_seeds",),
    "sequential_tests": ("scores",),
    # experiments
    "sweep": ("groups",),
    "consistency_by_temperature": ("frame",),
    "summary_table": ("frame",),
    "compare_report": ("frame",),
    "paired_summary": ("scores",),
    "compare_rounds": ("paraphrases",),
    "style_responses": ("questions",),
    "label_responses": ("responses",),
    "style_consistency": ("labelled",),
    "style_table": ("consistency",),
    "ab": ("prompts", "a", "b"),
    "ab_report": ("frame",),
    "parting": ("a", "b", "prompt"),
    # figures: their data
    "consistency_figure": ("frame",),
    "similarity_heatmap": ("matrix", "labels"),
    "coupling_figure": ("curve",),
    "recycling_figure": ("histogram",),
    "style_figure": ("consistency",),
    "paired_figure": ("per_seed", "summary"),
    "race_figure": ("step",),
    "race_scale": ("steps",),
}

POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


def public_functions() -> list[str]:
    return [name for name in gcs.__all__ if inspect.isfunction(getattr(gcs, name))]


def test_every_public_function_declares_its_data_arguments():
    missing = [name for name in public_functions() if name not in DATA_ARGUMENTS]
    assert not missing, f"add these public functions to DATA_ARGUMENTS (their data arguments): {missing}"
    stale = sorted(set(DATA_ARGUMENTS) - set(public_functions()))
    assert not stale, f"DATA_ARGUMENTS names what is no public function: {stale}"


@pytest.mark.parametrize("name", public_functions())
def test_options_are_keyword_only_after_the_data_arguments(name):
    parameters = inspect.signature(getattr(gcs, name)).parameters.values()
    positional = tuple(p.name for p in parameters if p.kind in POSITIONAL)
    assert positional == DATA_ARGUMENTS.get(name), f"gcs.{name}: positional {positional}"
    others = [p for p in parameters if p.kind not in POSITIONAL]
    assert all(p.kind in (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD) for p in others), (
        f"gcs.{name} takes *args: options must be keyword-only")


def test_an_option_passed_by_position_is_a_type_error():
    with pytest.raises(TypeError):
        gcs.generate(["Why is the sky blue?"], "gcs")
    with pytest.raises(TypeError):
        gcs.perturb([0.5, 0.5], 0.0)
