"""The honest demo's costs (issue 13), each measured side by side in one run on the embedded model.

    python bench/bench_demo.py [--tokens 64] [--rounds 2] [--seeds 16] [--engine transformers|vllm]

1. Many seeds: --seeds seeds x 3 paraphrases x 3 methods (144 rows for 16) in one batch vs 1 seed (9 rows),
   on --engine; on transformers all responses held to exactly --tokens tokens, on vLLM each row stops at its
   end of turn (at most --tokens tokens). Target: <= 3x the 1-seed time for 16 seeds.
   Beside it, a floor: the decode's matrix products alone (every linear layer of the model, --tokens
   steps, stock kernels with no row blocks), at both row counts; no implementation of the many-seed run
   can be faster than its floor on this machine. The app's side by side also scores every response with
   E5 (the verdict's metric): that scoring is timed too, and the floor of a scored run is the sum.
Parts 2 and 3 run on transformers whatever --engine.
2. A step-through Step: the handler's work per click once the trace is computed (it redraws from the
   trace, never generates). Target: <= 0.5 s warm.
3. Hindsight for a --tokens-token response and 2 paraphrases vs a plain 2-row generate of --tokens
   tokens. Target: <= 1.5x.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
from timing import best_in_turns  # bench/ is on sys.path when run as a script
from torch.nn import functional as F

import gcs

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

PARAPHRASES = ["Why is the sky blue?", "What makes the sky look blue?", "Explain the blue colour of the sky."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--engine", default="transformers", choices=gcs.ENGINES)
    parser.add_argument("--seeds", type=int, default=16)
    args = parser.parse_args()
    model, n = gcs.load_model(), args.tokens
    held = f"{n} tokens per response" if args.engine == "transformers" else \
        f"at most {n} tokens per response (rows stop at their end of turn)"
    print(f"model {model.name} ({model.model.dtype}) on {model.device}, engine {args.engine}, {held}; "
          f"the step-through and hindsight run on transformers")

    def compare(seeds):
        settings = gcs.SamplingSettings(seeds=seeds, temperature=1.0, max_new_tokens=n)
        kwargs = {} if args.engine == "vllm" else {"min_new_tokens": n}  # every row does the same work
        return lambda: gcs.compare(PARAPHRASES, settings=settings, model=model, engine=args.engine, **kwargs)

    many = f"{args.seeds} seeds ({9 * args.seeds} rows)"
    best = best_in_turns({"1 seed (9 rows)": compare([0]), many: compare(list(range(args.seeds)))}, args.rounds)
    for name, seconds in best.items():
        print(f"  {name:<22} {seconds:6.2f} s")
    ratio = best[many] / best["1 seed (9 rows)"]
    print(f"many seeds: {args.seeds} seeds / 1 seed = {ratio:.2f}x (target <= 3x for 16 seeds; "
          f"{args.seeds} serial runs would be {args.seeds}x)")
    one, many_rows = best["1 seed (9 rows)"], 9 * args.seeds
    floors = {rows: decode_matmul_seconds(model.model, rows, n) for rows in (9, many_rows)}
    flop = 2 * sum(m.weight.numel() for m in model.model.modules() if isinstance(m, torch.nn.Linear)) * many_rows * n
    print(f"floor: the decode's matrix products alone (stock kernels): {floors[9]:.2f} s at 9 rows, "
          f"{floors[many_rows]:.2f} s at {many_rows} rows ({flop / 1e12:.2f} TFLOP at "
          f"{flop / floors[many_rows] / 1e9:.0f} GFLOP/s) = {floors[many_rows] / one:.2f}x the whole 1-seed run")
    frames = {seeds: compare(list(range(seeds)))() for seeds in (1, args.seeds)}
    scoring = best_in_turns({seeds: lambda frame=frame: e5_scores(frame) for seeds, frame in frames.items()},
                            args.rounds)
    print(f"E5 scoring (the app's, per method and seed): {scoring[1]:.2f} s for 9 responses, "
          f"{scoring[args.seeds]:.2f} s for {many_rows}; a scored side by side (generation + E5): "
          f"{best[many] + scoring[args.seeds]:.2f} s vs {one + scoring[1]:.2f} s, {args.seeds} seeds / 1 seed = "
          f"{(best[many] + scoring[args.seeds]) / (one + scoring[1]):.2f}x, its floor (matrix products + scoring) "
          f"{(floors[many_rows] + scoring[args.seeds]) / (one + scoring[1]):.2f}x")

    from ui.tabs import stepthrough

    trace = gcs.trace(PARAPHRASES[:2], method="gcswr", seed=0, max_new_tokens=min(n, 64), model=model)
    stepthrough.view(trace, 0)  # warm: plotly's first figure imports its validators
    clicks = []
    for position in range(min(len(trace.steps) - 1, 20)):
        start = time.perf_counter()
        stepthrough.move(trace, position, 1)
        clicks.append(time.perf_counter() - start)
    print(f"step-through Step: median {statistics.median(clicks):.3f} s, slowest {max(clicks):.3f} s over "
          f"{len(clicks)} clicks (target <= 0.5 s warm)")

    response = gcs.generate([PARAPHRASES[0]], method="gcswr", seed=0, max_new_tokens=n, model=model,
                            min_new_tokens=n)[0]
    tokens = len(model.tokenizer.encode(response, add_special_tokens=False))
    best = best_in_turns({
        "plain 2-row generate": lambda: gcs.generate(PARAPHRASES[1:], method="gcswr", seed=0, max_new_tokens=n,
                                                     model=model, min_new_tokens=n),
        "hindsight (2 paraphrases)": lambda: _hindsight(PARAPHRASES[0], response, PARAPHRASES[1:], n, model),
    }, args.rounds)
    for name, seconds in best.items():
        print(f"  {name:<26} {seconds:6.2f} s")
    ratio = best["hindsight (2 paraphrases)"] / best["plain 2-row generate"]
    print(f"hindsight: a {tokens}-token response, 2 paraphrases / plain 2-row generate = {ratio:.2f}x (target <= 1.5x)")


def decode_matmul_seconds(model: torch.nn.Module, rows: int, steps: int, rounds: int = 3) -> float:
    """Seconds that ``steps`` decode steps of ``rows`` rows spend in the model's linear layers (LM head
    included), with the stock ``F.linear`` on every row at once: the fastest each layer's product ran."""
    total = 0.0
    with torch.inference_mode():
        for module in model.modules():
            if isinstance(module, torch.nn.Linear):
                x = torch.randn(rows, module.in_features, dtype=module.weight.dtype)
                F.linear(x, module.weight)  # warm
                times = []
                for _ in range(rounds):
                    start = time.perf_counter()
                    F.linear(x, module.weight)
                    times.append(time.perf_counter() - start)
                total += min(times)
    return total * steps


def e5_scores(frame) -> list:
    """E5 similarity matrices of a compare frame's responses, one per (method, seed), as the side by side scores."""
    groups = [group.response.tolist() for _, group in frame.groupby(["method", "seed"])]
    return gcs.scoring.metrics.similarity_matrices(groups, "e5")


def _hindsight(prompt, response, paraphrases, n, model):
    """``gcs.hindsight`` with every answer held to ``n`` tokens, like the plain contender."""
    return gcs.hindsight(prompt, response, paraphrases, seed=0, max_new_tokens=n, model=model, min_new_tokens=n)


if __name__ == "__main__":
    main()
