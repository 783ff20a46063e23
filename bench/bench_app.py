"""The demo's speed: time until ``python app.py`` serves, and warm ``/compare`` latency.

    python bench/bench_app.py [--repeats 3]

Starts the app in a fresh process on a free port (the model cache must exist: run the
app or ``python -c "import gcs; gcs.load_model()"`` once), measures the seconds until
it answers HTTP, then calls ``/compare`` through gradio_client with 4 paraphrases x 3
methods x 64 new tokens, scoring (E5, Jaccard, MiniLM) included. The first call is
reported separately (it may wait for the embedding models' background load); then the
best and median of --repeats warm calls. Targets (issue "The Gradio demo"): ready
<= 15 s, warm /compare <= 10 s on the 2-core CPU machine.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx
from gradio_client import Client

ROOT = Path(__file__).resolve().parent.parent
PARAPHRASES = "What is DNA?\nCan you explain what DNA is?\nDescribe the molecule called DNA.\nTell me what DNA is."


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "GRADIO_SERVER_PORT": str(port), "GRADIO_ANALYTICS_ENABLED": "False"}
    start = time.perf_counter()
    server = subprocess.Popen(
        [sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}/"
    try:
        while True:
            if server.poll() is not None:
                raise SystemExit("the app exited before serving")
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        ready = time.perf_counter() - start
        client = Client(url, verbose=False)

        def call() -> float:
            begin = time.perf_counter()
            client.predict(PARAPHRASES, 1.0, 64, 0, api_name="/compare")
            return time.perf_counter() - begin

        first = call()
        warm = [call() for _ in range(args.repeats)]
    finally:
        server.terminate()
        server.wait()
    print(f"app ready (fresh process, cached model): {ready:.2f} s (target <= 15 s)")
    print("/compare, 4 paraphrases x 3 methods x 64 tokens + E5/Jaccard/MiniLM scoring:")
    print(
        f"  first call {first:.2f} s; warm best {min(warm):.2f} s, median {statistics.median(warm):.2f} s "
        f"over {args.repeats} (target <= 10 s)"
    )


if __name__ == "__main__":
    main()
