"""End-to-end generation cost: gcs.compare next to plain transformers sampling, on the embedded model.

    python bench/bench_generation.py [--tokens 64] [--repeats 2]

Rows: 4 paraphrases x 3 methods = 12 responses of exactly --tokens tokens (EOS is held
back with min_new_tokens so every contender does the same work). Prints seconds and the
ratios measured side by side in this run (targets from issue "Models and batched
generation": compare <= 1.10x plain do_sample=True; gcswr <= 1.03x is), plus the time to
load the cached model in a fresh process.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

import torch
from timing import best_in_turns  # bench/ is on sys.path when run as a script

import gcs

PROMPTS = [
    "What is the capital of France?",
    "Which city is the capital of France?",
    "Name the capital city of France.",
    "Tell me what France's capital is.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    n = args.tokens

    probe = (
        "import time; t0 = time.perf_counter(); import gcs; t1 = time.perf_counter(); gcs.load_model(); "
        "print(f'{t1 - t0:.2f} {time.perf_counter() - t1:.2f}')"
    )
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", probe], check=True, capture_output=True, text=True)
    import_s, load_s = result.stdout.split()
    print(
        f"fresh process: {time.perf_counter() - start:.2f} s in all; import gcs {import_s} s, "
        f"load cached model {load_s} s (target <= 3 s)"
    )

    model = gcs.load_model()
    tokenizer = model.tokenizer
    texts = [gcs.format_prompt(p, tokenizer=tokenizer, is_chat=model.is_chat) for p in PROMPTS] * 3
    inputs = tokenizer(texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=False)

    def plain():
        with torch.inference_mode():
            torch.manual_seed(0)
            model.model.generate(
                **inputs, do_sample=True, max_new_tokens=n, min_new_tokens=n, pad_token_id=tokenizer.pad_token_id
            )

    contenders = {
        "plain generate(do_sample=True)": plain,
        "gcs.compare (is+gcs+gcswr)": lambda: gcs.compare(PROMPTS, max_new_tokens=n, min_new_tokens=n, model=model),
        "is only, 3 seeds": lambda: gcs.compare(
            PROMPTS, methods=["is"], seeds=[0, 1, 2], max_new_tokens=n, min_new_tokens=n, model=model
        ),
        "gcswr only, 3 seeds": lambda: gcs.compare(
            PROMPTS, methods=["gcswr"], seeds=[0, 1, 2], max_new_tokens=n, min_new_tokens=n, model=model
        ),
    }
    contenders["plain generate(do_sample=True)"]()  # warm-up
    seconds = best_in_turns(contenders, rounds=args.repeats)
    print(f"12 rows x {n} tokens, {torch.get_num_threads()} threads, best of {args.repeats} turns each")
    for name, value in seconds.items():
        print(f"  {name:<32} {value:6.2f} s")
    plain_s = seconds["plain generate(do_sample=True)"]
    print(f"ratio compare / plain = {seconds['gcs.compare (is+gcs+gcswr)'] / plain_s:.3f} (target <= 1.10)")
    print(
        f"ratio gcswr / is      = {seconds['gcswr only, 3 seeds'] / seconds['is only, 3 seeds']:.3f} (target <= 1.03)"
    )


if __name__ == "__main__":
    main()
