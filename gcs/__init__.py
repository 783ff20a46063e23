"""gcs: Gumbel Consistency Sampling.

Data flow: noise -> samplers -> processor -> models/prompts -> generation -> (scoring -> experiments).

>>> import gcs, torch
>>> sampler = gcs.make_sampler("gcswr", seed=[0, 0])
>>> sampler.sample(torch.tensor([[2.0, 1.0, 0.0], [2.0, 1.1, 0.0]])).tolist()  # coupled rows
[0, 0]
"""

from .ensemble import geometric_ensemble, grouped_geometric_ensemble
from .generation import MAX_NEW_TOKENS, compare, generate, reword, stream, stream_compare
from .models import DEFAULT_MODEL, Model, load_model
from .noise import gumbel
from .processor import EnsembleLogitsProcessor, GumbelLogitsProcessor, check_sampling_settings
from .prompts import format_prompt, strip_followups
from .samplers import (
    METHOD_NAMES,
    METHODS,
    GumbelSampler,
    IndependentSampler,
    MixedSampler,
    RecyclingGumbelSampler,
    Sampler,
    make_sampler,
)
from .theory import agreement_probability, p_repeat

__version__ = "0.1.0"

__all__ = [
    "METHODS",
    "METHOD_NAMES",
    "Sampler",
    "IndependentSampler",
    "GumbelSampler",
    "RecyclingGumbelSampler",
    "MixedSampler",
    "make_sampler",
    "gumbel",
    "GumbelLogitsProcessor",
    "EnsembleLogitsProcessor",
    "check_sampling_settings",
    "DEFAULT_MODEL",
    "Model",
    "load_model",
    "format_prompt",
    "strip_followups",
    "MAX_NEW_TOKENS",
    "generate",
    "stream",
    "compare",
    "stream_compare",
    "reword",
    "agreement_probability",
    "p_repeat",
    "geometric_ensemble",
    "grouped_geometric_ensemble",
]
