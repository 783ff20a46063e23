"""gcs: Gumbel Consistency Sampling.

Data flow: checks/settings -> noise -> samplers (reference: the literal algorithm; on CPU, GCSwR's fused kernel) ->
processor -> models/prompts, invariance (kernels that make a row's tokens independent of its batch) -> batch (rows laid
out as one batch) -> runner (the batch decoded step by step by transformers' generate; vllm_engine: by vLLM) -> packing
(many rows through few batches) -> generation/rewording, trace (the race step by step), posterior (the noise given a
response) -> hindsight (paraphrases answered with that noise) and counterfactual (an edit under it) -> scoring ->
surprise and verdict (paired, simultaneous, degenerate answers flagged) -> experiments/style, and ab (shared luck for
A/B: two variants answer with one noise; ab_scores, ab_report with the verdict's paired tests, parting: the race where
their answers part, from trace) -> cli, ab_cli (and the Gradio app, outside this package). The vLLM plugin (vllm,
vllm_requests) is what a ``vllm serve`` process loads; gcs imports it only for ``engine="vllm"`` (through vllm_engine).

>>> import gcs, torch
>>> sampler = gcs.make_sampler("gcswr", seed=[0, 0])
>>> sampler.sample(torch.tensor([[2.0, 1.0, 0.0], [2.0, 1.1, 0.0]])).tolist()  # coupled rows
[0, 0]
"""

from . import openmp  # noqa: F401  (first: it sets OpenMP's idle threads before torch loads)
from .checks import ENGINES, MAX_NEW_TOKENS, MAX_SEED, METHODS, check_engine, check_methods, check_sampling_settings, check_seeds
from .data import Group, load_groups, parse_groups
from .export import csv_safe, write_csv
from .ensemble import geometric_ensemble, grouped_geometric_ensemble
from .kernels import cpu_kernel, kernel_status
from .batch import Cancelled, prompt_lengths
from .generation import compare, generate, stream, stream_compare
from .rewording import RewordReport, reword, reword_report
from .settings import SamplingSettings
from .experiments import (
    CompareReport,
    compare_report,
    consistency_by_temperature,
    mean_interval,
    paired_summary,
    summary_table,
    sweep,
)
from .trace import CarriedWin, Candidate, Trace, TraceStep, carried_win, trace
from .surprise import excess_surprise
from .verdict import paired_tests, sign_flip_p, verdict
from .sequential import SequentialPlan, sequential_plan, sequential_tests
from .rounds import RoundReport, compare_rounds
from .hindsight import HindsightReport, hindsight, hindsight_report, reads_back
from .posterior import Posterior, posterior
from .counterfactual import counterfactual, response_tokens
from .models import DEFAULT_MODEL, Model, embedded_model_installed, load_model
from .invariance import make_row_invariant, row_invariant_kernels
from .noise import gumbel
from .processor import EnsembleLogitsProcessor, GumbelLogitsProcessor
from .prompts import format_prompt, strip_followups
from .samplers import (
    METHOD_NAMES,
    GumbelSampler,
    IndependentSampler,
    MixedSampler,
    RecyclingGumbelSampler,
    Sampler,
    make_sampler,
)
from .coupling import coupling_curve, perturb, recycling_histogram
from .scoring import (
    METRICS,
    METRIC_NAMES,
    aligned_spans,
    common_prefix_length,
    consistency,
    embedder,
    shared_tokens,
    similarity,
    similarity_to,
)
from .style import (
    RULE_CLASSIFIERS,
    Classifier,
    LLMJudge,
    label_responses,
    style_consistency,
    style_responses,
    style_table,
)
from .theory import agreement_probability, p_repeat
from .ab import Variant, ab
from .ab_report import ABReport, ab_report
from .parting import Parting, parting

__version__ = "0.1.0"

_FIGURES = ("consistency_figure", "style_figure", "similarity_heatmap", "coupling_figure", "recycling_figure",
            "paired_figure", "race_figure", "race_scale")


def __getattr__(name: str):
    # Figures need plotly (an optional dependency): import it on first use only.
    if name in _FIGURES:
        from . import figures

        return getattr(figures, name)
    raise AttributeError(f"module 'gcs' has no attribute {name!r}")

__all__ = [
    "METHODS",
    "METHOD_NAMES",
    "Sampler",
    "IndependentSampler",
    "GumbelSampler",
    "RecyclingGumbelSampler",
    "MixedSampler",
    "make_sampler",
    "kernel_status",
    "cpu_kernel",
    "gumbel",
    "GumbelLogitsProcessor",
    "EnsembleLogitsProcessor",
    "check_sampling_settings",
    "ENGINES",
    "check_engine",
    "check_methods",
    "check_seeds",
    "SamplingSettings",
    "DEFAULT_MODEL",
    "Model",
    "load_model",
    "embedded_model_installed",
    "make_row_invariant",
    "row_invariant_kernels",
    "format_prompt",
    "strip_followups",
    "MAX_NEW_TOKENS",
    "MAX_SEED",
    "generate",
    "prompt_lengths",
    "Cancelled",
    "stream",
    "compare",
    "stream_compare",
    "reword",
    "reword_report",
    "RewordReport",
    "agreement_probability",
    "p_repeat",
    "geometric_ensemble",
    "grouped_geometric_ensemble",
    "METRICS",
    "METRIC_NAMES",
    "embedder",
    "similarity",
    "similarity_to",
    "consistency",
    "Group",
    "csv_safe",
    "write_csv",
    "load_groups",
    "parse_groups",
    "sweep",
    "consistency_by_temperature",
    "summary_table",
    "compare_report",
    "CompareReport",
    "consistency_figure",
    "similarity_heatmap",
    "coupling_figure",
    "recycling_figure",
    "Classifier",
    "LLMJudge",
    "RULE_CLASSIFIERS",
    "style_responses",
    "label_responses",
    "style_consistency",
    "style_table",
    "style_figure",
    "coupling_curve",
    "recycling_histogram",
    "perturb",
    "shared_tokens",
    "aligned_spans",
    "common_prefix_length",
    "paired_summary",
    "mean_interval",
    "paired_figure",
    "race_figure",
    "race_scale",
    "trace",
    "Trace",
    "TraceStep",
    "Candidate",
    "carried_win",
    "CarriedWin",
    "hindsight",
    "hindsight_report",
    "reads_back",
    "HindsightReport",
    "posterior",
    "Posterior",
    "counterfactual",
    "response_tokens",
    "verdict",
    "excess_surprise",
    "paired_tests",
    "sign_flip_p",
    "SequentialPlan",
    "sequential_plan",
    "sequential_tests",
    "compare_rounds",
    "RoundReport",
    "Variant",
    "ab",
    "ab_report",
    "ABReport",
    "parting",
    "Parting",
]
