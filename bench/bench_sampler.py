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

"gcswr" is what the library runs by default: on CPU the fused kernel of ``gcs.sampling.kernels``
(compiled before timing starts). "gcswr eager" is the same sampler in eager torch
(``GCS_CPU_KERNEL=off``, the path without a C++ compiler). "gcswr+1 done" is GCSwR with one
row finished, as ``generate`` calls it (the processor passes which rows are still running).

Each contender also runs a 1-token response, which splits its cost the way the issue
quotes the per-sequence version's: a cost per token (the 64-token run minus the 1-token
run, over 63 tokens) and a set-up per response (the 1-token run minus one token's cost:
hashing the noise, or drawing the per-sequence table).

Targets (issue "Core library"): gcswr <= 1.5x is; gcswr >= 50x faster than per-sequence.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
from unittest import mock

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


def run_batched(
    method: str, logits: list[torch.Tensor], seeds: list[int], active: torch.Tensor | None = None, kernel: str = "auto"
) -> None:
    """One response of len(logits) tokens for the whole batch, state set-up included."""
    with mock.patch.dict(os.environ, {gcs.sampling.kernels.KERNEL_ENV: kernel}):
        sampler = gcs.make_sampler(method, seed=seeds)
        for step in logits:
            sampler.sample(step, active=active)


def run_per_sequence(logits: list[torch.Tensor], seeds: list[int]) -> None:
    for row, seed in enumerate(seeds):
        recycler = PerSequenceRecycler(seed=seed, vocab=logits[0].shape[1])
        for step in logits:
            recycler.sample(step[row])


def contenders_for(logits: list[torch.Tensor], layouts: dict[str, list[int]]) -> dict:
    """The runs to time for one response of len(logits) tokens, keyed by (layout, contender)."""
    contenders = {
        (layout, method): functools.partial(run_batched, method, logits, seeds)
        for layout, seeds in layouts.items()
        for method in gcs.METHODS
    }
    # As generate calls it: GumbelLogitsProcessor passes which rows are still running.
    own_seeds = layouts["own seeds"]
    one_finished = torch.arange(len(own_seeds)) > 0
    contenders["own seeds", "gcswr+1 done"] = functools.partial(run_batched, "gcswr", logits, own_seeds, one_finished)
    contenders["own seeds", "gcswr eager"] = functools.partial(run_batched, "gcswr", logits, own_seeds, kernel="off")
    contenders["own seeds", "per-sequence"] = functools.partial(run_per_sequence, logits, own_seeds)
    return contenders


@dataclasses.dataclass(frozen=True)
class Cost:
    """One contender's seconds per row: per token amortised over the response, and split in two."""

    amortised: float  # the whole response, set-up included, over its tokens
    per_token: float  # one more token
    set_up: float  # the response's cost before its first token

    @classmethod
    def split(cls, one_token: float, whole: float, tokens: int, batch: int) -> Cost:
        """From the best seconds of a 1-token run and a ``tokens``-token run of ``batch`` rows."""
        per_token = (whole - one_token) / (tokens - 1) / batch
        return cls(whole / tokens / batch, per_token, one_token / batch - per_token)


def ratio(numerator: float, denominator: float, digits: int = 2, unit: str = "") -> str:
    # Split costs of tiny runs can come out <= 0 (timing noise): say so rather than print a meaningless ratio.
    return f"{numerator / denominator:.{digits}f}{unit}" if numerator > 0 and denominator > 0 else "n/a"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64, help="tokens per response (>= 2)")
    parser.add_argument("--batch", type=int, default=12)
    parser.add_argument("--paraphrases", type=int, default=3, help="rows per seed in the shared-seed layout")
    parser.add_argument("--rounds", type=int, default=5, help="each contender keeps its best of this many turns")
    parser.add_argument("--vocab", type=int, nargs="+", default=[49_152, 128_256])
    args = parser.parse_args()
    if args.tokens < 2:
        parser.error("--tokens must be >= 2: the per-token cost is the difference to a 1-token response")
    layouts = {
        "own seeds": list(range(args.batch)),
        f"{args.paraphrases} per seed": [row // args.paraphrases for row in range(args.batch)],
    }
    gcs.sampling.kernels.cpu_kernel()  # compile (or load) the fused kernel now, not inside a timed run
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, batch {args.batch}, {args.tokens} tokens")
    print(gcs.sampling.kernels.kernel_status())
    print("us/token/row: amortised over the response; per token: one more token; set-up: per response and row")
    print(f"{'vocab':>8} {'layout':>12} {'contender':>13} {'us/token/row':>13} {'per token':>10} {'set-up ms':>10}")
    for vocab in args.vocab:
        generator = torch.Generator().manual_seed(vocab)
        logits = [
            torch.log_softmax(torch.randn(args.batch, vocab, generator=generator) * 3, -1) for _ in range(args.tokens)
        ]
        whole, first = contenders_for(logits, layouts), contenders_for(logits[:1], layouts)
        best = best_in_turns({**{(*name, "first"): run for name, run in first.items()}, **whole}, rounds=args.rounds)
        costs = {name: Cost.split(best[(*name, "first")], best[name], args.tokens, args.batch) for name in whole}
        for (layout, contender), cost in costs.items():
            print(
                f"{vocab:>8} {layout:>12} {contender:>13} {cost.amortised * 1e6:>13.1f} "
                f"{cost.per_token * 1e6:>10.1f} {cost.set_up * 1e3:>10.3f}"
            )
        per_sequence, eager = costs["own seeds", "per-sequence"], costs["own seeds", "gcswr eager"]
        own_is, own_gcswr = costs["own seeds", "is"], costs["own seeds", "gcswr"]
        print(
            f"{vocab:>8} {'own seeds':>12} gcswr eager/is = {ratio(eager.amortised, own_is.amortised)}, "
            f"gcswr eager/gcswr = {ratio(eager.amortised, own_gcswr.amortised)}"
        )
        for layout in layouts:
            gcswr, independent = costs[layout, "gcswr"], costs[layout, "is"]
            print(
                f"{vocab:>8} {layout:>12} ratios: gcswr/is = {ratio(gcswr.amortised, independent.amortised)} "
                f"(per token {ratio(gcswr.per_token, independent.per_token)}; target <= 1.5), "
                f"per-sequence/gcswr = {ratio(per_sequence.amortised, gcswr.amortised, 0, 'x')} "
                f"(per token {ratio(per_sequence.per_token, gcswr.per_token, 0, 'x')}, "
                f"set-up {ratio(per_sequence.set_up, gcswr.set_up, 0, 'x')}; target >= 50)"
            )


if __name__ == "__main__":
    main()
