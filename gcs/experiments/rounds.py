"""The side by side in rounds: seeds run a round at a time, each round is scored and the sequential verdict looks
again, and the run stops as soon as every comparison is decided (``gcs.stats.sequential``).

    for round_report in gcs.compare_rounds(paraphrases, seeds=16):
        print(round_report.seeds, round_report.tests[["method", "metric", "status"]])
    print(round_report.reason)     # the last round: why the run stopped ("every comparison decided after 8 seeds")
    if round_report.more_seeds:    # ended undecided: continue the same sequence
        *_, round_report = gcs.compare_rounds(paraphrases, resume=round_report)

A round is one batch of its seeds. A seed's answers do not depend on the batch it ran in (``gcs.engines.invariance``, on
by default on CPU), so every seed gets the answers a one-batch run of the same seeds gives. "More seeds" continues
an undecided run (``resume=``) with the plan's extension looks, set aside before the first seed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd

from gcs.checks import DEFAULT_MAX_NEW_TOKENS, MAX_SEED, METHODS, check_engine
from gcs.engines.endpoints import EngineChoice
from gcs.engines.models import Model, resolve_model
from gcs.experiments.comparison import CompareReport, combine_reports, compare_report
from gcs.generation.cores import compare_with
from gcs.runtime.arguments import ArgumentTypeError, check_callback, check_share, check_stop, check_texts
from gcs.runtime.keywords import keywords_checked
from gcs.runtime.stage_timing import timed
from gcs.scoring.metrics import check_metrics
from gcs.scoring.surprise import frame_excess
from gcs.settings import SamplingSettings, at_defaults, refuse_beside, settings_for
from gcs.stats.intervals import CONFIDENCE
from gcs.stats.sequential import FUTILITY, SequentialPlan, sequential_plan, sequential_tests

BASELINE = "is"
MAX_ROUND_SEEDS = 1024


@dataclass(frozen=True)
class RoundReport:
    """A run of ``gcs.compare_rounds`` after one round.

    Attributes:
        frame: every answer so far, with ``gcs.compare``'s columns.
        report: their scores, a ``CompareReport``.
        tests: ``gcs.sequential_tests`` at this look.
        plan: the run's ``SequentialPlan``.
        look: the index of this look in ``plan.looks``.
        settings: the run's methods and seeds so far, its sampling.
        final: whether the run stopped here.
        reason: on the final report, why the run stopped.
        model: the model that ran it.
        engine: the engine that ran it.
        excess: the first round's answers' excess surprise (``gcs.excess_surprise``, recorded as they were generated),
            the evidence ``gcs.verdict`` flags degenerate answers by.
    """

    frame: pd.DataFrame
    report: CompareReport
    tests: pd.DataFrame
    plan: SequentialPlan
    look: int
    settings: SamplingSettings
    final: bool
    reason: str | None
    model: Model
    engine: Any  # "transformers", "vllm" or served endpoints (gcs.engines.endpoints.Endpoints)
    excess: tuple[float, ...] = ()

    @property
    def seeds(self) -> list[int]:
        return list(self.settings.seeds)

    @property
    def more_seeds(self) -> bool:
        """Whether "more seeds" can continue this run: it ended undecided, with extension looks left in its plan."""
        return self.final and (self.tests["status"] == "undecided").any() and self.look < len(self.plan.looks) - 1


@keywords_checked
def compare_rounds(paraphrases: Sequence[str], *, methods: Sequence[str] | str = METHODS,
                   seeds: int | Iterable[int] = 16, rounds: Sequence[int] | None = None,
                   confidence: float = CONFIDENCE, metrics: Sequence[str] = ("e5", "aligned"),
                   model: Model | str | None = None, temperature: float = 1.0, top_k: int | None = None,
                   top_p: float | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
                   engine: EngineChoice = "transformers", futility: float = FUTILITY,
                   report_metrics: Sequence[str] | None = None, settings: SamplingSettings | None = None,
                   resume: RoundReport | None = None, on_results: Callable[[pd.DataFrame], None] | None = None,
                   on_partial: Callable[[pd.DataFrame], None] | None = None,
                   stop: threading.Event | None = None) -> Iterator[RoundReport]:
    """The side by side of ``methods`` on ``paraphrases``, a round of seeds at a time, until the verdict is decided.

    The run stops when every comparison of a method with IS under each metric is decided (claimed, or within noise for
    good) or when its seeds run out; the last report says which (``reason``).

    Args:
        paraphrases: the prompts.
        methods: a list or a comma-separated string of methods.
        seeds: a count n (seeds 0 to n - 1) or the seeds themselves, in the order the rounds take them; their number
            is the run's maximum.
        rounds: seeds per round (None: 4, then 12).
        confidence: as in ``gcs.sequential_plan``.
        metrics: the metrics the sequential tests use.
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.
        temperature: 0 is greedy; else at least ``MIN_TEMPERATURE``.
        top_k: keep the k likeliest tokens (None: all).
        top_p: nucleus sampling's mass, in (0, 1] (None: off).
        max_new_tokens: at most ``MAX_NEW_TOKENS``.
        engine: "transformers", "vllm" or served endpoints (a ``gcs.Endpoint`` or a list), whose final ``reason``
            says what they promise about batches.
        futility: as in ``gcs.sequential_plan`` (0 never stops a comparison early for futility).
        report_metrics: what each report scores (None: ``metrics``, which must be among them).
        settings: a ``gcs.SamplingSettings`` (no ensembling) in place of methods ... max_new_tokens.
        resume: an undecided final report to continue with "more seeds" (the plan's extension looks; every other
            argument is taken from it).
        on_results: receives each round's answers once they are final.
        on_partial: receives the first round's answers as they grow, token by token.
        stop: a ``threading.Event`` that ends the run after its current token with ``gcs.Cancelled``.

    Yields:
        A ``RoundReport`` after each round.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a bad value, before any model work.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> reports = list(gcs.compare_rounds(["What is DNA?", "Explain what DNA is."], methods="is,gcswr", seeds=4,
        ...                                   metrics=["jaccard"], max_new_tokens=4))
        >>> len(reports), reports[-1].reason is not None
        (1, True)
    """
    check_stop(stop)
    check_callback(on_results, "on_results")
    check_callback(on_partial, "on_partial")
    if resume is not None:
        if not isinstance(resume, RoundReport):
            raise ArgumentTypeError(f"resume must be a gcs.RoundReport (a run's last report), got "
                                    f"{type(resume).__name__}")
        if list(check_texts(paraphrases, "paraphrases")) != _paraphrases(resume):
            raise ValueError("paraphrases: resume continues its own run, on that run's paraphrases")
        refuse_beside(resume, "gcs.compare_rounds", what="resume", **at_defaults(
            compare_rounds, methods=methods, seeds=seeds, temperature=temperature, top_k=top_k, top_p=top_p,
            max_new_tokens=max_new_tokens, settings=settings, model=model))
        yield from _continue(resume, on_results, on_partial, stop)
        return
    paraphrases = check_texts(paraphrases, "paraphrases")
    if len(paraphrases) < 2:
        raise ValueError(f"a run in rounds scores how alike the answers to paraphrases are: it needs at least 2, "
                         f"got {len(paraphrases)}")
    settings = settings_for(compare_rounds, settings, methods=methods, seeds=seeds, temperature=temperature,
                            top_k=top_k, top_p=top_p, max_new_tokens=max_new_tokens)
    metrics = tuple(check_metrics(metrics))
    report_metrics = None if report_metrics is None else tuple(check_metrics(report_metrics))
    methods = list(settings.methods)
    if BASELINE not in methods or len(methods) < 2:
        raise ValueError(f"a run in rounds compares methods with IS: methods must hold is and another, got {methods}")
    if len(settings.seeds) > MAX_ROUND_SEEDS:
        raise ValueError(f"seeds: a run in rounds takes at most {MAX_ROUND_SEEDS} seeds, got {len(settings.seeds)}")
    check_share(futility, "futility", 0)
    scored = tuple(dict.fromkeys([*metrics, *(report_metrics or ())]))
    if report_metrics is not None and not set(metrics) <= set(report_metrics):
        raise ValueError(f"the tested metrics {list(metrics)} must be among report_metrics {list(report_metrics)}")
    plan = sequential_plan(len(settings.seeds), rounds=rounds, confidence=confidence,
                           comparisons=(len(methods) - 1) * len(metrics), futility=futility)
    extra = plan.looks[-1] - len(settings.seeds)
    if max(settings.seeds) + extra > MAX_SEED:
        raise ValueError(f"seeds: {max(settings.seeds)} and the {extra} seeds \"more seeds\" may add after it "
                         "runs past the largest seed (2^63 - 1)")
    run = _Run(list(paraphrases), resolve_model(model), settings, plan, tuple(metrics), check_engine(engine), scored)
    yield from run.rounds(0, on_results, on_partial, stop)


def _paraphrases(report: RoundReport) -> list[str]:
    return list(dict.fromkeys(report.frame.sort_values("prompt_index")["prompt"]))


def _continue(report: RoundReport, on_results, on_partial, stop) -> Iterator[RoundReport]:
    if not report.more_seeds:
        raise ValueError("only an undecided final report can take more seeds (its plan's extension looks are "
                         "left, and some comparison is undecided)")
    extended = report.plan.extended()
    run = _Run(_paraphrases(report), report.model,
               report.settings, extended, tuple(report.tests["metric"].unique()), report.engine,
               tuple(report.report.summary["metric"].unique()))
    run.frame, run.report, run.excess = report.frame, report.report, report.excess
    yield from run.rounds(report.look + 1, on_results, on_partial, stop)


@dataclass
class _Run:
    """One run's fixed parts, and its answers and scores so far. ``settings.seeds``: the seeds run so far, or all the
    run may take (before its first round); the extension's go on after the largest."""

    paraphrases: list[str]
    model: Model
    settings: SamplingSettings
    plan: SequentialPlan
    metrics: tuple[str, ...]
    engine: Any
    scored: tuple[str, ...]
    frame: pd.DataFrame | None = None
    report: CompareReport | None = None
    excess: tuple[float, ...] = ()

    def seeds_through(self, n: int) -> list[int]:
        """The run's first ``n`` seeds: its own, then the ones after the largest (the extension's)."""
        own = list(self.settings.seeds)
        return own[:n] + list(range(max(own) + 1, max(own) + 1 + n - len(own)))

    def rounds(self, look: int, on_results, on_partial, stop) -> Iterator[RoundReport]:
        for k in range(look, self.plan.maximum + 1):
            done = 0 if k == 0 else self.plan.looks[k - 1]
            seeds = self.seeds_through(self.plan.looks[k])[done:]
            with timed("generate", round=k + 1, seeds=len(seeds), rows=len(seeds) * len(self.settings.methods)
                       * len(self.paraphrases)):
                frame = self._answer(seeds, on_partial if k == 0 else None, stop)
            if not self.excess:
                self.excess = frame_excess(frame, self.model)
                frame = frame.drop(columns="excess_surprise")
            part = compare_report(frame, metrics=self.scored, tokenizer=self.model.tokenizer)
            self.frame = frame if self.frame is None else pd.concat([self.frame, frame], ignore_index=True)
            self.report = part if self.report is None else combine_reports([self.report, part])
            tests = sequential_tests(self.report.scores, plan=self.plan, baseline=BASELINE, metrics=self.metrics)
            open_ = tests["status"].isin(["open", "undecided"]).any()  # undecided: open at the run's last look
            final = not open_ or k == self.plan.maximum
            reason = None if not final else (
                f"every comparison decided after {self.plan.looks[k]} seeds" if not open_ else
                f"the maximum of {self.plan.looks[k]} seeds reached")
            if reason is not None and not isinstance(self.engine, str):  # served endpoints: what they promise
                reason += f"; on served endpoints, {self.engine.promise}"  # (no URLs: a page may show it)
            if on_results is not None:
                on_results(frame)
            settings = self.settings.replace(seeds=self.seeds_through(self.plan.looks[k]))
            yield RoundReport(self.frame, self.report, tests, self.plan, k, settings, final, reason, self.model,
                              self.engine, self.excess)
            if final:
                return

    def _answer(self, seeds: list[int], on_partial, stop) -> pd.DataFrame:
        """The answers of ``seeds``, with their excess surprise in the first round (recorded as they are drawn)."""
        frames = compare_with(self.paraphrases, self.settings.replace(seeds=seeds), self.model, engine=self.engine,
                              streaming=on_partial is not None, stop=stop, record_excess=not self.excess)
        frame = None
        for frame in frames:
            if on_partial is not None:
                on_partial(frame)
        return frame
