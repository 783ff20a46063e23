"""Threads per decode step (gcs.engines.threads): torch's thread count throughout vs chosen per step, quiet and
beside another job that keeps the cores busy.

    python bench/bench_threads.py [--tokens 64] [--seeds 4] [--rounds 2]

The side by side (3 paraphrases x 3 methods x --seeds seeds, every response held to --tokens tokens) on the embedded
model, generated in a worker thread as the app does, with ``GCS_THREADS=fixed`` and ``auto`` taking turns: first on
a quiet machine, then beside a process multiplying matrices on torch's threads (bench_load.BUSY). Each keeps its
best of --rounds. Prints the times, auto / fixed for each, and whether every response is the same in all four.
The first auto run beside the busy job also pays for the thread probe of its row count (once per process; the
app probes its default rounds at start). The busy job's effect varies from run to run: compare the two contenders
of one run.

Then, quiet again, the same generation beside a web server's request thread (a long-lived thread of a pool, as
Gradio's) that has just run a parallel region of torch (what the app's coupling explorer does as a page loads):
with that thread's OpenMP team left idle, and let go by ``gcs.runtime.background.releasing_openmp`` (what the
app's handlers do), in turns; prints both and kept / released.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import torch
from bench_load import BUSY  # bench/ is on sys.path when run as a script
from timing import best_in_turns

import gcs
from gcs.runtime.background import Background, releasing_openmp

PARAPHRASES = ["Why is the sky blue?", "What makes the sky look blue?", "Explain the blue colour of the sky."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    model = gcs.load_model()
    settings = gcs.SamplingSettings(seeds=list(range(args.seeds)), max_new_tokens=args.tokens)
    responses = {}

    def contender(name: str, mode: str):
        def run():
            os.environ["GCS_THREADS"] = mode
            job = Background(lambda stop: gcs.compare(PARAPHRASES, settings=settings, model=model,
                                                      min_new_tokens=args.tokens), "bench-threads")
            responses[(name, mode)] = job.result()["response"].tolist()
        return run

    print(f"side by side: {9 * args.seeds} rows x {args.tokens} tokens, embedded model, in a worker thread; "
          f"best of {args.rounds} in turns")
    contender("warm-up", "fixed")()
    times = best_in_turns({("quiet", mode): contender("quiet", mode) for mode in ("fixed", "auto")}, args.rounds)
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        time.sleep(2)
        times.update(best_in_turns({("busy", mode): contender("busy", mode) for mode in ("auto", "fixed")},
                                   args.rounds))
    finally:
        busy.kill()
    for (machine, mode), seconds in times.items():
        print(f"  {machine:<6} {mode:<6} {seconds:7.2f} s")
    for machine in ("quiet", "busy"):
        print(f"{machine}: auto / fixed = {times[(machine, 'auto')] / times[(machine, 'fixed')]:.2f}x")
    same = len({tuple(texts) for key, texts in responses.items() if key[0] != "warm-up"}) == 1
    print(f"every response the same in all four: {'yes' if same else 'NO'}")
    beside_a_request_thread(contender("request thread", "auto"), args.rounds)


def beside_a_request_thread(generate, rounds: int) -> None:
    """``generate`` beside a pool's thread that ran a parallel region just before: its team kept, and let go."""
    def region():
        torch.randn(4_000_000).exp_()  # a parallel region: the calling thread's OpenMP team gets a worker thread

    with ThreadPoolExecutor(1) as pool:
        def after(request):
            def run():
                pool.submit(request).result()
                generate()
            return run

        times = best_in_turns({"team kept": after(region), "team released": after(releasing_openmp(region))}, rounds)
    for name, seconds in times.items():
        print(f"  beside a request thread, its {name:<13} {seconds:7.2f} s")
    print(f"beside a request thread: kept / released = {times['team kept'] / times['team released']:.2f}x")


if __name__ == "__main__":
    main()
