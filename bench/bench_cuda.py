"""The CUDA path, checked and timed (needs a GPU): a randomly initialised Llama built from a config, no download.

    python bench/bench_cuda.py [--tokens 64]

1. The same seed on CPU and on CUDA (fp32): how many rows give the same tokens, per method (GCS noise
   bits are device-independent; GCSwR may part after a few dozen tokens, see gcs/sampling/noise.py).
2. On CUDA: ``gcs.trace``'s winners are ``generate``'s tokens; a shared prefill gives the same tokens as
   a full one; hindsight's replay of the prompt itself gives the response back, whole (with its end) and
   its first half (unfinished), in fp32 and bf16 (the posterior comes from the step-by-step logits).
3. bf16 timings of a side-by-side run: 1 seed (9 rows) vs 4 seeds (36) vs 16 seeds (144, the demo's
   CUDA default), 3 paraphrases x 3 methods, every response exactly --tokens tokens.
"""

from __future__ import annotations

import argparse
import functools
import time

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

import gcs
from gcs.engines.batch import Batch, Row


def random_model(vocab: int, hidden: int, layers: int, dtype, device, seed: int = 0) -> gcs.Model:
    """A Llama of random weights and a word-level tokenizer (words w3 .. w{vocab-1})."""
    words = {"<pad>": 0, "</s>": 1, "<s>": 2, **{f"w{i}": i for i in range(3, vocab)}}
    backend = Tokenizer(models.WordLevel(words, unk_token="w3"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, pad_token="<pad>", eos_token="</s>", bos_token="<s>")
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=hidden, intermediate_size=4 * hidden, num_hidden_layers=layers,
                         num_attention_heads=hidden // 64, num_key_value_heads=max(1, hidden // 256),
                         max_position_embeddings=1024, pad_token_id=0, eos_token_id=1, bos_token_id=2)
    model = LlamaForCausalLM(config).to(dtype=dtype, device=device).eval()
    return gcs.Model(name=f"random-{hidden}x{layers}", model=model, tokenizer=tokenizer)


PROMPTS = ["w5 w9 w17 w33 w65", "w5 w9 w17 w34 w65", "w6 w9 w17 w33 w64"]


def cpu_vs_cuda(tokens: int) -> None:
    cpu = random_model(2048, 256, 4, torch.float32, "cpu")
    cuda = random_model(2048, 256, 4, torch.float32, "cuda")
    rows = [Row(p, method, seed) for method in gcs.METHODS for seed in range(8) for p in PROMPTS]
    settings = gcs.SamplingSettings(max_new_tokens=tokens, temperature=1.0)
    on_cpu = Batch(rows, cpu, settings).run()
    on_cuda = Batch(rows, cuda, settings).run()
    for method in gcs.METHODS:
        index = [i for i, row in enumerate(rows) if row.method == method]
        same = (on_cpu[index] == on_cuda[index]).all(dim=1)
        first = [int((a != b).nonzero()[0]) for a, b in zip(on_cpu[index], on_cuda[index], strict=True)
                 if not torch.equal(a, b)]
        print(f"  {method:<6} {int(same.sum())}/{len(index)} rows identical over {tokens} tokens"
              + (f"; the others part at token {sorted(first)}" if first else ""))


def cuda_checks(tokens: int) -> None:
    for dtype in (torch.float32, torch.bfloat16):
        model = random_model(2048, 256, 4, dtype, "cuda")
        settings = gcs.SamplingSettings(max_new_tokens=tokens)
        trace = gcs.trace(PROMPTS[:2], method="gcswr", seed=3, max_new_tokens=tokens, model=model)
        generated = gcs.generate(PROMPTS[:2], method="gcswr", seed=3, max_new_tokens=tokens, model=model)
        rows = [Row(p, method, seed) for method in ("is", "gcswr") for seed in (0, 1) for p in PROMPTS]
        shared = torch.equal(Batch(rows, model, settings).run(),
                             Batch(rows, model, settings, {"past_key_values": None}).run())
        frame = gcs.compare([PROMPTS[0]], methods=["gcswr"], seeds=list(range(8)), max_new_tokens=tokens, model=model)
        replayed = 0
        for seed, response, finished in zip(frame.seed, frame.raw_response, frame.finished, strict=True):
            # the whole response (with its end, if it ended) and its first half (unfinished), as tests/ do on CPU
            for observed, ended in ((response, bool(finished)), (response[: len(response) // 2] or response, False)):
                report = gcs.hindsight_report(PROMPTS[0], observed, [PROMPTS[0]], seed=int(seed),
                                              max_new_tokens=tokens, finished=ended, model=model)
                replayed += bool(report.replayed)
        print(f"  {str(dtype):<15} trace winners = generate: {list(trace.responses) == generated}; shared prefill "
              f"= full prefill: {shared}; hindsight replays the response: {replayed}/16 (8 whole, 8 first halves)")


def timings(tokens: int) -> None:
    model = random_model(32_000, 1024, 16, torch.bfloat16, "cuda")
    parameters = sum(p.numel() for p in model.model.parameters()) / 1e6
    print(f"  {parameters:.0f}M parameters, bf16, {torch.cuda.get_device_name()}")
    results = {}
    for seeds in (1, 4, 16):
        settings = gcs.SamplingSettings(seeds=list(range(seeds)), max_new_tokens=tokens)
        run = functools.partial(gcs.compare, PROMPTS, settings=settings, model=model, min_new_tokens=tokens)
        run()  # warm
        torch.cuda.synchronize()
        start = time.perf_counter()
        run()
        torch.cuda.synchronize()
        results[seeds] = time.perf_counter() - start
        rows = 9 * seeds
        print(f"  {seeds:>2} seed(s), {rows:>3} rows: {results[seeds]:6.2f} s "
              f"({rows * tokens / results[seeds]:,.0f} tok/s)")
    print(f"  4 seeds / 1 seed = {results[4] / results[1]:.2f}x (target <= 2.2x); "
          f"16 seeds / 1 seed = {results[16] / results[1]:.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=64)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_cuda.py needs a CUDA GPU")
    print(f"torch {torch.__version__}; the same seed on CPU and CUDA (fp32):")
    cpu_vs_cuda(args.tokens)
    print("on CUDA:")
    cuda_checks(min(args.tokens, 32))
    print("side-by-side timings on CUDA:")
    timings(args.tokens)


if __name__ == "__main__":
    main()
