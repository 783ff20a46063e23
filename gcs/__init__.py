"""gcs: Gumbel Consistency Sampling.

Data flow: checks/settings -> noise -> samplers (reference: the literal algorithm; on CPU, GCSwR's fused kernel) ->
processor -> models/prompts -> batch (rows laid out as one batch) -> engines (the batch decoded step by step:
engines.transformers by transformers' generate, engines.vllm by vLLM; engines.invariance: kernels that make a row's
tokens independent of its batch) -> batching (many rows through few batches) -> generation/rewording, trace (the race
step by step), posterior (the noise given a response) -> hindsight (paraphrases answered with that noise) and
counterfactual (an edit under it) -> scoring -> surprise and verdict (paired, simultaneous, degenerate answers flagged)
-> experiments/style, and ab (shared luck for A/B: two variants answer with one noise; ab_scores, ab_report with the
verdict's paired tests, parting: the race where their answers part, from trace) -> cli, ab_cli (and the Gradio app,
outside this package). The vLLM plugin (vllm, vllm_requests) is what a ``vllm serve`` process loads (``gcs vllm-serve``:
vllm_serve); gcs imports it only for ``engine="vllm"`` (through engines.vllm).

>>> import gcs, torch
>>> sampler = gcs.make_sampler("gcswr", seed=[0, 0])
>>> sampler.sample(torch.tensor([[2.0, 1.0, 0.0], [2.0, 1.1, 0.0]])).tolist()  # coupled rows
[0, 0]
"""

import importlib
import sys
import types

from . import openmp  # noqa: F401  (first: it sets OpenMP's idle threads before torch loads)

__version__ = "0.3.0"

# Every public name and the module that defines it, in the order data flows. A name's module is imported on first
# use: ``import gcs`` stays light, and a vLLM server that loads the plugin (``gcs.vllm``) never imports scoring,
# experiments or figures (plotly is an optional dependency besides).
_EXPORTS = {
    "checks": ("METHODS", "METHOD_NAMES", "check_sampling_settings", "ENGINES", "check_engine", "check_methods",
        "check_seeds", "MAX_NEW_TOKENS", "MAX_SEED", "MIN_TEMPERATURE"),
    "settings": ("SamplingSettings",),
    "data": ("Group", "load_groups", "parse_groups"),
    "export": ("csv_safe", "write_csv"),
    "noise": ("gumbel",),
    "samplers": ("Sampler", "IndependentSampler", "GumbelSampler", "RecyclingGumbelSampler",
        "MixedSampler", "make_sampler"),
    "kernels": ("kernel_status", "cpu_kernel"),
    "processor": ("GumbelLogitsProcessor", "EnsembleLogitsProcessor"),
    "ensemble": ("geometric_ensemble", "grouped_geometric_ensemble"),
    "models": ("DEFAULT_MODEL", "Model", "load_model", "embedded_model_installed"),
    "resources": ("close",),
    "prompts": ("format_prompt", "strip_followups"),
    "engines.invariance": ("make_row_invariant", "row_invariant_kernels"),
    "batch": ("prompt_lengths", "Cancelled"),
    "generation": ("generate", "stream", "compare", "stream_compare"),
    "rewording": ("reword", "reword_report", "RewordReport"),
    "trace": ("trace", "Trace", "TraceStep", "Candidate", "carried_win", "CarriedWin"),
    "posterior": ("posterior", "Posterior"),
    "hindsight": ("hindsight", "hindsight_report", "reads_back", "HindsightReport"),
    "counterfactual": ("counterfactual", "response_tokens"),
    "coupling": ("coupling_curve", "recycling_histogram", "perturb"),
    "theory": ("agreement_probability", "p_repeat"),
    "scoring": ("METRICS", "METRIC_NAMES", "embedder", "similarity", "similarity_to", "consistency", "shared_tokens",
        "aligned_spans", "common_prefix_length"),
    "intervals": ("CONFIDENCE", "standard_error", "mean_interval", "seeds_for"),
    "surprise": ("excess_surprise",),
    "verdict": ("verdict", "paired_tests", "sign_flip_p"),
    "sequential": ("SequentialPlan", "sequential_plan", "sequential_tests"),
    "experiments": ("sweep", "consistency_by_temperature", "summary_table", "compare_report", "CompareReport",
        "paired_summary"),
    "rounds": ("compare_rounds", "RoundReport"),
    "style": ("Classifier", "LLMJudge", "RULE_CLASSIFIERS", "style_responses", "label_responses",
        "style_consistency", "style_table"),
    "ab": ("Variant", "ab"),
    "ab_report": ("ab_report", "ABReport"),
    "parting": ("parting", "Parting"),
    "figures": ("consistency_figure", "similarity_heatmap", "coupling_figure", "recycling_figure", "style_figure",
        "paired_figure", "race_figure", "race_scale"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = list(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        try:  # a submodule (``gcs.models``) is an attribute once imported, as in any package
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module 'gcs' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


class _Package(types.ModuleType):
    """The ``gcs`` module's class. Importing a submodule sets it as an attribute of its package; where a public name
    is its own module's name (the function ``gcs.verdict`` in ``gcs/verdict.py``), the name keeps meaning the
    function, as an eager ``from .verdict import verdict`` would leave it."""

    def __setattr__(self, name: str, value) -> None:
        if isinstance(value, types.ModuleType) and _MODULE_OF.get(name) == name:
            value = getattr(value, name)
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package  # Python's documented way to customise a module's attributes
