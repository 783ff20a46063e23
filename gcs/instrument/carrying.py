"""GCSwR's carried wins, read off a trace: a race won by a clock that had already won another row's race earlier.

Under GCSwR every token's Exp(1) clock is drawn from the shared seed (``drawn_clock``) and recycling only lowers it,
taking ``T * p`` off at every race it loses, so a clock can win in one row and, carried along, win again in another.
``carried_win`` finds such races exactly from a ``gcs.trace`` alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import torch

from gcs.checks import check_seed
from gcs.instrument.tracing import Trace
from gcs.sampling.noise import DOMAIN_GUMBEL, exponential_noise, row_keys


@dataclass(frozen=True)
class CarriedWin:
    """GCSwR: a race won by a clock that had already won another row's race earlier.

    Both rows received the clock as the same value ``drawn`` from the shared seed (the same token's same draw), and
    recycling carried it along in each, taking ``T * p`` off at every race it lost.

    Attributes:
        position: the later race's position.
        row: the later race's row.
        token_id: the token whose clock won both races.
        text: its text.
        draw: how often each row had emitted the token before.
        drawn: the clock's value when drawn.
        clock: its value at the later race.
        earlier_position: the earlier race's position.
        earlier_row: the earlier race's row.
        earlier_clock: the clock's value at the earlier race.
    """

    position: int
    row: int
    token_id: int
    text: str
    draw: int
    drawn: float
    clock: float
    earlier_position: int
    earlier_row: int
    earlier_clock: float


def drawn_clock(seed: int, token_id: int, draw: int) -> float:
    """The Exp(1) clock GCSwR gives ``token_id`` at its ``draw``-th draw under ``seed`` (draw 0: the start), the same
    in every row with that seed."""
    keys = row_keys(torch.tensor([check_seed(seed)]), DOMAIN_GUMBEL)
    return float(exponential_noise(keys, torch.tensor([draw]), torch.tensor([token_id]))[0])


def carried_win(trace: Trace, position: int, row: int) -> CarriedWin | None:
    """The race at (``position``, ``row``) if its winning clock had already won another row's race earlier.

    Exact, from the trace alone: the same token, the same draw of its clock in both rows (each row's emitted tokens
    before the race are counted), and in both races a value at most the drawn one (recycling only lowers a clock). Only
    GCSwR carries clocks; a forced step redraws a clock the trace need not show, so races at or after a row's first
    forced step are left out.

    Args:
        trace: a ``gcs.trace`` result.
        position: the token position.
        row: the prompt's row.

    Returns:
        The ``CarriedWin`` (the latest such race when there are several), or None.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> t = gcs.trace(["2+2?", "What is 2 plus 2?"], method="gcswr", seed=1, max_new_tokens=4)
        >>> win = carried_win(t, 3, 1)
        >>> win is None or isinstance(win, CarriedWin)
        True
    """
    step = trace.steps[position][row]
    if trace.method != "gcswr" or not _raced(trace, position, row):
        return None
    draw = _emitted(trace, position, row).count(step.winner)
    drawn = drawn_clock(trace.seed, step.winner, draw)
    clock = cast(float, step.winning.noise)  # GCSwR: every candidate holds its noise (None is IS's)
    for earlier in range(position - 1, -1, -1):
        for other, past in enumerate(trace.steps[earlier]):
            if other == row or past.winner != step.winner or not _raced(trace, earlier, other):
                continue
            earlier_clock = cast(float, past.winning.noise)
            if _emitted(trace, earlier, other).count(step.winner) == draw and max(clock, earlier_clock) <= drawn:
                return CarriedWin(position, row, step.winner, step.winner_text, draw, drawn, clock, earlier, other,
                                  earlier_clock)
    return None


def _raced(trace: Trace, position: int, row: int) -> bool:
    """The row's token at ``position`` is its race's winner: not finished, and no step of the row forced so far."""
    return not trace.steps[position][row].finished and not any(
        where <= position and forced_row == row for where, forced_row, _ in trace.forced)


def _emitted(trace: Trace, position: int, row: int) -> list[int]:
    """The tokens ``row`` emitted before ``position``."""
    return [trace.steps[t][row].winner for t in range(position)]
