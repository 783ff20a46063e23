"""Shared luck for A/B: how much narrower a change's effect is measured when both arms share their noise.

    python bench/bench_ab.py [--prompts 8] [--seeds 16] [--tokens 48] [--engine transformers|vllm] [--method gcswr|gcs]

Four real changes on the embedded model, arm A against arm B (``gcs.ab``, GCSwR, with its IS control):
a system prompt (none against "Answer in one sentence."), the temperature (1.0 against 0.8), the precision
(bfloat16 against float32) and the user turn's template (the bare prompt against "Question: " before it and
"Answer briefly." on a line after it). Two scores: the answer's length in tokens, and its E5 similarity to a
reference answer (each prompt's own: the embedded model's greedy answer at bf16). The prompts are the first prompt of
each of the first ``--prompts`` groups of the built-in "general" set (different questions).

For each change and score: the effect B - A under shared luck and its interval (``gcs.ab_report``: simultaneous
over the two scores, seeds as the unit), the interval's width under shared luck and under independent sampling at
the same seeds, their ratio, and the seeds independent sampling would need for shared luck's width
(``seeds x (sd_is / sd_shared)²``, an estimate from the two spreads). The goal: at least 2x fewer seeds
(``IS seeds / seeds >= 2``) for every change whose effect is not zero (the change moved the score on some seed; whether
the effect is beyond noise at these seeds is printed too). Also the
share of seeds whose two answers are identical under each change (bf16 against fp32 should be high: a user sees where
precision matters).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import gcs
from gcs.scoring.metrics import embedder

CHANGES = {
    "system prompt": (gcs.Variant(), gcs.Variant(system="Answer in one sentence.")),
    "T 1.0 vs 0.8": (gcs.Variant(), gcs.Variant(temperature=0.8)),
    "bf16 vs fp32": (gcs.Variant(dtype="bfloat16"), gcs.Variant(dtype="float32")),
    "template": (gcs.Variant(), gcs.Variant(template="Question: {prompt}\nAnswer briefly.")),
}
GOAL = 2.0


def with_reference_scores(frame, references: dict[str, str]):
    """The frame with arm scores ``e5_ref_a``/``e5_ref_b``: each answer's E5 similarity to its prompt's reference."""
    texts = list(references.values())
    vectors = embedder("e5")(texts + list(frame["answer_a"]) + list(frame["answer_b"]))
    reference = dict(zip(references, np.asarray(vectors[: len(texts)], dtype=np.float64), strict=True))
    answers = np.asarray(vectors[len(texts):], dtype=np.float64).reshape(2, len(frame), -1)
    wanted = np.stack([reference[p] for p in frame["prompt"]])
    scored = frame.assign(e5_ref_a=(answers[0] * wanted).sum(axis=1), e5_ref_b=(answers[1] * wanted).sum(axis=1))
    scored.attrs = dict(frame.attrs)
    return scored


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--engine", default="transformers", choices=gcs.ENGINES)
    parser.add_argument("--method", default="gcswr", choices=["gcswr", "gcs"],
                        help="the shared luck (GCS keeps each position's noise shared after the answers part)")
    args = parser.parse_args()
    prompts = [group.prompts[0] for group in gcs.load_groups("general")[: args.prompts]]
    greedy = gcs.generate(prompts, temperature=0.0, max_new_tokens=args.tokens, model=gcs.load_model(dtype="bfloat16"))
    references = dict(zip(prompts, greedy, strict=True))
    print(f"embedded model, {len(prompts)} prompts x {args.seeds} seeds, {args.tokens} tokens, engine {args.engine}; "
          f"{gcs.METHOD_NAMES[args.method]} (shared luck) against IS (independent); "
          "widths: simultaneous 95 % intervals over 2 scores")
    print(f"  {'change':<14} {'score':<7} {'effect B-A (shared)':>27} {'noise':>7} {'width shared':>12} "
          f"{'width IS':>9} {'IS/shared':>9} {'IS seeds':>8} {'fewer':>6} {'goal':>5} {'identical':>17}")
    met, counted = 0, 0
    for change, (a, b) in CHANGES.items():
        start = time.perf_counter()
        frame = gcs.ab(prompts, a, b, seeds=args.seeds, method=args.method, metrics=["length"],
                       max_new_tokens=args.tokens, engine=args.engine)
        report = gcs.ab_report(with_reference_scores(frame, references))
        seconds = time.perf_counter() - start
        identical = report.pairs.set_index(["method", "score"])["mean"]
        same = f"{identical[(args.method, 'identical')]:.0%} (IS {identical[('is', 'identical')]:.0%})"
        for row in report.effects.itertuples():
            scale = 1 if row.metric == "length" else 100
            # an interval over differences with no spread has width 0 (paired_tests then gives none: NaN)
            shared, independent = (np.nan_to_num((high - low) * scale) for low, high in
                                   ((row.low, row.high), (row.control_low, row.control_high)))
            ratio = independent / shared if shared else (float("inf") if independent else float("nan"))
            fewer = row.is_seeds / row.n
            moved = bool(row.sd > 0 or row.diff != 0)  # the change moved this score on some seed: not a zero effect
            verdict = "-" if not moved else "yes" if fewer >= GOAL else "NO"
            met, counted = met + (verdict == "yes"), counted + moved
            name = "length" if row.metric == "length" else "E5 ref"
            interval = f"{scale * row.diff:+.2f} " + (
                "(too few seeds)" if not row.claimable else "(no spread)" if not row.sd > 0 else
                f"[{scale * row.low:+.2f}, {scale * row.high:+.2f}]")
            print(f"  {change:<14} {name:<7} {interval:>27} {'beyond' if row.beyond_noise else 'within':>7} "
                  f"{shared:>12.2f} {independent:>9.2f} {ratio:>8.2f}x {row.is_seeds:>8.1f} {fewer:>5.1f}x "
                  f"{verdict:>5} {same:>17}")
        print(f"    ({change}: {seconds:.0f} s; E5 in points x100; 'fewer' = IS seeds / {args.seeds}; "
              f"goal >= {GOAL:g}x where the effect is not zero)")
    print(f"goal (IS needs >= {GOAL:g}x the seeds) met for {met} of {counted} (change, score) pairs whose effect is "
          f"not zero (the change moved the score on some seed)")


if __name__ == "__main__":
    main()
