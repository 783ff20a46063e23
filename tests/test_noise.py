"""Noise is a pure function of integer keys: reference bits, distribution, device independence."""

import numpy as np
import pytest
import torch
from scipy import stats

from conftest import P_VALUE_THRESHOLD
from gcs import make_sampler
from gcs.sampling import noise

MASK = (1 << 64) - 1


def reference_splitmix64(state: int) -> int:
    """Textbook splitmix64 on Python ints (one output for the given state)."""
    z = (state + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def reference_exponential_bits(seed: int, draw: int, token: int) -> int:
    key = reference_splitmix64((seed ^ noise.DOMAIN_GUMBEL) & MASK)
    word = reference_splitmix64(reference_splitmix64((key + draw) & MASK) + token & MASK)
    return word >> (64 - noise.UNIFORM_BITS)


def test_splitmix64_known_outputs():
    # The first outputs of the splitmix64 generator seeded with 0 (state advances by the gamma each call).
    gamma = 0x9E3779B97F4A7C15
    states = torch.tensor([noise.to_signed(i * gamma) for i in range(3)])
    got = [v & MASK for v in noise.splitmix64(states).tolist()]
    assert got == [0xE220A8397B1DCDAF, 0x6E789E6AA1B965F4, 0x06C45D188009454F]


@pytest.mark.parametrize("state", [0, 1, 2**63 - 1, 2**63, 2**64 - 1, 0x123456789ABCDEF0])
def test_splitmix64_matches_reference(state):
    got = noise.splitmix64(torch.tensor([noise.to_signed(state)])).item() & MASK
    assert got == reference_splitmix64(state)


@pytest.mark.parametrize("seed", [0, 1, 12345, 2**63 - 1])
def test_noise_bits_match_reference(seed):
    tokens = torch.tensor([0, 1, 7, 49151, 128255])
    for draw in (0, 1, 99, 100, 10**6):
        keys = noise.row_keys(torch.tensor([seed]), noise.DOMAIN_GUMBEL)
        words = noise.splitmix64(noise.splitmix64(keys + draw)[:, None] + tokens[None, :])
        got = noise.uniform_bits(words)[0].tolist()
        assert got == [reference_exponential_bits(seed, draw, t) for t in tokens.tolist()]


@pytest.mark.parametrize("rows, vocab", [(1, 1), (1, 300_000), (3, 50_257), (12, 128_256), (200_000, 3)])
def test_vocabulary_noise_tiles_equal_one_call(rows, vocab):
    # Tiles of columns, a ragged last tile, and more rows than a tile holds entries.
    keys = noise.row_keys(torch.arange(rows) % 5, noise.DOMAIN_GUMBEL)
    draws = torch.arange(rows) % 3
    whole = noise.exponential_noise(keys[:, None], draws[:, None], torch.arange(vocab)[None, :])
    assert torch.equal(noise.vocabulary_noise(keys, draws, vocab), whole)


def test_uniform_is_open_interval_and_uniform():
    u = noise.uniform(noise.hash_keys(torch.arange(200_000)))
    assert 0 < u.min() and u.max() < 1
    assert stats.kstest(u.numpy(), "uniform").pvalue > P_VALUE_THRESHOLD


def test_gumbel_distribution():
    g = noise.gumbel(torch.tensor([11]), torch.arange(200_000), torch.tensor([0]))[0]
    assert g.dtype == torch.float32 and torch.isfinite(g).all()
    assert stats.kstest(g.double().numpy(), "gumbel_r").pvalue > P_VALUE_THRESHOLD


def test_draws_and_seeds_are_independent():
    # Pairs (draw 0, draw 1) of the same tokens, and (seed 0, seed 1): a 10x10 grid chi-square.
    tokens = torch.arange(50_000)
    g = noise.gumbel(torch.tensor([0, 0, 1]), tokens, torch.tensor([0, 1, 0]))
    u = torch.exp(-torch.exp(-g.double()))  # Gumbel CDF: back to uniforms
    for a, b in ((0, 1), (0, 2)):
        grid = np.histogram2d(u[a].numpy(), u[b].numpy(), bins=10, range=[[0, 1], [0, 1]])[0]
        assert stats.chisquare(grid.ravel()).pvalue > P_VALUE_THRESHOLD


def test_equal_keys_equal_noise_and_unbounded_draws():
    seeds = torch.tensor([5, 5, 6])
    g = noise.gumbel(seeds, torch.arange(100), torch.tensor([10**9, 10**9, 10**9]))
    assert torch.equal(g[0], g[1]) and not torch.equal(g[0], g[2])


def test_bits_identical_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine: CPU/CUDA bit identity is checked where one exists")
    keys = noise.hash_keys(torch.arange(100_000), 3)
    cuda_keys = noise.hash_keys(torch.arange(100_000, device="cuda"), 3)
    assert torch.equal(noise.uniform_bits(keys), noise.uniform_bits(cuda_keys).cpu())


def test_cuda_tokens_keep_what_is_promised():
    """Across devices the noise bits are identical; tokens are identical only where rounding cannot flip them.

    GCS reads fresh noise at every position, so for identical logits its tokens match except at float
    near-ties. GCSwR's recycled residuals carry rounding forward and amplify it, so its streams may part
    after a few dozen tokens on another arithmetic path: exact in distribution, not token-identical. Its
    first token, drawn from the initial noise, matches.
    """
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine: the CPU/CUDA token check runs where one exists")
    import gcs

    generator = torch.Generator().manual_seed(0)
    steps = [torch.randn(64, 1000, generator=generator) * 3 for _ in range(32)]
    for method in ("gcs", "gcswr"):
        cpu, cuda = gcs.make_sampler(method, seed=list(range(64))), gcs.make_sampler(method, seed=list(range(64)))
        tokens = [(cpu.sample(x), cuda.sample(x.cuda()).cpu()) for x in steps]
        if method == "gcs":
            assert all(torch.equal(a, b) for a, b in tokens)
        else:
            assert torch.equal(*tokens[0])


@pytest.mark.parametrize("method", ["gcs", "gcswr"])
def test_noise_and_draws_do_not_follow_the_default_dtype(method):
    """torch's default dtype is process-wide: vLLM sets it to bf16 while it loads a model, in another thread while
    the app serves. Noise is float32 and a seed's draws are the same whatever the default (seen: the fused
    kernel refused a bf16 noise buffer built under vLLM's default)."""
    logits = torch.randn(3, 4096, generator=torch.Generator().manual_seed(0))

    def draws():
        sampler = make_sampler(method, seed=[5, 5, 6])
        tokens = [sampler.sample(logits + step).tolist() for step in range(4)]
        return tokens, sampler.noise.vector(torch.zeros(3, dtype=torch.long))

    expected, expected_noise = draws()
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        got, noise = draws()
    finally:
        torch.set_default_dtype(previous)
    assert noise.dtype == torch.float32 and torch.equal(noise, expected_noise)
    assert got == expected
