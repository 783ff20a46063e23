"""Rows per second: in-process vLLM next to one and two served endpoints (``gcs.Endpoint``).

    python bench/bench_endpoints.py [--rows 24] [--tokens 32] [--rounds 2] [--endpoint URL --endpoint URL]

Without ``--endpoint`` it starts two local ``gcs vllm-serve`` servers on the embedded model (the CPU build here;
stopped at the end). Where GPUs are, start a server on each and name them:

    gcs vllm-serve MODEL --host 0.0.0.0 --port 8000 --batch-invariant     (on each GPU machine)
    python bench/bench_endpoints.py --model MODEL --endpoint http://gpu1:8000 --endpoint http://gpu2:8000

The rows are GCSwR answers of up to --tokens tokens (the same rows, so the same stops, on every contender).
Contenders take turns; each keeps its best (``timing.best_in_turns``). On a 2-core machine two local servers share
the same two cores, so two endpoints are not faster than one there: that is what this measures here, not what it
measures on two GPU machines.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
from bench_generation import PROMPTS  # (bench/ is on sys.path when run as a script)
from timing import best_in_turns

import gcs

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def local_servers(count: int, dtype: str):
    """``count`` local ``gcs vllm-serve`` processes, once each lists its model: their URLs."""
    processes, urls = [], []
    try:
        for i in range(count):
            port = 18600 + i
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "gcs", "vllm-serve", "--port", str(port), "--", "--dtype", dtype,
                 "--kv-cache-memory-bytes", str(1 << 30)], cwd=ROOT, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, env={**os.environ, "VLLM_LOGGING_LEVEL": "ERROR"}))
            urls.append(f"http://127.0.0.1:{port}")
        for url, process in zip(urls, processes, strict=True):
            until_listed(process, url)
        yield urls
    finally:
        for process in processes:
            process.terminate()
            process.wait()


def until_listed(process: subprocess.Popen, url: str) -> None:
    """Wait until the server ``process`` serves at ``url`` lists its model; fail if it exits first."""
    while True:
        assert process.poll() is None, f"the server at {url} exited with status {process.returncode}"
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/v1/models").status_code == 200:
                return
        time.sleep(0.5)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=24, help="rows per run (prompts x seeds)")
    parser.add_argument("--tokens", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--model", default=None, help="the local model (the served one's family; default embedded)")
    parser.add_argument("--endpoint", action="append", default=None, metavar="URL",
                        help="a served endpoint (repeat for two); none: start two local servers")
    args = parser.parse_args()
    model = gcs.load_model(args.model)
    dtype = str(next(model.model.parameters()).dtype).removeprefix("torch.")
    seeds = list(range(max(1, args.rows // len(PROMPTS))))
    with contextlib.ExitStack() as stack:
        urls = args.endpoint or stack.enter_context(local_servers(2, dtype))
        key = os.environ.get("GCS_ENDPOINT_KEY") or None
        endpoints = [gcs.Endpoint(url, api_key=key) for url in urls]

        def run(engine) -> None:
            gcs.compare(PROMPTS, methods="gcswr", seeds=seeds, max_new_tokens=args.tokens, model=model, engine=engine)

        contenders = {"in-process vLLM": lambda: run("vllm"), "one endpoint": lambda: run(endpoints[:1]),
                      f"{len(endpoints)} endpoints": lambda: run(endpoints)}
        for engine in ("vllm", endpoints[:1], endpoints):  # start-up and connect checks, outside the timing
            gcs.compare(PROMPTS[:1], methods="gcswr", max_new_tokens=2, model=model, engine=engine)
        best = best_in_turns(contenders, args.rounds)
    rows = len(PROMPTS) * len(seeds)
    print(f"{rows} rows of up to {args.tokens} tokens, {model.name} ({dtype}), best of {args.rounds}:")
    for name, seconds in best.items():
        print(f"  {name:<18} {seconds:7.2f} s  {rows / seconds:6.2f} rows/s")


if __name__ == "__main__":
    main()
