"""GCSwR's state for the requests of a vLLM batch: a row per batch slot in persistent tensors, updated in place.

vLLM's own processors keep per-slot tensors and update their rows as requests come, go and move; the plugin does
the same with GCSwR's residual noise and draw counts. A step then hands the sampler its rows as one view (or one
gather, where other methods' rows sit between them) and clones nothing per request. A request that leaves the
batch unfinished (preempted) takes its rows with it (``RequestState.parked``) and brings them back when it returns.

Each slot remembers the output index its last draw was for and the token it chose. vLLM may discard a draw (a row
still in chunked prefill samples a token nobody keeps) and ask for that index again, so the state before the
last draw is kept as well (``before``: one copy of the drawn rows per step).

>>> slots = SlotStates()
>>> slots.enter(0, RequestState(RequestArgs("gcswr", 7, None, 1.0, None, None)))
>>> state, rows = slots.take([(0, 0, None)], vocab=4, device="cpu")
>>> state[0].shape, rows  # one row of residual noise, a view (no gather)
(torch.Size([1, 4]), None)
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from .samplers import RecyclingGumbelSampler
from .vllm_requests import RequestArgs, RequestState  # noqa: F401  (RequestArgs: the doctest's)

logger = logging.getLogger("gcs.vllm")  # the plugin's logger: this module is part of it

_NAMES = ("residual", "draws", "before_residual", "before_draws")


@dataclass
class SlotInfo:
    """The request in a slot, the output index of its row's last draw (None: the row holds no state yet) and the
    token that draw chose."""

    request: RequestState
    drawn: int | None = None
    token: int | None = None


class SlotStates:
    """GCSwR state by batch slot: ``residual`` [slots, vocab] float32 and ``draws`` [slots, vocab] int32 (the state
    each row draws its next index from), and the same before each row's last draw. Grows as slots appear."""

    def __init__(self):
        self.info: dict[int, SlotInfo] = {}
        self.residual = self.draws = self.before_residual = self.before_draws = None

    def _room(self, slot: int, vocab: int, device) -> None:
        """Tensors with a row for ``slot`` (and every slot before it) of width ``vocab``."""
        rows = 0 if self.residual is None else self.residual.shape[0]
        if self.residual is not None and self.residual.shape[1] != vocab:
            raise ValueError(f"logits changed width from {self.residual.shape[1]} to {vocab} between steps")
        if slot < rows:
            return
        grown = max(slot + 1, 2 * rows, 8)
        for name in _NAMES:
            old = getattr(self, name)
            dtype = torch.float32 if name.endswith("residual") else torch.int32
            new = torch.zeros(grown, vocab, dtype=dtype, device=device if old is None else old.device)
            if old is not None:
                new[:rows] = old
            setattr(self, name, new)

    # -- vLLM's batch updates --------------------------------------------------------------------
    def enter(self, slot: int, request: RequestState) -> None:
        """``request`` takes ``slot``; a request coming back (it was preempted) brings its rows."""
        self.leave(slot)
        info = SlotInfo(request)
        if request.parked is not None:
            rows, info.drawn, info.token = request.parked
            request.parked = None
            self._room(slot, rows[0].shape[0], rows[0].device)
            for name, row in zip(_NAMES, rows):
                getattr(self, name)[slot] = row
        self.info[slot] = info

    def leave(self, slot: int) -> None:
        """``slot``'s request leaves the batch (finished or preempted: vLLM does not say): it keeps its rows."""
        info = self.info.pop(slot, None)
        if info is not None and info.drawn is not None:
            info.request.parked = (tuple(getattr(self, name)[slot].clone() for name in _NAMES), info.drawn, info.token)

    def move(self, source: int, target: int, swap: bool) -> None:
        """A request moves from ``source`` to ``target`` (an empty slot), or two swap places."""
        moving, other = self.info.pop(source, None), self.info.pop(target, None)
        if self.residual is not None:
            self._room(max(source, target), self.residual.shape[1], self.residual.device)
            for name in _NAMES:
                tensor = getattr(self, name)
                if swap:
                    tensor[[source, target]] = tensor[[target, source]]
                else:
                    tensor[target] = tensor[source]
        if moving is not None:
            self.info[target] = moving
        if swap and other is not None:
            self.info[source] = other

    # -- a step ---------------------------------------------------------------------------------
    def take(self, picks: Sequence[tuple[int, int, int | None]], vocab: int, device):
        """The state the ``picks`` draw from, as ``(residual, draws)`` [picks, vocab], and the slots they came from
        (None when the state is a view of consecutive slots, updated in place). A pick is ``(slot, output index,
        the request's last output token or None)``.

        A row draws from the state its last draw left when vLLM asks for the next index and kept that draw's token;
        from the state before it when vLLM asks for the same index again (it discarded that draw); else from the
        seed's initial noise: the start, or a lost state past it.
        """
        slots = [slot for slot, _, _ in picks]
        self._room(max(slots), vocab, device)
        again, fresh = [], []
        for slot, index, last_token in picks:
            info = self.info[slot]
            if info.drawn is not None and index == info.drawn + 1 and (last_token is None or last_token < 0
                                                                      or last_token == info.token):
                continue
            if info.drawn is not None and index == info.drawn:
                again.append(slot)
            else:
                if index > 0:
                    # Exact still (given the history, residuals are iid Exp(1) like fresh noise), but this request
                    # loses its coupling from here on.
                    logger.warning("gcs: GCSwR state of a request was lost at output index %d (it restarts from "
                                   "fresh noise); its tokens stay exact samples but are no longer coupled", index)
                fresh.append(slot)
        if again:
            rows = torch.tensor(again, device=self.residual.device)
            self.residual[rows], self.draws[rows] = self.before_residual[rows], self.before_draws[rows]
        for slot in fresh:
            self.residual[slot], self.draws[slot] = RecyclingGumbelSampler.initial_state(
                self.info[slot].request.args.seed, vocab, self.residual.device)
        first = slots[0]
        if slots == list(range(first, first + len(slots))):  # consecutive slots: views, no gather
            end = first + len(slots)
            self.before_residual[first:end] = self.residual[first:end]
            self.before_draws[first:end] = self.draws[first:end]
            return (self.residual[first:end], self.draws[first:end]), None
        rows = torch.tensor(slots, device=self.residual.device)
        state = (self.residual.index_select(0, rows), self.draws.index_select(0, rows))
        self.before_residual[rows], self.before_draws[rows] = state
        return state, rows

    def drew(self, picks: Sequence[tuple[int, int, int | None]], tokens: Sequence[int], state, rows) -> None:
        """Record the draws ``take`` prepared: ``state`` is the sampler's state after them, ``rows`` what ``take``
        returned with it."""
        if rows is not None:
            self.residual[rows], self.draws[rows] = state
        else:
            first = picks[0][0]
            for name, value in zip(("residual", "draws"), state):
                target = getattr(self, name)[first : first + len(picks)]
                if target.data_ptr() != value.data_ptr():  # a sampler that did not update in place
                    target.copy_(value)
        for (slot, index, _), token in zip(picks, tokens):
            info = self.info[slot]
            info.drawn, info.token = index, token
