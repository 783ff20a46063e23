"""Defaults with power: how often the side by side's verdict resolves GCSwR's gain over IS, and how often a null
comparison claims anything, on the built-in paraphrase sets.

    python bench/bench_verdict.py [--groups 12] [--seeds 16] [--tokens 48] [--temperatures 0.7,1]
                                  [--engine vllm|transformers]

Every group is answered by IS, GCS and GCSwR with seeds 0 .. N-1, and once more by GCSwR with seeds
N+10000 .. (a null "method": the same sampler with other luck). For 4, 8 and 16 seeds (the first ones),
per temperature: the share of groups where ``gcs.verdict``'s family (GCS and GCSwR against IS, under
E5 and aligned agreement, as in the app) says GCSwR is more consistent beyond noise, per metric; and the
share of groups where the null family (the null against GCSwR, both metrics) claims any effect
(nominal at most 5 %). Also the share of groups the degenerate-output rule flags.
"""

from __future__ import annotations

import argparse

import pandas as pd

import gcs
from gcs.verdict import paired_tests

METRICS = ("e5", "aligned")
NULL_OFFSET = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=12)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--temperatures", default="0.7,1")
    parser.add_argument("--engine", default="vllm", choices=gcs.ENGINES)
    args = parser.parse_args()
    model = gcs.load_model()
    groups = gcs.load_groups("general")[: args.groups]
    seeds = list(range(args.seeds))
    counts = [n for n in (4, 8, 16) if n <= args.seeds]
    print(f"model {model.name} ({model.model.dtype}), engine {args.engine}, {len(groups)} 'general' groups, "
          f"{args.tokens} tokens, seeds {counts}")
    print(f"  {'T':>4} {'seeds':>5} {'GCSwR>IS E5':>12} {'GCSwR>IS aligned':>17} {'null claims':>12} {'flagged':>8}")
    for temperature in (float(t) for t in args.temperatures.split(",")):
        results = {n: {"e5": 0, "aligned": 0, "null": 0, "flagged": 0} for n in counts}
        for group in groups:
            prompts = list(group.prompts)
            settings = gcs.SamplingSettings(seeds=seeds, temperature=temperature, max_new_tokens=args.tokens)
            frame = gcs.compare(prompts, settings=settings, model=model, engine=args.engine)
            null = gcs.compare(prompts, settings=settings.replace(methods=["gcswr"],
                                                                  seeds=[s + NULL_OFFSET for s in seeds]),
                               model=model, engine=args.engine)
            null = null.assign(method="null", seed=null["seed"] - NULL_OFFSET)
            both = gcs.compare_report(pd.concat([frame, null], ignore_index=True), METRICS, tokenizer=model.tokenizer)
            first = frame[frame["seed"] < 2]
            excess = gcs.excess_surprise(list(first["prompt"]), list(first["raw_response"]), model)
            for n in counts:
                scores = both.scores[both.scores["seed"] < n]
                family = paired_tests(scores[scores["method"].isin(gcs.METHODS)], metrics=METRICS)
                family = family.set_index(["method", "metric"])
                for metric in METRICS:
                    row = family.loc[("gcswr", metric)]
                    results[n][metric] += bool(row["beyond_noise"] and row["diff"] > 0)
                nulls = paired_tests(scores[scores["method"].isin(["gcswr", "null"])], baseline="gcswr",
                                     metrics=METRICS)
                results[n]["null"] += bool(nulls["beyond_noise"].any())
                results[n]["flagged"] += gcs.surprise.degenerate(excess)
        for n, r in results.items():
            share = {k: v / len(groups) for k, v in r.items()}
            print(f"  {temperature:>4g} {n:>5} {share['e5']:>12.0%} {share['aligned']:>17.0%} {share['null']:>12.0%} "
                  f"{share['flagged']:>8.0%}")


if __name__ == "__main__":
    main()
