"""gcs: Gumbel Consistency Sampling.

The package's folders follow the data: noise is drawn, a sampler turns it and the logits into tokens, an engine runs
the model, generation lays out the responses, scoring and statistics judge them, experiments and A/B tests run many.

    runtime/      the plumbing everything uses: quoting in errors, argument shapes, private APIs (internals), OpenMP,
                  threads, timing
    checks, settings, environment   what a caller may pass: the argument checks, ``SamplingSettings``, GCS_* variables
    stats/        paired tests, the sequential plan, intervals (numpy, pandas and scipy only: no torch, no model)
    sampling/     noise, the IS / GCS / GCSwR samplers (the literal algorithm, the fused CPU kernel), the logits
                  processor, ensembling, Theorem 1's agreement probability and the coupling curves
    vllm/         the vLLM plugin: the same samplers as a logits processor, per-request options and state
    engines/      models, prompts, rows laid out as one batch and many, decoded by transformers, vLLM or endpoints
    scoring/      similarity metrics, E5 and the other embedders, the model's excess surprise
    rewording, generation/   ``generate``, ``stream``, ``compare``: the public way to sample responses
    instrument/   the race step by step (trace), the noise given a response (posterior), hindsight, counterfactuals
    experiments/  sweeps, rounds until a verdict, style, figures, paraphrase sets, results files
    abtest/       A/B under shared luck: variants, their scores, the report, where two answers part
    cli/          the ``gcs`` command (and ``gcs vllm-serve``)

An import only points down this list. ``gcs.NAME`` is the public way in for every name below; a subpackage is
imported on first use, so ``import gcs`` stays light and a vLLM server that loads the plugin never imports scoring,
experiments or figures.

>>> import gcs, torch
>>> sampler = gcs.make_sampler("gcswr", seed=[0, 0])
>>> sampler.sample(torch.tensor([[2.0, 1.0, 0.0], [2.0, 1.1, 0.0]])).tolist()  # coupled rows
[0, 0]
"""

import importlib

from gcs.runtime import openmp  # noqa: F401  (first: it sets OpenMP's idle threads before torch loads)

# isort: split
from gcs.runtime.lazy import submodule

__version__ = "0.4.0"

# Every public name and the module that defines it, in the order data flows. A name's module is imported on first
# use: ``import gcs`` stays light, and a vLLM server that loads the plugin (``gcs.vllm.plugin``) never imports scoring,
# experiments or figures (plotly is an optional dependency besides).
_EXPORTS = {
    "checks": ("METHODS", "EXTENDED_METHODS", "METHOD_NAMES", "DEFAULT_CONTEXT", "check_sampling_settings", "ENGINES",
        "check_engine", "check_methods",
        "check_seeds", "MAX_NEW_TOKENS", "MAX_SEED", "MIN_TEMPERATURE"),
    "settings": ("SamplingSettings",),
    "stats.intervals": ("CONFIDENCE", "standard_error", "mean_interval", "seeds_for"),
    "stats.paired": ("verdict", "paired_tests"),
    "stats.signflip": ("sign_flip_p", "sign_flip_interval", "sign_flip_test", "fewest_seeds"),
    "stats.sequential": ("SequentialPlan", "sequential_plan", "sequential_tests"),
    "sampling.noise": ("gumbel",),
    "sampling.samplers": ("Sampler", "IndependentSampler", "GumbelSampler", "RecyclingGumbelSampler",
        "ContextGumbelSampler", "MixedSampler", "make_sampler"),
    "sampling.kernels": ("kernel_status", "cpu_kernel"),
    "sampling.processor": ("GumbelLogitsProcessor", "EnsembleLogitsProcessor"),
    "sampling.ensembling": ("geometric_ensemble", "grouped_geometric_ensemble"),
    "sampling.coupling": ("coupling_curve", "recycling_histogram", "perturb"),
    "sampling.theory": ("agreement_probability", "p_repeat"),
    "engines.models": ("DEFAULT_MODEL", "Model", "load_model", "embedded_model_installed"),
    "engines.prompts": ("format_prompt", "strip_followups"),
    "engines.invariance": ("make_row_invariant", "row_invariant_kernels"),
    "engines.batch": ("prompt_lengths", "Cancelled"),
    "engines.endpoints": ("Endpoint", "EndpointError"),
    "scoring.metrics": ("METRICS", "METRIC_NAMES", "embedder", "similarity", "similarity_to", "consistency"),
    "scoring.token_overlap": ("shared_tokens", "aligned_spans", "common_prefix_length"),
    "scoring.surprise": ("excess_surprise",),
    "generation.responses": ("generate", "stream", "compare", "stream_compare"),
    "rewording": ("reword", "reword_report", "RewordReport"),
    "instrument.tracing": ("trace", "Trace", "TraceStep", "Candidate"),
    "instrument.carrying": ("carried_win", "CarriedWin"),
    "instrument.conditioning": ("posterior", "Posterior"),
    "instrument.forcing": ("reads_back",),
    "instrument.replay": ("hindsight", "hindsight_report", "HindsightReport"),
    "instrument.edits": ("counterfactual", "response_tokens"),
    "experiments.data": ("Group", "load_groups", "parse_groups"),
    "experiments.export": ("csv_safe", "write_csv"),
    "experiments.sweeps": ("sweep", "consistency_by_temperature", "summary_table"),
    "experiments.comparison": ("compare_report", "CompareReport", "paired_summary"),
    "experiments.rounds": ("compare_rounds", "RoundReport"),
    "experiments.classifiers": ("Classifier", "LLMJudge", "RULE_CLASSIFIERS"),
    "experiments.style": ("style_responses", "label_responses", "style_consistency", "style_table"),
    "experiments.figures": ("consistency_figure", "similarity_heatmap", "coupling_figure", "recycling_figure",
        "style_figure", "paired_figure", "race_figure", "race_scale"),
    "abtest.variants": ("Variant",),
    "abtest.answers": ("ab",),
    "abtest.report": ("ab_report", "ABReport"),
    "abtest.divergence": ("parting", "Parting"),
    "resources": ("close",),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = list(_MODULE_OF)


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        return submodule(__name__, name)
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

