"""The benchmarks' timing helper and a small run of the sampler benchmark (the figures themselves live in bench/)."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from timing import best_in_turns  # noqa: E402


def test_contenders_take_turns_and_keep_their_best():
    calls = []
    best = best_in_turns({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3)
    assert calls == ["a", "b"] * 3
    assert set(best) == {"a", "b"} and all(0 < seconds < 1 for seconds in best.values())


def test_rounds_must_be_positive():
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        best_in_turns({"a": lambda: None}, rounds=0)


def test_sampler_benchmark_prints_every_contender_and_both_ratios():
    arguments = "--tokens 3 --batch 4 --paraphrases 2 --rounds 1 --vocab 1000".split()
    command = [sys.executable, str(BENCH / "bench_sampler.py"), *arguments]
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=120).stdout
    for layout in ("own seeds", "2 per seed"):
        for method in ("is", "gcs", "gcswr"):
            assert re.search(rf"1000 +{layout} +{method} +\d+\.\d", out), out
        assert re.search(rf"{layout} ratios: gcswr/is = \d+\.\d\d .*per-sequence/gcswr = \d+x", out), out
    for contender in ("per-sequence", r"gcswr\+1 done"):
        assert re.search(rf"own seeds +{contender} +\d+\.\d", out), out
