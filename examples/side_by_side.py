"""Side by side: IS and GCSwR answer the same paraphrases over several seeds, scored and judged seed by seed.

One seed's answers prove nothing (luck can make any one comparison look good or bad), so the verdict compares the
methods on every seed (paired) with the exact sign-flip test, and says "within noise" when the seeds do not support
more.

    python examples/side_by_side.py                                   # the README's paraphrases, 8 seeds
    python examples/side_by_side.py --seeds 12 --tokens 64 "Why is the sky blue?" "What makes the sky blue?"
"""

import argparse

import gcs

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("paraphrases", nargs="*",
                    default=["What is DNA?", "Can you explain what DNA is?", "Describe the molecule called DNA."])
parser.add_argument("--seeds", type=int, default=8, help="seeds, each one paired observation (default 8)")
parser.add_argument("--tokens", type=int, default=32, help="new tokens per answer at most (default 32)")
args = parser.parse_args()

frame = gcs.compare(args.paraphrases, methods="is,gcswr", seeds=args.seeds, max_new_tokens=args.tokens)
report = gcs.compare_report(frame, metrics=("e5", "aligned"), tokenizer=gcs.load_model().tokenizer)

for method in ("is", "gcswr"):
    print(f"{gcs.METHOD_NAMES[method]}, seed 0:")
    for response in frame[(frame["method"] == method) & (frame["seed"] == 0)]["response"]:
        print(f"  {response!r}")
print(f"\nconsistency, mean over {args.seeds} seeds:")
print(report.table.round(3).to_string(index=False))
print("\nverdict:")
print("\n".join(gcs.verdict(report.scores)))
