"""The library's own argument checks: methods, engines, seeds, temperatures and the other sampling settings. Each
names the argument and the problem, raising ``ArgumentTypeError`` (a TypeError, and a ValueError too) for an argument
of the wrong type and ValueError for a bad value of the right type; the shapes they build on (counts, finite numbers,
lists of strings) are ``gcs.runtime.arguments``.

Every public entry point validates its arguments here, before any model work, so one
rule has one wording wherever it applies.

>>> check_methods("GCSwR, is, gcswr")
['gcswr', 'is']
>>> check_seeds(3), check_seeds([7])
([0, 1, 2], [7])
>>> check_sampling_settings(-1, None, None)
Traceback (most recent call last):
...
ValueError: temperature must be a finite number, 0 (greedy) or at least 0.0001 (the floor: ...), got -1
"""

from __future__ import annotations

import operator
import urllib.parse
from collections.abc import Iterable, Sequence

from gcs.runtime.arguments import ArgumentTypeError, check_count, finite, is_integer
from gcs.runtime.names import parse_names, unknown
from gcs.runtime.quoting import quoted

METHODS = ("is", "gcs", "gcswr")  # the paper's methods: every side-by-side default
"""The paper's methods, every side-by-side default: independent sampling, GCS and GCSwR."""
# Accepted wherever a method is named, never a default: "ctx" (context-keyed noise, docs/context.md) is an
# extension beyond the paper, so adding it changes no default comparison.
EXTENDED_METHODS = (*METHODS, "ctx")
"""Every method a caller may name: ``METHODS`` and "ctx" (context-keyed noise, an extension beyond the paper)."""
METHOD_NAMES = {"is": "IS", "gcs": "GCS", "gcswr": "GCSwR", "ctx": "GCS-ctx"}  # as the paper and the page write them
"""Each method's display name, as the paper and the app write it."""
DEFAULT_CONTEXT = 4  # "ctx": how many generated tokens key its noise when no context is given
"""How many generated tokens key the noise of method "ctx" when no ``context`` is given."""
MAX_CONTEXT = 64
MAX_SEED = 2**63 - 1
"""The largest seed (seeds are integers in [0, 2**63 - 1])."""
MAX_NEW_TOKENS = 1024
"""The most tokens one response may be given (``max_new_tokens``)."""
DEFAULT_MAX_NEW_TOKENS = 64  # every generating entry point's default, the app's too
MAX_REWORDINGS = 8
MAX_SEED_COUNT = 10_000


ENGINES = ("transformers", "vllm")
"""The engines that decode a batch: transformers (the default) or vLLM; served endpoints are passed as
``gcs.Endpoint``."""


def check_engine(engine, *, ensembling: bool = False):
    """Check an engine choice before any work.

    "vllm" needs vLLM installed and cannot ensemble (ensembling mixes several rows' logits in each step, which a
    per-request processor never sees). Served endpoints, a ``gcs.Endpoint`` or a list of them, come back as one
    ``gcs.engines.endpoints.Endpoints``.

    Args:
        engine: "transformers", "vllm", a ``gcs.Endpoint`` or a list of them.
        ensembling: whether the request ensembles rewordings.

    Returns:
        The engine: its name, or the endpoints as one engine.

    Raises:
        TypeError: an engine of the wrong type, or a list that holds anything but endpoints.
        ValueError: an unknown engine name, "vllm" without vLLM installed, or "vllm" with ensembling.

    Examples:
        >>> check_engine("transformers", ensembling=True)
        'transformers'
    """
    served = _served(engine)
    if served is not None:
        if ensembling:
            raise ValueError("ensembling is not available on served endpoints (the plugin sees one request at a "
                             "time); use engine='transformers'")
        return served
    if not isinstance(engine, str):
        raise ArgumentTypeError(f"engine must be a string, one of {', '.join(ENGINES)}, or a gcs.Endpoint or a list "
                                f"of them, got {type(engine).__name__} {quoted(engine)}")
    if engine.strip().lower() not in ENGINES:
        hint = "; a served endpoint is gcs.Endpoint(url)" if engine.startswith(("http://", "https://")) else ""
        raise ValueError(f"unknown engine {quoted(engine)}; expected one of {', '.join(ENGINES)}{hint}")
    engine = engine.strip().lower()
    if engine == "vllm":
        import importlib.util

        if importlib.util.find_spec("vllm") is None:
            raise ValueError("engine 'vllm' needs vLLM: pip install it (on CPU: see requirements-vllm.txt)")
        if ensembling:
            raise ValueError("ensembling is not available on the vLLM engine (it mixes several requests' logits "
                             "in each step); use engine='transformers'")
    return engine


def _served(engine):
    """Served endpoints as one engine (their ``as_engine``: ``gcs.engines.endpoints``, a layer above), or None.
    A list must hold endpoints only."""
    if hasattr(engine, "as_engine") and not isinstance(engine, type):
        return engine.as_engine()
    if isinstance(engine, (list, tuple)) and any(hasattr(item, "url") for item in engine):
        strays = [i for i, item in enumerate(engine) if type(item) is not type(engine[0]) or not hasattr(item, "url")]
        if strays:
            raise ArgumentTypeError(f"engine[{strays[0]}] must be a gcs.Endpoint, like engine[0], got "
                                    f"{type(engine[strays[0]]).__name__}")
        return engine[0].as_engine(*engine[1:])
    return None


def check_url(url, name: str = "url") -> str:
    """A served endpoint's base URL (``gcs.Endpoint``): http(s), a host, no credentials, query or fragment; a
    trailing ``/`` or ``/v1`` off.

    >>> check_url("https://gpu.example:8000/v1")
    'https://gpu.example:8000'
    """
    if not isinstance(url, str):
        raise ArgumentTypeError(f"{name} must be a string, got {type(url).__name__}")
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{name} must start with http:// or https:// and name a host, got {quoted(url)}")
    if parts.username or parts.password:  # (not quoted: the URL holds a secret)
        raise ValueError(f"{name} must not hold credentials: pass the key as api_key (GCS_ENDPOINT_KEY)")
    if parts.query or parts.fragment:
        raise ValueError(f"{name} must have no query or fragment, got {quoted(url)}")
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/").removesuffix("/v1"), "", ""))


def check_method(method: str) -> str:
    """Return ``method`` lower-cased, or raise ValueError naming the valid methods (``EXTENDED_METHODS``).

    >>> check_method("GCSwR"), check_method("ctx")
    ('gcswr', 'ctx')
    """
    if not isinstance(method, str):
        raise ArgumentTypeError(f"method must be a string, one of {', '.join(EXTENDED_METHODS)}, got "
                                f"{type(method).__name__} {quoted(method)}")
    if method.strip().lower() not in EXTENDED_METHODS:  # the message of the one rule for names (gcs.runtime.names)
        raise ValueError(unknown(method, method.strip(), {name: name for name in EXTENDED_METHODS}, "method"))
    return method.strip().lower()


def check_context(context, methods: Sequence[str]) -> int | None:
    """``context`` (how many generated tokens key the noise of method "ctx") for checked ``methods``: an integer in
    [1, ``MAX_CONTEXT``], or None (``DEFAULT_CONTEXT`` where "ctx" runs); ValueError when given without "ctx".

    >>> check_context(2, ["gcs", "ctx"]), check_context(None, ["gcs"])
    (2, None)
    >>> check_context(2, ["gcs"])
    Traceback (most recent call last):
    ...
    ValueError: context keys the noise of method 'ctx' only, but methods are ['gcs']: leave context at None
    """
    if context is None:
        return None
    context = check_count(context, "context", 1, MAX_CONTEXT)
    if "ctx" not in methods:
        raise ValueError(f"context keys the noise of method 'ctx' only, but methods are {list(methods)}: leave "
                         "context at None")
    return context


def check_methods(methods: Sequence[str] | str) -> list[str]:
    """Methods from a list or a comma-separated string, checked, each once (first occurrence kept).

    Args:
        methods: method names ("is", "gcs", "gcswr", "ctx"; any case), as a list or one comma-separated string.

    Returns:
        The methods, lower-cased, without repeats.

    Raises:
        TypeError: not a string or a sequence of strings.
        ValueError: an unknown method, or none at all.

    Examples:
        >>> check_methods("IS,gcswr,is")
        ['is', 'gcswr']
    """
    return parse_names(methods, EXTENDED_METHODS, what="method")  # the one rule for lists of names


def check_seed(seed, name: str = "seed") -> int:
    """Return ``seed`` as an int in [0, 2**63 - 1], or raise ValueError.

    >>> check_seed(5)
    5
    """
    if isinstance(seed, bool):
        raise ArgumentTypeError(f"{name} must be an integer, got a bool")
    try:
        value = operator.index(seed)
    except TypeError:
        raise ArgumentTypeError(f"{name} must be an integer, got {type(seed).__name__} {quoted(seed)}") from None
    if not 0 <= value <= MAX_SEED:
        raise ValueError(f"{name} must be in [0, 2**63 - 1], got {quoted(value)}")
    return value


def check_seeds(seeds: int | Iterable[int]) -> list[int]:
    """Seeds, with one meaning everywhere: a count or the seeds themselves.

    One seed alone is ``[seed]`` (or ``seed=`` where a function takes it).

    Args:
        seeds: a count ``n`` (seeds 0 to n - 1), or an iterable of seeds (each once, order kept), each in
            [0, ``MAX_SEED``].

    Returns:
        The seeds as a list.

    Raises:
        TypeError: a seed that is not an integer (a bool or a float included).
        ValueError: a negative or too large seed or count, or no seeds.

    Examples:
        >>> check_seeds(3), check_seeds([7, 2, 7]), check_seeds(range(2))
        ([0, 1, 2], [7, 2], [0, 1])
    """
    if is_integer(seeds):
        return list(range(check_count(seeds, "seeds (a count)", 1, MAX_SEED_COUNT)))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Iterable):
        raise ArgumentTypeError(f"seeds must be a count or a list of seeds, got {type(seeds).__name__}")
    seeds = [check_seed(s, f"seeds[{i}]") for i, s in enumerate(seeds)]
    if not seeds:
        raise ValueError("seeds must not be empty")
    return list(dict.fromkeys(seeds))


# The smallest temperature above 0 (greedy). Dividing logits by less overflows: 1e-300 made every logit infinite,
# and the request failed after its prefill with "no valid distribution". At this floor logits / T is finite in
# float32 (where transformers and vLLM warp, whatever the model's dtype) for any logit below 3e34, and nothing is
# lost below it: a token 0.0104 logits behind the best is already exp(-104) as likely, 0 in float32, so a smaller
# temperature picks the same tokens but for near-ties. vLLM treats temperatures below 1e-5 as greedy: above the
# floor both engines sample.
MIN_TEMPERATURE = 1e-4
"""The lowest non-zero temperature; 0 itself is greedy decoding."""


def check_temperature(temperature) -> float:
    """``temperature`` as a float: 0 (greedy) or from ``MIN_TEMPERATURE`` on, finite.

    >>> check_temperature(0), check_temperature(0.7)
    (0.0, 0.7)
    >>> check_temperature(1e-300)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be a finite number, 0 (greedy) or at least 0.0001 (the floor: ...), got 1e-300
    """
    wanted = f"temperature must be a finite number, 0 (greedy) or at least {MIN_TEMPERATURE:g} (the floor: below it " \
             "logits / temperature overflows)"
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise ArgumentTypeError(f"{wanted}, got {type(temperature).__name__} {quoted(temperature)}")
    if not finite(temperature) or temperature < 0 or 0 < temperature < MIN_TEMPERATURE:
        raise ValueError(f"{wanted}, got {quoted(temperature)}")
    return float(temperature)


def check_sampling_settings(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Check a temperature, top_k and top_p together, before any work.

    Args:
        temperature: 0 (greedy) or a finite number from ``MIN_TEMPERATURE`` on.
        top_k: None or an integer of at least 1.
        top_p: None or a number in (0, 1].

    Raises:
        ArgumentTypeError: an argument of the wrong type (a ``TypeError`` that is a ``ValueError`` too).
        ValueError: a bad value, naming the argument.

    Examples:
        >>> check_sampling_settings(0.7, 50, 0.9)  # valid: returns None
        >>> check_sampling_settings(-1.0, None, None)
        Traceback (most recent call last):
        ...
        ValueError: temperature must be ...
    """
    check_temperature(temperature)
    if top_k is not None and not is_integer(top_k):
        raise ArgumentTypeError(f"top_k must be None or an integer >= 1, got {type(top_k).__name__} {quoted(top_k)}")
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be None or an integer >= 1, got {quoted(top_k)}")
    if top_p is not None and (isinstance(top_p, bool) or not isinstance(top_p, (int, float))):
        raise ArgumentTypeError(f"top_p must be None or a number in (0, 1], got {type(top_p).__name__} "
                                f"{quoted(top_p)}")
    if top_p is not None and (not finite(top_p) or not 0 < top_p <= 1):
        raise ValueError(f"top_p must be None or a number in (0, 1], got {quoted(top_p)}")


def check_temperatures(temperatures) -> list[float]:
    """One temperature or a non-empty list of them, each once."""
    if not isinstance(temperatures, (int, float, Iterable)):
        raise ArgumentTypeError(f"temperatures must be a number or a list of numbers, got "
                                f"{type(temperatures).__name__} {quoted(temperatures)}")
    temperatures = [temperatures] if isinstance(temperatures, (int, float)) else list(temperatures)
    if not temperatures:
        raise ValueError("temperatures must not be empty")
    return list(dict.fromkeys(check_temperature(t) for t in temperatures))


def check_max_new_tokens(max_new_tokens: int) -> int:
    return check_count(max_new_tokens, "max_new_tokens", 1, MAX_NEW_TOKENS)


def check_rewordings(rewordings) -> int:
    """How many rewordings the model writes per prompt for ensembling: 0 (off) to 8."""
    return check_count(rewordings, "ensemble (rewordings per prompt)", 0, MAX_REWORDINGS)
