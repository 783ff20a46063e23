"""The fused CPU kernel of GCSwR against the eager path, and how it is switched on, off, and fails."""

import os
import subprocess
import sys

import pytest
import torch

import gcs
from conftest import ROOT, require_fused_kernel
from gcs.sampling import kernels


def run_gcswr(steps, seeds, path, monkeypatch, active_every=None):
    """Tokens per step and the final sampler, on one CPU path ("fused-kernel" or "eager-torch")."""
    monkeypatch.setenv(kernels.KERNEL_ENV, "off" if path == "eager-torch" else "on")
    sampler = gcs.make_sampler("gcswr", seed=seeds)
    tokens = []
    for step, logits in enumerate(steps):
        # Some rows pause now and then, as finished rows do under generate.
        active = None if active_every is None else (torch.arange(len(seeds)) + step) % active_every != 0
        tokens.append(sampler.sample(logits, active=active))
    assert (sampler._kernel is not None) == (path == "fused-kernel")
    return torch.stack(tokens), sampler


def awkward_logits(batch, vocab, steps, seed):
    """Sharp and flat rows, masked tokens, exact ties and a huge gap: what the update must survive."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for step in range(steps):
        logits = torch.randn(batch, vocab, generator=generator) * (0.1 + 4 * (step % 3))
        logits[:, (step % 5) :: 7] = -torch.inf
        logits[0, : min(vocab, 4)] = 2.0  # ties
        if batch > 1 and vocab > 1:
            logits[1, 1] = 1e4 if step % 4 == 0 else logits[1, 1]
        logits[:, 0] = torch.where(logits.amax(-1).isfinite(), logits[:, 0], 0.0)  # every row keeps a finite logit
        out.append(logits)
    return out


@pytest.fixture(autouse=True)
def kernel_available():
    require_fused_kernel()


@pytest.mark.parametrize("batch, vocab", [(12, 49_152), (5, 128_256), (3, 4096), (4, 96), (1, 32)])
def test_fused_kernel_equals_eager_torch_bit_for_bit(batch, vocab, monkeypatch):
    """Vocabularies that are multiples of 32: same tokens, same residuals and draw counts, to the bit."""
    steps = awkward_logits(batch, vocab, steps=300 if vocab <= 96 else 40, seed=vocab)
    seeds = [row // 2 for row in range(batch)]  # pairs share noise, as paraphrases do
    fused_tokens, fused = run_gcswr(steps, seeds, "fused-kernel", monkeypatch, active_every=3)
    eager_tokens, eager = run_gcswr(steps, seeds, "eager-torch", monkeypatch, active_every=3)
    assert torch.equal(fused_tokens, eager_tokens)
    assert torch.equal(fused.draws, eager.draws)
    assert torch.equal(fused.residual, eager.residual)
    assert torch.isfinite(fused.residual).all() and (fused.residual > 0).all()


@pytest.mark.parametrize("batch, vocab", [(7, 50_257), (12, 37), (2, 3)])
def test_fused_kernel_on_other_vocabularies(batch, vocab, monkeypatch):
    """Elsewhere torch computes a few tail rates with scalar exp2, within an ulp of the kernel's vectorised one.

    The residuals can then drift apart by rounding (a near-tie's cancellation magnifies an ulp,
    and the next pick spreads it), but the picks stay the same.
    """
    steps = awkward_logits(batch, vocab, steps=200, seed=vocab)
    seeds = list(range(batch))
    fused_tokens, fused = run_gcswr(steps, seeds, "fused-kernel", monkeypatch)
    eager_tokens, eager = run_gcswr(steps, seeds, "eager-torch", monkeypatch)
    assert torch.equal(fused_tokens, eager_tokens)
    assert torch.equal(fused.draws, eager.draws)
    assert torch.isfinite(fused.residual).all() and (fused.residual > 0).all()


def test_winner_redraw_is_the_library_noise(monkeypatch):
    """The kernel's own splitmix64 + log redraw gives gcs.sampling.noise's values exactly, deep into the draw
    counter."""
    monkeypatch.setenv(kernels.KERNEL_ENV, "on")
    sampler = gcs.make_sampler("gcswr", seed=[5, 2**62 + 3])
    forced = torch.full((2, 40), -torch.inf)
    forced[:, 17] = 0.0
    for _ in range(1000):
        sampler.sample(forced)
    assert sampler.draws[:, 17].tolist() == [1000, 1000]
    expected = gcs.sampling.noise.exponential_noise(sampler.noise.keys, torch.tensor([1000, 1000]),
                                                    torch.tensor([17, 17]))
    assert torch.equal(sampler.residual[:, 17], expected)


@pytest.mark.parametrize(("value", "mode"), [("ON", "on"), (" off ", "off"), ("auto", "auto")])
def test_kernel_mode(value, mode):
    assert kernels.kernel_mode({kernels.KERNEL_ENV: value}) == mode


def test_bad_kernel_mode_names_the_variable_and_choices(monkeypatch):
    monkeypatch.setenv(kernels.KERNEL_ENV, "fast")
    with pytest.raises(ValueError, match=r"GCS_CPU_KERNEL='fast'; expected one of auto, on, off"):
        gcs.make_sampler("gcswr").sample(torch.zeros(1, 4))


def test_off_uses_eager_torch_and_says_so(monkeypatch):
    monkeypatch.setenv(kernels.KERNEL_ENV, "off")
    sampler = gcs.make_sampler("gcswr", seed=1)
    sampler.sample(torch.zeros(1, 64))
    assert sampler._kernel is None
    assert "off" in kernels.kernel_status()
    monkeypatch.setenv(kernels.KERNEL_ENV, "auto")
    assert kernels.kernel_status().startswith("fused GCSwR CPU kernel: on")


SAMPLE_SCRIPT = """
import warnings, torch, gcs
warnings.simplefilter("always")
sampler = gcs.make_sampler("gcswr", seed=[3, 4])
logits = torch.log_softmax(torch.randn(2, 640, generator=torch.Generator().manual_seed(0)), -1)
print("tokens", [sampler.sample(logits).tolist() for _ in range(20)])
print(gcs.sampling.kernels.kernel_status())
"""


def run_without_a_compiler(mode, tmp_path):
    """SAMPLE_SCRIPT in a fresh process whose C++ compiler does not exist (and with an empty build cache)."""
    env = {
        **os.environ,
        kernels.KERNEL_ENV: mode,
        "CXX": str(tmp_path / "no-such-compiler"),
        "TORCH_EXTENSIONS_DIR": str(tmp_path / "torch_extensions"),
    }
    return subprocess.run([sys.executable, "-c", SAMPLE_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True)


def test_auto_without_a_compiler_warns_once_and_samples_the_same_tokens(tmp_path, monkeypatch):
    result = run_without_a_compiler("auto", tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("the fused GCSwR CPU kernel could not be built") == 1
    assert "unavailable" in result.stdout and "eager torch" in result.stdout
    # The same script with the kernel built, in this process:
    monkeypatch.setenv(kernels.KERNEL_ENV, "on")
    sampler = gcs.make_sampler("gcswr", seed=[3, 4])
    logits = torch.log_softmax(torch.randn(2, 640, generator=torch.Generator().manual_seed(0)), -1)
    assert f"tokens {[sampler.sample(logits).tolist() for _ in range(20)]}" in result.stdout


def test_on_without_a_compiler_is_an_error(tmp_path):
    result = run_without_a_compiler("on", tmp_path)
    assert result.returncode != 0
    assert "RuntimeError: GCS_CPU_KERNEL=on but the fused GCSwR kernel could not be built" in result.stderr


HOLD_THE_BUILD = """
import sys, time
from pathlib import Path
from gcs.sampling.kernels import build_lock
with build_lock(Path(sys.argv[1])):
    (Path(sys.argv[1]) / "lock").touch()  # as torch's build does
    print("building", flush=True)
    time.sleep(600)
"""


def test_a_build_waits_for_a_live_build_and_clears_the_lock_a_killed_one_left(tmp_path, caplog):
    """A compile killed mid-way leaves torch's lock file, on which every later build of torch's would wait forever:
    the build lock is the operating system's, so it waits only while the other build's process lives, and then
    removes what the dead one left (here a real process, killed with SIGKILL while it held the lock)."""
    import fcntl
    import logging

    folder = tmp_path / "gcs_probe"
    other = subprocess.Popen([sys.executable, "-c", HOLD_THE_BUILD, str(folder)], cwd=ROOT, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert other.stdout.readline().strip() == "building"
        with open(folder / "gcs-build.lock", "a") as probe, pytest.raises(BlockingIOError):
            fcntl.flock(probe.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)  # held while that build lives
    finally:
        other.kill()
        other.wait()
    assert (folder / "lock").exists()  # what the killed build left
    with caplog.at_level(logging.WARNING, logger="gcs.sampling.kernels"), kernels.build_lock(folder):
        assert not (folder / "lock").exists()
    assert "a killed compile left behind" in caplog.text


def test_the_kernel_is_built_under_torch_extensions_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert kernels.build_directory("gcs_probe") == tmp_path / "gcs_probe"
