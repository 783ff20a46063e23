"""Context-keyed noise ("ctx", docs/context.md) against GCS and GCSwR: consistency, and what it saves an A/B test.

    python bench/bench_context.py [--sets general] [--groups 44] [--seeds 16] [--tokens 64] [--contexts 1,2,4,8]
                                  [--ab-prompts 8] [--ab-seeds 16] [--ab-tokens 48]

Consistency: every group of the built-in paraphrase sets (the first ``--groups`` of them) is answered with IS, GCS,
GCSwR and "ctx" at each window of ``--contexts`` (``ctx1``, ``ctx2``, ...), seeds 0 .. N-1 at T = 1 on the embedded
model, and scored with E5 and aligned agreement (``gcs.compare_report``). A seed's noise is shared by every group,
so the seed is the unit: each method's score is averaged over the groups within a seed, and the paired verdict
(``gcs.paired_tests``: exact sign-flip, simultaneous over the comparisons) compares every "ctx" window with GCS and
with GCSwR.

A/B (``--ab-prompts 0`` skips it): the temperature change of ``bench_ab.py`` (1.0 against 0.8) and its two scores
(length, E5 to each prompt's greedy answer), answered by ``gcs.ab`` under GCS, GCSwR and each "ctx" window with
its IS control; per method and score, the seeds
independent sampling would need for shared luck's width (``is_seeds``, with its F interval) over the seeds used:
the variance ratio shared luck buys.

Run it at full size on a quiet machine; a tiny run (``--groups 1 --seeds 2 --tokens 4 --contexts 1 --ab-prompts 1
--ab-seeds 2 --ab-tokens 4``) only checks that it works.
"""

from __future__ import annotations

import argparse
import time

import pandas as pd
from bench_ab import with_reference_scores  # bench/ is on sys.path when run as a script

import gcs
from gcs.stats.paired import paired_tests

METRICS = ("e5", "aligned")
SHARED = ("gcs", "gcswr")


def contexts(text: str) -> list[int]:
    return [int(k) for k in text.split(",") if k.strip()]


def arms(windows: list[int]) -> dict[str, dict]:
    """Each compared arm's label and the settings it changes: IS, GCS, GCSwR, then "ctx" per window."""
    return {"is": {"methods": ["is"]}, **{m: {"methods": [m]} for m in SHARED},
            **{f"ctx{k}": {"methods": ["ctx"], "context": k} for k in windows}}


def consistency(args, model) -> pd.DataFrame:
    """Per (arm, seed, metric), the consistency averaged over the groups: ``paired_tests``' layout."""
    groups = [g for name in args.sets.split(",") for g in gcs.load_groups(name)][: args.groups]
    base = gcs.SamplingSettings(seeds=args.seeds, temperature=1.0, max_new_tokens=args.tokens)
    scores = []
    for group in groups:
        start = time.perf_counter()
        frames = [gcs.compare(list(group.prompts), settings=base.replace(**changes), model=model).assign(method=arm)
                  for arm, changes in arms(contexts(args.contexts)).items()]
        report = gcs.compare_report(pd.concat(frames, ignore_index=True), metrics=METRICS, tokenizer=model.tokenizer)
        scores.append(report.scores)
        print(f"  group {group.id}: {time.perf_counter() - start:.0f} s", flush=True)
    every = pd.concat(scores, ignore_index=True)
    return every.groupby(["method", "seed", "metric"], sort=False)["consistency"].mean().reset_index()


def print_consistency(scores: pd.DataFrame, windows: list[int]) -> None:
    means = scores.groupby(["method", "metric"], sort=False)["consistency"].mean().unstack("metric")
    print(f"  {'method':<8} " + " ".join(f"{m:>9}" for m in METRICS) + "   (consistency x100, mean over seeds)")
    for method, row in means.iterrows():
        print(f"  {method:<8} " + " ".join(f"{100 * row[m]:>9.2f}" for m in METRICS))
    ctx = [f"ctx{k}" for k in windows]
    for baseline in SHARED:
        tests = paired_tests(scores[scores["method"].isin([baseline, *ctx])], baseline=baseline, metrics=METRICS)
        print(f"  paired verdict against {gcs.METHOD_NAMES[baseline]} (sign-flip over seeds, simultaneous over "
              f"{len(tests)} comparisons):")
        for row in tests.itertuples():
            interval = "(too few seeds)" if not row.claimable else f"[{100 * row.low:+.2f}, {100 * row.high:+.2f}]"
            print(f"    {row.method:<6} {row.metric:<8} {100 * row.diff:+7.2f} {interval:>18} "
                  f"{'beyond noise' if row.beyond_noise else 'within noise'}")


def ab_saving(args, windows: list[int], model) -> None:
    """The variance ratio each shared method buys an A/B test, on bench_ab.py's temperature change and its scores
    (length, and E5 to each prompt's greedy answer)."""
    prompts = [group.prompts[0] for group in gcs.load_groups("general")[: args.ab_prompts]]
    references = dict(zip(prompts, gcs.generate(prompts, temperature=0.0, max_new_tokens=args.ab_tokens, model=model),
                          strict=True))
    a, b = gcs.Variant(), gcs.Variant(temperature=0.8)
    print(f"A/B, T 1.0 vs 0.8, {len(prompts)} prompts x {args.ab_seeds} seeds, {args.ab_tokens} tokens: "
          "'fewer' = the seeds IS needs for shared luck's width / the seeds used [95 % F interval]")
    for arm, changes in arms(windows).items():
        if arm == "is":
            continue
        settings = gcs.SamplingSettings(seeds=args.ab_seeds, max_new_tokens=args.ab_tokens, **changes)
        frame = gcs.ab(prompts, a, b, metrics=["length"], settings=settings)
        report = gcs.ab_report(with_reference_scores(frame, references))
        identical = report.pairs.set_index(["method", "score"])["mean"]
        for row in report.effects.itertuples():
            print(f"  {arm:<8} {row.metric:<7} fewer {row.is_seeds / row.n:6.2f}x "
                  f"[{row.is_seeds_low / row.n:.2f}, {row.is_seeds_high / row.n:.2f}]   identical answers "
                  f"{identical[(report.method, 'identical')]:.0%}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", default="general")
    parser.add_argument("--groups", type=int, default=44)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--contexts", default="1,2,4,8")
    parser.add_argument("--ab-prompts", type=int, default=8)
    parser.add_argument("--ab-seeds", type=int, default=16)
    parser.add_argument("--ab-tokens", type=int, default=48)
    args = parser.parse_args()
    windows = contexts(args.contexts)
    model = gcs.load_model()
    print(f"embedded model, {args.groups} groups of {args.sets} x {args.seeds} seeds, {args.tokens} tokens, T = 1; "
          f"ctx windows {windows}", flush=True)
    print_consistency(consistency(args, model), windows)
    if args.ab_prompts:
        ab_saving(args, windows, model)


if __name__ == "__main__":
    main()
