"""What both command lines (``gcs.cli.commands``, ``gcs.cli.ab_commands``) share: argument types, and the run folder
(``--out``) that a
re-run of the same command resumes and a run with other settings may not reuse.

>>> parse_seeds("3"), parse_seeds("5,9"), csv_list("is, gcswr")
(3, [5, 9], ['is', 'gcswr'])
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import tempfile
from pathlib import Path

from gcs.experiments.data import BUILTIN_SETS, builtin_path
from gcs.runtime.names import split_names
from gcs.runtime.quoting import quoted


def csv_list(text: str) -> list[str]:
    """A comma list by the one rule for lists of names (``gcs.runtime.names``); its names are checked where they
    are used (``check_methods``, ``check_metrics``, ...)."""
    items = split_names(text)
    if not items:
        raise argparse.ArgumentTypeError("expected a comma-separated list")
    return items


def float_list(text: str) -> list[float]:
    try:
        return [float(item) for item in csv_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {quoted(text)}") from None


def parse_seeds(text: str) -> int | list[int]:
    """``3`` = seeds 0, 1, 2; ``5,9`` = those seeds."""
    try:
        return [int(s) for s in csv_list(text)] if "," in text else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seeds or a comma-separated list, got "
                                         f"{quoted(text)}") from None


def parse_ensemble(text: str) -> list[int]:
    """``2`` = two rewordings per prompt; ``0,2`` = without and with (each a setting of the sweep); ``0`` = off."""
    try:
        return [int(s) for s in csv_list(text)]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected rewordings per prompt (0 = off) or a comma-separated list of "
                                         f"them, got {quoted(text)}") from None


def write_atomic(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    with os.fdopen(handle, "w", encoding="utf-8") as file:
        file.write(text)
    os.replace(temporary, path)


def data_fingerprint(data: str) -> str:
    path = builtin_path(data) if data in BUILTIN_SETS else Path(data)
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def claim_out_dir(out: Path, settings: dict) -> None:
    """Create ``out`` or check that the run already there used the same fixed settings (a setting the record
    lacks, from a run of an older gcs, counts as changed: its rows may have been computed otherwise)."""
    out.mkdir(parents=True, exist_ok=True)
    record = out / "run.json"
    if record.exists():
        previous = json.loads(record.read_text())
        changed = {k: (previous.get(k, _NOT_RECORDED), v) for k, v in settings.items() if previous.get(k) != v}
        if changed:
            details = "; ".join(f"{k}: {_shown(a)} there, {_shown(b)} now" for k, (a, b) in changed.items())
            raise ValueError(f"{out} holds a run with other settings ({details}); use another --out")
        return
    write_atomic(record, json.dumps(settings, indent=2) + "\n")


_NOT_RECORDED = object()


def _shown(value) -> str:
    return "not recorded" if value is _NOT_RECORDED else repr(value)


def run_record(command: str, model, args: argparse.Namespace, **settings) -> dict:
    """What a run's rows depend on, as ``run.json`` records it: the command, the model with its engine and the dtype
    it ran in (resolved: "auto" is bf16 on one machine and fp32 on another), the data's fingerprint and ``settings``."""
    dtype = str(next(model.model.parameters()).dtype).removeprefix("torch.")
    return {"command": command, "model": model.name, "engine": engine_name(args), "dtype": dtype, **settings,
            "data": data_fingerprint(args.data)}


def engine_name(args: argparse.Namespace) -> str:
    """The engine a run records: its name, or "endpoints" (not their URLs: rows do not depend on which server ran
    them, so a run may resume on others)."""
    return "endpoints" if getattr(args, "endpoint", None) else args.engine


def engine_of(args: argparse.Namespace):
    """What ``--engine`` and ``--endpoint`` (repeatable) ask for: the engine's name, or the endpoints as
    ``gcs.Endpoint`` with the key from ``$GCS_ENDPOINT_KEY`` (an environment variable, never an argument: a command
    line is visible to every user of the machine)."""
    if not getattr(args, "endpoint", None):
        return args.engine
    if args.engine != "transformers":
        raise ValueError(f"--engine {args.engine} and --endpoint name two engines: give one")
    from gcs.engines.endpoints import endpoints_from

    return endpoints_from(args.endpoint)


def engine_options(sub: argparse.ArgumentParser, dtype: bool = True) -> None:
    sub.add_argument("--engine", choices=["transformers", "vllm"], default="transformers",
                     help="generate with transformers (default) or inside vLLM (gcs.vllm.plugin; needs vLLM installed)")
    sub.add_argument("--endpoint", action="append", default=None, metavar="URL",
                     help="generate on a served endpoint (gcs vllm-serve); repeat it for several, one engine; the "
                          "key, if any, from $GCS_ENDPOINT_KEY")
    if not dtype:
        return
    sub.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto",
                     help="model weights (auto: bf16 on CUDA and on CPUs with hardware bf16, else fp32)")
