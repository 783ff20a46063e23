"""The vLLM plugin's cost per engine step, without an engine: ``GumbelSamplingV1.apply`` on a full batch of rows
against the floor, gcs's sampler on the same rows with their state already in one tensor.

    python bench/bench_plugin_step.py [--rows 48,256] [--vocab 49152] [--steps 16] [--rounds 3] [--method gcswr]

The plugin keeps each request's state across steps (GCSwR's residual noise and draw counts), follows vLLM's
batch updates, and hands each row's draw to the sampler; the floor is only the warp and the draw. Their ratio is
what the plugin adds per step. Contenders run in turns (best of ``--rounds``); logits are random, rows sample with
temperature 1. Compare two commits with the same command on one machine.
"""

from __future__ import annotations

import argparse
import os
import sys
from types import SimpleNamespace

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing import best_in_turns  # noqa: E402  (bench/ is on sys.path when run as a script)
from vllm.v1.sample.logits_processor import BatchUpdate  # noqa: E402

from gcs.sampling.processor import make_warpers  # noqa: E402
from gcs.sampling.samplers import make_sampler  # noqa: E402
from gcs.vllm.plugin import GumbelSamplingProcessor, sampling_params, token_stream  # noqa: E402

CONFIG = SimpleNamespace(speculative_config=None)


def prompt(row: int) -> list[int]:
    return [1, 2, row]


def plugin_steps(rows: int, vocab: int, steps: int, method: str):
    """A function that runs ``steps`` engine steps of ``rows`` requests through a fresh V1 processor; it returns each
    request's tokens."""
    generator = torch.Generator().manual_seed(0)
    logits = [torch.randn(rows, vocab, generator=generator) for _ in range(steps)]

    def run():
        processor = GumbelSamplingProcessor(CONFIG, torch.device("cpu"), False)
        outputs = [[] for _ in range(rows)]
        added = [(i, sampling_params(method, seed=i % 4, temperature=1.0), prompt(i), outputs[i]) for i in range(rows)]
        processor.update_state(BatchUpdate(batch_size=rows, removed=[], added=added, moved=[]))
        for step in range(steps):
            if step:
                processor.update_state(None)
            out = processor.apply(logits[step].clone())
            for ids, token in zip(outputs, out.argmax(dim=1).tolist(), strict=True):
                ids.append(token)
        return outputs

    return run


def floor_steps(rows: int, vocab: int, steps: int, method: str):
    """The same draws by gcs's sampler alone: one warp and one draw per step, state in one tensor; it returns each
    row's tokens (IS rows on the streams the plugin gives them: a hash of their prompt's token ids)."""
    generator = torch.Generator().manual_seed(0)
    logits = [torch.randn(rows, vocab, generator=generator) for _ in range(steps)]
    warp = make_warpers(1.0, None, None)

    def run():
        sampler = make_sampler(method, seed=[i % 4 for i in range(rows)],
                               streams=[token_stream(prompt(i)) for i in range(rows)])
        by_step = [sampler.sample(warp(None, logits[step].clone())).tolist() for step in range(steps)]
        return [list(tokens) for tokens in zip(*by_step, strict=True)]

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="48,256", help="batch sizes (comma-separated)")
    parser.add_argument("--vocab", type=int, default=49152, help="vocabulary size (SmolLM2's by default)")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--method", default="gcswr", choices=["is", "gcs", "gcswr"])
    args = parser.parse_args(argv)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, vocab {args.vocab}, {args.steps} steps, "
          f"{args.method}, best of {args.rounds} in turns")
    for rows in (int(r) for r in args.rows.split(",")):
        contenders = {"plugin": plugin_steps(rows, args.vocab, args.steps, args.method),
                      "floor": floor_steps(rows, args.vocab, args.steps, args.method)}
        same = contenders["plugin"]() == contenders["floor"]()
        best = best_in_turns(contenders, args.rounds)
        per_step = {name: 1000 * seconds / args.steps for name, seconds in best.items()}
        print(f"{rows:4d} rows: plugin {per_step['plugin']:7.1f} ms/step, floor {per_step['floor']:7.1f} ms/step, "
              f"plugin/floor {per_step['plugin'] / per_step['floor']:.2f}x, "
              f"overhead {per_step['plugin'] - per_step['floor']:6.1f} ms/step; "
              f"the plugin's tokens = the sampler's: {'yes' if same else 'NO'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
