"""The verdict in rounds: how many seeds a question needs, how often it is decided, and the error over every look.

    python bench/bench_rounds.py collect [--sets general] [--seeds 32] [--tokens 64] [--cache runs/rounds.csv]
    python bench/bench_rounds.py evaluate [--cache runs/rounds.csv] [--null-runs 4000] [--timing]

``collect`` answers every group of the paraphrase sets with IS, GCS and GCSwR, and with two more IS arms on
other seeds (``is2``, ``is3``: real null pairs, independent sampling against independent sampling), seeds 0 .. N-1
at T = 1, and appends each group's per-seed E5 and aligned-agreement scores to the cache as it finishes (a stopped
run resumes where it was). ``evaluate`` replays the side by side's sequential verdict (``gcs.sequential_tests``)
on the cached scores, round by round, for several plans (rounds, futility), against the fixed 16-seed verdict
(``gcs.stats.paired.paired_tests``): per plan, the share of groups where GCSwR's gain over IS is claimed under each
metric, the seeds used until the verdict (median, p90; time follows seeds: a round's rows run as one batch), and the
familywise false-claim rate on the real null pairs (the family ``is2``, ``is3`` against ``is``); then the same rate
over ``--null-runs`` simulated null families of four comparisons for each shape of per-seed scores (normal, tied,
heavy-tailed, two-humped), for the default plan and the fixed verdict.

``--timing`` also prints each plan's time until the verdict against the fixed 16 seeds (median over groups): one
round of each size the plans use (4, 8, 12, 16 seeds; IS, GCS, GCSwR x the first general group's paraphrases x
``--tokens`` tokens, scored with E5 and aligned agreement, as the page runs a round) is timed on this machine (after a
warm-up round; sizes in turns, each its best of two), and a plan's time on a group is the sum of its rounds until it
stops. Then the frontier: the plans that no other plan beats on time and on both decided shares at once.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from timing import best_in_turns  # bench/ is on sys.path when run as a script

import gcs
from gcs.stats.paired import paired_tests
from gcs.stats.sequential import sequential_plan, sequential_tests

METRICS = ("e5", "aligned")
NULL_ARMS = {"is2": 10_000, "is3": 20_000}  # IS on other seeds: the same method, other luck


def collect(args) -> None:
    cache = Path(args.cache)
    done = set(pd.read_csv(cache)["group"].astype(str)) if cache.exists() else set()
    model = gcs.load_model()
    groups = [g for name in args.sets.split(",") for g in gcs.load_groups(name)]
    seeds = list(range(args.seeds))
    print(f"collecting {len(groups)} groups x {args.seeds} seeds, {args.tokens} tokens, T = 1, {model.model.dtype}; "
          f"{len(done)} groups cached in {cache}", flush=True)
    for group in groups:
        if str(group.id) in done:
            continue
        start = time.perf_counter()
        settings = gcs.SamplingSettings(seeds=seeds, temperature=1.0, max_new_tokens=args.tokens)
        frames = [gcs.compare(list(group.prompts), settings=settings, model=model)]
        for arm, offset in NULL_ARMS.items():
            null = gcs.compare(list(group.prompts), settings=settings.replace(methods=["is"],
                                                                               seeds=[s + offset for s in seeds]),
                               model=model)
            frames.append(null.assign(method=arm, seed=null["seed"] - offset))
        report = gcs.compare_report(pd.concat(frames, ignore_index=True), metrics=METRICS, tokenizer=model.tokenizer)
        scores = report.scores.assign(group=str(group.id))
        scores.to_csv(cache, mode="a", header=not cache.exists(), index=False)
        print(f"  group {group.id}: {time.perf_counter() - start:.0f} s", flush=True)


def replay(scores: pd.DataFrame, plan, baseline: str = "is") -> tuple[pd.DataFrame, int]:
    """The sequential verdict as the page would run it on one group: after each look, stop once nothing is open."""
    for k, n in enumerate(plan.looks[: plan.maximum + 1]):
        tests = sequential_tests(scores[scores["seed"] < n], plan=plan, baseline=baseline, metrics=METRICS)
        if k == plan.maximum or not (tests["status"] == "open").any():
            return tests, n
    raise AssertionError("unreachable: the run's last look ends it")


def round_times(sizes, tokens: int, turns: int = 2) -> dict[int, float]:
    """Seconds for one round of each size: generation and scoring, as the page runs a round (first general group);
    after a warm-up round (loading E5, first calls), sizes in turns, each its best of ``turns``."""
    model = gcs.load_model()
    prompts = list(gcs.load_groups("general")[0].prompts)

    def one_round(size: int) -> None:
        frame = gcs.compare(prompts, seeds=list(range(size)), temperature=1.0, max_new_tokens=tokens, model=model)
        gcs.compare_report(frame, metrics=METRICS, tokenizer=model.tokenizer)

    one_round(1)
    times = best_in_turns({size: lambda size=size: one_round(size) for size in sorted(set(sizes))}, rounds=turns)
    print(f"one round (best of {turns}): " + ", ".join(f"{size} seeds {seconds:.1f} s"
                                                       for size, seconds in times.items()), flush=True)
    return times


def evaluate(args) -> None:
    scores = pd.read_csv(args.cache, dtype={"group": str})
    groups = list(dict.fromkeys(scores["group"]))
    available = int(scores["seed"].max()) + 1
    print(f"{len(groups)} groups, {available} seeds each, from {args.cache}")
    plans = {f"{'+'.join(map(str, rounds))}, fut. {futility:g}, {spending}": (16, rounds, futility, spending)
             for spending in ("floor-first", "proportional") for rounds in ((4, 4, 8), (4, 12), (8, 8), (4, 4, 4, 4))
             for futility in (0.0, 0.1, 0.2)}
    # cheaper maxima: the time goal (0.6x of the fixed 16 seeds) against what they decide
    plans.update({f"{'+'.join(map(str, rounds))} (max {maximum}), fut. 0.1, {spending}": (maximum, rounds, 0.1,
                                                                                          spending)
                  for spending in ("floor-first", "proportional") for maximum, rounds in ((8, (8,)), (8, (4, 4)),
                                                                                          (12, (4, 8)))})
    sizes = {16, *(size for maximum, rounds, _, _ in plans.values()
                   for size in round_sizes(sequential_plan(maximum, rounds=rounds)))}  # 16: the fixed run, one batch
    times = round_times(sizes, args.tokens) if args.timing else None
    print(f"  {'plan':<44} {'GCSwR>IS E5':>12} {'aligned':>9} {'seeds median':>13} {'p90':>5} {'null claims':>12}"
          + (f" {'time/fixed':>11}" if times else ""))
    fixed = {"e5": 0, "aligned": 0, "null": 0}
    for group in groups:
        part = scores[(scores["group"] == group) & (scores["seed"] < 16)]
        family = paired_tests(part[part["method"].isin(gcs.METHODS)], metrics=METRICS).set_index(["method", "metric"])
        for metric in METRICS:
            fixed[metric] += bool(family.loc[("gcswr", metric), "beyond_noise"] and family.loc[("gcswr", metric),
                                                                                              "diff"] > 0)
        nulls = paired_tests(part[part["method"].isin(["is", *NULL_ARMS])], metrics=METRICS)
        fixed["null"] += bool(nulls["beyond_noise"].any())

    def share(count):
        return f"{count / len(groups):.0%} ({count}/{len(groups)})"

    print(f"  {'fixed 16 seeds (t / sign-flip)':<44} {share(fixed['e5']):>12} {share(fixed['aligned']):>9} "
          f"{16:>13} {16:>5} {share(fixed['null']):>12}" + (f" {1:>10.2f}x" if times else ""))
    points = {"fixed 16 seeds": (1.0, fixed["e5"], fixed["aligned"])}
    for name, (maximum, rounds, futility, spending) in plans.items():
        plan = sequential_plan(maximum, rounds=rounds, futility=futility, spending=spending)
        claimed, used, null_claims = {"e5": 0, "aligned": 0}, [], 0
        for group in groups:
            part = scores[scores["group"] == group]
            tests, n = replay(part[part["method"].isin(gcs.METHODS)], plan)
            used.append(n)
            tests = tests.set_index(["method", "metric"])
            for metric in METRICS:
                claimed[metric] += bool(tests.loc[("gcswr", metric), "beyond_noise"]
                                        and tests.loc[("gcswr", metric), "diff"] > 0)
            null_tests, _ = replay(part[part["method"].isin(["is", *NULL_ARMS])], plan)
            null_claims += bool(null_tests["beyond_noise"].any())
        ratio = np.median([plan_time(plan, n, times) for n in used]) / times[16] if times else None
        print(f"  {name:<44} {share(claimed['e5']):>12} {share(claimed['aligned']):>9} {np.median(used):>13g} "
              f"{np.percentile(used, 90):>5g} {share(null_claims):>12}" + (f" {ratio:>10.2f}x" if times else ""),
              flush=True)
        points[name] = (ratio, claimed["e5"], claimed["aligned"])
    if times:
        frontier = [name for name, point in points.items()
                    if not any(other[0] <= point[0] and other[1] >= point[1] and other[2] >= point[2]
                               and other != point for other in points.values())]
        print("frontier (no plan is faster and decides at least as much under both metrics):")
        for name in sorted(frontier, key=lambda name: points[name][0]):
            ratio, e5, aligned = points[name]
            print(f"  {ratio:.2f}x  GCSwR > IS claimed: E5 {share(e5)}, aligned {share(aligned)}  {name}")
    if args.null_runs:
        simulate_nulls(args.null_runs)


def round_sizes(plan, seeds_used: int | None = None) -> list[int]:
    """The seeds of each round a run of ``plan`` makes until ``seeds_used`` (default: its maximum)."""
    looks = [0, *[n for n in plan.looks[: plan.maximum + 1] if seeds_used is None or n <= seeds_used]]
    return [after - before for before, after in zip(looks[:-1], looks[1:], strict=True)]


def plan_time(plan, seeds_used: int, times: dict[int, float]) -> float:
    """Seconds for a run that stopped at ``seeds_used``: its rounds, each one batch of its size."""
    return sum(times[size] for size in round_sizes(plan, seeds_used))


SHAPES = {
    "normal": lambda rng, size: rng.normal(0.8, 0.05, size),
    "tied": lambda rng, size: rng.choice([0.5, 0.75, 1.0], size),
    "heavy-tailed": lambda rng, size: 0.8 + 0.02 * rng.standard_t(2, size),
    "two-humped": lambda rng, size: rng.beta(0.3, 0.3, size),
}


def simulate_nulls(runs: int) -> None:
    """Familywise false-claim rate of the default plan (every look, stopping as the page does) and of the fixed
    16-seed verdict, on null families: IS and two methods scored alike (exchangeable), two metrics."""
    plan = sequential_plan(16)
    print(f"simulated nulls ({runs} families of 4 comparisons each; nominal at most 5 %):")
    for shape, draw in SHAPES.items():
        rng = np.random.default_rng(0)
        sequential_claims = fixed_claims = 0
        for _ in range(runs):
            records = [dict(method=method, seed=seed, metric=metric, consistency=float(value))
                       for method in ("is", "a", "b") for metric in METRICS
                       for seed, value in enumerate(draw(rng, 16))]
            scores = pd.DataFrame.from_records(records)
            tests, _ = replay(scores, plan)
            sequential_claims += bool(tests["beyond_noise"].any())
            fixed_claims += bool(paired_tests(scores, metrics=METRICS)["beyond_noise"].any())
        print(f"  {shape:<13} sequential {sequential_claims / runs:6.2%}   fixed 16 seeds {fixed_claims / runs:6.2%}",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["collect", "evaluate"])
    parser.add_argument("--sets", default="general")
    parser.add_argument("--seeds", type=int, default=32)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--cache", default="runs/rounds.csv")
    parser.add_argument("--null-runs", type=int, default=4000)
    parser.add_argument("--timing", action="store_true", help="time one round of each size: each plan's time")
    args = parser.parse_args()
    Path(args.cache).parent.mkdir(parents=True, exist_ok=True)
    collect(args) if args.command == "collect" else evaluate(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
