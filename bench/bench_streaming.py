"""What the side by side costs to watch: streaming against a plain run, and a run in rounds against one batch.

    python bench/bench_streaming.py [--groups 4] [--seeds 16] [--tokens 64] [--turns 2] [--rounds 4,12] [--beside 0.25]

On the first --groups built-in general groups (3 paraphrases each, IS / GCS / GCSwR, T = 1, the app's defaults), the
contenders take turns (bench/timing.py), each keeping its best time per group:

- ``compare``: the --seeds seeds in one batch, not streamed (what the library's ``gcs.compare`` costs);
- ``stream``: the same rows through ``gcs.stream_compare``, every frame consumed (what the page paid before rounds);
- ``rounds``: the page's work, ``gcs.compare_rounds`` (--rounds: seeds per round, by default the library's 4, 12;
  the first round streamed, every round scored with E5 and aligned agreement, stopping once decided);
- ``table``: ``rounds`` scoring the page's table as well (MiniLM, Jaccard and the common prefix beside the verdict's
  metrics): the library doing the page's work, without the page;
- ``fixed``: ``compare`` then the same scoring of all seeds (the one-batch verdict's work);
- ``page``: the page's whole update path in this process (``ui.tabs.side_by_side.compare.compare_stream`` at the app's
  defaults, the library's rounds: streaming, rounds, the table's four metrics, the degenerate-output check, plots),
  without a server or a browser (``bench/bench_browser.py`` adds those).

It prints per group and as medians: the streaming overhead (stream / compare; goal <= 1.1x), the time until the first
answers exist (the first streamed frame of the rounds run, with every first-seed response started), the time until
the final verdict in rounds against the fixed run (goal: median <= 0.6x), the seeds the rounds used, the page against
the library's rounds (with and without the table's metrics) and the page's first verdict against the library's first
round (goals 1.1x and 1.5x), and E5's share of the fixed run (E5 alone on its answers, timed once).

``GCS_ENGINE=vllm`` runs every contender, the page too, on the vLLM engine (transformers unless set).

--beside SHARE: a light neighbour runs meanwhile, busy for SHARE of every 20 ms on one core (what a browser drawing
the streamed page takes on the same cores: bench/bench_browser.py prints it per round); compare with a run without.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench_load import PART_BUSY  # bench/ is on sys.path when run as a script
from timing import best_in_turns

import gcs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the app's ui package
os.environ.setdefault("GCS_ENGINE", "transformers")  # the page on the engine the library contenders use
from ui import compare as page_compare  # noqa: E402
from ui.shared.deployment import DEFAULT_MODEL, SETTINGS  # noqa: E402
from ui.tabs.side_by_side.verdict import METRICS as TABLE_METRICS  # noqa: E402
from ui.tabs.side_by_side.verdict import VERDICT_METRICS

METRICS = ("e5", "aligned")
ENGINE = SETTINGS.engine  # $GCS_ENGINE (transformers unless set): every contender's, the page's too


def page_run(prompts: list[str], *, tokens: int, seeds: int) -> tuple[float, float]:
    """The page's whole update path in this process at the app's defaults
    (``ui.tabs.side_by_side.compare.compare_stream``, every update consumed): (seconds until its last update, seconds
    until its first verdict)."""
    start, first = time.perf_counter(), None
    for update in page_compare.compare_stream("\n".join(prompts), page_compare.DEFAULT_TEMPERATURE, tokens, 0, 1.0,
                                              list(gcs.METHODS), False, DEFAULT_MODEL, seeds):
        if "verdict" in update and first is None:
            first = time.perf_counter() - start
    return time.perf_counter() - start, first


def library_rounds(prompts: list[str], *, tokens: int, seeds: int, rounds: list[int], model, on_partial=None,
                   engine: str = "transformers"):
    """The library's rounds (``gcs.compare_rounds``, the first round streamed to ``on_partial``, by default to nobody;
    scored with the verdict's metrics): (seconds until the last round, seconds until the first, the last report)."""
    start, first = time.perf_counter(), None
    for update in gcs.compare_rounds(prompts, seeds=seeds, rounds=rounds, max_new_tokens=tokens, model=model,
                                     engine=engine, on_partial=on_partial or (lambda frame: None)):
        first, report = first or time.perf_counter() - start, update
    return time.perf_counter() - start, first, report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=4)
    parser.add_argument("--seeds", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--turns", type=int, default=2)
    parser.add_argument("--rounds", default=",".join(map(str, gcs.stats.sequential.DEFAULT_ROUNDS)))
    parser.add_argument("--beside", type=float, default=0.0,
                        help="a neighbour busy for this share of one core meanwhile (0: none)")
    args = parser.parse_args()
    if not 0 <= args.beside < 1:
        parser.error(f"--beside is a share of one core from 0 up to 1, got {args.beside}")
    neighbour = subprocess.Popen([sys.executable, "-c", PART_BUSY, str(args.beside)]) if args.beside else None
    try:
        measure(args)
    finally:
        if neighbour is not None:
            neighbour.kill()
            neighbour.wait()


def measure(args) -> None:
    rounds = [int(size) for size in args.rounds.split(",")]
    model = gcs.load_model()
    groups = gcs.load_groups("general")[: args.groups]
    settings = gcs.SamplingSettings(seeds=list(range(args.seeds)), temperature=1.0, max_new_tokens=args.tokens)
    print(f"{len(groups)} groups x {args.seeds} seeds x 3 methods x 3 paraphrases x {args.tokens} tokens, "
          f"{model.model.dtype}, engine {ENGINE}, rounds {rounds}, {args.turns} turns each; best time per contender"
          + (f"; beside a neighbour busy for {args.beside:.0%} of one core" if args.beside else ""), flush=True)
    rows = []
    for group in groups:
        prompts = list(group.prompts)
        seen = {}

        # best_in_turns below runs these within this iteration; the defaults only make that binding explicit
        def plain(prompts=prompts, seen=seen):
            seen["answers"] = gcs.compare(prompts, settings=settings, model=model, engine=ENGINE)
            return seen["answers"]

        def streamed(prompts=prompts):
            for update in gcs.stream_compare(prompts, settings=settings, model=model, engine=ENGINE):
                frame = update
            return frame

        def fixed():
            gcs.compare_report(plain(), metrics=METRICS, tokenizer=model.tokenizer)

        def in_rounds(prompts=prompts, seen=seen):
            start = time.perf_counter()
            first = {}

            def partial(frame):
                if "at" not in first and (frame[frame["seed"] == 0]["n_tokens"] > 0).all():
                    first["at"] = time.perf_counter() - start

            _, first_round, report = library_rounds(prompts, tokens=args.tokens, seeds=args.seeds, rounds=rounds,
                                                    model=model, on_partial=partial, engine=ENGINE)
            seen.update(first=first["at"], first_round=first_round, seeds=len(report.seeds), reason=report.reason)

        def with_table(prompts=prompts):
            for _ in gcs.compare_rounds(prompts, seeds=args.seeds, rounds=rounds, max_new_tokens=args.tokens,
                                        model=model, metrics=VERDICT_METRICS, report_metrics=TABLE_METRICS,
                                        engine=ENGINE):
                pass

        def page(prompts=prompts, seen=seen):
            seen["page_first"] = page_run(prompts, tokens=args.tokens, seeds=args.seeds)[1]

        seen.pop("page_first", None)
        best = best_in_turns({"compare": plain, "stream": streamed, "fixed": fixed, "rounds": in_rounds,
                              "table": with_table, "page": page}, args.turns)
        start = time.perf_counter()
        gcs.compare_report(seen["answers"], metrics=("e5",))  # the last plain run's answers: E5 alone on them
        e5 = time.perf_counter() - start
        row = dict(group=group.id, **best, first=seen["first"], seeds=seen["seeds"], e5=e5,
                   first_round=seen["first_round"], page_first=seen["page_first"])
        rows.append(row)
        print(f"  {group.id}: compare {best['compare']:.1f} s, stream {best['stream']:.1f} s "
              f"({best['stream'] / best['compare']:.2f}x), fixed verdict {best['fixed']:.1f} s, rounds "
              f"{best['rounds']:.1f} s ({best['rounds'] / best['fixed']:.2f}x, {seen['seeds']} seeds: "
              f"{seen['reason']}), first answers after {seen['first']:.1f} s, page {best['page']:.1f} s, E5 {e5:.1f} s",
              flush=True)
    ratio = lambda key, base: [r[key] / r[base] for r in rows]  # noqa: E731
    quantile = lambda values, q: sorted(values)[min(len(values) - 1, int(q * len(values)))]  # noqa: E731
    print(f"streaming overhead (stream / compare): median {statistics.median(ratio('stream', 'compare')):.2f}x "
          f"(goal <= 1.1x)")
    in_rounds = ratio("rounds", "fixed")
    print(f"final verdict in rounds / fixed {args.seeds} seeds: median {statistics.median(in_rounds):.2f}x, "
          f"p90 {quantile(in_rounds, 0.9):.2f}x (goal: median <= 0.6x)")
    firsts = [r["first"] for r in rows]
    print(f"first answers (library, no page): median {statistics.median(firsts):.1f} s, p90 "
          f"{quantile(firsts, 0.9):.1f} s; seeds used in rounds: {[r['seeds'] for r in rows]}")
    print(f"the page in-process / the library's rounds: median {statistics.median(ratio('page', 'rounds')):.2f}x, "
          f"/ the rounds scoring the page's table too: {statistics.median(ratio('page', 'table')):.2f}x "
          f"(goal <= 1.1x); "
          f"E5's share of the fixed verdict: median {statistics.median(ratio('e5', 'fixed')):.0%}")
    print(f"first verdict: the page in-process / the library's first round (the last turn of each): median "
          f"{statistics.median(ratio('page_first', 'first_round')):.2f}x (goal <= 1.5x; "
          f"{statistics.median(r['page_first'] for r in rows):.1f} s / "
          f"{statistics.median(r['first_round'] for r in rows):.1f} s)")


if __name__ == "__main__":
    main()
