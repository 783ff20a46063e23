"""Memory after floods: what a flood of requests leaves in the server, and whether it is bounded.

    python bench/bench_memory.py [--floods 4] [--clients 8] [--requests 4] [--tokens 16] [--seeds 4]

Launches the app in this process as ``app.py`` does (``ui.build`` and ``ui.launch_options``; the app's default
engine), warms every endpoint, then runs --floods floods, each from a child process so that no client object counts
here: bench_load's mixed flood (--clients threads x --requests calls taking turns over /compare, /trace, /hindsight
and /coupling, each thread a gradio_client of its own, i.e. a session) plus --clients MCP tool calls (each a
loopback session of its own). After the warm-up and each flood it prints the process's resident memory, the
sessions Gradio keeps (``state_holder``; each holds a copy of every component's config), the threads alive, the
Python objects by count (all, and the types that grew most since the warm-up) and Python's own allocations
(tracemalloc's total, traced from the warm-up on). Whatever RSS grows beyond what Python holds is native: glibc's
per-thread arenas, torch's and vLLM's allocators.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import subprocess
import sys
import threading
import tracemalloc
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def flood(url: str, clients: int, requests: int, tokens: int, seeds: int) -> None:
    """One flood, from this (child) process: bench_load's mixed calls, then one MCP tool call per client."""
    from bench_load import endpoint_calls
    from gradio_client import Client
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    calls = endpoint_calls(tokens, seeds)
    names = list(calls)

    def client_loop(first: int):
        client = Client(url, verbose=False)
        for turn in range(requests):
            try:
                calls[names[(first + turn) % len(names)]](client)
            except Exception:  # noqa: BLE001 - a full queue is part of a flood; memory is what is measured here
                pass

    threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    async def tool_calls():
        async with streamable_http_client(f"{url}gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                for _ in range(clients):
                    await session.call_tool("coupling", {"trials": 500, "steps": 500})

    asyncio.run(tool_calls())


def census() -> collections.Counter:
    gc.collect()
    return collections.Counter(type(item).__name__ for item in gc.get_objects())


def report(label: str, demo, warm: collections.Counter | None) -> collections.Counter:
    counts = census()
    rss = psutil.Process().memory_info().rss / 2**20
    traced = tracemalloc.get_traced_memory()[0] / 2**20 if tracemalloc.is_tracing() else 0.0
    line = (f"{label}: RSS {rss:,.0f} MiB, Python allocations {traced:,.0f} MiB since the warm-up, "
            f"{len(demo.state_holder.session_data)} sessions kept, {threading.active_count()} threads, "
            f"{sum(counts.values()):,} Python objects")
    if warm is not None:
        grown = (counts - warm).most_common(6)
        line += "; grew most: " + ", ".join(f"{name} +{count:,}" for name, count in grown)
    print(line, flush=True)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--floods", type=int, default=4)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--tokens", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--flood", metavar="URL", help=argparse.SUPPRESS)  # the child's part
    args = parser.parse_args()
    if args.flood:
        return flood(args.flood, args.clients, args.requests, args.tokens, args.seeds)

    import ui

    demo = ui.build(queue_size=4)
    ui.warm_up()
    _, url, _ = demo.launch(server_name="127.0.0.1", prevent_thread_lock=True, quiet=True, **ui.launch_options(demo))

    def child(clients: int, requests: int) -> list[str]:
        return [sys.executable, __file__, "--flood", url, "--clients", str(clients), "--requests", str(requests),
                "--tokens", str(args.tokens), "--seeds", str(args.seeds)]

    subprocess.run(child(4, 1), check=True)  # the warm-up: every endpoint once, every model loaded
    tracemalloc.start()
    warm = report("warm", demo, None)
    for number in range(1, args.floods + 1):
        subprocess.run(child(args.clients, args.requests), check=True)
        report(f"after flood {number}", demo, warm)
    demo.close()


if __name__ == "__main__":
    main()
