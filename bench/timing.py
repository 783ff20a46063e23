"""Side-by-side timing for the benchmarks: contenders take turns, each keeps its best.

This machine's speed drifts by up to +-30% over a minute (shared cores). Timing one
contender's repeats back to back and then the next one's puts the drift into the ratio;
taking turns (A, B, C, A, B, C, ...) spreads it over all of them.

>>> best = best_in_turns({"sum": lambda: sum(range(1000)), "max": lambda: max(range(1000))}, rounds=2)
>>> sorted(best), all(seconds > 0 for seconds in best.values())
(['max', 'sum'], True)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable


def best_in_turns(contenders: dict[Hashable, Callable[[], object]], rounds: int) -> dict[Hashable, float]:
    """Run every contender once per round, in turn, for ``rounds`` rounds; return each one's fastest seconds."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(rounds):
        for name, run in contenders.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best
