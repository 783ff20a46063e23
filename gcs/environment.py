"""Settings read from the environment, each parsed the same way: a name, its choices and a default.

    GCS_ROW_INVARIANT   auto, on, off   row-invariant kernels (auto: on CPU)       gcs.engines.invariance
    GCS_CPU_KERNEL      auto, on, off   GCSwR's fused CPU kernel                   gcs.kernels
    GCS_THREADS         auto, fixed     threads per decode step (auto: on CPU)     gcs.engines.threads
    GCS_ENGINE          auto, transformers, vllm   the app's engine                ui.deployment
    GCS_MCP             on, off         the app's MCP tools                        ui
    GCS_TRUSTED_PROXIES addresses, networks  whose X-Forwarded-For the app believes (none)  ui.http_limits
    GCS_TIMINGS         off, on         each stage's time in the app's log (DEBUG)  app.py, gcs.stage_timing

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
from collections.abc import Mapping, Sequence

from .quoting import quoted

SWITCH = ("auto", "on", "off")
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
    for entry in (part.strip() for part in raw.split(",")):
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry))
        except ValueError:
            raise ValueError(f"{name}={quoted(raw)}: {quoted(entry)} is not an IP address or network (such as "
                             "10.0.0.0/8)") from None
    return tuple(networks)
