"""Exact token samplers: independent sampling (IS), GCS and GCSwR.

Every sampler draws each token exactly from ``softmax(logits)`` of its row, whatever
the history. They differ only in how the randomness of different rows is related:

- ``"is"``: fresh, independent randomness for every row and step (the baseline).
- ``"gcs"``: Gumbel-max, ``argmax(logits + g_t)``, where ``g_t`` is the t-th Gumbel
  vector of the row's seed. Rows with the same seed share ``g_t`` position by position.
- ``"gcswr"``: Gumbel-max with recycling (Algorithm 1, Theorem 2): after each pick
  only the winner's noise is redrawn; every other token keeps its (rescaled) noise,
  so rows with the same seed keep the same preferences across positions.
- ``"ctx"`` (an extension beyond the paper; docs/context.md): Gumbel-max whose vector is keyed by the
  last ``context`` generated tokens and how often the answer met them before, not by the position.
  Rows that part and then write the same ``context`` tokens meet the same noise again.

>>> sampler = make_sampler("gcswr", seed=[0, 0])
>>> logits = torch.tensor([[0.0, 0.0, -1.0], [0.0, 0.1, -1.0]])
>>> sampler.sample(logits).shape
torch.Size([2])

Recycling, in the form used here. Write the Gumbel noise as ``g = -log E`` with
``E ~ Exp(1)``. Then ``argmax(log p + g) = argmin(E / p)``: each token runs an
exponential race with rate ``p_i`` and the first arrival ``k`` wins. The paper's
update ``g_i <- Q(Q^-1(g_i) / Q^-1(g_k + log p_k - log p_i))`` is, in this form,
``E_i <- E_i - E_k * p_i / p_k``: every loser keeps the residual of its race, which
by memorylessness is again Exp(1) given the history. With arrival times ``T_i = E_i / p_i``
this is ``E_i <- E_i - T_k * p_i``: the race ran for time ``T_k``, and each loser has used up
that much of its clock at its rate. It needs no logarithm, is exact for masked tokens (``p_i = 0``
leaves ``E_i`` untouched) and cannot overflow; a near-tie can round it to ``<= 0``, which is
clamped to the smallest positive float. On CPU one fused kernel computes the whole step
(``gcs.sampling.kernels``; bit for bit the same as the eager code below).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

import torch

from gcs.checks import DEFAULT_CONTEXT, EXTENDED_METHODS, check_context, check_method, check_seed
from gcs.runtime.arguments import ArgumentTypeError
from gcs.runtime.quoting import quoted
from gcs.sampling.kernels import cpu_kernel
from gcs.sampling.noise import (
    CONTEXT_PAD,
    DOMAIN_CONTEXT,
    DOMAIN_INDEPENDENT,
    HashedNoise,
    context_draws,
    context_words,
    row_keys,
    splitmix64,
    uniform,
)

SeedLike = int | Sequence[int]


def _seed_list(seed: SeedLike | None, name: str) -> int | list[int] | None:
    """None, one checked int, or a non-empty list of checked ints (from a list, tuple, tensor or array)."""
    if seed is None:
        return None
    if hasattr(seed, "tolist"):
        seed = seed.tolist()
    if isinstance(seed, Sequence) and not isinstance(seed, str):
        if not seed:
            raise ValueError(f"{name} must not be an empty sequence")
        return [check_seed(s, f"{name}[{i}]") for i, s in enumerate(seed)]
    return check_seed(seed, name)


def _row_tensor(values: int | list[int] | None, default: torch.Tensor, batch: int, device) -> torch.Tensor:
    if values is None:
        return default.to(device)
    if isinstance(values, int):
        return torch.full((batch,), values, dtype=torch.int64, device=device)
    return torch.tensor(values, dtype=torch.int64, device=device)


def _block_size(vocab: int, preferred: int = 512) -> int:
    """A block length for per-row block reductions: a divisor of ``vocab`` near ``preferred`` when one exists.

    Multiples of 16 come first: torch's CPU reductions over blocks of 501 floats (a
    divisor of Llama 3's 128,256) run at half the speed of blocks of 384.

    >>> _block_size(49_152), _block_size(128_256), _block_size(1_000_003)
    (512, 384, 512)
    """
    divisors = [d for d in range(preferred // 4, preferred * 4 + 1) if vocab % d == 0]
    aligned = [d for d in divisors if d % 16 == 0]
    candidates = aligned or [d for d in divisors if d >= preferred // 2]
    return min(candidates, key=lambda d: abs(d - preferred)) if candidates else preferred


def _blocked(x: torch.Tensor, block: int, fill: float) -> torch.Tensor:
    """View rows of ``x`` [batch, vocab] as [batch, blocks, block], padding the tail with ``fill``."""
    pad = -x.shape[1] % block
    if pad:
        x = torch.nn.functional.pad(x, (0, pad), value=fill)
    return x.view(x.shape[0], -1, block)


def _first_argmin(x: torch.Tensor, block: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(min value, first index of it) per row, like ``x.min(-1)``.

    On CPU torch's arg-reductions are ~10x slower than ``amin``; reducing whole blocks
    with ``amin`` and arg-reducing only inside each row's winning block keeps the exact
    first-index semantics at a fraction of the cost.
    """
    blocks = _blocked(x, block, float("inf"))
    rows = torch.arange(x.shape[0], device=x.device)
    best_block = blocks.amin(dim=-1).argmin(dim=-1)
    value, within = blocks[rows, best_block].min(dim=-1)
    return value, best_block * block + within


LOG2_E = 1.0 / math.log(2.0)


def relative_rates(logits: torch.Tensor, row_max: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """``p_i / p_max`` per row, that is ``exp(logits - row_max)``: exactly 1 for the top token, 0 where masked.

    Computed as ``exp2((logits - row_max) * log2 e)``: on CPU torch's ``exp2`` is about twice
    as fast as ``exp``. The gap is taken first, so the top token's exponent is exactly 0
    whatever the logits' magnitude (scaling first would round ``1e11 * log2 e`` by
    thousands, and the top rate would become 0 or inf: temperatures near 0 then broke
    sampling). The extra rounding is relative 2**-24 of the exponent, the size of the
    rounding already in a float32 logit (tested: within 1e-5 relative of float64 ``exp``
    down to 85 below the top logit, where float32 turns subnormal).

    >>> relative_rates(torch.tensor([[0.0, -1.0, float("-inf")]]), torch.tensor([0.0]))
    tensor([[1.0000, 0.3679, 0.0000]])
    >>> relative_rates(torch.tensor([[3e11, -2e11]]), torch.tensor([3e11]))
    tensor([[1., 0.]])
    """
    return torch.sub(logits, row_max[:, None], out=out).mul_(LOG2_E).exp2_()


class Sampler:
    """Base class of the samplers: validation, lazily created per-row state, and the call contract.

    ``sample(logits, active=None)`` draws one token per row; the batch size, vocabulary size and device are fixed by the
    first call until ``reset()``. ``force(index, tokens)`` schedules an intervention: at output index ``index`` row
    ``r`` emits ``tokens[r]`` (-1: whatever its race picks). The race still runs and moves the state on as for its
    winner; a forced token that is not the winner then takes a fresh draw of its noise, as a winner does (GCSwR; IS and
    GCS keep no per-token state). Given noise that is exact for the history (prior noise, or ``gcs.hindsight``'s
    posterior averaged over the observed response), the state after the forced step is again iid Exp(1), so what
    follows is an exact sample given the edited prefix (``gcs.counterfactual``).

    Args:
        seed: one int for every row, or one per row.
        streams: one int per row (IS only: the source of independence in place of the row index).

    Attributes:
        method: the method's name.
        batch_size: rows, fixed by the first ``sample`` until ``reset`` (None before).
        vocab_size: the vocabulary, likewise.
        device: the device, likewise.
    """

    method: str = ""
    # None until responses start (``begin``, or the first ``sample``); fixed until ``reset``
    batch_size: int | None
    vocab_size: int | None
    device: torch.device | None

    def __init__(self, seed: SeedLike = 0, streams: Sequence[int] | None = None):
        self.forced: dict[int, torch.Tensor] = {}
        self.seed = _seed_list(seed, "seed")
        self.streams = _seed_list(streams, "streams")
        if isinstance(self.streams, int):
            raise ArgumentTypeError("streams must be a sequence with one integer per row, got an int")
        if isinstance(self.seed, list) and isinstance(self.streams, list) and len(self.seed) != len(self.streams):
            raise ValueError(f"seed and streams have different lengths ({len(self.seed)} vs {len(self.streams)})")
        self.reset()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(method={self.method!r}, seed={self.seed!r})"

    def reset(self) -> None:
        """Forget all state: the next ``sample`` starts a new response for every row."""
        self.batch_size = self.vocab_size = self.device = None

    def sample(self, logits: torch.Tensor, active: torch.Tensor | None = None) -> torch.Tensor:
        """One token per row, an exact draw from ``softmax(logits)`` of that row.

        Args:
            logits: a floating tensor [rows, vocab], any float dtype, any device, ``-inf`` marking masked tokens;
                a row's largest logit must be finite.
            active: optional booleans [rows]; rows that are False (finished responses) get a token but keep their
                state.

        Returns:
            The chosen token ids, a long tensor [rows]; each row's state moves on.

        Examples:
            >>> make_sampler("gcs", seed=[0, 0]).sample(torch.tensor([[0.0, 5.0], [0.0, 5.0]])).tolist()
            [1, 1]

        Raises:
            ValueError: a shape that does not match, or a row with no distribution (NaN, all -inf, or +inf).
        """
        logits = self._checked(logits)
        if active is not None:
            active = torch.as_tensor(active, dtype=torch.bool, device=logits.device)
            if active.shape != (logits.shape[0],):
                raise ValueError(f"active must have shape [{logits.shape[0]}], got {list(active.shape)}")
        # A row whose largest logit is not finite is NaN, all -inf, or has +inf: no distribution.
        row_max = logits.amax(dim=-1)
        bad = ~torch.isfinite(row_max)
        if bad.any():
            row = int(bad.nonzero()[0])
            raise ValueError(
                f"logits row {row} has no valid distribution (max logit {row_max[row].item()}): "
                "rows must contain at least one finite logit and no NaN or +inf"
            )
        if not self.forced:
            return self._draw(logits, row_max, active)
        force = torch.full_like(self.steps, -1)
        for index, tokens in self.forced.items():
            force = torch.where(self.steps == index, tokens.to(force.device), force)
        tokens = self._draw(logits, row_max, active)
        overridden = (force >= 0) & (force != tokens)
        if active is not None:
            overridden &= active
        if overridden.any():
            rows = overridden.nonzero().squeeze(1)
            self._forced(rows, force[rows])
            tokens = torch.where(overridden, force, tokens)
        return tokens

    def force(self, index: int, tokens) -> Sampler:
        """At output index ``index``, row ``r`` emits ``tokens[r]`` (-1: its race's winner); see the class docstring.

        >>> s = make_sampler("gcswr", seed=[0, 0]).force(1, [4, -1])
        >>> first, second = s.sample(torch.zeros(2, 6)), s.sample(torch.zeros(2, 6))
        >>> int(second[0]), bool(first[0] == first[1])
        (4, True)
        """
        if not isinstance(index, int) or isinstance(index, bool):
            raise ArgumentTypeError(f"index must be an output index (an integer >= 0), got {type(index).__name__} "
                                    f"{index!r}")
        if index < 0:
            raise ValueError(f"index must be an output index (an integer >= 0), got {index!r}")
        tokens = torch.as_tensor(tokens, dtype=torch.long).reshape(-1).cpu()
        if len(tokens) == 0 or (tokens < -1).any():
            raise ValueError("tokens must hold one token id (or -1) per row")
        self.forced[index] = tokens
        return self

    def begin(self, batch: int, vocab: int, device: torch.device | str = "cpu",
              steps: torch.Tensor | None = None, state: tuple[torch.Tensor, torch.Tensor] | None = None) -> Sampler:
        """Start ``batch`` responses over ``vocab`` tokens now (``sample`` does it on its first call).

        ``steps`` [batch]: the output index each row is at (default 0), which picks the draw of
        GCS and IS: a row resumed at index 5 draws what a row sampled from the start would at
        its sixth token. ``state``: GCSwR's ``(residual, draws)`` rows to continue from (see
        ``RecyclingGumbelSampler.initial_state``) instead of fresh noise, or ctx's ``(window, words)``
        (``ContextGumbelSampler.state_of``). This is how an engine
        that keeps per-request state (``gcs.vllm.plugin``) samples a changing set of requests.
        """
        if state is not None and self.method not in ("gcswr", "ctx"):
            raise ValueError(f"only gcswr and ctx carry state; {self.method} draws depend on the step alone")
        self.reset()
        for name, values in (("seed", self.seed), ("streams", self.streams)):
            if isinstance(values, list) and len(values) != batch:
                raise ValueError(f"{name} has {len(values)} entries but logits have {batch} rows")
        device = torch.device(device)
        self.batch_size, self.vocab_size, self.device = batch, vocab, device
        self.steps = torch.zeros(batch, dtype=torch.int64, device=device) if steps is None \
            else torch.as_tensor(steps, dtype=torch.int64, device=device).clone()
        if self.steps.shape != (batch,):
            raise ValueError(f"steps must have shape [{batch}], got {list(self.steps.shape)}")
        seeds = _row_tensor(self.seed, torch.zeros(batch, dtype=torch.int64), batch, device)
        streams = _row_tensor(self.streams, torch.arange(batch), batch, device)
        self._start(seeds, streams, state)
        return self

    def peek(self) -> torch.Tensor:
        """The noise the next ``sample`` call will use, as a copy (for teaching and tracing; ``gcs.trace``).

        IS: the uniform [batch] of the inverse-CDF draw. GCS: this position's Exp(1) vector
        [batch, vocab] (Gumbel ``g = -log E``). GCSwR: the current residual state [batch, vocab].
        Call it after ``begin`` (or a first ``sample``).
        """
        if self.batch_size is None:
            raise ValueError("peek() needs started responses: call begin() or sample() first")
        return self._peek()

    # -- subclass hooks -------------------------------------------------------------------
    def _start(self, seeds: torch.Tensor, streams: torch.Tensor, state=None) -> None:
        raise NotImplementedError

    def _peek(self) -> torch.Tensor:
        raise NotImplementedError

    def _draw(self, logits: torch.Tensor, row_max: torch.Tensor, active: torch.Tensor | None) -> torch.Tensor:
        raise NotImplementedError

    def _forced(self, rows: torch.Tensor, tokens: torch.Tensor) -> None:
        """Rows ``rows`` emitted ``tokens`` instead of their races' winners (after the draw): IS and GCS keep no
        per-token state."""

    # -- helpers ----------------------------------------------------------------------------
    def _checked(self, logits: torch.Tensor) -> torch.Tensor:
        if not isinstance(logits, torch.Tensor):
            raise ArgumentTypeError(f"logits must be a torch.Tensor, got {type(logits).__name__}")
        if not logits.is_floating_point():
            raise ArgumentTypeError(f"logits must have a floating dtype, got {logits.dtype}")
        if logits.dim() != 2 or logits.shape[0] == 0 or logits.shape[1] == 0:
            raise ValueError(f"logits must have shape [batch, vocab] with both > 0, got {list(logits.shape)}")
        batch, vocab = logits.shape
        if self.batch_size is None:
            self.begin(batch, vocab, logits.device)
        elif (batch, vocab) != (self.batch_size, self.vocab_size) or logits.device != self.device:
            raise ValueError(
                f"logits of shape {[batch, vocab]} on {logits.device} do not continue the current responses "
                f"({[self.batch_size, self.vocab_size]} on {self.device}); call reset() to start new ones"
            )
        return logits.float()

    def _advance(self, active: torch.Tensor | None) -> None:
        self.steps += 1 if active is None else active.long()


class IndependentSampler(Sampler):
    """IS: inverse-CDF sampling with one fresh uniform per row and step.

    The uniform is ``hash(seed, stream, step)``: reproducible for a seed, and independent across rows because each row
    has its own stream.

    Args:
        seed: one int for every row, or one per row.
        streams: one int per row in place of its row index, e.g. a hash of the row's prompt, so that a row's draws do
            not depend on its position in the batch.

    Examples:
        >>> sampler = IndependentSampler(seed=0, streams=[5, 5])
        >>> tokens = sampler.sample(torch.zeros(2, 50))
        >>> bool(tokens[0] == tokens[1])  # one stream, one draw
        True
    """

    method = "is"

    def _start(self, seeds, streams, state=None):
        self.stream_keys = splitmix64(row_keys(seeds, DOMAIN_INDEPENDENT) + streams)
        self.block = _block_size(self.vocab_size)
        self.rows = torch.arange(self.batch_size, device=self.device)

    def _peek(self):
        return self._uniforms()

    def _uniforms(self) -> torch.Tensor:
        return uniform(splitmix64(self.stream_keys + self.steps))

    def _draw(self, logits, row_max, active):
        u = self._uniforms()
        # Inverse CDF in two levels: float64 cumulative sums over blocks, then inside one
        # block (a float64 cumsum over the whole vocabulary is 4x slower on CPU).
        weights = _blocked(relative_rates(logits, row_max), self.block, 0.0)
        block_cdf = weights.sum(dim=-1, dtype=torch.float64).cumsum(dim=-1)
        block, offset = _inverse_cdf(block_cdf, u * block_cdf[:, -1])
        token_cdf = weights[self.rows, block].cumsum(dim=-1, dtype=torch.float64)
        within, _ = _inverse_cdf(token_cdf, offset)
        self._advance(active)
        return block * self.block + within


def _inverse_cdf(cdf: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """First index whose cumulative weight exceeds ``target`` per row, and how far past the previous one it is.

    ``target`` is clamped below the row total (``u * total`` can round up to it), so a
    zero-weight entry is never returned.
    """
    total = cdf[:, -1]
    target = torch.minimum(target, torch.nextafter(total, torch.zeros_like(total)))
    index = torch.searchsorted(cdf, target[:, None], right=True).squeeze(1)
    before = cdf.gather(1, (index - 1).clamp(min=0)[:, None]).squeeze(1)
    return index, target - torch.where(index > 0, before, torch.zeros_like(before))


class _GumbelSamplerBase(Sampler):
    """Shared set-up of the Gumbel methods: where the noise comes from (``noise``, a ``gcs.sampling.noise.HashedNoise``
    by default; ``gcs.hindsight`` passes posterior sources)."""

    def __init__(self, seed: SeedLike = 0, streams: Sequence[int] | None = None, noise: HashedNoise | None = None):
        if noise is not None and not isinstance(noise, HashedNoise):
            raise ArgumentTypeError(f"noise must be a gcs.sampling.noise.HashedNoise (or a subclass), "
                                    f"got {type(noise).__name__}")
        self.noise = noise if noise is not None else HashedNoise()
        super().__init__(seed, streams)

    def _start(self, seeds, streams, state=None):
        self.noise.start(seeds, self.vocab_size)
        self.block = _block_size(self.vocab_size)


class GumbelSampler(_GumbelSamplerBase):
    """GCS: ``argmax(logits + g)`` with the row's Gumbel vector for this position.

    Args:
        seed: one int for every row, or one per row; rows with equal seeds share their noise.
        streams: accepted for the common signature; GCS's noise depends on the seed only.

    Examples:
        >>> GumbelSampler(seed=[1, 1]).sample(torch.zeros(2, 50)).tolist()[0] == GumbelSampler(seed=1).sample(
        ...     torch.zeros(1, 50)).tolist()[0]
        True
    """

    method = "gcs"

    def _draws(self) -> torch.Tensor:
        """Each row's draw index for this step: its position (``ContextGumbelSampler``: its context)."""
        return self.steps

    def _peek(self):
        return self.noise.vector(self._draws())

    def _draw(self, logits, row_max, active):
        # argmax(logits + g) with g = -log E is argmin(log E - logits).
        _, tokens = _first_argmin(self.noise.vector(self._draws()).log_().sub_(logits), self.block)
        self._advance(active)
        return tokens


class ContextGumbelSampler(GumbelSampler):
    """"ctx": GCS whose draw index is the answer's context, not its position (docs/context.md).

    The vector of a step is keyed by (seed, the last ``context`` generated tokens, how many earlier steps of this answer
    had those same tokens last): ``gcs.sampling.noise.context_draws``. The first ``context`` steps pad the window with
    ``CONTEXT_PAD``; the prompt never enters it. No key repeats within an answer and each depends on the past only, so
    every answer is an exact sample (``gcs.sampling.reference.context_step`` is the literal step); two answers that part
    and then write the same ``context`` tokens (having met them equally often) draw the same vector again. State per
    row: ``window`` [batch, context], the last tokens, and ``words`` [batch, >= steps], the context word of each
    earlier step.

    Args:
        seed: one int for every row, or one per row.
        streams: accepted for the common signature.
        context: how many generated tokens key the noise, in [1, 64] (None: ``DEFAULT_CONTEXT``).
        noise: where the noise comes from (a source hashing under ``DOMAIN_CONTEXT``; ``gcs.hindsight`` passes the
            posterior given a response).

    Examples:
        >>> s = make_sampler("ctx", seed=[0, 0], context=1)
        >>> logits = torch.tensor([[0.0, 0.0, -1.0], [0.0, 0.1, -1.0]])
        >>> s.sample(logits).shape, s.window.shape
        (torch.Size([2]), torch.Size([2, 1]))
    """

    method = "ctx"

    def __init__(self, seed: SeedLike = 0, streams: Sequence[int] | None = None, *, context: int | None = None,
                 noise: HashedNoise | None = None):
        self.context = DEFAULT_CONTEXT if context is None else check_context(context, ["ctx"])
        if noise is not None and getattr(noise, "domain", None) != DOMAIN_CONTEXT:
            raise ValueError("ctx's noise source must hash under DOMAIN_CONTEXT (gcs.sampling.noise)")
        super().__init__(seed, streams, noise=noise if noise is not None else HashedNoise(DOMAIN_CONTEXT))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(method='ctx', seed={self.seed!r}, context={self.context})"

    @staticmethod
    def state_of(answers: Sequence[Sequence[int]], context: int,
                 device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """The state ``(window, words)`` of answers that wrote ``answers`` so far: what ``begin(state=...)`` continues
        from, with ``steps`` their lengths. The state is a function of the tokens written, so an engine that keeps
        each request's output tokens (``gcs.vllm.plugin``) keeps nothing else.

        >>> window, words = ContextGumbelSampler.state_of([[5, 6, 5], []], context=2)
        >>> window.tolist(), bool(words[0, 0] == context_words(torch.tensor([[CONTEXT_PAD, CONTEXT_PAD]]))[0])
        ([[6, 5], [-1, -1]], True)
        """
        windows = [torch.tensor([CONTEXT_PAD] * context + list(answer), dtype=torch.int64).unfold(0, context, 1)
                   for answer in answers]  # [len + 1, context]: the window before each step, and the next one
        longest = max(1, *(len(w) - 1 for w in windows))
        words = torch.zeros(len(answers), longest, dtype=torch.int64)
        for row, w in enumerate(windows):
            words[row, : len(w) - 1] = context_words(w[:-1])
        return torch.stack([w[-1] for w in windows]).to(device), words.to(device)

    def _start(self, seeds, streams, state=None):
        super()._start(seeds, streams)
        self.rows = torch.arange(self.batch_size, device=self.device)
        if state is not None:
            self.window, self.words = state
            if self.window.shape != (self.batch_size, self.context) or self.words.shape[0] != self.batch_size \
                    or self.words.shape[1] < int(self.steps.max()) or self.window.dtype != torch.int64 \
                    or self.words.dtype != torch.int64:
                raise ValueError(f"state must be int64 (window [{self.batch_size}, {self.context}], words "
                                 f"[{self.batch_size}, >= steps]): see ContextGumbelSampler.state_of")
            self.words = self.words.clone()  # _draw writes into it, and may grow it
            return
        if bool((self.steps != 0).any()):
            raise ValueError("ctx cannot resume from an output index alone: its noise is keyed by the answer's "
                             "last tokens; pass state=ContextGumbelSampler.state_of(answers, context) too")
        self.window = torch.full((self.batch_size, self.context), CONTEXT_PAD, dtype=torch.int64, device=self.device)
        self.words = torch.empty(self.batch_size, 64, dtype=torch.int64, device=self.device)

    def _counts(self, words: torch.Tensor) -> torch.Tensor:
        """How many earlier steps of each row had the context word ``words[row]`` (only a row's own steps count)."""
        longest = int(self.steps.max())
        earlier = torch.arange(longest, device=self.device)[None, :] < self.steps[:, None]
        return ((self.words[:, :longest] == words[:, None]) & earlier).sum(dim=1)

    def _draws(self):
        words = context_words(self.window)
        return context_draws(words, self._counts(words))

    def _draw(self, logits, row_max, active):
        words = context_words(self.window)
        draws = context_draws(words, self._counts(words))
        _, tokens = _first_argmin(self.noise.vector(draws).log_().sub_(logits), self.block)
        moving = self.rows if active is None else active.nonzero().squeeze(1)
        if int(self.steps.max()) >= self.words.shape[1]:  # double the history: amortised O(1) per step
            self.words = torch.cat([self.words, torch.empty_like(self.words)], dim=1)
        self.words[moving, self.steps[moving]] = words[moving]
        self.window[moving] = torch.cat([self.window[moving, 1:], tokens[moving, None]], dim=1)
        self._advance(active)
        return tokens

    def _forced(self, rows, tokens):
        # the forced token, not the race's winner, is what the answer wrote: it enters the window
        self.window[rows, -1] = tokens


class RecyclingGumbelSampler(_GumbelSamplerBase):
    """GCSwR (Algorithm 1): Gumbel-max whose noise is recycled after every pick.

    State per row: ``residual`` [vocab], the Exp(1) form of the current Gumbel noise, and ``draws`` [vocab], how often
    each token has been picked (the draw index of its current noise). Nothing is pre-drawn, so responses can be
    arbitrarily long. On CPU the step runs in the fused kernel of ``gcs.sampling.kernels`` when it is available (same
    tokens and state, bit for bit); elsewhere, and without it, in eager torch.

    Args:
        seed: one int for every row, or one per row; rows with equal seeds share their noise.
        streams: accepted for the common signature; GCSwR's noise depends on the seed only.

    Examples:
        >>> sampler = RecyclingGumbelSampler(seed=[0, 0])
        >>> first = sampler.sample(torch.zeros(2, 6))
        >>> bool(first[0] == first[1]), sampler.draws.shape
        (True, torch.Size([2, 6]))
    """

    method = "gcswr"
    # A loser whose arrival ties the winner's in float32 can round to E_i - T_k p_i <= 0; it keeps
    # a tiny positive residual instead (the race says it is next in line), never 0, which would
    # divide as 0/0 when masked.
    MIN_RESIDUAL = torch.finfo(torch.float32).tiny

    @staticmethod
    def initial_state(seed: int, vocab: int, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """One fresh row of state, ``(residual [vocab] float32, draws [vocab] int32)``: what a new response starts from.

        >>> residual, draws = RecyclingGumbelSampler.initial_state(7, 4)
        >>> s = RecyclingGumbelSampler(seed=[7]).begin(1, 4)
        >>> torch.equal(s.residual[0], residual), int(draws.sum())
        (True, 0)
        """
        noise = HashedNoise().start(torch.tensor([check_seed(seed)], device=device), vocab)
        return (noise.vector(torch.zeros(1, dtype=torch.int64, device=device))[0],
                torch.zeros(vocab, dtype=torch.int32, device=device))

    def _start(self, seeds, streams, state=None):
        super()._start(seeds, streams)
        if state is None:
            # int32 halves the largest piece of state (no response picks one token 2**31 times).
            self.draws = torch.zeros(self.batch_size, self.vocab_size, dtype=torch.int32, device=self.device)
            self.residual = self.noise.vector(torch.zeros_like(seeds))
        else:
            self.residual, self.draws = state
            shape = (self.batch_size, self.vocab_size)
            if self.residual.shape != shape or self.draws.shape != shape or self.residual.dtype != torch.float32 \
                    or self.draws.dtype != torch.int32 or not self.residual.is_contiguous() \
                    or not self.draws.is_contiguous():
                raise ValueError(f"state must be contiguous (float32 residual, int32 draws) of shape {list(shape)}")
        # Reused buffers for the rates and the arrivals: fresh multi-megabyte temporaries cost page faults on CPU.
        self._rates = torch.empty_like(self.residual)
        self._kernel = cpu_kernel() if self.device.type == "cpu" else None
        self._arrivals = torch.empty_like(self.residual) if self._kernel is None else None
        self.rows = torch.arange(self.batch_size, device=self.device)

    def _peek(self):
        return self.residual.clone()

    def _renew(self, rows: torch.Tensor, tokens: torch.Tensor) -> None:
        """``tokens`` [len(rows)] were emitted by ``rows``: each takes its next draw as its new noise."""
        draws = self.draws[rows, tokens] + 1
        self.draws[rows, tokens] = draws
        self.residual[rows, tokens] = self.noise.token(rows, tokens, draws)

    def _forced(self, rows, tokens):
        self._renew(rows, tokens)

    def _draw(self, logits, row_max, active):
        if self._kernel is not None:
            tokens = self._kernel.race_and_recycle(
                logits.contiguous(),
                row_max.contiguous(),
                self.residual,
                self._rates,
                self.draws,
                self.noise.keys,
                _ALL_ROWS if active is None else active.contiguous(),
                LOG2_E,
                self.MIN_RESIDUAL,
            )
            if not self.noise.hashed:  # the kernel hashed each winner's new noise: take the source's instead
                rows = self.rows if active is None else active.nonzero().squeeze(1)
                picked = tokens[rows]
                self.residual[rows, picked] = self.noise.token(rows, picked, self.draws[rows, picked])
            self._advance(active)
            return tokens
        rates = relative_rates(logits, row_max, out=self._rates)
        arrivals = torch.div(self.residual, rates, out=self._arrivals)  # T_i = E_i / p_i; inf where masked
        first_arrival, tokens = _first_argmin(arrivals, self.block)
        # Finished rows keep their state: copy out just those rows and put them back after
        # the in-place update (a copy of the whole state every step would cost more than the step).
        frozen = None if active is None else (~active).nonzero().squeeze(1)
        saved = self.residual[frozen] if frozen is not None and len(frozen) else None
        # Memoryless race: each loser keeps E_i - T_k * p_i (the paper's recycling update).
        self.residual.addcmul_(rates, first_arrival[:, None], value=-1.0).clamp_(min=self.MIN_RESIDUAL)
        picked_draws = self.draws[self.rows, tokens] + 1
        self.residual[self.rows, tokens] = self.noise.token(self.rows, tokens, picked_draws)
        if saved is not None:
            self.residual[frozen] = saved
            picked_draws[frozen] -= 1
        self.draws[self.rows, tokens] = picked_draws
        self._advance(active)
        return tokens


_ALL_ROWS = torch.empty(0, dtype=torch.bool)  # the kernel's "no active mask"


_SAMPLERS = {cls.method: cls for cls in (IndependentSampler, GumbelSampler, RecyclingGumbelSampler,
                                         ContextGumbelSampler)}


def _one_sampler(method: str, seed, streams, context: int | None) -> Sampler:
    if method == "ctx":
        return ContextGumbelSampler(seed=seed, streams=streams, context=context)
    return _SAMPLERS[method](seed=seed, streams=streams)


class MixedSampler(Sampler):
    """One method per row: rows are grouped by method and each group has its own sampler.

    Lets one batch hold IS, GCS and GCSwR rows side by side (a loop over the methods, never over rows). Each row behaves
    exactly as it would under its own method.

    Args:
        methods: one method per row.
        seed: one int for every row, or one per row.
        streams: one int per row (IS rows only).
        context: the window of "ctx" rows.

    Examples:
        >>> mixed = MixedSampler(["gcs", "gcs", "is"], seed=0)
        >>> tokens = mixed.sample(torch.zeros(3, 40))
        >>> bool(tokens[0] == tokens[1])  # the two GCS rows share their noise
        True
    """

    method = "mixed"

    def __init__(self, methods: Sequence[str], seed: SeedLike = 0, streams: Sequence[int] | None = None, *,
                 context: int | None = None):
        self.methods = [check_method(m) for m in methods]
        if not self.methods:
            raise ValueError("methods must not be empty")
        self.context = check_context(context, self.methods)
        super().__init__(seed, streams)
        if isinstance(self.seed, list) and len(self.seed) != len(self.methods):
            raise ValueError(f"{len(self.methods)} methods but {len(self.seed)} seeds; give one per row")

    def _start(self, seeds, streams, state=None):
        if self.batch_size != len(self.methods):
            raise ValueError(f"{len(self.methods)} methods but logits have {self.batch_size} rows")
        self.parts = []
        for method in dict.fromkeys(self.methods):
            rows = torch.tensor([i for i, m in enumerate(self.methods) if m == method], device=self.device)
            sampler = _one_sampler(method, seeds[rows].tolist(), streams[rows].tolist(), self.context)
            self.parts.append((rows, sampler.begin(len(rows), self.vocab_size, self.device, steps=self.steps[rows])))

    def _peek(self):
        raise ValueError("a mixed batch has no single kind of noise to peek at: peek at one method's sampler")

    def _forced(self, rows, tokens):
        for part_rows, sampler in self.parts:
            inside = torch.isin(rows, part_rows)
            if inside.any():
                sampler._forced(torch.searchsorted(part_rows, rows[inside]), tokens[inside])

    def _draw(self, logits, row_max, active):
        tokens = torch.empty(self.batch_size, dtype=torch.long, device=self.device)
        for rows, sampler in self.parts:
            # The whole batch is validated already: skip the part's own NaN/-inf scan and its sync.
            part = sampler._checked(logits[rows])
            tokens[rows] = sampler._draw(part, row_max[rows], None if active is None else active[rows])
        self._advance(active)
        return tokens


def make_sampler(
    method: str | Sequence[str] = "gcswr", *, seed: SeedLike = 0, streams: Sequence[int] | None = None,
    context: int | None = None,
) -> Sampler:
    """Create a sampler for ``method``: "is", "gcs", "gcswr" (or "ctx", an extension beyond the paper).

    Under "gcs" and "gcswr" rows with equal seeds share their noise: that is the coupling.

    Args:
        method: the method, or a sequence with one method per row.
        seed: one int for every row, or a sequence with one int per batch row (so a whole sweep of seeds x
            paraphrases runs as one batch).
        streams: one int per row; only "is" reads it: it replaces the row index as the source of independence,
            making a row's draws independent of its place in the batch.
        context: how many generated tokens key the noise of "ctx", an integer in [1, 64] (None: ``DEFAULT_CONTEXT``);
            other methods take none.

    Returns:
        A fresh ``Sampler``; call ``sample(logits)`` once per position.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: an unknown method, bad seeds or streams, or a context for a method that takes none.

    Examples:
        >>> s = make_sampler("gcs", seed=3)
        >>> first = s.sample(torch.zeros(2, 10)); s.reset()
        >>> torch.equal(first, s.sample(torch.zeros(2, 10))), bool(first[0] == first[1])
        (True, True)
        >>> make_sampler("ctx", seed=3, context=2)
        ContextGumbelSampler(method='ctx', seed=3, context=2)
    """
    if isinstance(method, str):
        method = check_method(method)
        return _one_sampler(method, seed, streams, check_context(context, [method]))
    if not isinstance(method, Iterable):
        raise ArgumentTypeError(f"method must be a method name ({', '.join(EXTENDED_METHODS)}) or a list of them, "
                                f"got {type(method).__name__} {quoted(method)}")
    methods = [check_method(m) for m in method]
    context = check_context(context, methods)
    if len(set(methods)) == 1:  # one method after all: skip the per-method dispatch
        return _one_sampler(methods[0], seed, streams, context)
    return MixedSampler(methods, seed=seed, streams=streams, context=context)
