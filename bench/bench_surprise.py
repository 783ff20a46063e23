"""Calibrates the degenerate-output rule (``gcs.scoring.surprise``): excess surprise of the model's answers by
temperature.

    python bench/bench_surprise.py [--groups 12] [--seeds 2] [--tokens 48] [--temperatures 0.5,1,1.5,2]

A run is one side by side: a built-in group's paraphrases answered by one method and seed. For every
run, the median over its answers of their mean excess surprise (nats per token; 0 for the model's own
samples at T = 1). Prints, per temperature and method, the median of those run medians, their range,
and the share of runs the rule flags (median above ``gcs.scoring.surprise.DEGENERATE_EXCESS``).
"""

from __future__ import annotations

import argparse

import numpy as np

import gcs
from gcs.scoring.surprise import DEGENERATE_EXCESS, excess_surprise


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=12)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--temperatures", default="0.5,1,1.5,2")
    parser.add_argument("--methods", default="is,gcswr")
    args = parser.parse_args()
    model = gcs.load_model()
    groups = [g for name in ("general", "coding", "lists") for g in gcs.load_groups(name)][: args.groups]
    methods = gcs.check_methods(args.methods)
    print(f"model {model.name} ({model.model.dtype}), {len(groups)} built-in groups x {args.seeds} seeds x "
          f"{len(methods)} methods, {args.tokens} tokens; rule: run median > {DEGENERATE_EXCESS} nats/token")
    print(f"  {'T':>4} {'method':<6} {'median':>7} {'min':>7} {'max':>7} {'flagged':>8}")
    for temperature in (float(t) for t in args.temperatures.split(",")):
        medians = {m: [] for m in methods}
        for group in groups:
            frame = gcs.compare(list(group.prompts), methods=methods, seeds=list(range(args.seeds)),
                                temperature=temperature, max_new_tokens=args.tokens, model=model)
            excess = excess_surprise(list(frame["prompt"]), list(frame["raw_response"]), model=model)
            frame = frame.assign(excess=excess)
            for (method, _), part in frame.groupby(["method", "seed"]):
                medians[method].append(float(np.nanmedian(part["excess"])))
        for method, values in medians.items():
            values = np.asarray(values)
            print(f"  {temperature:>4g} {method:<6} {np.median(values):7.2f} {values.min():7.2f} {values.max():7.2f} "
                  f"{np.mean(values > DEGENERATE_EXCESS):8.0%}")


if __name__ == "__main__":
    main()
