"""Sampler-only cost per token: gcs's batched samplers next to a per-sequence Algorithm 1.

Prints, for each vocabulary size, the cost of one token for one row (batch of 12
rows, 64-token responses, state set-up included and spread over the 64 tokens) and the
ratios measured side by side in this one run:

    python bench/bench_sampler.py [--tokens 64] [--batch 12] [--rounds 5]

Contenders take turns, one run each per round, and each keeps its best round (see
bench/timing.py: this machine's speed drifts over minutes). Two seed layouts of the
batch: every row its own seed (the worst case for the Gumbel methods: every row hashes
its own noise), and 3 paraphrases per seed (how sweeps batch: rows that share a seed
share one hash).

"gcswr+1 done" is GCSwR with one row finished, as ``generate`` calls it (the processor
passes which rows are still running).

Targets (issue "Core library"): gcswr <= 1.5x is; gcswr >= 50x faster than per-sequence.
"""

from __future__ import annotations

import argparse
import functools

import numpy as np
import torch
from timing import best_in_turns  # bench/ is on sys.path when run as a script

import gcs


class PerSequenceRecycler:
    """Algorithm 1 written plainly for one sequence: a pre-drawn [vocab, memory] Gumbel table and counters."""

    def __init__(self, seed: int, vocab: int, memory: int = 100):
        self.table = torch.from_numpy(np.random.default_rng(seed).gumbel(size=(vocab, memory))).float()
        self.counters = torch.zeros(vocab, dtype=torch.long)

    def sample(self, logprobs: torch.Tensor) -> int:
        current = self.table.gather(1, self.counters[:, None]).squeeze(1)
        k = int(torch.argmax(current + logprobs))
        # Q^-1 is the Gumbel CDF exp(-exp(-x)); Q its inverse -log(-log u).
        cdf = torch.exp(-torch.exp(-current))
        scale = torch.exp(-torch.exp(-(current[k] + logprobs[k] - logprobs)))
        recycled = -torch.log(-torch.log(cdf / scale))
        self.table.scatter_(1, self.counters[:, None], recycled[:, None])
        self.counters[k] += 1
        return k


def run_batched(method: str, logits: list[torch.Tensor], seeds: list[int], active: torch.Tensor | None = None) -> None:
    """One response of len(logits) tokens for the whole batch, state set-up included."""
    sampler = gcs.make_sampler(method, seed=seeds)
    for step in logits:
        sampler.sample(step, active=active)


def run_per_sequence(logits: list[torch.Tensor], seeds: list[int]) -> None:
    for row, seed in enumerate(seeds):
        recycler = PerSequenceRecycler(seed=seed, vocab=logits[0].shape[1])
        for step in logits:
            recycler.sample(step[row])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--paraphrases", type=int, default=3, help="rows per seed in the shared-seed layout")
    parser.add_argument("--rounds", type=int, default=5, help="each contender keeps its best of this many turns")
    parser.add_argument("--vocab", type=int, nargs="+", default=[49_152, 128_256])
    args = parser.parse_args()
    layouts = {
        "own seeds": list(range(args.batch)),
        f"{args.paraphrases} per seed": [row // args.paraphrases for row in range(args.batch)],
    }
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, {args.tokens} tokens")
    print(f"{'vocab':>8} {'layout':>12} {'method':>13} {'us/token/row':>13}")
    for vocab in args.vocab:
        generator = torch.Generator().manual_seed(vocab)
        logits = [
            torch.log_softmax(torch.randn(args.batch, vocab, generator=generator) * 3, -1) for _ in range(args.tokens)
        ]
        contenders = {
            (layout, method): functools.partial(run_batched, method, logits, seeds)
            for layout, seeds in layouts.items()
            for method in gcs.METHODS
        }
        # As generate calls it: GumbelLogitsProcessor passes which rows are still running.
        one_finished = torch.arange(args.batch) > 0
        contenders["own seeds", "gcswr+1 done"] = functools.partial(
            run_batched, "gcswr", logits, layouts["own seeds"], one_finished
        )
        contenders["own seeds", "per-sequence"] = functools.partial(run_per_sequence, logits, layouts["own seeds"])
        best = best_in_turns(contenders, rounds=args.rounds)
        per_token = {name: seconds / (args.tokens * args.batch) for name, seconds in best.items()}
        for (layout, method), seconds in per_token.items():
            print(f"{vocab:>8} {layout:>12} {method:>13} {seconds * 1e6:>13.1f}")
        per_sequence = per_token["own seeds", "per-sequence"]
        for layout in layouts:
            gcswr, independent = per_token[layout, "gcswr"], per_token[layout, "is"]
            print(
                f"{vocab:>8} {layout:>12} ratios: gcswr/is = {gcswr / independent:.2f} (target <= 1.5), "
                f"per-sequence/gcswr = {per_sequence / gcswr:.0f}x (target >= 50)"
            )


if __name__ == "__main__":
    main()
