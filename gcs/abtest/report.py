"""What an A/B frame says: the paired effect of B against A per score, and what the shared luck saved.

    report = gcs.ab_report(gcs.ab(prompts, a, b))
    report.lines     # one plain sentence per score, then the seeds saved, then how close the answers stay
    report.effects   # per arm score: the effect under shared luck and under the IS control, the seeds IS needs

The seed is the unit, as in ``gcs.verdict``: a seed's noise is shared by every prompt (and both arms), so each
score is averaged over the prompts within a seed, and the paired differences B - A over seeds are tested with
``gcs.paired_tests`` (baseline A): the exact sign-flip test, simultaneous (Bonferroni) over the scores, which says
so where the seeds are too few for any claim (identical arms: every difference is 0, and no claim).
The IS control answers the same prompts and seeds independently; the same test on its differences gives the
width independent sampling reaches with as many seeds, and ``n * (sd_is / sd_shared)**2`` estimates the seeds
it would need for shared luck's width (from the two spreads: a width shrinks as sd / sqrt(n)). The two sets of
differences are independent (IS draws its own noise), so the F interval for the ratio of their variances
(``gcs.stats.intervals.variance_ratio_interval``) times n bounds that estimate: is_seeds_low, is_seeds_high.

>>> import pandas as pd
>>> frame = pd.DataFrame({"prompt_index": 0, "method": ["gcswr"] * 4 + ["is"] * 4, "seed": [0, 1, 2, 3] * 2,
...                       "identical": [True] * 4 + [False] * 4, "length_a": [10, 12, 9, 11, 10, 12, 9, 11],
...                       "length_b": [10, 12, 9, 11, 14, 7, 12, 9]})
>>> print(ab_report(frame).lines[1])
length: B and A gave the same value on each of the 4 seeds: no difference, and no claim: 4 seeds are too few for \
any claim at 95 % (the exact sign-flip test needs at least 6).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from gcs.abtest.answers import FRAME_COLUMNS
from gcs.abtest.scores import PAIR_SCORES
from gcs.checks import METHOD_NAMES
from gcs.runtime.arguments import ArgumentTypeError
from gcs.stats.intervals import CONFIDENCE, mean_interval, variance_ratio_interval
from gcs.stats.paired import paired_tests
from gcs.stats.signflip import fewest_seeds

EFFECT_COLUMNS = ("metric", "n", "diff", "low", "high", "p", "claimable", "beyond_noise", "sd", "control_diff",
                  "control_low", "control_high", "control_sd", "is_seeds", "is_seeds_low", "is_seeds_high")
PAIR_COLUMNS = ("method", "score", "n", "mean", "low", "high")


@dataclass(frozen=True)
class ABReport:
    """``gcs.ab_report``'s answer, plain data for a page.

    Attributes:
        names: the arms' names.
        method: the shared method.
        control: the control's method ("is"), or None without a control.
        effects: one row per arm score: n (seeds), diff (mean of B - A over seeds), low, high (the simultaneous
            sign-flip interval; NaN where n seeds are too few for it), p, claimable, beyond_noise, sd (the spread of the
            per-seed differences), the same under the IS control (control_*), and is_seeds (the seeds IS would need for
            shared luck's width: inf where only IS has spread, NaN where IS has none) with is_seeds_low and
            is_seeds_high, its F interval (NaN unless both spreads are positive; it assumes roughly normal per-seed
            differences, and heavy tails make it too narrow).
        pairs: per method, the share of identical answers and each pair score (how close the arms' answers are), with
            an interval over seeds.
        lines: the sentences.
    """

    names: tuple[str, str]
    method: str
    control: str | None
    effects: pd.DataFrame
    pairs: pd.DataFrame
    lines: list[str]


def arm_scores(frame: pd.DataFrame) -> list[str]:
    """The labels of the frame's arm scores: every ``LABEL_a`` with its ``LABEL_b``."""
    fixed = {c.removesuffix("_a") for c in FRAME_COLUMNS if c.endswith("_a")}
    return [c[:-2] for c in frame.columns if c.endswith("_a") and c[:-2] not in fixed and f"{c[:-2]}_b" in frame]


def _per_seed(part: pd.DataFrame, labels: list[str]) -> pd.DataFrame:
    """Each score's mean over the prompts within each seed, the arms as method "A"/"B" (``paired_tests``' layout)."""
    means = part.groupby("seed")[[f"{label}_{slot}" for label in labels for slot in "ab"]].mean()
    return pd.DataFrame.from_records(
        [{"method": slot.upper(), "seed": seed, "metric": label,
          "consistency": float(means.loc[seed, f"{label}_{slot}"])}
         for label in labels for slot in "ab" for seed in means.index],
        columns=["method", "seed", "metric", "consistency"])


def _effects(frame: pd.DataFrame, method: str, control: str | None, labels: list[str], confidence: float):
    tests = {}
    for which in (method, control):
        if which is not None and labels:
            scores = _per_seed(frame[frame["method"] == which], labels)
            tested = paired_tests(scores, baseline="A", confidence=confidence, metrics=labels)
            tests[which] = tested.set_index("metric")
    records = []
    for label in labels:
        row = tests[method]
        tested = row.loc[label, ["n", "diff", "low", "high", "p", "claimable", "beyond_noise", "sd"]].to_dict()
        record = {"metric": label, **tested, "control_diff": math.nan, "control_low": math.nan,
                  "control_high": math.nan, "control_sd": math.nan, "is_seeds": math.nan, "is_seeds_low": math.nan,
                  "is_seeds_high": math.nan}
        if control is not None:
            other = tests[control]
            record.update(control_diff=other.loc[label, "diff"], control_low=other.loc[label, "low"],
                          control_high=other.loc[label, "high"], control_sd=other.loc[label, "sd"])
            shared, independent = record["sd"], record["control_sd"]
            if shared > 0 and independent > 0:
                record["is_seeds"] = record["n"] * (independent / shared) ** 2
                low, high = variance_ratio_interval((independent / shared) ** 2, int(other.loc[label, "n"]) - 1,
                                                    int(record["n"]) - 1, confidence=confidence)
                record.update(is_seeds_low=record["n"] * low, is_seeds_high=record["n"] * high)
            elif independent > 0:
                record["is_seeds"] = math.inf  # no finite number of independent seeds matches a width of zero
        records.append(record)
    return pd.DataFrame.from_records(records, columns=list(EFFECT_COLUMNS))


def _pairs(frame: pd.DataFrame, methods: list[str], confidence: float) -> pd.DataFrame:
    records = []
    for method in methods:
        part = frame[frame["method"] == method]
        for score in ["identical", *(s for s in PAIR_SCORES if s in frame)]:
            values = part.groupby("seed")[score].mean().astype(float)
            mean, _, low, high = mean_interval(values, confidence=confidence)
            floor = -1.0 if score == "e5_between" else 0.0  # a t interval cut to the values the score can take
            low, high = _at_a_bound(values, floor, confidence) or (max(low, floor), min(high, 1.0))
            records.append({"method": method, "score": score, "n": len(values), "mean": mean, "low": low, "high": high})
    return pd.DataFrame.from_records(records, columns=list(PAIR_COLUMNS))


def _at_a_bound(values: pd.Series, floor: float, confidence: float) -> tuple[float, float] | None:
    """The exact interval of a mean score when every seed's value sits at one end of the score's range [floor, 1]
    (no identical answer on any seed, say), where a t interval has no width and would claim certainty; else None.

    A seed's value X in [floor, 1] with mean m has P(X = floor) <= 1 - (m - floor) / (1 - floor), so n seeds all at
    ``floor`` have probability at most that to the n-th power; the bound is the m where it equals alpha / 2 (the
    one-sided half of the two-sided level; mirrored at 1): Clopper-Pearson's bound for 0 of n, valid for any
    distribution on the range.

    >>> _at_a_bound(pd.Series([0.0] * 8), 0.0, 0.95)
    (0.0, 0.369...)
    >>> _at_a_bound(pd.Series([0.0, 0.5]), 0.0, 0.95) is None
    True
    """
    n = len(values)
    if not n or values.nunique() != 1 or values.iloc[0] not in (floor, 1.0):
        return None
    width = (1.0 - floor) * (1.0 - ((1.0 - confidence) / 2) ** (1.0 / n))
    return (floor, floor + width) if values.iloc[0] == floor else (1.0 - width, 1.0)


# -- words -------------------------------------------------------------------------------------------------------
def _phrasing(label: str) -> tuple[str, str, float, str]:
    """(sentence with {B}, {A}, {more} and {amount}; the words for more and less; the scale; the unit)."""
    kind, _, argument = label.partition(":")
    if kind == "length":
        return "{B} is {more} than {A} by {amount}", "longer/shorter", 1.0, "tokens"
    if kind == "contains":
        return f"{{B}}'s answers contain {argument!r} {{more}} than {{A}}'s, by {{amount}}", "more often/less often", \
            100.0, "points"
    if kind == "regex":
        return f"{{B}}'s answers match /{argument}/ {{more}} than {{A}}'s, by {{amount}}", "more often/less often", \
            100.0, "points"
    if kind == "e5_to":
        return "{B} is {more} the reference answer than {A}, by {amount}", "closer to/further from", 100.0, "E5 points"
    return f"{{B}} scores {{more}} than {{A}} on {label}, by {{amount}}", "higher/lower", 1.0, ""


# Below this, in the unit shown, a value is floating-point dust (a bisected interval's end at -3.9e-11), not a number.
_DUST = 1e-9


def _number(value: float, scale: float, unit: str, signed: bool = True, with_unit: bool = True,
            decimals: int = 1) -> str:
    """A score (times ``scale``) with its unit: ``decimals`` for tokens and points, three digits for a scorer's; a
    value that rounds to zero is written 0, without a sign (never "-0.0").

    >>> _number(2.25, 1.0, "tokens"), _number(-0.125, 100.0, "points", with_unit=False), _number(0.1234, 1.0, "")
    ('+2.2 tokens', '-12.5', '+0.123')
    >>> _number(-3.9e-11, 1.0, "tokens"), _number(-0.04, 1.0, "tokens"), _number(-3.9e-11, 1.0, "")
    ('0.0 tokens', '0.0 tokens', '0')
    """
    digits = f".{decimals}f" if scale != 1 or unit else ".3g"
    shown = scale * value
    if abs(shown) < _DUST or float(f"{shown:{digits}}") == 0:
        shown = 0.0
    sign = "+" if signed and shown != 0 else ""
    return f"{shown:{sign}{digits}} {unit if with_unit else ''}".strip()


def _decimals(values, scale: float) -> int:
    """The fewest decimals, 1 to 4, at which none of ``values`` (times ``scale``) that is more than dust prints as 0.

    >>> _decimals([2.5, -1.0], 1.0), _decimals([0.03, 2.5], 1.0), _decimals([-3.9e-11], 1.0)
    (1, 2, 1)
    """
    shown = [scale * value for value in values if abs(scale * value) >= _DUST]
    return next((d for d in range(1, 5) if all(round(value, d) != 0 for value in shown)), 4)


def _interval_text(low: float, high: float, beyond_noise: bool, scale: float, unit: str) -> str:
    """"LOW to HIGH UNIT", whose printed ends say what the verdict says. Within noise, the test at 0 itself did not
    reject, so 0 belongs to the interval even where bisection stopped a hair short of it (-3.9e-11): the printed
    interval reaches 0. Beyond noise, as many decimals as it takes for neither end to print as 0.

    >>> _interval_text(-6.0, -3.9e-11, False, 1.0, "tokens")
    '-6.0 to 0.0 tokens'
    >>> _interval_text(0.03, 2.5, True, 1.0, "tokens")
    '+0.03 to +2.50 tokens'
    """
    if not beyond_noise:
        low, high = min(low, 0.0), max(high, 0.0)
    decimals = _decimals([low, high], scale) if beyond_noise else 1
    return " to ".join(_number(end, scale, unit, with_unit=False, decimals=decimals) for end in (low, high)) + \
        (f" {unit}" if unit else "")


def _effect_line(row, names: tuple[str, str], confidence: float, family: int) -> str:
    a, b = names
    sentence, words, scale, unit = _phrasing(row.metric)
    more, less = words.split("/")
    head = f"{row.metric}: "
    if row.n < 2:
        return f"{head}{row.n} seed{'s' if row.n != 1 else ''}: one seed is an anecdote, not evidence; use more seeds."
    amount = _number(abs(row.diff), scale, unit, signed=False, decimals=_decimals([row.diff], scale))
    body = sentence.format(B=b, A=a, more=more if row.diff >= 0 else less, amount=amount)
    together = "" if family == 1 else f", simultaneous over {family} scores"
    few = (f"{row.n} seeds are too few for any claim at {100 * confidence:g} %{together} (the exact sign-flip test "
           f"needs at least {fewest_seeds((1 - confidence) / family)})")
    if row.diff == 0 and not row.sd > 0:
        return (f"{head}{b} and {a} gave the same value on each of the {row.n} seeds: no difference, and no claim"
                + ("." if row.claimable else f": {few}."))
    if not row.claimable:
        return f"{head}{body}; {few}: no claim either way; use more seeds."
    noise = "beyond noise" if row.beyond_noise else "within noise"
    if not row.sd > 0:
        bonferroni = "" if family == 1 else f"; Bonferroni over {family} scores"
        return f"{head}{body} on every seed alike (exact sign-flip test, p = {row.p:.3g}{bonferroni}): {noise}."
    interval = _interval_text(row.low, row.high, row.beyond_noise, scale, unit)
    return f"{head}{body} ({100 * confidence:g} % CI {interval}{together}): {noise}."


def _saving_line(row, method: str, confidence: float) -> str:
    _, _, scale, unit = _phrasing(row.metric)
    shared = METHOD_NAMES.get(method, method)
    if math.isnan(row.control_sd):
        return f"{row.metric}: the IS control has too few seeds to compare spreads."
    if not row.control_sd > 0:
        if not row.sd > 0:
            return f"{row.metric}: neither shared luck nor independent sampling gave any spread between seeds."
        return (f"{row.metric}: independent sampling gave the same difference on every seed here (no spread), so "
                "these seeds cannot tell what shared luck saved; use more seeds or longer answers.")
    if not row.sd > 0:
        return (f"{row.metric}: with shared luck ({shared}) every seed gave the same difference; independent "
                f"sampling's differences spread by {_number(row.control_sd, scale, unit, signed=False)} per seed, "
                "so no number of independent seeds reaches that width.")
    bounds = (f"{100 * confidence:g} % F interval {max(1.0, row.is_seeds_low):.0f} to "
              f"{max(1.0, row.is_seeds_high):.0f}, if the per-seed differences are about normal")
    control_sd, sd = (_number(value, scale, unit, signed=False, decimals=_decimals([row.control_sd, row.sd], scale))
                      for value in (row.control_sd, row.sd))
    spreads = f"{control_sd} per seed with independent sampling against {sd} with shared luck, {shared}"
    if round(row.is_seeds) <= row.n:  # "would need about 1 seeds": the control was as precise or more
        return (f"{row.metric}: shared luck saved nothing here: its differences spread as much as or more than "
                f"independent sampling's ({spreads}), so independent sampling would have been as precise with these "
                f"{row.n} seeds (the seeds it needs for shared luck's width: {bounds}).")
    return (f"{row.metric}: independent sampling's differences spread {row.control_sd / row.sd:.1f}x as much "
            f"({spreads}): it would need about {row.is_seeds:.0f} seeds for the width shared luck reaches with "
            f"{row.n} (an estimate from the two spreads, {row.n} x ({row.control_sd / row.sd:.2f})²; {bounds}).")


def _pair_lines(pairs: pd.DataFrame, method: str, control: str | None, confidence: float) -> list[str]:
    words = {"identical": ("identical answers", "share"), "e5_between": ("E5 between the arms' answers", "mean"),
             "aligned": ("aligned agreement between the arms' answers", "mean")}
    lines = []
    for score, part in pairs.groupby("score", sort=False):
        rows = part.set_index("method")
        what, kind = words[score]
        mine = rows.loc[method]
        text = f"{what}: {kind} {mine['mean']:.2f}"
        if not math.isnan(mine["low"]):
            text += f" ({100 * confidence:g} % CI {mine['low']:.2f} to {mine['high']:.2f})"
        text += f" with shared luck ({METHOD_NAMES.get(method, method)})"
        if control is not None and control in rows.index:
            text += f", {rows.loc[control, 'mean']:.2f} with independent sampling"
        lines.append(text + ".")
    return lines


def ab_report(frame: pd.DataFrame, *, confidence: float = CONFIDENCE, names: tuple[str, str] | None = None) -> ABReport:
    """The paired effect of B against A per arm score under shared luck, and the same estimate from the IS control.

    The seed is the unit: each score is averaged over the prompts within a seed, and the differences B - A over seeds go
    through ``gcs.paired_tests`` (the exact sign-flip test, simultaneous over the arm scores). The shared method is the
    frame's method other than "is" (or "is" when that is all it holds); its "is" rows are the control.

    Args:
        frame: ``gcs.ab``'s frame (or rows of it read back from a file: ``parts_at`` may then be NaN instead of
            None).
        confidence: the simultaneous confidence level.
        names: the arms' names in the sentences (None: ``frame.attrs["arms"]``, else "A" and "B").

    Returns:
        An ``ABReport``: ``lines`` (a sentence per score), ``effects`` (the numbers) and more.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> frame = gcs.ab(["What is DNA?"], gcs.Variant(), gcs.Variant(), seeds=2, metrics=["length"],
        ...                max_new_tokens=4)
        >>> report = ab_report(frame)  # equal arms: no difference on any seed
        >>> report.effects["diff"].tolist()
        [0.0]
    """
    if not isinstance(frame, pd.DataFrame):
        raise ArgumentTypeError(f"frame must be gcs.ab's DataFrame (columns prompt_index, method, seed, identical, "
                                f"scores), got {type(frame).__name__}")
    if not {"prompt_index", "method", "seed", "identical"} <= set(frame.columns):
        raise ValueError("frame must be gcs.ab's DataFrame (columns prompt_index, method, seed, identical, scores)")
    if frame.empty:
        raise ValueError("frame holds no answers")
    names = tuple(names or frame.attrs.get("arms") or ("A", "B"))
    methods = list(dict.fromkeys(frame["method"]))
    method = next((m for m in methods if m != "is"), "is")
    control = "is" if "is" in methods and method != "is" else None
    labels = arm_scores(frame)
    effects = _effects(frame, method, control, labels, confidence)
    pairs = _pairs(frame, [m for m in (method, control) if m is not None], confidence)
    part = frame[frame["method"] == method]
    parted = pd.to_numeric(part["parts_at"], errors="coerce").dropna() if "parts_at" in part else pd.Series([])
    count = lambda n, what: f"{n} {what}{'s' if n != 1 else ''}"  # noqa: E731
    where = f"; the others part at token {np.median(parted):.0f} (median)" if len(parted) else ""
    head = (f"{names[1]} against {names[0]}, {count(part['prompt_index'].nunique(), 'prompt')} x "
            f"{count(part['seed'].nunique(), 'seed')} with shared luck ({METHOD_NAMES.get(method, method)}): "
            f"{part['identical'].mean():.0%} of the answer pairs are identical{where}.")
    lines = [head]
    ended = ["finished_a", "finished_b"]
    capped = set(ended) <= set(part) and not part[ended].to_numpy().any()  # a length is then the cap's, not the arms'
    lines += [_effect_line(row, names, confidence, len(effects))
              + (" Every answer stopped at max_new_tokens: its length is the cap's, not the arms'."
                 if capped and row.metric == "length" else "") for row in effects.itertuples()]
    if control is not None:
        lines += [_saving_line(row, method, confidence) for row in effects.itertuples()]
    lines += _pair_lines(pairs, method, control, confidence)
    return ABReport(names, method, control, effects, pairs, lines)
