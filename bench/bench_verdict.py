"""Defaults with power: how often the side by side's verdict resolves GCSwR's gain over IS, and how often a null
comparison claims anything, on the built-in paraphrase sets.

    python bench/bench_verdict.py [--sets general[:44]] [--seeds 16] [--tokens 64]
                                  [--temperatures 0.7,1] [--engine vllm|transformers]

Every group is answered by IS, GCS and GCSwR with seeds 0 .. N-1, and once more by GCSwR with seeds
N+10000 .. (a null "method": the same sampler with other luck). For 4, 8 and 16 seeds (the first ones),
per temperature: the share of groups where ``gcs.verdict``'s family (GCS and GCSwR against IS, under
E5 and aligned agreement, as in the app) says GCSwR is more consistent beyond noise, per metric; and the
share of groups where the null family (the null against GCSwR, both metrics) claims any effect
(nominal at most 5 %). Also the share of groups the degenerate-output rule flags. Each share is printed with
the count of groups it stands for (28/44). ``--sets`` names the paraphrase sets (built-in
names or files) and how many of each set's first groups to run; the shares are printed per set and over all.
"""

from __future__ import annotations

import argparse

import pandas as pd

import gcs
from gcs.stats.paired import paired_tests

METRICS = ("e5", "aligned")
NULL_OFFSET = 10_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="general", help="paraphrase sets as name[:groups], comma-separated")
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--temperatures", default="0.7,1")
    parser.add_argument("--engine", default="vllm", choices=gcs.ENGINES)
    args = parser.parse_args()
    groups = []  # (set name, group)
    for item in args.sets.split(","):
        name, _, count = item.partition(":")
        if count and not count.isdigit():
            parser.error(f"--sets: {item!r} should be name or name:groups, with groups a whole number")
        try:
            groups += [(name, group) for group in gcs.load_groups(name)[: int(count) if count else None]]
        except ValueError as error:
            parser.error(f"--sets: {error}")
    single = sorted({name for name, group in groups if len(group.prompts) < 2})
    if single:
        parser.error(f"{', '.join(single)}: groups of one prompt have no consistency to compare; pass paraphrase sets")
    sets = list(dict.fromkeys(name for name, _ in groups))
    model = gcs.load_model()
    seeds = list(range(args.seeds))
    counts = [n for n in (4, 8, 16) if n <= args.seeds]
    print(f"model {model.name} ({model.model.dtype}), engine {args.engine}, {len(groups)} groups "
          f"({args.sets}), {args.tokens} tokens, seeds {counts}")
    print(f"  {'T':>4} {'set':>8} {'seeds':>5} {'GCSwR>IS E5':>12} {'GCSwR>IS aligned':>17} {'null claims':>12} "
          f"{'flagged':>10}")
    for temperature in (float(t) for t in args.temperatures.split(",")):
        rows = []  # one per group and seed count: did the verdict resolve GCSwR, did the null claim anything
        for name, group in groups:
            prompts = list(group.prompts)
            settings = gcs.SamplingSettings(seeds=seeds, temperature=temperature, max_new_tokens=args.tokens)
            frame = gcs.compare(prompts, settings=settings, model=model, engine=args.engine)
            null = gcs.compare(prompts, settings=settings.replace(methods=["gcswr"],
                                                                  seeds=[s + NULL_OFFSET for s in seeds]),
                               model=model, engine=args.engine)
            null = null.assign(method="null", seed=null["seed"] - NULL_OFFSET)
            both = gcs.compare_report(pd.concat([frame, null], ignore_index=True), metrics=METRICS,
                                      tokenizer=model.tokenizer)
            first = frame[frame["seed"] < 2]
            answers = list(first["raw_response"])
            flagged = gcs.stats.paired.degenerate(gcs.excess_surprise(list(first["prompt"]), answers,
                                                                  model=model))
            group_rows = []
            for n in counts:
                scores = both.scores[both.scores["seed"] < n]
                family = paired_tests(scores[scores["method"].isin(gcs.METHODS)], metrics=METRICS)
                family = family.set_index(["method", "metric"])
                resolved = {metric: bool(family.loc[("gcswr", metric), "beyond_noise"]
                                         and family.loc[("gcswr", metric), "diff"] > 0) for metric in METRICS}
                nulls = paired_tests(scores[scores["method"].isin(["gcswr", "null"])], baseline="gcswr",
                                     metrics=METRICS)
                group_rows.append({"set": name, "seeds": n, **resolved, "null": bool(nulls["beyond_noise"].any()),
                                   "flagged": bool(flagged)})
            rows += group_rows
            # one line per group as it finishes, so a run stopped early still says what it measured
            print(f"  T={temperature:g} {name} group {group.id}: "
                  + "; ".join(f"{r['seeds']} seeds: E5 {'+' if r['e5'] else '-'} aligned {'+' if r['aligned'] else '-'}"
                              f" null {'!' if r['null'] else '-'}" for r in group_rows)
                  + (" (flagged)" if flagged else ""), flush=True)
        table = pd.DataFrame(rows)
        for name in [*sets, "all"] if len(sets) > 1 else sets:
            part = table if name == "all" else table[table["set"] == name]
            for n, rows_n in part.groupby("seeds"):
                cell = {column: f"{rows_n[column].mean():.0%} ({int(rows_n[column].sum())}/{len(rows_n)})"
                        for column in (*METRICS, "null", "flagged")}  # the share, and the groups it counts
                print(f"  {temperature:>4g} {name:>8} {n:>5} {cell['e5']:>12} {cell['aligned']:>17} "
                      f"{cell['null']:>12} {cell['flagged']:>10}")


if __name__ == "__main__":
    main()
