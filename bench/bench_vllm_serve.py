"""``gcs vllm-serve`` on CPU: its one worker inside the engine core (two processes, the default) next to vLLM's
worker process of its own (three processes, ``VLLM_ENABLE_V1_MULTIPROCESSING=1``).

    python bench/bench_vllm_serve.py [--requests 12] [--tokens 48] [--rounds 3] [--dtype float32]

Both servers serve the embedded model with a 128 MiB KV cache (the test suite's servers). Each is started alone
(seconds until it lists its model: the shared cores would slow both if they started together), then both serve at
once: bursts of --requests completions of exactly --tokens tokens, the servers taking turns, each keeping its best
(``timing.best_in_turns``); then each server's resident memory, all its processes together. Prints both and their
ratios, measured in this one run.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import subprocess
import sys
import time

import httpx
import psutil
from bench_endpoints import until_listed  # (bench/ is on sys.path when run as a script)
from timing import best_in_turns

CONTENDERS = {"two processes (default)": {}, "three processes": {"VLLM_ENABLE_V1_MULTIPROCESSING": "1"}}


def started(port: int, dtype: str, env: dict[str, str]) -> tuple[subprocess.Popen, float]:
    """A ``gcs vllm-serve`` on ``port``, once it lists its model; the seconds that took."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "gcs", "vllm-serve", "--port", str(port), "--", "--dtype", dtype,
         "--kv-cache-memory-bytes", str(128 << 20), "--max-model-len", "1024"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR", **env})
    until_listed(process, f"http://127.0.0.1:{port}")
    return process, time.perf_counter() - start


def resident_gib(process: subprocess.Popen) -> float:
    """The resident memory of ``process`` and every process under it, in GiB."""
    root = psutil.Process(process.pid)
    return sum(p.memory_info().rss for p in [root, *root.children(recursive=True)]) / 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=12, help="completions per burst, sent at once")
    parser.add_argument("--tokens", type=int, default=48, help="tokens per completion (EOS ignored)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    processes, ready = {}, {}
    try:
        for port, (name, env) in enumerate(CONTENDERS.items(), start=18700):
            processes[name], ready[name] = started(port, args.dtype, env)
        urls = {name: f"http://127.0.0.1:{port}" for port, name in enumerate(CONTENDERS, start=18700)}

        models = {url: httpx.get(f"{url}/v1/models").json()["data"][0]["id"] for url in urls.values()}

        def burst(url: str) -> None:
            body = {"prompt": "Tell me about DNA.", "max_tokens": args.tokens, "ignore_eos": True,
                    "model": models[url]}
            with concurrent.futures.ThreadPoolExecutor(args.requests) as pool:
                answers = list(pool.map(lambda _: httpx.post(f"{url}/v1/completions", json=body, timeout=600),
                                        range(args.requests)))
            assert all(answer.status_code == 200 for answer in answers), [a.text[:200] for a in answers]

        best = best_in_turns({name: (lambda url=url: burst(url)) for name, url in urls.items()}, args.rounds)
        memory = {name: resident_gib(process) for name, process in processes.items()}
    finally:
        for process in processes.values():
            process.terminate()
            process.wait()
    for name in CONTENDERS:
        print(f"{name:<24} ready in {ready[name]:6.1f} s   burst {best[name]:6.2f} s   "
              f"resident {memory[name]:5.2f} GiB")
    two, three = CONTENDERS
    print(f"two / three processes: ready x{ready[two] / ready[three]:.2f}, burst x{best[two] / best[three]:.2f}, "
          f"memory x{memory[two] / memory[three]:.2f} ({memory[three] - memory[two]:+.2f} GiB saved)")


if __name__ == "__main__":
    main()
