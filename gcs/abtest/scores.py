"""The scores ``gcs.ab`` gives its pairs of answers: each arm's own, and the pair's.

An *arm score* is a number per answer, compared between the arms (B - A over seeds, ``gcs.ab_report``):

- ``"length"``: the answer's tokens as generated (before its stop token);
- ``"contains:WORD"``: 1 when the answer contains WORD as a whole word (case-insensitive), else 0;
- ``"regex:PATTERN"``: 1 when ``regex.search(PATTERN, answer)`` finds it (the ``regex`` package, ``re``'s syntax;
  case-sensitive unless ``(?i)``), else 0; each answer's search is cut after ``REGEX_SECONDS`` (a ValueError naming
  the pattern), since a pattern such as ``(a+)+$`` backtracks for a time that doubles with each "a";
- ``"e5_to:REFERENCE"``: the answer's E5 similarity to a reference answer;
- ``scorer``: any function answer -> number (its label: ``"scorer"``, or ``"scorer:NAME"`` for a named function).

A *pair score* is a number per pair of answers, how close the arms' answers are: ``"e5_between"`` (their E5
similarity) and ``"aligned"`` (aligned agreement of their token ids, ``gcs.scoring.token_overlap.aligned_agreement``).

>>> arm, pair = check_scores(["length", "contains:Paris", "aligned"])
>>> [score.label for score in arm], pair
(['length', 'contains:Paris'], ['aligned'])
>>> arm[1].of(["Paris is the capital.", "Parisian food."], [5, 3]).tolist()
[1.0, 0.0]
>>> check_scores(["regex:(unclosed"])
Traceback (most recent call last):
...
ValueError: metric 'regex:(unclosed': '(unclosed' is not a valid regular expression (missing ) at position 9)
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import regex

from gcs.runtime.arguments import ArgumentTypeError
from gcs.runtime.names import parse_names
from gcs.runtime.quoting import quoted
from gcs.scoring.metrics import embedder, similarity_to
from gcs.scoring.token_overlap import aligned_agreement

ARM_KINDS = ("length", "contains", "regex", "e5_to")
PAIR_SCORES = ("e5_between", "aligned")
SCORE_KINDS = ("length", "contains", "regex", "e5_to", *PAIR_SCORES)  # what a metric names before its ":"
EXPECTED = "length, contains:WORD, regex:PATTERN, e5_to:REFERENCE, e5_between or aligned"
# A regex score's bound on one answer's search: an ordinary pattern takes microseconds on an answer of 1,024 tokens;
# one that backtracks exponentially ("(a+)+$" on 24 "a"s and a "!": 5.9 s with re, 4 times longer per 2 more) would
# otherwise hold a run, and the CLI, for hours. ``re`` has no bound: the ``regex`` package's searches take one.
REGEX_SECONDS = 1.0


@dataclass(frozen=True)
class Score:
    """An arm score: ``label`` names it (and its frame columns ``LABEL_a``, ``LABEL_b``); ``kind`` is one of
    ``ARM_KINDS`` or "scorer"; ``argument`` the compiled pattern, the reference text or the function."""

    label: str
    kind: str
    argument: Any = None  # by kind (see above): a compiled pattern, the reference text or the function

    def of(self, answers: Sequence[str], lengths: Sequence[int], where: Callable[[int], str] = str) -> np.ndarray:
        """The score of each answer (``lengths``: their tokens). ``where(i)`` names answer ``i`` in errors."""
        if self.kind == "length":
            return np.asarray(lengths, dtype=float)
        if self.kind == "contains":  # an escaped word: linear time
            return np.array([float(self.argument.search(answer) is not None) for answer in answers])
        if self.kind == "regex":
            return np.array([float(self._found(answer, where(i))) for i, answer in enumerate(answers)])
        if self.kind == "e5_to":
            return similarity_to(self.argument, list(answers), metric="e5") if len(answers) else np.zeros(0)
        values = []
        for i, answer in enumerate(answers):
            value = self.argument(answer)
            if isinstance(value, bool):
                value = float(value)
            if not isinstance(value, (int, float, np.integer, np.floating)):
                raise ArgumentTypeError(f"scorer returned {type(value).__name__} {quoted(value)} for {where(i)}: a "
                                        "score must be a finite number")
            if not math.isfinite(value):
                raise ValueError(f"scorer returned {quoted(value)} for {where(i)}: a score must be a finite number")
            values.append(float(value))
        return np.array(values)

    def _found(self, answer: str, where: str) -> bool:
        try:
            return self.argument.search(answer, timeout=REGEX_SECONDS) is not None
        except TimeoutError:
            raise ValueError(f"metric {quoted(self.label)}: the search took over {REGEX_SECONDS:g} s on {where}, the "
                             "bound for one answer (nested repeats such as (a+)+ backtrack for a time that doubles "
                             "with each character): write the pattern without them") from None


PLACEHOLDERS = {"contains": ("contains argument", "WORD"), "regex": ("regex argument", "PATTERN"),
                "e5_to": ("reference answer", "REFERENCE")}


def _argument(metric: str, kind: str, argument: str) -> str:
    if not argument.strip():
        what, placeholder = PLACEHOLDERS[kind]
        raise ValueError(f"metric {quoted(metric)} names no {what}: write {kind}:{placeholder}")
    return argument


def _score(metric: str) -> Score | str:
    """One metric as an arm ``Score``, or the name of a pair score."""
    if not isinstance(metric, str):
        raise ArgumentTypeError(f"a metric must be a string such as 'length', got {type(metric).__name__}")
    kind, colon, argument = metric.strip().partition(":")
    kind = kind.strip().lower()
    if kind in ("length", *PAIR_SCORES):
        if colon:
            raise ValueError(f"metric {quoted(metric)}: {kind} takes no argument")
        return kind if kind in PAIR_SCORES else Score("length", "length")
    if kind == "contains":
        word = _argument(metric, kind, argument).strip()
        return Score(f"contains:{word}", kind, re.compile(rf"(?<!\w){re.escape(word)}(?!\w)", re.IGNORECASE))
    if kind == "regex":
        pattern = _argument(metric, kind, argument)
        try:
            return Score(f"regex:{pattern}", kind, regex.compile(pattern))
        except regex.error as error:
            raise ValueError(f"metric {quoted(metric)}: {quoted(pattern)} is not a valid regular expression "
                             f"({error})") from None
    if kind == "e5_to":
        reference = _argument(metric, kind, argument).strip()
        return Score(f"e5_to:{reference}", kind, reference)
    raise ValueError(f"unknown A/B metric {quoted(metric)}: expected {EXPECTED}")


def check_scores(metrics: Sequence[str] | str, scorer: Callable[[str], float] | None = None) \
        -> tuple[list[Score], list[str]]:
    """The arm scores and the pair scores that ``metrics`` (a list, or a comma-separated string) and ``scorer`` ask
    for, each once, validated (a regex compiled, a reference present) before any answer is generated."""
    if scorer is not None and not callable(scorer):
        raise ArgumentTypeError(f"scorer must be a function answer -> number, got {type(scorer).__name__}")
    metrics = parse_names(metrics, SCORE_KINDS, what="A/B metric", arguments=True, empty_ok=True)
    if not metrics and scorer is None:
        raise ValueError(f"metrics must name at least one score ({EXPECTED}), or pass a scorer")
    arm: dict[str, Score] = {}
    pair: dict[str, None] = {}  # a dict for its order, each name once
    for metric in metrics:
        score = _score(metric)
        if isinstance(score, str):
            pair[score] = None
        else:  # (contains is case-insensitive: "contains:DNA" and "contains:dna" are one score, one test's share)
            arm.setdefault(score.label.casefold() if score.kind == "contains" else score.label, score)
    if scorer is not None:
        name = getattr(scorer, "__name__", "")
        label = f"scorer:{name}" if name.isidentifier() else "scorer"
        arm[label] = Score(label, "scorer", scorer)
    return list(arm.values()), list(pair)


def pair_scores(names: Sequence[str], answers_a: Sequence[str], answers_b: Sequence[str],
                ids_a: Sequence[Sequence[int]], ids_b: Sequence[Sequence[int]]) -> dict[str, np.ndarray]:
    """``"aligned"`` always (it costs nothing) and ``"e5_between"`` when ``names`` ask for it, one value per pair.

    >>> pair_scores(["aligned"], ["x", "y"], ["x", "z"], [[1, 2, 3], [4, 5, 6]], [[1, 2, 3], [4, 5, 7]])["aligned"]
    array([1., 0.])
    """
    scores = {"aligned": np.array([aligned_agreement(list(a), list(b)) for a, b in zip(ids_a, ids_b, strict=True)])}
    if "e5_between" in names:
        n = len(answers_a)
        vectors = np.asarray(embedder("e5")(list(answers_a) + list(answers_b)), dtype=np.float64) if n \
            else np.zeros((0, 1))
        scores["e5_between"] = np.clip((vectors[:n] * vectors[n:]).sum(axis=1), -1.0, 1.0)
    return scores
