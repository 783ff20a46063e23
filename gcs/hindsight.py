"""Hindsight: what would the model have said to a paraphrase, with the same luck?

    gcs.hindsight("Why is the sky blue?", "The sky looks blue because", ["What makes the sky blue?"])
    # -> one answer per paraphrase, generated with noise drawn from its posterior given the response

A response ``Y`` to prompt ``A`` says something about the noise that produced it. Hindsight
samples the shared noise from its posterior given that ``A`` produced ``Y`` (the teacher-forced
probabilities of ``Y`` under ``A``), then answers each paraphrase ``B`` with that noise: a draw of
what coupled sampling would have answered to ``B`` in a world where ``A`` got ``Y``.

The posterior, exactly, in the race form of ``gcs.samplers`` (noise ``E ~ Exp(1)``, token ``i``
arrives at ``E_i / p_i``, the first arrival wins). Given that token ``k`` won a race over iid Exp(1)
noise, the race time ``T`` is Exp(1), and every loser's residual ``E_i - T p_i`` is a fresh Exp(1),
independent of ``T``, of ``k`` and of each other (memorylessness). So, for one race:
``E_k = T p_k`` and ``E_i = R_i + T p_i`` with ``T, R_i`` iid Exp(1) (``race_posterior``).

- GCS: every position has its own noise vector, independent of the others: each position's
  posterior is one race posterior, and positions after ``Y`` keep fresh noise.
- GCSwR (Theorem 2): the state after the last step is iid Exp(1) given the whole history, and the
  state before a step is the race posterior of the state after it (the losers' residuals ``R_i``
  *are* the state after; the winner's entry after is its freshly drawn noise). Walking backward
  from iid Exp(1) gives the initial noise and every noise value ``Y`` drew; values ``Y`` never
  drew stay fresh.
- IS: the responses' randomness is independent, so ``B``'s answer is independent of ``Y``.

A replay of ``A`` with posterior noise reproduces ``Y`` exactly (checked on every draw).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .batch import Batch, Row
from .checks import check_method, check_prompts, check_seed
from .models import Model, resolve_model
from .noise import derive_seed, derive_seeds
from .processor import make_warpers
from .prompts import format_prompt
from .samplers import GumbelSampler, RecyclingGumbelSampler, relative_rates
from .settings import SamplingSettings

MAX_RESPONSE_TOKENS = 1024
REPLAY_ATTEMPTS = 20  # a posterior draw whose float32 replay differs from Y (a near-tie) is drawn again


def race_posterior(probabilities: torch.Tensor, winners: torch.Tensor, after: torch.Tensor,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """Exp(1) noise before a race [rows, vocab], given its winners [rows] and the losers' residuals ``after``.

    ``probabilities`` [rows, vocab] (float64, rows sum to 1). ``after`` holds each loser's residual
    ``R_i`` (iid Exp(1)); the winner's entry of ``after`` is not used. Returns ``E`` with ``E_k = T p_k``
    and ``E_i = R_i + T p_i``, ``T ~ Exp(1)``: then ``argmin E / p`` is ``k``.

    >>> p = torch.tensor([[0.5, 0.3, 0.2]], dtype=torch.float64)
    >>> e = race_posterior(p, torch.tensor([2]), torch.ones(1, 3, dtype=torch.float64))
    >>> int((e / p).argmin())
    2
    """
    rows = torch.arange(len(winners))
    race_time = torch.empty(len(winners), dtype=torch.float64).exponential_(generator=generator)
    noise = after + race_time[:, None] * probabilities
    noise[rows, winners] = race_time * probabilities[rows, winners]
    return noise


def _exponentials(shape, generator) -> torch.Tensor:
    return torch.empty(shape, dtype=torch.float64).exponential_(generator=generator)


@dataclass(frozen=True)
class Posterior:
    """Noise drawn from its posterior given responses, one row per response (``posterior``).

    ``response`` [rows, n]: the token ids. GCS: ``positions`` [rows, n, vocab], the noise of each of
    ``Y``'s positions. GCSwR: ``initial`` [rows, vocab], the state before the first token; ``fresh``
    [rows, n], the noise drawn for the winner after each step, which is that token's
    ``draw_index``-th value. ``seeds``: the noise ``Y`` never used is fresh, from these seeds.
    """

    method: str
    response: torch.Tensor
    seeds: tuple[int, ...]
    positions: torch.Tensor | None = None
    initial: torch.Tensor | None = None
    fresh: torch.Tensor | None = None
    draw_index: torch.Tensor | None = None

    def select(self, rows: Sequence[int]) -> Posterior:
        """The posterior rows ``rows`` (repeats allowed: paraphrases that share one response's luck)."""
        index = torch.as_tensor(list(rows), dtype=torch.long)
        pick = lambda x: None if x is None else x[index]  # noqa: E731
        return Posterior(self.method, self.response[index], tuple(self.seeds[i] for i in index.tolist()),
                         pick(self.positions), pick(self.initial), pick(self.fresh), pick(self.draw_index))

    def sampler(self):
        """A sampler for ``len(response)`` rows that draws with this noise (``sample`` as any ``gcs.Sampler``)."""
        return _PosteriorGumbel(self) if self.method == "gcs" else _PosteriorRecycling(self)


def draw_indices(response: torch.Tensor) -> torch.Tensor:
    """For each step, how often its token has won up to and including it: the draw index of its new noise.

    >>> draw_indices(torch.tensor([[5, 7, 5, 5]])).tolist()
    [[1, 1, 2, 3]]
    """
    same = response[:, :, None] == response[:, None, :]  # [rows, t, s]: step s picked step t's token
    return torch.tril(same).sum(dim=-1)


def rates_to_probabilities(logits: torch.Tensor) -> torch.Tensor:
    """The exact distribution the samplers race over: ``relative_rates`` (float32), normalised in float64.

    A token whose float32 rate underflows to 0 has probability 0, as it has in every sampler.
    """
    flat = logits.reshape(-1, logits.shape[-1]).float()
    rates = relative_rates(flat, flat.max(dim=-1).values).double()
    return (rates / rates.sum(dim=-1, keepdim=True)).reshape(logits.shape)


def posterior(method: str, logits: torch.Tensor, response: torch.Tensor, seed: int = 0) -> Posterior:
    """Noise from its posterior given that rows with (warped) ``logits`` [rows, n, vocab] produced ``response``
    [rows, n] under ``method`` ("gcs" or "gcswr"). ``seed`` picks the draw (a different seed, another draw).

    Every row's replay (``replay``) reproduces its response; a draw whose float32 replay would not (a
    near-tie rounded the other way) is drawn again. A response token of probability 0 is a ValueError.
    """
    method = check_method(method)
    if method == "is":
        raise ValueError("IS has no shared noise to infer: a paraphrase's answer is independent of the response")
    if logits.dim() != 3 or response.shape != logits.shape[:2] or response.shape[1] == 0:
        raise ValueError(f"logits must be [rows, n, vocab] and response [rows, n] with n > 0, got "
                         f"{list(logits.shape)} and {list(response.shape)}")
    probabilities = rates_to_probabilities(logits)
    response = response.long().cpu()
    chosen = probabilities.gather(-1, response[:, :, None]).squeeze(-1)
    if (chosen <= 0).any():
        row, step = (chosen <= 0).nonzero()[0].tolist()
        raise ValueError(f"the response is impossible under these settings: its token {step + 1} (id "
                         f"{int(response[row, step])}) has probability 0 (a lower temperature or top-p cut it)")
    generator = torch.Generator().manual_seed(derive_seed(check_seed(seed), 1))
    rows = len(response)
    seeds = tuple(derive_seeds(seed, 2 + torch.arange(rows)).tolist())
    draw = _gcs_posterior if method == "gcs" else _gcswr_posterior
    result = draw(probabilities, response, seeds, generator)
    for _ in range(REPLAY_ATTEMPTS):
        wrong = (replay(result, logits) != response).any(dim=1).nonzero().squeeze(1)
        if len(wrong) == 0:
            return result
        redrawn = draw(probabilities[wrong], response[wrong], tuple(seeds[i] for i in wrong.tolist()), generator)
        result = _replace_rows(result, wrong, redrawn)
    raise RuntimeError(f"no posterior draw replays the response exactly after {REPLAY_ATTEMPTS} attempts")


def _gcs_posterior(probabilities, response, seeds, generator) -> Posterior:
    rows, n, vocab = probabilities.shape
    flat = race_posterior(probabilities.reshape(-1, vocab), response.reshape(-1),
                          _exponentials((rows * n, vocab), generator), generator)
    return Posterior("gcs", response, seeds, positions=flat.reshape(rows, n, vocab).float())


def _gcswr_posterior(probabilities, response, seeds, generator) -> Posterior:
    rows, n, vocab = probabilities.shape
    state = _exponentials((rows, vocab), generator)  # after the last step: iid Exp(1) given the history
    fresh = torch.empty(rows, n, dtype=torch.float64)
    index = torch.arange(rows)
    for step in reversed(range(n)):
        fresh[:, step] = state[index, response[:, step]]  # the winner's entry after a step is its new draw
        state = race_posterior(probabilities[:, step], response[:, step], state, generator)
    return Posterior("gcswr", response, seeds, initial=state.float(), fresh=fresh.float(),
                     draw_index=draw_indices(response))


def _replace_rows(result: Posterior, rows: torch.Tensor, redrawn: Posterior) -> Posterior:
    def put(old, new):
        if old is None:
            return None
        old = old.clone()
        old[rows] = new
        return old

    return Posterior(result.method, result.response, result.seeds, put(result.positions, redrawn.positions),
                     put(result.initial, redrawn.initial), put(result.fresh, redrawn.fresh), result.draw_index)


def replay(noise: Posterior, logits: torch.Tensor) -> torch.Tensor:
    """The tokens [rows, n] the posterior's sampler picks from teacher-forced ``logits`` [rows, n, vocab]."""
    sampler = noise.sampler()
    return torch.stack([sampler.sample(logits[:, step].float()) for step in range(logits.shape[1])], dim=1)


class _PosteriorGumbel(GumbelSampler):
    """GCS whose noise at ``Y``'s positions comes from the posterior; later positions are fresh."""

    def __init__(self, noise: Posterior):
        super().__init__(seed=list(noise.seeds))
        self.noise = noise

    def _shared_noise(self, draws):
        values = super()._shared_noise(draws)
        positions = self.noise.positions.to(values.device)
        known = (draws < positions.shape[1]).nonzero().squeeze(1)
        values[known] = positions[known, draws[known]]
        return values


class _PosteriorRecycling(RecyclingGumbelSampler):
    """GCSwR starting from the posterior's initial state; a winner's new noise is the posterior's value when
    ``Y`` drew it, else fresh. Runs the eager step (the fused kernel computes fresh noise itself)."""

    def __init__(self, noise: Posterior):
        super().__init__(seed=list(noise.seeds))
        self.noise = noise

    def _start(self, seeds, streams, state=None):
        initial = self.noise.initial.to(self.device).clone()
        super()._start(seeds, streams, (initial, torch.zeros_like(initial, dtype=torch.int32)))
        self._kernel, self._arrivals = None, torch.empty_like(self.residual)
        self._known = (self.noise.response.to(self.device), self.noise.draw_index.to(self.device),
                       self.noise.fresh.to(self.device))

    def _fresh_noise(self, draws, tokens):
        values = super()._fresh_noise(draws, tokens)
        response, draw_index, fresh = self._known
        match = (response == tokens[:, None]) & (draw_index == draws[:, None])  # at most one step per row
        found = match.any(dim=1)
        values[found] = fresh[found, match[found].int().argmax(dim=1)]
        return values


def teacher_forced_logits(prompt: str, response_ids: Sequence[int], model: Model, settings: SamplingSettings):
    """The warped logits [1, n, vocab] (float32) with which the model would pick each token of the response."""
    tokenizer = model.tokenizer
    text = format_prompt(prompt, tokenizer, model.is_chat)
    prompt_ids = tokenizer(text, add_special_tokens=not model.is_chat)["input_ids"]
    ids = torch.tensor([list(prompt_ids) + list(response_ids)], device=model.device)
    if ids.shape[1] > model.context_window:
        raise ValueError(f"the prompt and response are {ids.shape[1]} tokens: over the model's context window "
                         f"of {model.context_window}")
    with torch.inference_mode():
        logits = model.model(input_ids=ids).logits[0, len(prompt_ids) - 1 : -1].float()
    warped = make_warpers(*settings.warping)(ids[:, : len(prompt_ids)].expand(len(logits), -1), logits)
    return warped.cpu()[None]


def hindsight(
    prompt: str,
    response: str,
    paraphrases: Sequence[str],
    method: str = "gcswr",
    seed: int = 0,
    temperature: float = 1.0,
    top_p: float | None = None,
    max_new_tokens: int = 64,
    model: Model | str | None = None,
    **generate_kwargs,
) -> list[str]:
    """One answer per paraphrase, with the noise drawn from its posterior given that ``prompt`` got ``response``.

    ``response`` is text (typed in, or a response from ``gcs.compare``), tokenized with the model's
    tokenizer; ``seed`` picks the posterior draw. ``method``: "gcswr" (default) or "gcs" share noise
    with the response; under "is" a paraphrase's answer is independent of it (an ordinary IS sample).
    Replaying the prompt itself (``paraphrases=[prompt]``) gives an answer that begins with ``response``
    (up to the model's float rounding between one forward pass and step-by-step decoding).
    A response token the settings make impossible (top-p) is a ValueError. Extra keyword arguments go to
    transformers' ``generate`` (hindsight runs on the transformers engine).

    >>> # gcs.hindsight("Name a colour.", "Blue", ["Tell me a colour."], seed=3)  -> ['Blue, ...']
    """
    if not isinstance(prompt, str) or not prompt.strip():
        raise ValueError("prompt must be non-blank text")
    paraphrases = check_prompts(paraphrases, "paraphrases")
    method = check_method(method)
    settings = SamplingSettings([method], [check_seed(seed)], temperature, None, top_p, max_new_tokens)
    if settings.temperature == 0:
        raise ValueError("at temperature 0 every method is greedy: there is no luck to share; use a temperature "
                         "above 0")
    if not isinstance(response, str) or not response.strip():
        raise ValueError("response must be non-empty text")
    model = resolve_model(model)
    response_ids = model.tokenizer.encode(response, add_special_tokens=False)
    if len(response_ids) > MAX_RESPONSE_TOKENS:
        raise ValueError(f"the response is {len(response_ids):,} tokens; at most {MAX_RESPONSE_TOKENS:,}")
    sampler = None
    if method != "is":
        logits = teacher_forced_logits(prompt, response_ids, model, settings)
        noise = posterior(method, logits, torch.tensor([response_ids]), seed)
        sampler = noise.select([0] * len(paraphrases)).sampler()
    batch = Batch([Row(b, method, settings.seeds[0]) for b in paraphrases], model, settings, dict(generate_kwargs),
                  sampler=sampler)
    return [row["response"] for row in batch.decode(batch.run())]
