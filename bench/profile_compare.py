"""Where one warm side-by-side request spends its time, and how far its decode loop is from the machine's limit.

    python bench/profile_compare.py [--paraphrases 4] [--tokens 64] [--seeds 1] [--gradio]
                                    [--engine transformers|vllm] [--dtype auto|float32|bfloat16]

Runs what the app's /compare runs (``gcs.stream_compare`` of N paraphrases x 3 methods x
seeds, then ``gcs.compare_report`` with E5, Jaccard and MiniLM) once to warm up, then once
instrumented, and prints the split: prefill and decode forward passes (hooks on the
decoder), the sampler (the logits processors), streaming text (incremental decoding and
follow-up stripping), each metric's scoring, and the rest (generate's own loop, threads).
``--gradio`` also times the same request through the real app (a fresh ``python app.py``)
and reports the difference as Gradio's share.

The decode loop's achieved GFLOP/s (2 x the weights of every matmul, per token and row) is
compared with this machine's matmul peak, measured in the same run with ``torch.mm`` of
1024 x 1024 matrices in fp32 and bf16: the printed ratio is the distance to the limit. On
``--engine vllm`` the split is vLLM's engine steps, the gcs plugin's sampling, streaming text
and scoring, and the GFLOP/s count every generated token against all engine time.
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import torch

import gcs

PARAPHRASES = ["What is the capital of France?", "Which city is the capital of France?",
               "Name the capital city of France.", "Tell me what France's capital is.",
               "France's capital is which city?", "What city serves as the capital of France?",
               "Identify the capital of France.", "Where is the seat of the French government?"]
METRICS = ("e5", "jaccard", "minilm")


def matmul_peak(dtype: torch.dtype, size: int = 1024, repeats: int = 20, budget_s: float = 2.0) -> float:
    """Best GFLOP/s of ``torch.mm`` of two ``size`` x ``size`` matrices: ``repeats`` products, or as many as fit in
    ``budget_s`` seconds (at least two). A dtype the CPU has no instructions for takes seconds a product (bf16
    without AVX512-BF16: about 3 s), which ``repeats`` alone would turn into a minute."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    torch.mm(a, b)
    best, spent, done = float("inf"), 0.0, 0
    while done < repeats and (done < 2 or spent < budget_s):
        start = time.perf_counter()
        torch.mm(a, b)
        took = time.perf_counter() - start
        best, spent, done = min(best, took), spent + took, done + 1
    return 2 * size**3 / best / 1e9


def memory_bandwidth(megabytes: int = 256, repeats: int = 5) -> float:
    """Best GB/s of one tensor copy of ``megabytes`` (bytes read + bytes written)."""
    source = torch.ones(megabytes * 2**20 // 4)
    target = torch.empty_like(source)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.numel() * 4 / best / 1e9


def matmul_flops_per_token(model: torch.nn.Module) -> int:
    """2 x the weights of every linear layer (the lm_head included): a decode step's matmul FLOPs per row."""
    return 2 * sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))


class Split:
    """Seconds accumulated per part, from wrappers and forward hooks installed for one run."""

    def __init__(self):
        self.seconds, self.calls, self._undo = defaultdict(float), defaultdict(int), []

    def wrap(self, owner, name: str, part: str) -> None:
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.seconds[part] += time.perf_counter() - start
                self.calls[part] += 1

        setattr(owner, name, timed)
        self._undo.append(lambda: setattr(owner, name, original))

    def hook_forward(self, decoder: torch.nn.Module) -> None:
        started = {}

        def before(module, args, kwargs):
            ids = kwargs.get("input_ids", args[0] if args else None)
            # A batch whose rows repeat prompts prefills them once, outside generate (no cache_position; see
            # gcs.engines.transformers.prefill); generate's first forward then takes the prompts' last token:
            # prefill too.
            shared = ids is not None and ids.shape[1] > 1 and kwargs.get("cache_position") is None
            finishing = started.pop("shared", False)
            started["part"] = "prefill" if finishing or (ids is not None and ids.shape[1] > 1) else "decode forward"
            started["shared"] = shared
            started["at"] = time.perf_counter()

        def after(module, args, kwargs, output):
            self.seconds[started["part"]] += time.perf_counter() - started["at"]
            self.calls[started["part"]] += 1

        handles = [decoder.register_forward_pre_hook(before, with_kwargs=True),
                   decoder.register_forward_hook(after, with_kwargs=True)]
        self._undo.extend(handle.remove for handle in handles)

    def remove(self) -> None:
        for undo in reversed(self._undo):
            undo()


def one_request(prompts, model, settings, engine: str) -> tuple[float, dict, int]:
    """The app's /compare work in-process; returns (seconds for generation, seconds per metric, tokens generated)."""
    start = time.perf_counter()
    *_, frame = gcs.stream_compare(prompts, model=model, settings=settings, engine=engine)
    generation = time.perf_counter() - start
    scoring = {}
    for metric in METRICS:
        start = time.perf_counter()
        gcs.compare_report(frame, metrics=[metric], tokenizer=model.tokenizer)
        scoring[metric] = time.perf_counter() - start
    return generation, scoring, int(frame["n_tokens"].sum())


def through_gradio(prompts, settings, engine: str) -> float:
    """Seconds of one warm /compare through a fresh app process (the same request, its seeds included)."""
    from bench_load import start_app  # bench/ is on sys.path when run as a script
    from gradio_client import Client

    server, url = start_app(queue_size=4, engine=engine)
    try:
        client = Client(url, verbose=False)
        # the in-process run's seeds, as a list (the app's default is a count, 16)
        arguments = ("\n".join(prompts), settings.temperature, settings.max_new_tokens, list(settings.seeds))
        client.predict(*arguments, api_name="/compare")  # warm: models, kernel, embedders
        start = time.perf_counter()
        client.predict(*arguments, api_name="/compare")
        return time.perf_counter() - start
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--paraphrases", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--gradio", action="store_true", help="also time the request through the real app")
    parser.add_argument("--engine", default="transformers", choices=["transformers", "vllm"])
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    args = parser.parse_args()
    model = gcs.load_model(dtype=args.dtype)
    dtype = next(model.model.parameters()).dtype
    prompts = PARAPHRASES[: args.paraphrases]
    settings = gcs.SamplingSettings(seeds=list(range(args.seeds)), temperature=1.0, max_new_tokens=args.tokens)
    rows = len(prompts) * len(settings.methods) * len(settings.seeds)
    one_request(prompts, model, settings, args.engine)  # warm-up: kernel, embedders, allocator, engine

    split = Split()
    if args.engine == "transformers":
        split.hook_forward(model.model)  # the whole causal LM: decoder and lm_head
        split.wrap(gcs.sampling.processor.GumbelLogitsProcessor, "__call__", "sampler")
    else:
        from gcs.vllm import plugin

        split.wrap(plugin, "draw", "sampler")
    split.wrap(gcs.engines.streamed_text.IncrementalText, "append", "streaming text")
    split.wrap(gcs.engines.batch, "strip_followups", "streaming text")
    try:
        generation, scoring, tokens = one_request(prompts, model, settings, args.engine)
    finally:
        split.remove()
    total = generation + sum(scoring.values())
    names = ("prefill", "decode forward", "sampler", "streaming text") if args.engine == "transformers" else (
        "sampler", "streaming text")
    parts = {name: split.seconds[name] for name in names}
    parts |= {f"scoring: {metric}": seconds for metric, seconds in scoring.items()}
    rest = "rest of generate (loop, threads, cache)" if args.engine == "transformers" else \
        "vLLM engine steps (forward passes, scheduling)"
    parts[rest] = generation - sum(split.seconds.values())
    if args.gradio:
        via_app = through_gradio(prompts, settings, args.engine)
        parts["gradio (app request minus in-process)"] = via_app - total
        total = via_app

    print(f"one warm /compare on {args.engine} ({str(dtype).removeprefix('torch.')}): {len(prompts)} paraphrases x 3 "
          f"methods x {len(settings.seeds)} seed(s) = {rows} rows, {args.tokens} new tokens, "
          f"{torch.get_num_threads()} threads; {total:.2f} s in all")
    for name, seconds in parts.items():
        print(f"  {name:46s} {seconds:7.3f} s  {100 * seconds / total:5.1f} %")
    per_token = matmul_flops_per_token(model.model)
    if args.engine == "transformers":
        steps = split.calls["decode forward"]
        achieved = per_token * rows * steps / split.seconds["decode forward"] / 1e9 if steps else float("nan")
        print(f"decode loop: {steps} steps x {rows} rows, {per_token / 1e6:.0f} MFLOP per token and row: "
              f"{achieved:.1f} GFLOP/s achieved")
    else:  # vLLM's steps mix prefill and decode: count every generated token against all of its engine time
        achieved = per_token * tokens / parts[rest] / 1e9
        print(f"vLLM engine: {tokens} tokens generated, {per_token / 1e6:.0f} MFLOP per token: {achieved:.1f} GFLOP/s "
              f"achieved (prefill and scheduling time included: a lower bound)")
    fp32, bf16 = matmul_peak(torch.float32), matmul_peak(torch.bfloat16)
    own = bf16 if dtype == torch.bfloat16 else fp32
    print(f"matmul peak here (torch.mm 1024^3): fp32 {fp32:.1f} GFLOP/s, bf16 {bf16:.1f} GFLOP/s")
    print(f"ratio decode / peak of the model's dtype = {achieved / own:.2f} (issue target >= 0.3); "
          f"decode / fp32 peak = {achieved / fp32:.2f}, decode / bf16 peak = {achieved / bf16:.2f}")
    # A decode step reads every weight once for all rows: rows x 2 FLOP per weight over its bytes.
    bandwidth = memory_bandwidth()
    intensity = 2 * rows / torch.finfo(dtype).bits * 8
    roofline = min(own, bandwidth * intensity)
    print(f"memory bandwidth here (tensor copy): {bandwidth:.1f} GB/s; a {rows}-row decode step does {intensity:.0f} "
          f"FLOP per weight byte, so its roofline is {roofline:.1f} GFLOP/s: ratio decode / roofline = "
          f"{achieved / roofline:.2f}")


if __name__ == "__main__":
    main()
