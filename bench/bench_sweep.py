"""Sweep throughput (rows x tokens / s) next to plain transformers sampling of the same rows.

    python bench/bench_sweep.py [--groups 8] [--tokens 32] [--repeats 2]

Rows: --groups built-in paraphrase groups (3 rewordings each) x 3 methods x 2 seeds at
temperature 1, packed 48 rows per ``generate`` call by both contenders. EOS is held back
(min_new_tokens) so every row is exactly --tokens long. The sweep's time includes E5
scoring of every cell. Target (issue "Consistency scoring ..."): sweep >= 0.9x plain.
"""

from __future__ import annotations

import argparse

import torch
from timing import best_in_turns  # bench/ is on sys.path when run as a script

import gcs
from gcs.engines.batching import MAX_BATCH_ROWS_CPU


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args()
    n, groups = args.tokens, [g for g in gcs.load_groups("general") if len(g.prompts) == 3][: args.groups]

    model = gcs.load_model()
    tokenizer = model.tokenizer
    prompts = [p for g in groups for p in g.prompts]
    texts = [gcs.format_prompt(p, tokenizer=tokenizer, is_chat=model.is_chat)
             for p in prompts] * (3 * 2)  # methods x seeds
    batches = [
        tokenizer(
            texts[i : i + MAX_BATCH_ROWS_CPU],
            return_tensors="pt",
            padding=True,
            padding_side="left",
            add_special_tokens=False,
        )
        for i in range(0, len(texts), MAX_BATCH_ROWS_CPU)
    ]

    def plain():
        torch.manual_seed(0)
        with torch.inference_mode():
            for inputs in batches:
                model.model.generate(
                    **inputs, do_sample=True, max_new_tokens=n, min_new_tokens=n, pad_token_id=tokenizer.pad_token_id
                )

    def sweep():
        gcs.sweep(
            groups,
            temperatures=[1.0],
            seeds=2,
            metrics=["e5"],
            model=model,
            max_new_tokens=n,
            batch_rows=MAX_BATCH_ROWS_CPU,
            min_new_tokens=n,
        )

    sweep()  # warm-up: loads E5, first-call overheads
    seconds = best_in_turns(
        {"plain generate(do_sample=True)": plain, "gcs.sweep (+E5 scoring)": sweep}, rounds=args.repeats
    )
    work = len(texts) * n
    print(
        f"{len(texts)} rows x {n} tokens in {len(batches)} generate calls, {torch.get_num_threads()} threads, "
        f"best of {args.repeats} turns each"
    )
    for name, value in seconds.items():
        print(f"  {name:<32} {value:6.2f} s   {work / value:8.1f} rows*tokens/s")
    ratio = seconds["plain generate(do_sample=True)"] / seconds["gcs.sweep (+E5 scoring)"]
    print(f"sweep throughput / plain throughput = {ratio:.2f} (target >= 0.9)")


if __name__ == "__main__":
    main()
