"""gcs: Gumbel Consistency Sampling.

The package's folders follow the data: noise is drawn, a sampler turns it and the logits into tokens, an engine runs
the model, generation lays out the responses, scoring and statistics judge them, experiments and A/B tests run many.

    runtime/      the plumbing everything uses: quoting in errors, argument shapes, private APIs (internals), OpenMP,
                  threads, timing
    checks, settings, environment   what a caller may pass: the argument checks, ``SamplingSettings``, GCS_* variables
    fronts        ``gcs.compare`` and the other entry points that take options, their keywords checked before their
                  modules (torch, transformers) are imported
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
from typing import TYPE_CHECKING

from gcs.runtime import openmp  # noqa: F401  (first: it sets OpenMP's idle threads before torch loads)

# isort: split
from gcs.runtime.lazy import submodule

# What an editor and a type checker read for gcs.NAME: each public name with its real type, where __getattr__ below
# gives Any (tests/test_public_types.py keeps this in step with _EXPORTS). Nothing here runs.
if TYPE_CHECKING:
    from gcs.abtest.answers import ab as ab
    from gcs.abtest.divergence import Parting as Parting
    from gcs.abtest.divergence import parting as parting
    from gcs.abtest.report import ABReport as ABReport
    from gcs.abtest.report import ab_report as ab_report
    from gcs.abtest.variants import Variant as Variant
    from gcs.checks import DEFAULT_CONTEXT as DEFAULT_CONTEXT
    from gcs.checks import ENGINES as ENGINES
    from gcs.checks import EXTENDED_METHODS as EXTENDED_METHODS
    from gcs.checks import MAX_NEW_TOKENS as MAX_NEW_TOKENS
    from gcs.checks import MAX_SEED as MAX_SEED
    from gcs.checks import METHOD_NAMES as METHOD_NAMES
    from gcs.checks import METHODS as METHODS
    from gcs.checks import MIN_TEMPERATURE as MIN_TEMPERATURE
    from gcs.checks import check_engine as check_engine
    from gcs.checks import check_methods as check_methods
    from gcs.checks import check_sampling_settings as check_sampling_settings
    from gcs.checks import check_seeds as check_seeds
    from gcs.engines.batch import Cancelled as Cancelled
    from gcs.engines.batch import prompt_lengths as prompt_lengths
    from gcs.engines.endpoints import Endpoint as Endpoint
    from gcs.engines.endpoints import EndpointError as EndpointError
    from gcs.engines.invariance import make_row_invariant as make_row_invariant
    from gcs.engines.invariance import row_invariant_kernels as row_invariant_kernels
    from gcs.engines.models import DEFAULT_MODEL as DEFAULT_MODEL
    from gcs.engines.models import Model as Model
    from gcs.engines.models import embedded_model_installed as embedded_model_installed
    from gcs.engines.models import load_model as load_model
    from gcs.engines.prompts import format_prompt as format_prompt
    from gcs.engines.prompts import strip_followups as strip_followups
    from gcs.experiments.classifiers import RULE_CLASSIFIERS as RULE_CLASSIFIERS
    from gcs.experiments.classifiers import Classifier as Classifier
    from gcs.experiments.classifiers import LLMJudge as LLMJudge
    from gcs.experiments.comparison import CompareReport as CompareReport
    from gcs.experiments.comparison import compare_report as compare_report
    from gcs.experiments.comparison import paired_summary as paired_summary
    from gcs.experiments.data import Group as Group
    from gcs.experiments.data import load_groups as load_groups
    from gcs.experiments.data import parse_groups as parse_groups
    from gcs.experiments.export import csv_safe as csv_safe
    from gcs.experiments.export import write_csv as write_csv
    from gcs.experiments.figures import consistency_figure as consistency_figure
    from gcs.experiments.figures import coupling_figure as coupling_figure
    from gcs.experiments.figures import paired_figure as paired_figure
    from gcs.experiments.figures import race_figure as race_figure
    from gcs.experiments.figures import race_scale as race_scale
    from gcs.experiments.figures import recycling_figure as recycling_figure
    from gcs.experiments.figures import similarity_heatmap as similarity_heatmap
    from gcs.experiments.figures import style_figure as style_figure
    from gcs.experiments.rounds import RoundReport as RoundReport
    from gcs.experiments.rounds import compare_rounds as compare_rounds
    from gcs.experiments.style import label_responses as label_responses
    from gcs.experiments.style import style_consistency as style_consistency
    from gcs.experiments.style import style_responses as style_responses
    from gcs.experiments.style import style_table as style_table
    from gcs.experiments.sweeps import consistency_by_temperature as consistency_by_temperature
    from gcs.experiments.sweeps import summary_table as summary_table
    from gcs.experiments.sweeps import sweep as sweep
    from gcs.generation.responses import compare as compare
    from gcs.generation.responses import generate as generate
    from gcs.generation.responses import stream as stream
    from gcs.generation.responses import stream_compare as stream_compare
    from gcs.instrument.carrying import CarriedWin as CarriedWin
    from gcs.instrument.carrying import carried_win as carried_win
    from gcs.instrument.conditioning import Posterior as Posterior
    from gcs.instrument.conditioning import posterior as posterior
    from gcs.instrument.edits import counterfactual as counterfactual
    from gcs.instrument.edits import response_tokens as response_tokens
    from gcs.instrument.forcing import reads_back as reads_back
    from gcs.instrument.replay import HindsightReport as HindsightReport
    from gcs.instrument.replay import hindsight as hindsight
    from gcs.instrument.replay import hindsight_report as hindsight_report
    from gcs.instrument.tracing import Candidate as Candidate
    from gcs.instrument.tracing import Trace as Trace
    from gcs.instrument.tracing import TraceStep as TraceStep
    from gcs.instrument.tracing import trace as trace
    from gcs.resources import close as close
    from gcs.rewording import RewordReport as RewordReport
    from gcs.rewording import reword as reword
    from gcs.rewording import reword_report as reword_report
    from gcs.sampling.coupling import coupling_curve as coupling_curve
    from gcs.sampling.coupling import perturb as perturb
    from gcs.sampling.coupling import recycling_histogram as recycling_histogram
    from gcs.sampling.ensembling import geometric_ensemble as geometric_ensemble
    from gcs.sampling.ensembling import grouped_geometric_ensemble as grouped_geometric_ensemble
    from gcs.sampling.kernels import cpu_kernel as cpu_kernel
    from gcs.sampling.kernels import kernel_status as kernel_status
    from gcs.sampling.noise import gumbel as gumbel
    from gcs.sampling.processor import EnsembleLogitsProcessor as EnsembleLogitsProcessor
    from gcs.sampling.processor import GumbelLogitsProcessor as GumbelLogitsProcessor
    from gcs.sampling.samplers import ContextGumbelSampler as ContextGumbelSampler
    from gcs.sampling.samplers import GumbelSampler as GumbelSampler
    from gcs.sampling.samplers import IndependentSampler as IndependentSampler
    from gcs.sampling.samplers import MixedSampler as MixedSampler
    from gcs.sampling.samplers import RecyclingGumbelSampler as RecyclingGumbelSampler
    from gcs.sampling.samplers import Sampler as Sampler
    from gcs.sampling.samplers import make_sampler as make_sampler
    from gcs.sampling.theory import agreement_probability as agreement_probability
    from gcs.sampling.theory import p_repeat as p_repeat
    from gcs.scoring.metrics import METRIC_NAMES as METRIC_NAMES
    from gcs.scoring.metrics import METRICS as METRICS
    from gcs.scoring.metrics import consistency as consistency
    from gcs.scoring.metrics import embedder as embedder
    from gcs.scoring.metrics import similarity as similarity
    from gcs.scoring.metrics import similarity_to as similarity_to
    from gcs.scoring.surprise import excess_surprise as excess_surprise
    from gcs.scoring.token_overlap import aligned_spans as aligned_spans
    from gcs.scoring.token_overlap import common_prefix_length as common_prefix_length
    from gcs.scoring.token_overlap import shared_tokens as shared_tokens
    from gcs.settings import SamplingSettings as SamplingSettings
    from gcs.stats.intervals import CONFIDENCE as CONFIDENCE
    from gcs.stats.intervals import mean_interval as mean_interval
    from gcs.stats.intervals import seeds_for as seeds_for
    from gcs.stats.intervals import standard_error as standard_error
    from gcs.stats.paired import paired_tests as paired_tests
    from gcs.stats.paired import verdict as verdict
    from gcs.stats.sequential import SequentialPlan as SequentialPlan
    from gcs.stats.sequential import sequential_plan as sequential_plan
    from gcs.stats.sequential import sequential_tests as sequential_tests
    from gcs.stats.signflip import fewest_seeds as fewest_seeds
    from gcs.stats.signflip import sign_flip_interval as sign_flip_interval
    from gcs.stats.signflip import sign_flip_p as sign_flip_p
    from gcs.stats.signflip import sign_flip_test as sign_flip_test

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
# The entry points that take options and load a model: gcs.NAME is a front (gcs/fronts.py) that refuses an unknown
# keyword before their modules (torch, transformers, pandas: seconds) are imported. tests/test_fronts.py holds this
# to every exported function that checks its keywords.
_FRONTED = frozenset({"generate", "stream", "compare", "stream_compare", "trace", "hindsight", "hindsight_report",
                      "counterfactual", "sweep", "compare_rounds", "style_responses", "ab"})


def __getattr__(name: str):
    module = _MODULE_OF.get(name)
    if module is None:
        return submodule(__name__, name)
    if name in _FRONTED:
        from gcs.fronts import front

        value = front(f"{__name__}.{module}", name)
    else:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value  # the next lookup is a plain attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

