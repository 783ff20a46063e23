"""Shared fixtures and statistical helpers.

Statistical tests use fixed seeds, so each is deterministic; thresholds are the usual
p > 1e-3 (chi-square) or |z| < 4.5 (normal approximation), chosen before running.
"""

from __future__ import annotations

import os

# No hub here: fail fast instead of retrying for a minute when a test names an unknown model.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import numpy as np
import pytest
import torch
from scipy import stats

P_VALUE_THRESHOLD = 1e-3
Z_THRESHOLD = 4.5


def chi_square_p(counts, probabilities) -> float:
    """p-value of observed ``counts`` against ``probabilities`` (cells with zero probability must be empty)."""
    counts = np.asarray(counts, dtype=np.float64)
    probabilities = np.asarray(probabilities, dtype=np.float64)
    assert counts[probabilities == 0].sum() == 0, "a zero-probability category was drawn"
    live = probabilities > 0
    expected = probabilities[live] / probabilities[live].sum() * counts.sum()
    assert expected.min() >= 5, "test design error: expected counts below 5"
    return stats.chisquare(counts[live], expected).pvalue


def z_score(successes: int, trials: int, probability: float) -> float:
    """Normal-approximation z of a binomial count against its expected probability."""
    return (successes - trials * probability) / np.sqrt(trials * probability * (1 - probability))


def tiny_llama(vocab_size: int = 64, seed: int = 0, **overrides):
    """A randomly initialised two-layer Llama built from a config (no download)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=2,
        **overrides,
    )
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tiny_model():
    return tiny_llama()


@pytest.fixture(scope="session")
def embedded_model():
    """The real embedded SmolLM2-135M-Instruct (converted once into the user cache, then < 1 s)."""
    import gcs

    return gcs.load_model()
