"""One vLLM request's gcs settings (its ``gcs_*`` extra arguments) and what stays with it across engine steps.

    >>> sampling_params("gcs", seed=5, temperature=0.8, max_tokens=16).extra_args
    {'gcs_method': 'gcs', 'gcs_seed': 5}

The plugin (``gcs.vllm.plugin``) reads every request through ``request_args`` (a ``ValueError``, HTTP 400
on a server, for a bad one) and keeps a ``RequestState`` per request in a ``RequestRegistry``; the GCSwR state of the
requests in the batch is in ``gcs.vllm.slots``.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

from vllm import SamplingParams

from gcs.checks import DEFAULT_CONTEXT, MAX_CONTEXT, check_method, check_sampling_settings, check_seed
from gcs.runtime.arguments import ArgumentTypeError, check_count
from gcs.runtime.quoting import quoted
from gcs.sampling.noise import stream_id
from gcs.vllm.options import named_keys

METHOD_KEY, SEED_KEY, STREAM_KEY, CONTEXT_KEY = "gcs_method", "gcs_seed", "gcs_stream", "gcs_context"
EXCESS_KEY = "gcs_excess_key"  # the key the plugin records the request's excess surprise under (gcs.vllm.excess)
KEYS = (METHOD_KEY, SEED_KEY, STREAM_KEY, CONTEXT_KEY, EXCESS_KEY)
MAX_EXCESS_KEY = 200  # characters


# -- request arguments -----------------------------------------------------------------------
@dataclass(frozen=True)
class RequestArgs:
    """What gcs needs from one request's ``SamplingParams``."""

    method: str
    seed: int
    stream: int | None
    temperature: float
    top_k: int | None
    top_p: float | None
    context: int | None = None  # "ctx" only: its window (docs/context.md)
    excess_key: str | None = None  # the key its excess surprise is recorded under (gcs.vllm.excess), or None

    @property
    def warping(self) -> tuple[float, int | None, float | None]:
        return self.temperature, self.top_k, self.top_p


def request_args(params: SamplingParams) -> RequestArgs | None:
    """The request's gcs settings; None when it has no ``gcs_*`` key; ValueError naming a bad value.

    >>> args = request_args(SamplingParams(temperature=0.7, extra_args={"gcs_method": "GCSwR", "gcs_seed": 3}))
    >>> args.method, args.seed, args.stream, args.warping, args.context, args.excess_key
    ('gcswr', 3, None, (0.7, None, None), None, None)
    >>> request_args(SamplingParams()) is None
    True
    """
    extra = params.extra_args or {}
    keys = [key for key in extra if isinstance(key, str) and key.startswith("gcs_")]
    if not keys:
        return None
    unknown = sorted(set(keys) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown gcs argument(s) {named_keys(unknown)}; expected {', '.join(KEYS)}")
    if METHOD_KEY not in extra:
        raise ValueError(f"{METHOD_KEY} is required with other gcs arguments (one of is, gcs, gcswr, ctx)")
    conflicts = {
        "presence_penalty": params.presence_penalty != 0,
        "frequency_penalty": params.frequency_penalty != 0,
        "repetition_penalty": params.repetition_penalty != 1,
        "min_p": params.min_p != 0,
        "n": params.n != 1,
    }
    named = [name for name, conflicting in conflicts.items() if conflicting]
    if named:
        raise ValueError(
            f"gcs sampling cannot be combined with {', '.join(f'{n}={getattr(params, n)!r}' for n in named)}: "
            "leave them at their defaults (for several coupled responses, send one request per gcs_seed)"
        )
    top_k = None if params.top_k in (None, 0, -1) else int(params.top_k)
    top_p = None if params.top_p is None or params.top_p >= 1 else float(params.top_p)
    temperature = float(params.temperature)
    check_sampling_settings(temperature, top_k, top_p)
    stream, method = extra.get(STREAM_KEY), check_method(extra[METHOD_KEY])
    if stream is not None and method != "is":
        raise ValueError(f"{STREAM_KEY} applies to IS only (it makes IS requests independent); {method} couples "
                         f"requests by {SEED_KEY}: leave {STREAM_KEY} out")
    context = extra.get(CONTEXT_KEY)
    if context is not None and method != "ctx":
        raise ValueError(f"{CONTEXT_KEY} applies to ctx only (the window that keys its noise); leave it out for "
                         f"{method}")
    if method == "ctx":
        context = DEFAULT_CONTEXT if context is None else check_count(context, CONTEXT_KEY, 1, MAX_CONTEXT)
    excess_key = extra.get(EXCESS_KEY)
    if excess_key is not None and not isinstance(excess_key, str):
        raise ArgumentTypeError(f"{EXCESS_KEY} must be a string (the key the request's excess surprise is recorded "
                                f"under), got {type(excess_key).__name__}")
    if excess_key is not None and not 0 < len(excess_key) <= MAX_EXCESS_KEY:
        raise ValueError(f"{EXCESS_KEY} must be 1 to {MAX_EXCESS_KEY} characters, got {len(excess_key):,}: "
                         f"{quoted(excess_key, 40)}")
    return RequestArgs(
        method=method,
        seed=check_seed(extra.get(SEED_KEY, 0), SEED_KEY),
        stream=None if stream is None else check_seed(stream, STREAM_KEY),
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        context=context,
        excess_key=excess_key,
    )


def sampling_params(method: str = "gcswr", seed: int = 0, stream: int | None = None, *, context: int | None = None,
                    excess_key: str | None = None, **kwargs) -> SamplingParams:
    """``vllm.SamplingParams(**kwargs)`` that sample with ``method`` under ``seed`` (validated now); ``context``: the
    window of "ctx"; ``excess_key``: record the request's excess surprise under this key (``gcs.vllm.excess``).

    >>> sampling_params("gcs", seed=5, temperature=0.8, max_tokens=16).extra_args
    {'gcs_method': 'gcs', 'gcs_seed': 5}
    >>> sampling_params("ctx", seed=5, context=2).extra_args
    {'gcs_method': 'ctx', 'gcs_seed': 5, 'gcs_context': 2}
    """
    extra = dict(kwargs.pop("extra_args", None) or {})
    extra.update({METHOD_KEY: method, SEED_KEY: seed})
    if stream is not None:
        extra[STREAM_KEY] = stream
    if context is not None:
        extra[CONTEXT_KEY] = context
    if excess_key is not None:
        extra[EXCESS_KEY] = excess_key
    params = SamplingParams(extra_args=extra, **kwargs)
    request_args(params)
    return params


def token_stream(token_ids: Sequence[int]) -> int:
    """A stable 63-bit id of a prompt's token ids: the default IS stream of a request."""
    data = b"".join(int(t).to_bytes(4, "little", signed=True) for t in token_ids)
    return stream_id(data)


# -- per-request state -------------------------------------------------------------------------
class RequestState:
    """One request's gcs settings and IS stream, kept with the request rather than its batch slot. While the request
    is in the batch its GCSwR state is a row of the plugin's slot tensors (``gcs.vllm.slots``); ``parked`` holds
    that state while it is out (preempted), so it continues where it stopped when it returns."""

    def __init__(self, args: RequestArgs, stream: int | None = None):
        self.args = args
        self.stream = args.stream if args.stream is not None else stream
        self.parked: tuple | None = None


class RequestRegistry:
    """Request states by request (its ``SamplingParams`` object, unique per request in vLLM's worker: vLLM's input
    processor clones the params of every request, "``params`` may be shared across prompts, requests and even
    engines by the caller", and a worker process receives its own copies).

    A preempted request leaves the batch and comes back later with the same params object:
    it gets its state back. A state is dropped when its params object is garbage collected
    (the request is gone for good).
    """

    def __init__(self):
        self._states: dict[int, tuple[weakref.ref, RequestState]] = {}

    def __len__(self) -> int:
        return len(self._states)

    def state(self, params: SamplingParams, args: RequestArgs, prompt_ids: Sequence[int] | None) -> RequestState:
        key = id(params)
        entry = self._states.get(key)
        if entry is not None and entry[0]() is params:
            return entry[1]
        state = RequestState(args, None if prompt_ids is None else token_stream(prompt_ids))
        forget = lambda _, key=key, states=self._states: states.pop(key, None)  # noqa: E731
        self._states[key] = (weakref.ref(params, forget), state)
        return state


