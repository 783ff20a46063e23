"""Load: a mixed flood of concurrent clients over loopback; every request must be served or told the queue is full.

    python bench/bench_load.py [--clients 8] [--requests 4] [--queue-size 4] [--tokens 16] [--seeds 4] [--floods 1]
                               [--engine transformers|vllm] [--busy 0]

Starts the app in a fresh process with a bounded model lane (GCS_QUEUE_SIZE; GCS_ENGINE=--engine when given),
warms it with one call to each endpoint and notes its resident memory, then each of --clients threads sends
--requests calls back to back, taking turns over /compare (3 paraphrases x 3 methods x --seeds
seeds x --tokens tokens), /trace, /hindsight and /coupling, while a prober calls /coupling once a
second; --floods times over. Prints outcomes per endpoint (served / queue full / other error), latency
percentiles of served requests, how the prober fared under the full model lane, the server's resident memory
before, at its peak and after each flood, and checks that the server still answers afterwards.
Then abandoned calls, each killed right after it started, and how soon a short /compare is served after the
kill: a long /compare (24 rows x 256 tokens), a 48-row /sweep (8 built-in groups x 3 paraphrases x 2 methods,
killed during its prefill) and an MCP tool call (the long /compare as the compare tool, through the real mcp
client); with --busy N, while N other processes keep the cores busy with matrix products (a shared machine: a
48-row prefill then takes tens of seconds). Then hostile /sweep metric strings (all refused) and an
over-the-cap request (refused). Exit status 1 if any request failed in an unexpected way.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import numpy as np
import psutil
from gradio_client import Client

ROOT = Path(__file__).resolve().parent.parent
PARAPHRASES = "What is DNA?\nExplain what DNA is.\nDescribe DNA."


def start_app(queue_size: int = 16, engine: str | None = None, log: Path | None = None,
              **settings: str) -> tuple[subprocess.Popen, str]:
    """A fresh ``python app.py`` on a free port, once it answers HTTP; ``engine`` sets its GCS_ENGINE, ``settings``
    other environment variables (``GCS_TIMINGS="on"``); its output goes to ``log`` (or nowhere)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {
        **os.environ,
        "GRADIO_SERVER_PORT": str(port),
        "GRADIO_ANALYTICS_ENABLED": "False",
        "GCS_QUEUE_SIZE": str(queue_size),
        **({"GCS_ENGINE": engine} if engine else {}),
        **settings,
    }
    output = open(log, "w") if log is not None else subprocess.DEVNULL  # noqa: SIM115 (the child holds it)
    server = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/"
    while True:
        if server.poll() is not None:
            raise SystemExit("the app exited before serving")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return server, url
        except httpx.HTTPError:
            time.sleep(0.1)


def classify(error: Exception) -> str:
    return "queue full" if "queue is full" in str(error).lower() else f"error: {type(error).__name__}: {error}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--queue-size", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--floods", type=int, default=1)
    parser.add_argument("--engine", choices=("transformers", "vllm"), default=None)
    parser.add_argument("--busy", type=int, default=0, help="processes keeping the cores busy during the kills")
    args = parser.parse_args()
    server, url = start_app(args.queue_size, args.engine)
    process, peak, watching = psutil.Process(server.pid), [0], threading.Event()
    calls = endpoint_calls(args.tokens, args.seeds)
    warm = Client(url, verbose=False)
    for call in calls.values():  # every model and kernel loaded: "before" is the serving baseline
        call(warm)
    before = process.memory_info().rss

    def watch_memory():
        while not watching.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.05)

    outcomes, latencies, lock = Counter(), [], threading.Lock()
    names = list(calls)

    def client_loop(first: int):
        client = Client(url, verbose=False)
        for turn in range(args.requests):  # bounded: each client stops after --requests calls
            name = names[(first + turn) % len(names)]
            start = time.perf_counter()
            try:
                calls[name](client)
                outcome = "served"
            except Exception as error:  # every failure is classified and reported below
                outcome = classify(error)
            with lock:
                outcomes[(name, outcome)] += 1
                if outcome == "served":
                    latencies.append(time.perf_counter() - start)

    light, flooding = Counter(), threading.Event()
    light_latencies = []

    def coupling_prober():
        client = Client(url, verbose=False)
        while flooding.is_set():
            start = time.perf_counter()
            try:
                client.predict(api_name="/coupling", trials=500, steps=500)
                light["served"] += 1
                light_latencies.append(time.perf_counter() - start)
            except Exception as error:
                light[classify(error)] += 1
            time.sleep(1)

    watcher = threading.Thread(target=watch_memory, daemon=True)
    watcher.start()
    started, after = time.perf_counter(), []
    for _ in range(args.floods):
        flooding.set()
        threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(args.clients)]
        prober = threading.Thread(target=coupling_prober)
        for thread in [*threads, prober]:
            thread.start()
        for thread in threads:
            thread.join()
        flooding.clear()
        prober.join()
        after.append(process.memory_info().rss)
    elapsed = time.perf_counter() - started
    still_serving = Client(url, verbose=False).predict(api_name="/coupling", trials=500, steps=500) is not None
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(args.busy)]
    try:
        alone = short_compare(url)  # what the short request costs on a free lane (counted in each figure below)
        freed_after = {name: abandoned_call(url, script) for name, script in ABANDONING.items()}
    finally:
        for hog in hogs:
            hog.kill()
    refusals = hostile_requests(url)
    watching.set()
    server.terminate()
    server.wait()

    print(
        f"{args.floods} x {args.clients} clients x {args.requests} requests taking turns over {', '.join(names)} "
        f"({args.tokens} tokens; /compare: 3 paraphrases x 3 methods x {args.seeds} seeds), "
        f"queue size {args.queue_size}, engine {args.engine or 'the app default'}: {elapsed:.1f} s"
    )
    for (name, outcome), count in sorted(outcomes.items()):
        print(f"  {name}: {outcome}: {count}")
    if latencies:
        p50, p90, p99 = np.percentile(latencies, [50, 90, 99])
        print(
            f"  latency of served requests: p50 {p50:.2f} s, p90 {p90:.2f} s, p99 {p99:.2f} s, "
            f"max {max(latencies):.2f} s"
        )
    worst = f", max {max(light_latencies):.2f} s" if light_latencies else ""
    print(f"  /coupling during the flood: {dict(light)}{worst}")
    floods = ", ".join(f"{rss / 2**20:.0f} MiB ({(rss - before) / 2**20:+.0f})" for rss in after)
    print(f"  server RSS: {before / 2**20:.0f} MiB before the floods (warm), peak {peak[0] / 2**20:.0f} MiB, after "
          f"each flood {floods}; still serving: {still_serving}")
    busy = f", {args.busy} processes keeping the cores busy" if args.busy else ""
    for name, seconds in freed_after.items():
        print(f"  abandoned {name} (client killed as it started{busy}): a short /compare served {seconds:.1f} s "
              f"after the kill (it takes {alone:.1f} s on a free lane)")
    print(f"  hostile requests refused: {refusals}")
    unexpected = any(o.startswith("error") for o in [*(o for _, o in outcomes), *light]) or not still_serving
    sys.exit(1 if unexpected or not all(refusals.values()) else 0)


def endpoint_calls(tokens: int, seeds: int) -> dict:
    """One call per endpoint of the flood, each a function of a Client."""
    answer = "DNA is the molecule that carries genetic information."
    return {
        "/compare": lambda c: c.predict(PARAPHRASES, 1.0, tokens, seeds, api_name="/compare"),
        "/trace": lambda c: c.predict("What is DNA?\nExplain DNA.", "gcswr", 0, 1.0, 1.0, tokens, api_name="/trace"),
        "/hindsight": lambda c: c.predict("What is DNA?", answer, "Explain DNA.\nDescribe DNA.", "gcswr", 0, 1.0, 1.0,
                                          tokens, api_name="/hindsight"),
        "/coupling": lambda c: c.predict(api_name="/coupling", trials=500, steps=500),
    }


BUSY = "import torch\nx = torch.randn(1024, 1024)\nwhile True:\n    x @ x"  # a neighbour on a shared machine
# A light neighbour: busy for a share of every 20 ms on one core (a browser drawing a streamed page on the same cores)
PART_BUSY = ("import sys, time\nshare = float(sys.argv[1])\nwhile True:\n    start = time.perf_counter()\n"
             "    while time.perf_counter() - start < 0.02 * share: pass\n    time.sleep(0.02 * (1 - share))")

# Clients that start a long call, print a line once the server says it is under way, and wait to be killed.
SUBMITTING = ("import sys, time; from gradio_client import Client; c = Client(sys.argv[1], verbose=False)\n"
              "job = c.submit(*ARGUMENTS)\n"
              "while not job.outputs() and not job.done(): time.sleep(0.05)\n"
              "print('under way', flush=True); job.result()")
STORIES = [chr(10).join(f"Tell me a long story about dragon number {i}." for i in range(8)), 1.0, 256, 1]
SWEEP_48_ROWS = ["builtin:8", "1", 1, "is,gcswr", "jaccard", 128]  # 8 groups x 3 paraphrases x 2 methods
COMPARE = {"paraphrases": STORIES[0], "max_new_tokens": 256, "seeds": 1}
MCP_CALLING = ("import asyncio, sys\nfrom mcp import ClientSession\n"
               "from mcp.client.streamable_http import streamable_http_client\n"
               "async def main():\n"
               "    async with streamable_http_client(sys.argv[1] + 'gradio_api/mcp/') as (read, write, _):\n"
               "        async with ClientSession(read, write) as session:\n"
               "            await session.initialize()\n"
               "            async def told(done, total, message):\n"
               "                if message == 'Processing': print('under way', flush=True)\n"
               f"            await session.call_tool('compare', {COMPARE!r}, progress_callback=told)\n"
               "asyncio.run(main())")
ABANDONING = {
    "/compare": SUBMITTING.replace("*ARGUMENTS", f"*{json.dumps(STORIES)}, api_name='/compare'"),
    "48-row /sweep": SUBMITTING.replace("*ARGUMENTS", f"*{json.dumps(SWEEP_48_ROWS)}, api_name='/sweep'"),
    "MCP call (/compare as a tool)": MCP_CALLING,
}


def abandoned_call(url: str, script: str) -> float:
    """Seconds from killing a client (``script``) right after its call got under way until a short /compare is
    served: how long the model lane stays held by work nobody waits for."""
    abandoned = subprocess.Popen([sys.executable, "-c", script, url], stdout=subprocess.PIPE, text=True)
    abandoned.stdout.readline()  # the server has said the work is under way
    abandoned.kill()
    abandoned.wait()
    return short_compare(url)


def short_compare(url: str) -> float:
    """Seconds until a short /compare (2 paraphrases, 4 greedy tokens) is served, from now."""
    start = time.perf_counter()
    Client(url, verbose=False).predict("What is DNA?\nExplain DNA.", 0.0, 4, 16, 1.0, "gcswr", api_name="/compare")
    return time.perf_counter() - start


def hostile_requests(url: str) -> dict[str, bool]:
    """Requests that must be refused (True) before any work: server paths as metrics, work over the cap."""
    client, refused = Client(url, verbose=False), {}
    for metric in (f"minilm:{Path.home()}", f"e5:{ROOT}", "minilm:/nonexistent", "e5:intfloat/e5-large-v2"):
        try:
            client.predict("What is DNA?\nExplain DNA.", "1", 1, "is", metric, 4, api_name="/sweep")
            refused[metric] = False
        except Exception as error:
            refused[metric] = "not offered here" in str(error)
    eight = "\n".join(f"Question {i}: " + "why is the sky blue and not green? " * 12 for i in range(8))
    try:
        client.predict(eight, 1.0, 256, 16, 1.0, "is,gcs,gcswr", 2, api_name="/compare")
        refused["work over the cap"] = False
    except Exception as error:
        refused["work over the cap"] = "tokens of work" in str(error)
    return refused


if __name__ == "__main__":
    main()
