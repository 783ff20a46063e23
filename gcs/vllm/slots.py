"""GCSwR's state for the requests of a vLLM batch: rows of persistent tensors, updated in place.

vLLM's own processors keep per-slot tensors and update their rows as requests come, go and move; the plugin does
the same with GCSwR's residual noise and draw counts. Each batch slot (V1: the row in the persistent batch; Model
Runner V2: the request slot) that holds a GCSwR request maps to a row of the tensors, taken lowest first from the
rows free, so the tensors hold as many rows as GCSwR requests ran at once (at most twice that, as they grow), not as
many as the engine has slots. A move in the batch moves the mapping, not the rows. A step hands the sampler its
rows as one view where they are consecutive (one gather otherwise). A request that leaves the batch unfinished
(preempted) takes a copy of its rows along (``RequestState.parked``) and brings it back when it returns, in whatever
slot it returns to.

Each row remembers the output index of its last draw and the token that draw chose. vLLM may discard a draw (a row
still in chunked prefill samples a token nobody keeps) and ask for that index again, so the state before the last
draw is kept as well (``before``: one copy of the drawn rows per step).

>>> slots = SlotStates()
>>> slots.enter(5, RequestState(RequestArgs("gcswr", 7, None, 1.0, None, None)))
>>> state, rows = slots.take([(5, 0, None)], vocab=4, device="cpu")
>>> state[0].shape, rows, slots.row_of  # slot 5's state is row 0, drawn through a view (no gather)
(torch.Size([1, 4]), None, {5: 0})
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from gcs.sampling.samplers import RecyclingGumbelSampler
from gcs.vllm.requests import RequestArgs, RequestState  # noqa: F401  (RequestArgs: the doctest's)

logger = logging.getLogger("gcs.vllm.plugin")  # the plugin's logger: this module is part of it

_NAMES = ("residual", "draws", "before_residual", "before_draws")


def as_slice(indices: Sequence[int]) -> slice | None:
    """``indices`` as a slice where they run consecutively (a view instead of a gather), else None.

    >>> as_slice([3, 4, 5]), as_slice([3, 5])
    (slice(3, 6, None), None)
    """
    first = indices[0]
    return slice(first, first + len(indices)) if list(indices) == list(range(first, first + len(indices))) else None


@dataclass
class SlotInfo:
    """The request in a slot, the output index of its last draw (None: no state yet) and the token it chose."""

    request: RequestState
    drawn: int | None = None
    token: int | None = None


class SlotStates:
    """GCSwR state of the requests in a batch: ``residual`` [rows, vocab] float32 and ``draws`` [rows, vocab] int32
    (the state each request draws its next index from), the same before each one's last draw, and which row each
    slot's request uses (``row_of``)."""

    def __init__(self):
        self.info: dict[int, SlotInfo] = {}
        self.row_of: dict[int, int] = {}
        self._free: list[int] = []  # a heap of the rows no slot uses
        self.residual = self.draws = self.before_residual = self.before_draws = None

    def _new_row(self, vocab: int, device) -> int:
        """The lowest free row, the tensors grown (doubled) when none is free."""
        if self.residual is not None and self.residual.shape[1] != vocab:
            raise ValueError(f"logits changed width from {self.residual.shape[1]} to {vocab} between steps")
        if not self._free:
            rows = 0 if self.residual is None else self.residual.shape[0]
            grown = max(2 * rows, 8)
            for name in _NAMES:
                old = getattr(self, name)
                dtype = torch.float32 if name.endswith("residual") else torch.int32
                new = torch.zeros(grown, vocab, dtype=dtype, device=device if old is None else old.device)
                if old is not None:
                    new[:rows] = old
                setattr(self, name, new)
            for row in range(rows, grown):
                heapq.heappush(self._free, row)
        return heapq.heappop(self._free)

    def _release(self, slot: int) -> None:
        row = self.row_of.pop(slot, None)
        if row is not None:
            heapq.heappush(self._free, row)

    # -- vLLM's batch updates --------------------------------------------------------------------
    def enter(self, slot: int, request: RequestState) -> None:
        """``request`` takes ``slot``; a request coming back (it was preempted) brings its rows."""
        for other, info in list(self.info.items()):
            if info.request is request and other != slot:  # Model Runner V2 re-adds a preempted request in any
                self.leave(other)  # free slot and never says its old one was freed: its rows come along from there
        self.leave(slot)
        info = self.info[slot] = SlotInfo(request)
        if request.parked is not None:
            saved, info.drawn, info.token = request.parked
            request.parked = None
            row = self.row_of[slot] = self._new_row(saved[0].shape[0], saved[0].device)
            for name, values in zip(_NAMES, saved, strict=True):
                getattr(self, name)[row] = values

    def leave(self, slot: int) -> None:
        """``slot``'s request leaves the batch (finished or preempted: vLLM does not say); it keeps a copy of its
        rows, and the slot's row is free again."""
        info = self.info.pop(slot, None)
        row = self.row_of.get(slot)
        if info is not None and info.drawn is not None and row is not None:
            info.request.parked = (tuple(getattr(self, name)[row].clone() for name in _NAMES), info.drawn, info.token)
        self._release(slot)

    def move(self, source: int, target: int, swap: bool) -> None:
        """A request moves from ``source`` to ``target`` (an empty slot), or two swap places: the mapping moves,
        not the rows."""
        moving, other = self.info.pop(source, None), self.info.pop(target, None)
        source_row, target_row = self.row_of.pop(source, None), self.row_of.pop(target, None)
        if moving is not None:
            self.info[target] = moving
        if source_row is not None:
            self.row_of[target] = source_row
        if swap:
            if other is not None:
                self.info[source] = other
            if target_row is not None:
                self.row_of[source] = target_row
        elif target_row is not None:  # a move onto an occupied slot drops its occupant (vLLM moves into holes)
            heapq.heappush(self._free, target_row)

    # -- a step ---------------------------------------------------------------------------------
    def take(self, picks: Sequence[tuple[int, int, int | None]], vocab: int, device):
        """The state the ``picks`` draw from, as ``(residual, draws)`` [picks, vocab], and the rows they came from
        (None when the state is a view of consecutive rows, updated in place). A pick is ``(slot, output index,
        the request's last output token or None)``.

        A request draws from the state its last draw left when vLLM asks for the next index and kept that draw's
        token; from the state before it when vLLM asks for the same index again (it discarded that draw); else
        from the seed's initial noise: the start, or a lost state past it.
        """
        again, fresh = [], []
        for slot, index, last_token in picks:
            info = self.info[slot]
            if slot not in self.row_of:
                self.row_of[slot] = self._new_row(vocab, device)
                info.drawn = None  # a new row holds no state
            if info.drawn is not None and index == info.drawn + 1 and (last_token is None or last_token < 0
                                                                      or last_token == info.token):
                continue
            if info.drawn is not None and index == info.drawn:
                again.append(self.row_of[slot])
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
            self.residual[self.row_of[slot]], self.draws[self.row_of[slot]] = RecyclingGumbelSampler.initial_state(
                self.info[slot].request.args.seed, vocab, self.residual.device)
        picked = [self.row_of[slot] for slot, _, _ in picks]
        run = as_slice(picked)
        if run is not None:  # consecutive rows: views, no gather
            self.before_residual[run], self.before_draws[run] = self.residual[run], self.draws[run]
            return (self.residual[run], self.draws[run]), None
        rows = torch.tensor(picked, device=self.residual.device)
        state = (self.residual.index_select(0, rows), self.draws.index_select(0, rows))
        self.before_residual[rows], self.before_draws[rows] = state
        return state, rows

    def drew(self, picks: Sequence[tuple[int, int, int | None]], tokens: Sequence[int], state, rows) -> None:
        """Record the draws ``take`` prepared: ``state`` is the sampler's state after them, ``rows`` what ``take``
        returned with it."""
        if rows is not None:
            self.residual[rows], self.draws[rows] = state
        else:
            first = self.row_of[picks[0][0]]
            for name, value in zip(("residual", "draws"), state, strict=True):
                target = getattr(self, name)[first : first + len(picks)]
                if target.data_ptr() != value.data_ptr():  # a sampler that did not update in place
                    target.copy_(value)
        for (slot, index, _), token in zip(picks, tokens, strict=True):
            info = self.info[slot]
            info.drawn, info.token = index, token
