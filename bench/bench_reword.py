"""How reliably the embedded model rewords: the fraction of checked rewordings, on the built-in sets.

    python bench/bench_reword.py [--n 2] [--sets general,coding,lists]

For every prompt of each built-in set (all rewordings of every group), ``gcs.reword_report``
asks for ``--n`` rewordings. Prints per set: prompts, candidates sampled, the fraction of
candidates that passed every check (a question, not the prompt itself, E5 cosine to the
prompt >= gcs.rewording.MIN_SIMILARITY), and the fraction of requested rewordings delivered
after retries (target >= 90 %), with a few accepted and rejected examples.
"""

from __future__ import annotations

import argparse
import time

import gcs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=2)
    parser.add_argument("--sets", default="general,coding,lists")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    model = gcs.load_model()
    print("| set | prompts | candidates | accepted candidates | delivered (target >= 90 %) | prompts short | s |")
    print("|---|---|---|---|---|---|---|")
    totals = {"prompts": 0, "candidates": 0, "delivered": 0, "requested": 0, "short": 0}
    for name in args.sets.split(","):
        prompts = list(dict.fromkeys(p for group in gcs.load_groups(name) for p in group.prompts))
        start = time.perf_counter()
        rewordings, report = gcs.reword_report(prompts, n=args.n, model=model, seed=args.seed)
        totals["prompts"] += len(prompts)
        totals["candidates"] += report.candidates
        totals["delivered"] += report.delivered
        totals["requested"] += report.requested
        totals["short"] += len(report.short)
        print(f"| {name} | {len(prompts)} | {report.candidates} | {report.acceptance:.1%} | {report.delivery:.1%} "
              f"| {len(report.short)} | {time.perf_counter() - start:.0f} |")
        for prompt, found in list(zip(prompts, rewordings, strict=True))[:2]:
            print(f"|  | {prompt!r} -> {found!r} | | | | | |")
    print(f"\nall sets: {totals['prompts']} prompts, {totals['candidates']} candidates sampled, "
          f"{totals['delivered']} of {totals['requested']} requested rewordings delivered "
          f"({totals['delivered'] / totals['requested']:.1%}), {totals['short']} prompts left short")


if __name__ == "__main__":
    main()
