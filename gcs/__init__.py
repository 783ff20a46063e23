"""gcs: Gumbel Consistency Sampling.

Data flow: noise -> samplers -> processor -> (generation -> scoring -> experiments).

>>> import gcs, torch
>>> sampler = gcs.make_sampler("gcswr", seed=[0, 0])
>>> sampler.sample(torch.tensor([[2.0, 1.0, 0.0], [2.0, 1.1, 0.0]])).tolist()  # coupled rows
[0, 0]
"""

from .ensemble import geometric_ensemble
from .noise import gumbel
from .processor import GumbelLogitsProcessor, check_sampling_settings
from .samplers import (
    METHOD_NAMES,
    METHODS,
    GumbelSampler,
    IndependentSampler,
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
    "make_sampler",
    "gumbel",
    "GumbelLogitsProcessor",
    "check_sampling_settings",
    "agreement_probability",
    "p_repeat",
    "geometric_ensemble",
]
