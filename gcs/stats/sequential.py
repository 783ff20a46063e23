"""A verdict that stays honest when it looks early: seeds in rounds, an exact test at each look, and an error rate
held over every look and every comparison together.

    plan = gcs.sequential_plan(max_seeds=16)          # looks after 4 and 16 seeds (rounds 4, 12)
    tests = gcs.sequential_tests(scores, plan)        # after any round: each comparison claimed, open or within noise

Looking after each round and stopping once the data "look decided" would inflate false claims if each look were
tested as if it were the only one. Here the error budget is fixed before any seed runs:

- Each comparison (a method against the baseline under one metric) gets ``(1 - confidence) / comparisons`` and
  splits it over the looks in advance (``SequentialPlan.spend``); by the union bound, the chance that it is ever
  claimed while it is null stays within its share, whenever the run stops.
- Each look tests with the exact sign-flip test on the paired differences so far: valid whatever their shape (ties,
  heavy tails, two humps) as long as a null difference is as likely positive as negative; an exact test has a
  floor, ``2 / 2**n`` with n seeds (0.125 at 4 seeds), so a look spends only where a claim is possible at all.
- A comparison claimed at a look hands its share on to those still open (Holm's closed testing over weighted
  Bonferroni tests), which keeps the error over all comparisons together at most ``1 - confidence``.
- A comparison that would very likely stay unclaimed by the last look (its conditional power under the effect seen
  so far, below ``futility``) stops as within noise: stopping for futility can lose claims, never add false ones.

The run stops when no comparison is open, or at the last look. "More seeds" continues the same sequence: the plan's
looks past the run's maximum (``extension``) keep a share of every budget for it, set aside before the first seed.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import scipy.stats

from gcs.runtime.arguments import ArgumentTypeError, check_share
from gcs.runtime.quoting import quoted
from gcs.stats.intervals import CONFIDENCE
from gcs.stats.paired import _check_scores, comparisons
from gcs.stats.signflip import can_claim, sign_flip_interval, sign_flip_p

DEFAULT_ROUNDS = (4, 12)  # looks after 4 and 16 seeds: the same claims as 4, 4, 8 on 16 real groups, 10 % faster
EXTENSION_ROUNDS = (8, 8)  # "more seeds": looks after 24 and 32
EXTENSION_SHARE = 0.15  # of every comparison's budget, kept for the extension's looks
FUTILITY = 0.10  # a comparison whose chance to be claimed by the last look is below this stops, within noise


@dataclass(frozen=True)
class SequentialPlan:
    """When a run looks and how much of each comparison's budget each look may spend, fixed before any seed.

    Attributes:
        looks: seeds seen at each look (increasing); looks after ``looks[maximum]`` are the "more seeds" extension.
        spend: each look's share of a comparison's budget (summing to 1; 0 where an exact test could not reject at any
            level the budget allows).
        maximum: the index of the run's own last look.
        confidence: held over every look and comparison.
        futility: how unlikely a later claim must be for a comparison to stop as "within noise".
    """

    looks: tuple[int, ...]
    spend: tuple[float, ...]
    maximum: int  # index of the run's last look (before any extension)
    confidence: float = CONFIDENCE
    futility: float = FUTILITY

    def extended(self) -> SequentialPlan:
        """The same plan, its run's maximum moved to its last look: "more seeds" continues into the extension (the
        spending, fixed in advance, is unchanged)."""
        return dataclasses.replace(self, maximum=len(self.looks) - 1)


def sequential_plan(max_seeds: int = 16, *, rounds: Sequence[int] | None = None, confidence: float = CONFIDENCE,
                    comparisons: int = 4, extension: Sequence[int] = EXTENSION_ROUNDS,
                    futility: float = FUTILITY, spending: str = "proportional") -> SequentialPlan:
    """The plan of a run of at most ``max_seeds`` seeds in rounds, then extension rounds for "more seeds".

    Spending: a look spends only where the exact test's floor (2 / 2**n) is within what it spends, since below the floor
    it could never claim. ``spending="proportional"`` splits the budget in proportion to each look's seeds, and a look
    whose share falls below its floor passes it to the later looks (with 4 comparisons, the look at 8 seeds would need
    62.5 % of the budget, so by default it only stops comparisons for futility); ``"floor-first"`` gives each earlier
    look at least its floor, so that seeds that all agree in sign are claimed there, at the cost of the last look's
    power. The run's looks share ``1 - EXTENSION_SHARE``, the extension's the remainder, split in proportion to their
    seeds.

    Args:
        max_seeds: the most seeds the run uses.
        rounds: seeds per round (None: 4, then 12, cut or extended to ``max_seeds``).
        confidence: the confidence held over every look and comparison.
        comparisons: how many comparisons share it.
        extension: the seeds of each extension round.
        futility: how unlikely a later claim must be for a comparison to stop as "within noise".
        spending: "proportional" or "floor-first".

    Returns:
        The plan: its looks (cumulative seeds) and what each spends.

    Raises:
        ValueError: a bad max_seeds, rounds, confidence, futility or spending.

    Examples:
        >>> plan = sequential_plan(16)
        >>> plan.looks, [round(s, 3) for s in plan.spend]
        ((4, 16, 24, 32), [0.0, 0.85, 0.064, 0.086])
        >>> sequential_plan(16, rounds=(4, 4, 8)).looks
        (4, 8, 16, 24, 32)
    """
    if not isinstance(max_seeds, int) or isinstance(max_seeds, bool):
        raise ArgumentTypeError(f"max_seeds must be a whole number of at least 1, got {type(max_seeds).__name__} "
                                f"{quoted(max_seeds)}")
    if max_seeds < 1:
        raise ValueError(f"max_seeds must be a whole number of at least 1, got {quoted(max_seeds)}")
    check_share(confidence, "confidence", 0.5)
    if not isinstance(spending, str):
        raise ArgumentTypeError(f"spending must be 'proportional' or 'floor-first', got {type(spending).__name__} "
                                f"{quoted(spending)}")
    if spending not in ("proportional", "floor-first"):
        raise ValueError(f"spending must be 'proportional' or 'floor-first', got {quoted(spending)}")
    sizes = [int(r) for r in (rounds if rounds is not None else DEFAULT_ROUNDS)]
    if not sizes or any(r < 1 for r in sizes):
        raise ValueError(f"rounds must be whole numbers of seeds, each at least 1, got {quoted(rounds)}")
    looks, total = [], 0
    for size in itertools.chain(sizes, itertools.repeat(sizes[-1])):
        total = min(total + size, max_seeds)
        looks.append(total)
        if total == max_seeds:
            break
    maximum = len(looks) - 1
    for size in extension:
        looks.append(looks[-1] + int(size))
    budget = (1 - confidence) / max(1, comparisons)
    usable = [can_claim(n, budget) for n in looks]
    extra_seeds = sum(n for n, ok in zip(looks[maximum + 1 :], usable[maximum + 1 :], strict=True) if ok)
    share = EXTENSION_SHARE if extra_seeds else 0.0
    spend = [0.0] * (maximum + 1)
    left = 1 - share
    for k in range(maximum):  # the run's looks but its last; the last takes what is left
        floor = 2 / 2 ** min(looks[k], 60) / budget * (1 + 1e-9)  # evidence is p / spend: the floor must reach alpha
        later = sum(n for n, ok in zip(looks[k : maximum + 1], usable[k : maximum + 1], strict=True) if ok)
        fair = left * looks[k] / later if usable[k] else 0.0
        if spending == "floor-first":
            spend[k] = min(max(fair, floor), left) if usable[k] else 0.0
        else:  # a share that cannot reach the floor could never claim: it goes to the later looks
            spend[k] = fair if fair >= floor else 0.0
        left -= spend[k]
    spend[maximum] = left
    spend += [share * n / extra_seeds if ok else 0.0
              for n, ok in zip(looks[maximum + 1 :], usable[maximum + 1 :], strict=True)]
    return SequentialPlan(tuple(looks), tuple(spend), maximum, confidence, futility)


COLUMNS = ["method", "metric", "n", "wins", "diff", "low", "high", "p", "status", "decided_at", "beyond_noise"]


def sequential_tests(scores: pd.DataFrame, *, plan: SequentialPlan, baseline: str = "is",
                     metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """Every comparison of a method with ``baseline`` under each metric, at the last look the seeds so far reach.

    Args:
        scores: columns method, seed, metric, consistency (``CompareReport.scores``); the seeds are taken in
            ascending order, and looked at where the plan says.
        plan: the run's ``SequentialPlan``.
        baseline: the method the others are compared with.
        metrics: the metrics to test (None: every metric in ``scores``).

    Returns:
        A frame with columns method, metric, n (paired seeds at that look), wins, diff (mean difference), low, high
        (the sign-flip interval at that look's share of the budget: with the other looks' intervals it holds at the
        plan's confidence over all comparisons; NaN where the look spends nothing), p, status ("beyond noise";
        "within noise" once it would very likely stay unclaimed; "open" while looks remain in the run; "undecided"
        at the run's last look), decided_at (the seeds it was decided at) and beyond_noise.

    Examples:
        >>> import pandas as pd
        >>> scores = pd.DataFrame({"method": ["is"] * 8 + ["gcswr"] * 8, "seed": list(range(8)) * 2, "metric": "e5",
        ...                        "consistency": [0.80, 0.82, 0.81, 0.79, 0.80, 0.83, 0.81, 0.80,
        ...                                        0.85, 0.86, 0.84, 0.85, 0.87, 0.86, 0.85, 0.84]})
        >>> sequential_tests(scores, plan=sequential_plan(16))[["method", "n", "status"]].to_dict("records")
        [{'method': 'gcswr', 'n': 4, 'status': 'open'}]
    """
    _check_scores(scores, plan.confidence)
    baseline, methods, metrics = comparisons(scores, baseline, metrics)
    by_key = scores.set_index(["method", "metric", "seed"])["consistency"].sort_index()
    differences = {(method, metric): (by_key.loc[(method, metric)] - by_key.loc[(baseline, metric)]).dropna()
                   .sort_index().to_numpy() for metric in metrics for method in methods}
    decisions = decide(differences, plan)
    records = []
    for (method, metric), d in differences.items():
        n = plan.looks[decisions.look] if decisions.look is not None else len(d)
        d = d[:n]
        level = decisions.level if decisions.look is not None else 0.0
        low, high = sign_flip_interval(d, alpha=level) if level else (math.nan, math.nan)
        status, decided_at = decisions.status[(method, metric)]
        records.append(dict(method=method, metric=metric, n=len(d), wins=int((d > 0).sum()),
                            diff=float(d.mean()) if len(d) else math.nan, low=low, high=high,
                            p=sign_flip_p(d) if len(d) else math.nan, status=status, decided_at=decided_at,
                            beyond_noise=status == "beyond noise"))
    return pd.DataFrame.from_records(records, columns=COLUMNS)


@dataclass(frozen=True)
class Decisions:
    """``decide``'s answer: ``status[comparison]`` = (status, seeds it was decided at or None); ``look``: the index of
    the last look the seeds reached (None before the first); ``level``: the error one comparison's interval may
    spend there."""

    status: dict
    look: int | None
    level: float

    @property
    def stopped(self) -> bool:
        """Whether the run stops here: no comparison is open."""
        return all(status != "open" for status, _ in self.status.values())


def decide(differences: dict, plan: SequentialPlan) -> Decisions:
    """The plan's decisions on paired differences (comparison -> differences in seed order, at least as many as
    seen so far by every comparison), look by look up to the last one they reach."""
    alpha, comparisons = 1 - plan.confidence, max(1, len(differences))
    seen = min((len(d) for d in differences.values()), default=0)
    reached = [k for k, n in enumerate(plan.looks) if n <= seen]
    evidence = dict.fromkeys(differences, math.inf)  # min over looks of p / share: a Bonferroni test over the looks
    claimed: dict = {}
    futile: dict = {}
    for k in reached:
        n = plan.looks[k]
        if plan.spend[k] > 0:
            for pair, d in differences.items():
                if pair not in claimed:
                    evidence[pair] = min(evidence[pair], sign_flip_p(d[:n]) / plan.spend[k])
            claimed.update((pair, n) for pair in _holm(evidence, claimed, alpha))
        if k < plan.maximum:
            futile.update((pair, n) for pair, d in differences.items() if pair not in claimed and pair not in futile
                          and _conditional_power(d[:n], plan, alpha / comparisons) < plan.futility)
    look = reached[-1] if reached else None
    final = look is not None and look >= plan.maximum
    status = {pair: ("beyond noise", claimed[pair]) if pair in claimed else ("within noise", futile[pair])
              if pair in futile else ("undecided", None) if final else ("open", None) for pair in differences}
    level = alpha / comparisons * plan.spend[look] if look is not None else 0.0
    return Decisions(status, look, level)


def _holm(evidence: dict, claimed: dict, alpha: float) -> list:
    """Comparisons Holm's step-down claims now (the shortcut of closed testing over weighted Bonferroni tests): with r
    comparisons unclaimed, the strongest is claimed when its evidence (min over looks of p / share) is at most
    ``alpha / r``; its budget then goes to the rest."""
    new = []
    remaining = sorted((pair for pair in evidence if pair not in claimed), key=evidence.__getitem__)
    for rank, pair in enumerate(remaining):
        if evidence[pair] > alpha / (len(remaining) - rank):
            break
        new.append(pair)
    return new


def _conditional_power(d: np.ndarray, plan: SequentialPlan, budget: float) -> float:
    """The chance that a comparison is claimed by the run's last look if its seeds go on as the ones seen so far (a
    normal approximation: the mean and spread so far, the seeds to come, the last look's level)."""
    n, final = len(d), plan.looks[plan.maximum]
    level = budget * plan.spend[plan.maximum]
    if n < 2 or final <= n or level <= 0 or not can_claim(final, level):
        return 0.0
    spread = float(np.std(d, ddof=1))
    if spread <= 1e-12:
        return 1.0 if d.any() else 0.0
    z_final = float(scipy.stats.norm.isf(level / 2))
    drift = abs(float(d.mean())) / spread  # the effect so far, in standard deviations per seed
    rest = final - n
    return float(scipy.stats.norm.sf((z_final * math.sqrt(final) - n * drift - rest * drift) / math.sqrt(rest)))
