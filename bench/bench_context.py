"""Context-keyed noise ("ctx", docs/context.md) against GCS and GCSwR: consistency, and what it saves an A/B test.

    python bench/bench_context.py [--sets general] [--groups 44] [--seeds 16] [--tokens 64] [--contexts 1,2,4,8]
                                  [--ab-prompts 8] [--ab-seeds 16] [--ab-tokens 48]
                                  [--changes system,temperature,precision,template]

Consistency: every group of the built-in paraphrase sets (the first ``--groups`` of them) is answered with IS, GCS,
GCSwR and "ctx" at each window of ``--contexts`` (``ctx1``, ``ctx2``, ...), seeds 0 .. N-1 at T = 1 on the embedded
model, and scored with E5 and aligned agreement (``gcs.compare_report``). A seed's noise is shared by every group,
so the seed is the unit: each method's score is averaged over the groups within a seed, and the paired verdict
(``gcs.paired_tests``: exact sign-flip, simultaneous over the comparisons) compares every "ctx" window with GCS and
with GCSwR.

A/B (``--ab-prompts 0`` skips it): the kinds of change of ``bench_ab.py`` picked by ``--changes`` (default all:
``system`` prompt, ``temperature`` 1.0 against 0.8, ``precision`` bf16 against fp32, the user turn's ``template``)
and its two scores (length, E5 to each prompt's greedy answer), answered by ``gcs.ab`` under GCS, GCSwR and each
"ctx" window, with one IS control per change (IS draws no noise from the method). Per change, arm and score: the
seeds independent sampling would need for shared luck's width over the seeds used (``is_seeds / n``, with its F
interval), the variance ratio shared luck buys; and per "ctx" arm, the paired comparison with GCS and with GCSwR:
the variance of their per-seed differences over ctx's (above 1, ctx saves more), with the Pitman-Morgan interval
for two variances measured on the same seeds (normal theory; simultaneous over the ``2 x windows`` comparisons of
a change and score). ``--groups 0`` skips the consistency part.

Run it at full size on a quiet machine; a tiny run (``--groups 1 --seeds 2 --tokens 4 --contexts 1 --ab-prompts 1
--ab-seeds 2 --ab-tokens 4``) only checks that it works.
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
import pandas as pd
import scipy.stats
from bench_ab import CHANGES, with_reference_scores  # bench/ is on sys.path when run as a script

import gcs
from gcs.stats.intervals import CONFIDENCE
from gcs.stats.paired import paired_tests

METRICS = ("e5", "aligned")
SHARED = ("gcs", "gcswr")
# --changes' names for bench_ab.py's changes
KINDS = {"system": "system prompt", "temperature": "T 1.0 vs 0.8", "precision": "bf16 vs fp32", "template": "template"}


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


def pitman_morgan(x: np.ndarray, y: np.ndarray, *, confidence: float) -> tuple[float, float, float]:
    """var(x) / var(y) for paired samples (the same seeds), with the Pitman-Morgan interval at ``confidence``: the
    F interval of ``is_seeds`` assumes independent samples, and two methods' differences on one seed's prompts are
    not. Exact for bivariate normal samples; NaN where either has no spread."""
    n = len(x)
    vx, vy = float(np.var(x, ddof=1)), float(np.var(y, ddof=1))
    if n < 3 or not (vx > 0 and vy > 0):  # one without spread: a ratio of 0 or inf, no interval
        ratio = math.nan if n < 3 or vx == vy == 0 else math.inf if vy == 0 else 0.0
        return ratio, math.nan, math.nan
    rho = float(np.corrcoef(x, y)[0, 1])
    t = float(scipy.stats.t.ppf(1 - (1 - confidence) / 2, n - 2))
    k = 1 + 2 * (1 - rho**2) * t**2 / (n - 2)
    ratio = vx / vy
    return ratio, ratio * (k - math.sqrt(k * k - 1)), ratio * (k + math.sqrt(k * k - 1))


def per_seed(frame, labels: list[str]) -> pd.DataFrame:
    """Each score's B - A, averaged over the prompts within each seed (``gcs.ab_report``'s unit), by seed."""
    means = frame.groupby("seed")[[f"{label}_{slot}" for label in labels for slot in "ab"]].mean()
    return pd.DataFrame({label: means[f"{label}_b"] - means[f"{label}_a"] for label in labels})


def ab_change(change: str, prompts: list[str], references: dict[str, str], windows: list[int], args) -> list[dict]:
    """One change under every shared arm (one IS control for them all, as IS draws no noise from the method):
    per arm and score, the seeds saved with its F interval, and per "ctx" arm and score its variance ratio against
    GCS and GCSwR (> 1: ctx saves more), simultaneous over those comparisons."""
    a, b = CHANGES[change]
    frames, control = {}, None
    for arm, changes in arms(windows).items():
        if arm == "is":
            continue
        settings = gcs.SamplingSettings(seeds=args.ab_seeds, max_new_tokens=args.ab_tokens, **changes)
        frame = gcs.ab(prompts, a, b, metrics=["length"], settings=settings, control=control is None)
        frame = with_reference_scores(frame, references)
        if control is None:
            control = frame[frame["method"] == "is"]
            frame = frame[frame["method"] != "is"]
        frames[arm] = frame
    labels = ["length", "e5_ref"]
    differences = {arm: per_seed(frame, labels) for arm, frame in frames.items()}
    family = len(SHARED) * len(windows)
    rows = []
    for arm, frame in frames.items():
        report = gcs.ab_report(pd.concat([frame, control], ignore_index=True))
        identical = report.pairs.set_index(["method", "score"])["mean"][(report.method, "identical")]
        for row in report.effects.itertuples():
            record = {"change": change, "arm": arm, "score": row.metric, "n": row.n, "fewer": row.is_seeds / row.n,
                      "low": row.is_seeds_low / row.n, "high": row.is_seeds_high / row.n, "identical": identical}
            if arm.startswith("ctx"):
                for baseline in SHARED:
                    record[baseline] = pitman_morgan(differences[baseline][row.metric], differences[arm][row.metric],
                                                     confidence=1 - (1 - CONFIDENCE) / family)
            rows.append(record)
    return rows


def ratio_text(ratio: float, low: float, high: float) -> str:
    return "-" if math.isnan(ratio) else f"{ratio:g}x (one has no spread)" if math.isnan(low) else \
        f"{ratio:5.2f}x [{low:.2f}, {high:.2f}]"


def ab_saving(args, windows: list[int], model) -> pd.DataFrame:
    """The variance ratio each shared method buys an A/B test, per kind of change of ``bench_ab.py`` and its scores
    (length, and E5 to each prompt's greedy answer): one table."""
    prompts = [group.prompts[0] for group in gcs.load_groups("general")[: args.ab_prompts]]
    references = dict(zip(prompts, gcs.generate(prompts, temperature=0.0, max_new_tokens=args.ab_tokens, model=model),
                          strict=True))
    print(f"A/B, {len(prompts)} prompts x {args.ab_seeds} seeds, {args.ab_tokens} tokens. 'fewer' = the seeds IS "
          "needs for shared luck's width / the seeds used [95 % F interval]; 'ctx/GCS', 'ctx/GCSwR' = the variance of "
          "the per-seed differences under GCS (GCSwR) over ctx's, paired over seeds [Pitman-Morgan, simultaneous "
          f"95 % over the {len(SHARED) * len(windows)} ctx comparisons of each change and score]: above 1, ctx "
          "saves more", flush=True)
    print(f"  {'change':<14} {'arm':<6} {'score':<7} {'fewer [95 %]':>22} {'identical':>9} "
          f"{'ctx/GCS [95 % simult.]':>24} {'ctx/GCSwR [95 % simult.]':>24}")
    every = []
    for kind in args.changes.split(","):
        start = time.perf_counter()
        rows = ab_change(KINDS[kind.strip()], prompts, references, windows, args)
        for row in rows:
            name = "length" if row["score"] == "length" else "E5 ref"
            fewer = ("inf (no shared spread)" if math.isinf(row["fewer"]) else "- (no IS spread)"
                     if math.isnan(row["fewer"]) else f"{row['fewer']:6.2f}x [{row['low']:.2f}, {row['high']:.2f}]")
            paired = "".join(f" {ratio_text(*row[b]):>24}" for b in SHARED if b in row)
            print(f"  {row['change']:<14} {row['arm']:<6} {name:<7} {fewer:>22} {row['identical']:>9.0%}{paired}")
        print(f"    ({KINDS[kind.strip()]}: {time.perf_counter() - start:.0f} s)", flush=True)
        every += rows
    return pd.DataFrame.from_records(every)


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
    parser.add_argument("--changes", default=",".join(KINDS), help=f"the A/B's kinds of change: some of {list(KINDS)}")
    args = parser.parse_args()
    unknown = [k for k in args.changes.split(",") if k.strip() not in KINDS]
    if unknown:
        parser.error(f"--changes: unknown {unknown}, choose among {list(KINDS)}")
    windows = contexts(args.contexts)
    model = gcs.load_model()
    print(f"embedded model ({model.model.dtype}), ctx windows {windows}", flush=True)
    if args.groups:
        print(f"consistency: {args.groups} groups of {args.sets} x {args.seeds} seeds, {args.tokens} tokens, T = 1",
              flush=True)
        print_consistency(consistency(args, model), windows)
    if args.ab_prompts:
        ab_saving(args, windows, model)


if __name__ == "__main__":
    main()
