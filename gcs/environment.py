"""Settings read from the environment, each parsed the same way: a name, its choices and a default.

    GCS_ROW_INVARIANT   auto, on, off   row-invariant kernels (auto: on CPU)       gcs.engines.invariance
    GCS_CPU_KERNEL      auto, on, off   GCSwR's fused CPU kernel                   gcs.sampling.kernels
    GCS_THREADS         auto, fixed     threads per decode step (auto: on CPU)     gcs.engines.threads
    GCS_ENGINE          auto, transformers, vllm   the app's engine                ui.shared.deployment
    GCS_MCP             on, off         the app's MCP tools                        ui
    GCS_TRUSTED_PROXIES addresses, networks  whose X-Forwarded-For the app believes (none)  ui.server.http_limits
    GCS_TIMINGS         off, on         each stage's time in the app's log (DEBUG)  app.py, gcs.runtime.stage_timing
    GCS_DTYPE           float32, bfloat16, float16 (or fp32, bf16, fp16)  the model's dtype  gcs.engines.models
    GCS_CACHE_DIR       a folder        where converted models are cached (else $HF_HOME/gcs)  gcs.engines.models
    GCS_QUEUE_SIZE      1 to 1000       runs that may wait in the app's queue (16)  app.py
    GCS_ALLOWED_MODELS  model ids       more models the app offers (comma-separated)  ui.shared.deployment
    GCS_DEFAULT_MODEL   a model id      the app's default model                     ui.shared.deployment
    GCS_ENDPOINTS       URLs            served vLLM endpoints the app generates on (comma-separated)
                                                                                    ui.shared.deployment
    GCS_ENDPOINT_KEY    a key           their bearer token (never shown)            ui.shared.deployment, gcs.cli

``check_environment()`` reads every one of them at once and raises one ValueError naming each bad value: the app
calls it before anything else, so a typo stops it at start with a sentence, not at the first request.

>>> env_choice("GCS_EXAMPLE", SWITCH, environ={"GCS_EXAMPLE": " On "})
'on'
>>> env_choice("GCS_EXAMPLE", SWITCH, environ={"GCS_EXAMPLE": "0"})  # 1/0, true/false, yes/no stand for on/off
'off'
>>> env_choice("GCS_EXAMPLE", SWITCH, environ={})
'auto'
>>> env_choice("GCS_EXAMPLE", SWITCH, environ={"GCS_EXAMPLE": "sometimes"})
Traceback (most recent call last):
...
ValueError: GCS_EXAMPLE='sometimes'; expected one of auto, on, off
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Callable, Mapping, Sequence

from gcs.checks import ENGINES, check_url
from gcs.runtime.names import split_names
from gcs.runtime.quoting import quoted

SWITCH = ("auto", "on", "off")
# Each switch's choices, the first its default: the one list its reader and ``check_environment`` both read.
CHOICES = {"GCS_ROW_INVARIANT": SWITCH, "GCS_CPU_KERNEL": SWITCH, "GCS_THREADS": ("auto", "fixed"),
           "GCS_ENGINE": ("auto", *ENGINES), "GCS_MCP": ("on", "off"), "GCS_TIMINGS": ("off", "on")}
DTYPE_NAMES = ("float32", "fp32", "bfloat16", "bf16", "float16", "fp16")  # gcs.engines.models.DTYPES' names (a test)
_BOOLEAN_WORDS = {"1": "on", "true": "on", "yes": "on", "0": "off", "false": "off", "no": "off"}


def env_choice(name: str, choices: Sequence[str], default: str | None = None,
               environ: Mapping[str, str] = os.environ) -> str:
    """``environ[name]``, stripped and lower-cased, if it is one of ``choices``; ``default`` (the first choice when
    None) if it is unset or empty; a ValueError naming the setting and its choices otherwise. Where ``choices``
    hold "on" and "off", 1/0, true/false and yes/no stand for them."""
    raw = environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return choices[0] if default is None else default
    if "on" in choices and "off" in choices:
        value = _BOOLEAN_WORDS.get(value, value)
    if value not in choices:
        raise ValueError(f"{name}={quoted(raw)}; expected one of {', '.join(choices)}")
    return value


def env_networks(name: str, environ: Mapping[str, str] = os.environ) -> tuple:
    """``environ[name]`` read as comma-separated IP addresses or networks (an address is a network of one), in the
    order given; none when it is unset or empty; a ValueError naming the setting and the entry it cannot read.

    >>> env_networks("GCS_EXAMPLE", environ={"GCS_EXAMPLE": " 10.0.0.0/8, 192.0.2.7 ,::1"})
    (IPv4Network('10.0.0.0/8'), IPv4Network('192.0.2.7/32'), IPv6Network('::1/128'))
    >>> env_networks("GCS_EXAMPLE", environ={})
    ()
    >>> env_networks("GCS_EXAMPLE", environ={"GCS_EXAMPLE": "*"})
    Traceback (most recent call last):
    ...
    ValueError: GCS_EXAMPLE='*': '*' is not an IP address or network (such as 10.0.0.0/8)
    """
    raw = environ.get(name, "")
    networks = []
    for entry in split_names(raw, name):
        try:
            networks.append(ipaddress.ip_network(entry))
        except ValueError:
            raise ValueError(f"{name}={quoted(raw)}: {quoted(entry)} is not an IP address or network (such as "
                             "10.0.0.0/8)") from None
    return tuple(networks)


def setting(name: str, environ: Mapping[str, str] = os.environ) -> str:
    """``env_choice`` of a switch named in ``CHOICES``, with its choices there.

    >>> setting("GCS_THREADS", environ={})
    'auto'
    """
    return env_choice(name, CHOICES[name], environ=environ)


def env_text(name: str, default: str = "", environ: Mapping[str, str] = os.environ) -> str:
    """``environ[name]`` stripped, or ``default`` when it is unset or blank.

    >>> env_text("GCS_EXAMPLE", "x", environ={"GCS_EXAMPLE": "  "})
    'x'
    >>> env_text("GCS_EXAMPLE", environ={"GCS_EXAMPLE": " a "})
    'a'
    """
    return environ.get(name, "").strip() or default


def env_list(name: str, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """``environ[name]`` read as comma-separated entries, blanks dropped, in order.

    >>> env_list("GCS_EXAMPLE", environ={"GCS_EXAMPLE": "a, ,b,"})
    ('a', 'b')
    """
    return tuple(split_names(environ.get(name, ""), name))


def env_count(name: str, default: int, low: int, high: int, environ: Mapping[str, str] = os.environ) -> int:
    """``environ[name]`` as a whole number in [``low``, ``high``] (ASCII digits), ``default`` when unset or blank; a
    ValueError naming the setting otherwise.

    >>> env_count("GCS_EXAMPLE", 16, 1, 1000, environ={"GCS_EXAMPLE": " 4 "})
    4
    >>> env_count("GCS_EXAMPLE", 16, 1, 1000, environ={})
    16
    >>> env_count("GCS_EXAMPLE", 16, 1, 1000, environ={"GCS_EXAMPLE": "0"})
    Traceback (most recent call last):
    ...
    ValueError: GCS_EXAMPLE='0'; expected a whole number from 1 to 1000
    """
    raw = environ.get(name, "")
    value = raw.strip()
    if not value:
        return default
    if not (value.isascii() and value.isdigit()) or not low <= int(value) <= high:
        raise ValueError(f"{name}={quoted(raw)}; expected a whole number from {low} to {high}")
    return int(value)


def env_urls(name: str, environ: Mapping[str, str] = os.environ) -> tuple[str, ...]:
    """``environ[name]`` read as comma-separated endpoint URLs (``gcs.checks.check_url``); a ValueError naming the
    setting and the entry otherwise. Only the operator sets these: no visitor's request names a URL.

    >>> env_urls("GCS_EXAMPLE", environ={"GCS_EXAMPLE": "http://a:8000/v1, https://b"})
    ('http://a:8000', 'https://b')
    """
    return tuple(check_url(url, f"{name} entry {i + 1}") for i, url in enumerate(env_list(name, environ)))


QUEUE_SIZE = ("GCS_QUEUE_SIZE", 16, 1, 1000)  # (name, default, low, high): the app's waiting runs


def check_environment(environ: Mapping[str, str] = os.environ) -> None:
    """Reads every setting above; one ValueError naming each bad one (nothing is loaded or started).

    >>> check_environment({"GCS_THREADS": "fast", "GCS_QUEUE_SIZE": "-1"})
    Traceback (most recent call last):
    ...
    ValueError: bad settings in the environment: GCS_THREADS='fast'; expected one of auto, fixed. GCS_QUEUE_SIZE=...
    """
    checks: list[Callable[[], object]] = [
        *(lambda name=name: setting(name, environ) for name in CHOICES),
        lambda: env_networks("GCS_TRUSTED_PROXIES", environ=environ),
        lambda: env_count(*QUEUE_SIZE, environ=environ),
        lambda: _check_dtype_name(env_text("GCS_DTYPE", environ=environ)),
        lambda: env_urls("GCS_ENDPOINTS", environ=environ),
    ]
    problems = []
    for check in checks:
        try:
            check()
        except ValueError as error:
            problems.append(str(error))
    if problems:
        raise ValueError("bad settings in the environment: " + ". ".join(problems))


def _check_dtype_name(value: str) -> None:
    if value and value.lower() not in (*DTYPE_NAMES, "auto"):
        raise ValueError(f"GCS_DTYPE={quoted(value)}; expected one of {', '.join((*DTYPE_NAMES, 'auto'))}")
