"""One vLLM request's gcs settings (its ``gcs_*`` extra arguments) and its sampler state across engine steps.

    >>> sampling_params("gcs", seed=5, temperature=0.8, max_tokens=16).extra_args
    {'gcs_method': 'gcs', 'gcs_seed': 5}

The plugin (``gcs.vllm``) reads every request through ``request_args`` (a ``ValueError``, HTTP 400
on a server, for a bad one) and keeps a ``RequestState`` per request in a ``RequestRegistry``.
"""

from __future__ import annotations

import hashlib
import logging
import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from vllm import SamplingParams

from .checks import check_method, check_sampling_settings, check_seed
from .samplers import RecyclingGumbelSampler

logger = logging.getLogger("gcs.vllm")  # the plugin's logger: this module is part of it

METHOD_KEY, SEED_KEY, STREAM_KEY = "gcs_method", "gcs_seed", "gcs_stream"
KEYS = (METHOD_KEY, SEED_KEY, STREAM_KEY)


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

    @property
    def warping(self) -> tuple[float, int | None, float | None]:
        return self.temperature, self.top_k, self.top_p


def request_args(params: SamplingParams) -> RequestArgs | None:
    """The request's gcs settings; None when it has no ``gcs_*`` key; ValueError naming a bad value.

    >>> request_args(SamplingParams(temperature=0.7, extra_args={"gcs_method": "GCSwR", "gcs_seed": 3}))
    RequestArgs(method='gcswr', seed=3, stream=None, temperature=0.7, top_k=None, top_p=None)
    >>> request_args(SamplingParams()) is None
    True
    """
    extra = params.extra_args or {}
    keys = [key for key in extra if isinstance(key, str) and key.startswith("gcs_")]
    if not keys:
        return None
    unknown = sorted(set(keys) - set(KEYS))
    if unknown:
        raise ValueError(f"unknown gcs argument(s) {', '.join(unknown)}; expected {', '.join(KEYS)}")
    if METHOD_KEY not in extra:
        raise ValueError(f"{METHOD_KEY} is required with other gcs arguments (one of is, gcs, gcswr)")
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
    return RequestArgs(
        method=method,
        seed=check_seed(extra.get(SEED_KEY, 0), SEED_KEY),
        stream=None if stream is None else check_seed(stream, STREAM_KEY),
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
    )


def sampling_params(method: str = "gcswr", seed: int = 0, stream: int | None = None, **kwargs) -> SamplingParams:
    """``vllm.SamplingParams(**kwargs)`` that sample with ``method`` under ``seed`` (validated now).

    >>> sampling_params("gcs", seed=5, temperature=0.8, max_tokens=16).extra_args
    {'gcs_method': 'gcs', 'gcs_seed': 5}
    """
    extra = dict(kwargs.pop("extra_args", None) or {})
    extra.update({METHOD_KEY: method, SEED_KEY: seed})
    if stream is not None:
        extra[STREAM_KEY] = stream
    params = SamplingParams(extra_args=extra, **kwargs)
    request_args(params)
    return params


def token_stream(token_ids: Sequence[int]) -> int:
    """A stable 63-bit id of a prompt's token ids: the default IS stream of a request."""
    data = b"".join(int(t).to_bytes(4, "little", signed=True) for t in token_ids)
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


# -- per-request state -------------------------------------------------------------------------
@dataclass(frozen=True)
class Draw:
    """One GCSwR draw of a request: the output ``index`` it drew, the state ``before`` it, the ``token`` it chose
    and the state ``after`` it (what the next index draws from)."""

    index: int
    before: tuple[torch.Tensor, torch.Tensor]
    token: int
    after: tuple[torch.Tensor, torch.Tensor]


class RequestState:
    """One request's sampler state, kept with the request rather than its batch slot.

    ``last`` is the request's latest GCSwR draw. Its state ``after`` draws the next output index, and
    its state ``before`` is kept too: vLLM may discard a draw (a row still in chunked prefill samples a
    token nobody keeps), and the next call then asks for the same index again.
    """

    def __init__(self, args: RequestArgs, stream: int | None = None):
        self.args = args
        self.stream = args.stream if args.stream is not None else stream
        self.last: Draw | None = None

    def state_for(self, index: int, last_token: int | None, vocab: int, device) -> tuple[torch.Tensor, torch.Tensor]:
        """GCSwR's ``(residual, draws)`` for drawing output token ``index``.

        The state the last draw left, when vLLM asks for the index after it and kept its token
        (``last_token``: the request's last output token, None or negative where unknown); the state
        before it, when vLLM asks for the same index again (it discarded that draw); else the seed's
        initial noise: the start, or a lost state past it.
        """
        last = self.last
        if last is not None and index == last.index + 1 and (last_token is None or last_token < 0
                                                              or last_token == last.token):
            return last.after
        if last is not None and index == last.index:
            return last.before
        if index > 0:
            # Exact still (given the history, residuals are iid Exp(1) like fresh noise), but this request
            # loses its coupling from here on.
            logger.warning("gcs: GCSwR state of a request was lost at output index %d (it restarts from fresh "
                           "noise); its tokens stay exact samples but are no longer coupled", index)
        return RecyclingGumbelSampler.initial_state(self.args.seed, vocab, device)

    def drew(self, index: int, before: tuple[torch.Tensor, torch.Tensor], token: int,
             after: tuple[torch.Tensor, torch.Tensor]) -> None:
        """Record a draw: output ``index`` drawn from ``before`` (what ``state_for`` gave) chose ``token``."""
        self.last = Draw(index, before, token, after)


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


