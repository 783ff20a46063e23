"""Sampler-only cost per token: gcs's batched samplers next to a per-sequence Algorithm 1.

Prints, for each vocabulary size, the cost of one token for one row (batch of 12
rows, 64-token responses, state set-up included and spread over the 64 tokens) and the
ratios measured side by side in this one run:

    python bench/bench_sampler.py [--tokens 64] [--batch 12] [--repeats 3]

Targets (issue "Core library"): gcswr <= 1.5x is; gcswr >= 50x faster than per-sequence.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

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


def time_batched(method: str, logits: list[torch.Tensor], batch: int) -> float:
    """Seconds for one response of len(logits) tokens for the whole batch (state set-up included)."""
    sampler = gcs.make_sampler(method, seed=list(range(batch)))
    start = time.perf_counter()
    for step in logits:
        sampler.sample(step)
    return time.perf_counter() - start


def time_per_sequence(logits: list[torch.Tensor], batch: int) -> float:
    start = time.perf_counter()
    for row in range(batch):
        recycler = PerSequenceRecycler(seed=row, vocab=logits[0].shape[1])
        for step in logits:
            recycler.sample(step[row])
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--repeats", type=int, default=3, help="best of this many runs per measurement")
    parser.add_argument("--vocab", type=int, nargs="+", default=[49_152, 128_256])
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, {args.tokens} tokens")
    print(f"{'vocab':>8} {'method':>14} {'us/token/row':>13}")
    for vocab in args.vocab:
        generator = torch.Generator().manual_seed(vocab)
        logits = [torch.log_softmax(torch.randn(args.batch, vocab, generator=generator) * 3, -1) for _ in range(args.tokens)]
        per_token = {}
        for method in gcs.METHODS:
            best = min(time_batched(method, logits, args.batch) for _ in range(args.repeats))
            per_token[method] = best / (args.tokens * args.batch)
        per_token["per-sequence"] = time_per_sequence(logits, args.batch) / (args.tokens * args.batch)
        for name, seconds in per_token.items():
            print(f"{vocab:>8} {name:>14} {seconds * 1e6:>13.1f}")
        print(
            f"{vocab:>8} ratios: gcswr/is = {per_token['gcswr'] / per_token['is']:.2f} (target <= 1.5), "
            f"per-sequence/gcswr = {per_token['per-sequence'] / per_token['gcswr']:.0f}x (target >= 50)"
        )


if __name__ == "__main__":
    main()
