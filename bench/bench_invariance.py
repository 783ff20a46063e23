"""What "same seed, same answer" costs: the side by side with row-invariant kernels vs the stock ones, one run.

    python bench/bench_invariance.py [--tokens 64] [--rounds 2] [--seeds 4] [--dtypes bfloat16,float32]
                                     [--engine transformers|vllm]

For each dtype, copies of the embedded model: one with ``gcs.make_row_invariant``
(the default on CPU: each bf16 weight packed once, rows in one call at the widths that give 16-row
blocks' bits), one with the stock kernels (``GCS_ROW_INVARIANT=off``) and, on transformers, one whose
weights are not packed (``unpacked``). ``blocks`` is the invariant copy with ``ONE_CALL`` off: every
call in 16-row blocks (what one call saves; the same tokens). On ``--engine vllm``
they are vLLM engines with and without row-blocked linear kernels; vLLM reads its environment
once per process, so both run each sequence's attention on its own (``VLLM_CPU_ATTN_SPLIT_KV=0``,
what the invariant engine needs): the ratio is the cost of the row blocks alone. Each runs the side by
side (3 paraphrases x 3 methods x --seeds seeds) and a single row, every response held to exactly
--tokens tokens whatever its tokens (transformers: ``min_new_tokens``; vLLM: the requests
``gcs.generate`` makes, with the stop tokens ignored), since the kernels give some rows other
tokens; contenders take turns (``timing.best_in_turns``) and each keeps its best.
Prints every time and the ratios invariant / stock; also whether each copy's single row equals
its row in the side by side (the promise; the stock kernels break it in some rows), and what
``gcs.row_invariant_kernels`` costs per gcs call on a model gcs did not convert (a caller's own).
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from timing import best_in_turns  # bench/ is on sys.path when run as a script

import gcs
from gcs.engines.invariance import packed_weights, row_blocks
from gcs.batch import Batch, Row
from gcs.engines.invariance import make_row_invariant
from gcs.models import _load, DEFAULT_MODEL

PARAPHRASES = ["Why is the sky blue?", "What makes the sky look blue?", "Explain the blue colour of the sky."]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--engine", default="transformers", choices=gcs.ENGINES)
    args = parser.parse_args()
    n, seeds, engine = args.tokens, list(range(args.seeds)), args.engine
    models = {}
    for dtype in args.dtypes.split(","):
        dtype = gcs.models.check_dtype(dtype)
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
    print(f"embedded model on CPU, engine {engine}, {n} tokens per response, side by side = 3 paraphrases x 3 "
          f"methods x {len(seeds)} seeds ({9 * len(seeds)} rows); {torch.get_num_threads()} threads")

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
        from gcs.engines.vllm import VLLMRunner, engine as vllm_engine

        batch = Batch(rows, model, gcs.SamplingSettings(temperature=1.0, max_new_tokens=n), engine="vllm")
        prompts, params = VLLMRunner(batch).requests(ignore_eos=True, stop_token_ids=[])
        return lambda: vllm_engine(model)[0].generate(prompts, params, use_tqdm=False)

    def side_by_side(model):
        if engine == "vllm":
            return on_vllm([Row(p, m, seed) for p in PARAPHRASES for m in gcs.METHODS for seed in seeds], model)
        settings = gcs.SamplingSettings(seeds=seeds, temperature=1.0, max_new_tokens=n)
        return lambda: gcs.compare(PARAPHRASES, settings=settings, model=model, min_new_tokens=n)

    def one_row(model):
        if engine == "vllm":
            return on_vllm([Row(PARAPHRASES[0], "gcswr", 0)], model)
        return lambda: gcs.generate(PARAPHRASES[:1], "gcswr", seed=0, max_new_tokens=n, model=model,
                                    min_new_tokens=n)

    contenders = {(*key, "side by side"): setting(key[1], side_by_side(model)) for key, model in models.items()}
    contenders.update({(*key, "one row"): setting(key[1], one_row(model)) for key, model in models.items()})
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
    print(f"  {'dtype':<9} {'kernels':<10} {'workload':<13} {'seconds':>8}")
    for (dtype, kind, work), seconds in best.items():
        print(f"  {dtype:<9} {kind:<10} {work:<13} {seconds:8.2f}")
    for dtype in dict.fromkeys(key[0] for key in models):
        for work in ("side by side", "one row"):
            stock = best[(dtype, "stock", work)]
            print(f"{dtype} {work}: " + ", ".join(f"{kind} / stock = {best[(dtype, kind, work)] / stock:.2f}x"
                                                   for kind in ("invariant", "blocks", "unpacked")
                                                   if (dtype, kind, work) in best))
    baseline = next(iter(models))[0]
    for work in ("side by side", "one row"):
        for dtype in dict.fromkeys(key[0] for key in models):
            ratio = best[(dtype, "invariant", work)] / best[(baseline, "stock", work)]
            print(f"{work}: {dtype} invariant / {baseline} stock = {ratio:.2f}x")
    responses = {}
    for key, model in models.items():
        os.environ["GCS_ROW_INVARIANT"] = "off" if key[1] == "stock" else "on"
        row_blocks.ONE_CALL = key[1] != "blocks"
        frame = gcs.compare(PARAPHRASES, settings=gcs.SamplingSettings(seeds=seeds, max_new_tokens=n), model=model,
                            engine=engine)
        responses[key] = frame.response.tolist()
        same = 0
        for method in gcs.METHODS:
            for seed in seeds:
                alone = gcs.generate(PARAPHRASES[:1], method, seed=seed, max_new_tokens=n, model=model, engine=engine)
                row = frame[(frame.method == method) & (frame.seed == seed) & (frame.prompt_index == 0)]
                same += alone == row.response.tolist()
        print(f"{key[0]} {key[1]}: a row alone = the same row in the side by side in {same}/{3 * len(seeds)} rows")
    for (dtype, kind), texts in responses.items():
        if kind not in ("stock", "invariant"):
            same = sum(a == b for a, b in zip(texts, responses[(dtype, "invariant")]))
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
