"""gcs on vLLM: GCSwR through the plugin next to vLLM's own sampling, and next to the transformers path.

    python bench/bench_vllm.py [--tokens 64] [--rounds 3] [--dtype float32]

12 rows (4 paraphrases x 3) of exactly --tokens tokens each (EOS held back on every
contender). Contenders take turns; each keeps its best. Prints seconds and tokens/s per
contender and the ratios measured side by side in this run (issue "Scale on vLLM":
vLLM + gcs GCSwR / vLLM plain <= 1.10; vLLM vs transformers is reported).
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # in-process engine: fast start, no worker

import torch  # noqa: E402
from bench_generation import PROMPTS  # noqa: E402  (bench/ is on sys.path when run as a script)
from timing import best_in_turns  # noqa: E402
from vllm import SamplingParams  # noqa: E402

import gcs  # noqa: E402
from gcs.engines.batch import Batch, Row  # noqa: E402
from gcs.engines.vllm import engine  # noqa: E402
from gcs.vllm.plugin import sampling_params  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    args = parser.parse_args()
    n = args.tokens

    model = gcs.load_model(dtype=getattr(torch, args.dtype))
    start = time.perf_counter()
    llm, _ = engine(model)
    print(f"vLLM engine ready in {time.perf_counter() - start:.1f} s "
          f"({args.dtype}, CPU threads {torch.get_num_threads()})")
    settings = gcs.SamplingSettings(methods=("gcswr",), seeds=(0, 1, 2), temperature=1.0, max_new_tokens=n)
    batch = Batch([Row(p, "gcswr", s) for s in settings.seeds for p in PROMPTS], model, settings, engine="vllm")
    mask = batch.inputs["attention_mask"].bool()
    prompts = [{"prompt_token_ids": ids[keep].tolist()}
               for ids, keep in zip(batch.inputs["input_ids"], mask, strict=True)]
    plain = [SamplingParams(temperature=1.0, max_tokens=n, ignore_eos=True, seed=i) for i in range(len(prompts))]
    coupled = [sampling_params("gcswr", seed=s, temperature=1.0, max_tokens=n, ignore_eos=True) for s in batch.seeds]

    def generate(params):
        outputs = llm.generate(prompts, params, use_tqdm=False)
        assert all(len(o.outputs[0].token_ids) == n for o in outputs)

    contenders = {
        "vLLM plain sampling": lambda: generate(plain),
        "vLLM + gcs GCSwR": lambda: generate(coupled),
        "transformers + gcs GCSwR": lambda: gcs.compare(PROMPTS, methods=["gcswr"], seeds=[0, 1, 2], max_new_tokens=n,
                                                        min_new_tokens=n, model=model),
    }
    generate(coupled)  # warm-up
    seconds = best_in_turns(contenders, rounds=args.rounds)
    tokens = len(prompts) * n
    print(f"{len(prompts)} rows x {n} tokens, best of {args.rounds} turns each")
    for name, value in seconds.items():
        print(f"  {name:<26} {value:6.2f} s  {tokens / value:7.1f} tok/s")
    vllm_gcs = seconds["vLLM + gcs GCSwR"]
    print(f"ratio vLLM+gcs / vLLM plain     = {vllm_gcs / seconds['vLLM plain sampling']:.3f} (target <= 1.10)")
    print(f"ratio transformers / vLLM (gcs) = {seconds['transformers + gcs GCSwR'] / vllm_gcs:.2f}x (reported)")


if __name__ == "__main__":
    main()
