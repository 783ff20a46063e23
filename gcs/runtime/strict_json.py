"""JSON a server takes from anyone, read strictly: numbers JSON has (``finite_loads``), and nesting measured before
any recursive parser meets it (``json_nesting``). The app's guard (``ui.server.http_guard.StrictJson``) and ``gcs
vllm-serve``'s middleware (``gcs.cli.vllm_server.StrictGcsArgs``) read request bodies with them.

>>> finite_loads(b'{"top_k": 5}'), json_nesting(b'{"a": [[1], "]]]"]}')
({'top_k': 5}, 3)
"""

from __future__ import annotations

import json
import math

import numpy as np


class NonFiniteNumber(ValueError):
    """A JSON number that JSON does not have: NaN, Infinity, or one past a double's range (1e400); its text is the
    error's message."""


def _refuse_constant(name: str):
    raise NonFiniteNumber(name)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NonFiniteNumber(text)
    return value


def finite_loads(body: bytes | str):
    """``json.loads(body)``, raising ``NonFiniteNumber`` at the first NaN, Infinity or number past a double's range
    (Python's parser reads them as floats; RFC 8259 has none). Other errors are ``json.loads``'s own.

    >>> finite_loads(b'[1.5, -1e400]')
    Traceback (most recent call last):
    gcs.runtime.strict_json.NonFiniteNumber: -1e400
    """
    return json.loads(body, parse_constant=_refuse_constant, parse_float=_finite_float)


_NOT_BRACKETS = bytes(set(range(256)) - set(b"[]{}"))


def json_nesting(body: bytes) -> int:
    """How deep ``body``'s arrays and objects nest, read as JSON text: the most brackets open at once outside
    strings. Measured in a few linear passes in C, without recursion, whatever ``body`` holds (Python's parser, and
    any recursive one, fails past about a thousand levels with a ``RecursionError``); a body that is not JSON gets
    a number too, and its parser then says what is wrong with it.

    >>> json_nesting(b'[' * 50_000 + b']' * 50_000), json_nesting(b'"[[[" 1'), json_nesting(b'{"a\\\\"[": ["x"]}')
    (50000, 0, 2)
    """
    # (a backslash always starts an escape of two characters, left to right: once \\ and \" are gone, every quote
    # left opens or closes a string, and the text outside strings is every other piece between quotes)
    unescaped = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    brackets = b"".join(unescaped.split(b'"')[::2]).translate(None, _NOT_BRACKETS)
    if not brackets:
        return 0
    opens = np.frombuffer(brackets, dtype=np.uint8)
    steps = np.where((opens == ord("[")) | (opens == ord("{")), 1, -1).astype(np.int32)
    return max(int(np.cumsum(steps).max()), 0)
