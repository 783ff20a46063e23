"""What "same seed, same answer" costs: batches of 1 to 144 rows with row-invariant kernels vs the stock ones, one run.

    python bench/bench_invariance.py [--tokens 64] [--rounds 2] [--sizes 1,9,12,36,144] [--seeds 4]
                                     [--dtypes bfloat16,float32] [--engine transformers|vllm]

For each dtype, copies of the embedded model: one with ``gcs.make_row_invariant``
(the default on CPU: each bf16 weight packed once, rows in one call at the widths that give 16-row
blocks' bits), one with the stock kernels (``GCS_ROW_INVARIANT=off``) and, on transformers, one whose
weights are not packed (``unpacked``). ``blocks`` is the invariant copy with ``ONE_CALL`` off: every
call in 16-row blocks (what one call saves; the same tokens). On ``--engine vllm``
they are vLLM engines with and without row-blocked linear kernels; vLLM reads its environment
once per process, so both run each sequence's attention on its own (``VLLM_CPU_ATTN_SPLIT_KV=0``,
what the invariant engine needs): the ratio is the cost of the row blocks alone. Each runs a batch of
each of --sizes rows (``shape``: one row, the side by side of 3 paraphrases x 3 methods, or 4
paraphrases x 3 methods, times seeds), every response held to exactly --tokens tokens whatever its
tokens (transformers: ``min_new_tokens``; vLLM: the requests ``gcs.generate`` makes, with the stop
tokens ignored), since the kernels give some rows other
tokens; contenders take turns (``timing.best_in_turns``) and each keeps its best.
Prints every time and the ratios invariant / stock per size (goal, issue "The verdict in seconds": <= 1.15x at
every size); also whether each copy's single row equals its row in the side by side of --seeds seeds (the promise;
the stock kernels break it in some rows), and what
``gcs.row_invariant_kernels`` costs per gcs call on a model gcs did not convert (a caller's own).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from timing import best_in_turns  # bench/ is on sys.path when run as a script

import gcs
from gcs.engines.batch import Batch, Row
from gcs.engines.invariance import make_row_invariant, packed_weights, row_blocks
from gcs.engines.models import DEFAULT_MODEL, _load

PARAPHRASES = ["Why is the sky blue?", "What makes the sky look blue?", "Explain the blue colour of the sky.",
               "Tell me why the sky is blue."]


def shape(rows: int) -> tuple[int, tuple[str, ...], int]:
    """(paraphrases, methods, seeds) of a batch of ``rows`` rows: one row is GCSwR on one paraphrase, 9 * s rows
    the side by side (3 paraphrases x 3 methods x s seeds), else 12 * s rows 4 paraphrases x 3 methods x s seeds.

    >>> shape(1), shape(36), shape(12)
    ((1, ('gcswr',), 1), (3, ('is', 'gcs', 'gcswr'), 4), (4, ('is', 'gcs', 'gcswr'), 1))
    """
    if rows == 1:
        return 1, ("gcswr",), 1
    for paraphrases in (3, 4):
        if rows % (3 * paraphrases) == 0:
            return paraphrases, tuple(gcs.METHODS), rows // (3 * paraphrases)
    raise SystemExit(f"--sizes: {rows} rows is neither 1 nor a multiple of 9 or 12")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sizes", default="1,9,12,36,144", help="batch sizes in rows (comma-separated)")
    parser.add_argument("--seeds", type=int, default=4, help="seeds of the side by side whose rows are checked alone")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--engine", default="transformers", choices=gcs.ENGINES)
    args = parser.parse_args()
    os.environ["GCS_THREADS"] = "fixed"  # the kernels' cost alone: no step moves to one thread (bench_threads.py)
    n, seeds, engine = args.tokens, list(range(args.seeds)), args.engine
    sizes = [int(size) for size in args.sizes.split(",")]
    shapes = {size: shape(size) for size in sizes}
    models = {}
    for dtype in args.dtypes.split(","):
        dtype = gcs.engines.models.check_dtype(dtype)
        name = str(dtype).removeprefix("torch.")
        models[(name, "stock")] = _load.__wrapped__(DEFAULT_MODEL, torch.device("cpu"), dtype)
        models[(name, "invariant")] = _load.__wrapped__(DEFAULT_MODEL, torch.device("cpu"), dtype)
        if engine == "vllm":  # build both engines now, each with its own setting
            from gcs.engines.vllm import engine as vllm_engine

            for kind in ("invariant", "stock"):
                os.environ["GCS_ROW_INVARIANT"] = "on" if kind == "invariant" else "off"
                vllm_engine(models[(name, kind)])
        else:
            models[(name, "unpacked")] = _load.__wrapped__(DEFAULT_MODEL, torch.device("cpu"), dtype)
            make_row_invariant(models[(name, "invariant")].model)
            make_row_invariant(models[(name, "unpacked")].model)
        models[(name, "blocks")] = models[(name, "invariant")]  # the same kernels, with ONE_CALL off when it runs
    print(f"embedded model on CPU, engine {engine}, {n} tokens per response, batches of {args.sizes} rows (3 methods "
          f"x paraphrases x seeds); {torch.get_num_threads()} threads")

    def setting(kind: str, run):
        def timed():
            os.environ["GCS_ROW_INVARIANT"] = "off" if kind == "stock" else "on"
            # a layer decides once, on its first call, whether to pack: "unpacked" never leaves room
            packed_weights.PACKING_HEADROOM = 1.0 if kind == "unpacked" else headroom
            row_blocks.ONE_CALL = kind != "blocks"
            return run()
        return timed

    headroom = packed_weights.PACKING_HEADROOM

    # every row does the same work, whatever its tokens: exactly n of them (transformers: min_new_tokens; vLLM:
    # the requests gcs.generate makes, with the stop tokens ignored)
    def on_vllm(rows, model):
        from gcs.engines.vllm import VLLMRunner
        from gcs.engines.vllm import engine as vllm_engine

        batch = Batch(rows, model, gcs.SamplingSettings(temperature=1.0, max_new_tokens=n), engine="vllm")
        prompts, params = VLLMRunner(batch).requests(ignore_eos=True, stop_token_ids=[])
        return lambda: vllm_engine(model)[0].generate(prompts, params, use_tqdm=False)

    def batch(model, rows: int):
        paraphrases, methods, batch_seeds = shapes[rows]
        if engine == "vllm":
            return on_vllm([Row(p, m, seed) for p in PARAPHRASES[:paraphrases] for m in methods
                            for seed in range(batch_seeds)], model)
        settings = gcs.SamplingSettings(methods, list(range(batch_seeds)), temperature=1.0, max_new_tokens=n)
        return lambda: gcs.compare(PARAPHRASES[:paraphrases], settings=settings, model=model, min_new_tokens=n)

    contenders = {(*key, rows): setting(key[1], batch(model, rows)) for rows in sizes for key, model in models.items()}
    probing = {"pairs": 0, "seconds": 0.0}
    probe = row_blocks._rounds_like_blocks

    def timed_probe(*probe_args):  # what finding the one-call widths costs (once per process; in the first round)
        start = time.perf_counter()
        try:
            return probe(*probe_args)
        finally:
            probing["pairs"] += 1
            probing["seconds"] += time.perf_counter() - start

    row_blocks._rounds_like_blocks = timed_probe
    best = best_in_turns(contenders, args.rounds)
    print(f"probing the one-call widths: {probing['pairs']} (kernel, width) pairs, {probing['seconds']:.2f} s in all")
    print(f"  {'dtype':<9} {'kernels':<10} {'rows':>5} {'seconds':>8}")
    for (dtype, kind, rows), seconds in best.items():
        print(f"  {dtype:<9} {kind:<10} {rows:>5} {seconds:8.2f}")
    for dtype in dict.fromkeys(key[0] for key in models):
        for rows in sizes:
            stock = best[(dtype, "stock", rows)]
            print(f"{dtype} {rows} rows: " + ", ".join(f"{kind} / stock = {best[(dtype, kind, rows)] / stock:.2f}x"
                                                     for kind in ("invariant", "blocks", "unpacked")
                                                     if (dtype, kind, rows) in best))
    baseline = next(iter(models))[0]
    for rows in sizes:
        for dtype in dict.fromkeys(key[0] for key in models):
            ratio = best[(dtype, "invariant", rows)] / best[(baseline, "stock", rows)]
            print(f"{rows} rows: {dtype} invariant / {baseline} stock = {ratio:.2f}x")
    responses = {}
    for key, model in models.items():
        os.environ["GCS_ROW_INVARIANT"] = "off" if key[1] == "stock" else "on"
        row_blocks.ONE_CALL = key[1] != "blocks"
        frame = gcs.compare(PARAPHRASES[:3], settings=gcs.SamplingSettings(seeds=seeds, max_new_tokens=n),
                            model=model, engine=engine)
        responses[key] = frame.response.tolist()
        same = 0
        for method in gcs.METHODS:
            for seed in seeds:
                alone = gcs.generate(PARAPHRASES[:1], method=method, seed=seed, max_new_tokens=n, model=model,
                                     engine=engine)
                row = frame[(frame.method == method) & (frame.seed == seed) & (frame.prompt_index == 0)]
                same += alone == row.response.tolist()
        print(f"{key[0]} {key[1]}: a row alone = the same row in the side by side of {9 * len(seeds)} rows in "
              f"{same}/{3 * len(seeds)} rows")
    for (dtype, kind), texts in responses.items():
        if kind not in ("stock", "invariant"):
            same = sum(a == b for a, b in zip(texts, responses[(dtype, "invariant")], strict=True))
            print(f"{dtype} {kind}: the invariant copy's responses in {same}/{len(texts)} rows of the side by side")
    # what a gcs call adds on a model of the caller's: the kernels swapped in and out (gcs.row_invariant_kernels)
    caller = models[(baseline, "stock")].model  # never converted: as a module the caller built
    layers = sum(type(module) is torch.nn.Linear for module in caller.modules())

    def enter_and_leave():
        with gcs.row_invariant_kernels(caller):
            pass

    swap = best_in_turns({"swap": enter_and_leave}, 20)["swap"]
    print(f"gcs.row_invariant_kernels on a caller's {baseline} model ({layers} linear layers): in and out in "
          f"{swap * 1e3:.2f} ms (best of 20)")

if __name__ == "__main__":
    main()
