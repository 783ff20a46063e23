"""Does bf16 keep the paper's effect? GCSwR's E5 consistency gain over IS at float32 and at bfloat16.

    python bench/bench_dtype.py [--groups 30] [--seeds 3] [--tokens 48] [--engine vllm]

The built-in "general" paraphrase groups (never used to tune anything here), temperature 1,
E5 consistency per (group, seed). The gain is the paired difference GCSwR - IS per group
(averaged over seeds), with a 95 % t-interval over groups. Prints the gain at each dtype,
their difference, and the generation time of each dtype measured in this run.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch
from scipy import stats

import gcs


def paired_gain(frame) -> tuple[float, float, float, int]:
    """Mean GCSwR - IS per group (seeds averaged first) and its 95 % t-interval: (mean, low, high, groups)."""
    by_group = frame.groupby(["group", "method"])["consistency"].mean().unstack("method")
    diffs = (by_group["gcswr"] - by_group["is"]).to_numpy()
    mean, sem = float(np.mean(diffs)), float(stats.sem(diffs))
    half = float(stats.t.ppf(0.975, len(diffs) - 1)) * sem
    return mean, mean - half, mean + half, len(diffs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=30)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--engine", default="vllm", choices=["vllm", "transformers"])
    args = parser.parse_args()
    groups = gcs.load_groups("general")[: args.groups]
    gains, seconds = {}, {}
    for dtype in (torch.float32, torch.bfloat16):
        model = gcs.load_model(dtype=dtype)
        start = time.perf_counter()
        frame = gcs.sweep(groups, temperatures=[1.0], methods=["is", "gcswr"], seeds=args.seeds, metrics=["e5"],
                          model=model, max_new_tokens=args.tokens, engine=args.engine)
        seconds[dtype] = time.perf_counter() - start
        gains[dtype] = paired_gain(frame)
    print(f"{len(groups)} groups x {args.seeds} seeds, T=1, {args.tokens} tokens, engine {args.engine}")
    for dtype, (mean, low, high, n) in gains.items():
        verdict = "GCSwR > IS" if low > 0 else ("GCSwR < IS" if high < 0 else "within noise")
        print(f"  {str(dtype).removeprefix('torch.'):<9} E5 gain GCSwR - IS = {mean:+.4f} "
              f"(95% CI {low:+.4f} .. {high:+.4f}, {n} groups): {verdict}; sweep {seconds[dtype]:.1f} s")
    same = np.sign(gains[torch.float32][0]) == np.sign(gains[torch.bfloat16][0])
    print(f"direction unchanged at bf16: {'yes' if same else 'NO'}; "
          f"bf16 / fp32 sweep time = {seconds[torch.bfloat16] / seconds[torch.float32]:.2f}")


if __name__ == "__main__":
    main()
