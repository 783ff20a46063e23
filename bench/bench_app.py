"""The demo's speed: time until ``python app.py`` serves, and warm ``/compare`` latency, on each engine.

    python bench/bench_app.py [--repeats 3] [--engines transformers,vllm] [--seeds 1]

For each engine (the app's GCS_ENGINE; vLLM only where installed) starts the app in a fresh
process on a free port (the model cache must exist: run the app or
``python -c "import gcs; gcs.load_model()"`` once), measures the seconds until it answers
HTTP, then calls ``/compare`` through gradio_client with 4 paraphrases x 3 methods x --seeds seeds
x 64 new tokens, scoring (E5, Jaccard, MiniLM) included. --seeds defaults to 1, the request the
app served before its 16-seed default (``--seeds 16`` times the app's default). The first call is
reported separately (it may wait for the background loads: embedding models, the vLLM engine);
then the best and median of --repeats warm calls. Targets (issue "Speed"): ready <= 7 s, warm
/compare <= 4 s on the 2-core CPU machine.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import time

from bench_load import start_app  # bench/ is on sys.path when run as a script
from gradio_client import Client

PARAPHRASES = "What is DNA?\nCan you explain what DNA is?\nDescribe the molecule called DNA.\nTell me what DNA is."


def measure(engine: str, repeats: int, seeds: int) -> tuple[float, float, list[float]]:
    """(seconds until the app serves, first /compare, warm /compare calls) for one engine."""
    start = time.perf_counter()
    server, url = start_app(engine=engine)
    ready = time.perf_counter() - start
    try:
        client = Client(url, verbose=False)

        def call() -> float:
            begin = time.perf_counter()
            client.predict(PARAPHRASES, 1.0, 64, seeds, api_name="/compare")
            return time.perf_counter() - begin

        first = call()
        return ready, first, [call() for _ in range(repeats)]
    finally:
        server.terminate()
        server.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--engines", default="transformers,vllm")
    parser.add_argument("--seeds", type=int, default=1, help="seeds per request (the app's default is 16)")
    args = parser.parse_args()
    engines = [e for e in args.engines.split(",") if e != "vllm" or importlib.util.find_spec("vllm")]
    print(f"/compare: 4 paraphrases x 3 methods x {args.seeds} seed(s) = {12 * args.seeds} rows of up to 64 "
          f"new tokens + E5/Jaccard/MiniLM scoring, through gradio_client")
    for engine in engines:
        ready, first, warm = measure(engine, args.repeats, args.seeds)
        print(f"  {engine:<12} app ready {ready:5.2f} s (target <= 7 s); first call {first:5.2f} s; warm best "
              f"{min(warm):5.2f} s, median {statistics.median(warm):5.2f} s over {args.repeats} (target <= 4 s)")


if __name__ == "__main__":
    main()
