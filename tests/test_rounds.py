"""gcs.compare_rounds: a side by side that runs its seeds a round at a time and looks after each round.

Every seed's answers equal a one-batch run of the same seeds (a row's answer does not depend on its batch), the last
report says why the run stopped, and "more seeds" continues the same sequence of seeds and looks."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

import gcs

PARAPHRASES = ["Why is the sky blue?", "What makes the sky look blue?"]
KEYS = ["method", "seed", "prompt_index"]


def answers(frame: pd.DataFrame) -> list[tuple]:
    return list(frame.sort_values(KEYS)[[*KEYS, "raw_response"]].itertuples(index=False, name=None))


@pytest.mark.slow
def test_each_round_s_answers_are_a_one_batch_run_s_and_the_last_report_says_why_it_stopped(embedded_model):
    reports = list(gcs.compare_rounds(PARAPHRASES, methods=["is", "gcswr"], seeds=8, rounds=(3, 5),
                                      metrics=("aligned",), max_new_tokens=8, model=embedded_model, futility=0))
    assert [r.seeds for r in reports] == [[0, 1, 2], list(range(8))]  # no futility stop, nothing claimable at 3
    assert [r.final for r in reports] == [False, True] and reports[0].reason is None
    last = reports[-1]
    assert last.reason in ("the maximum of 8 seeds reached", "every comparison decided after 8 seeds")
    assert set(last.tests["status"]) <= {"beyond noise", "undecided", "within noise"}
    one_batch = gcs.compare(PARAPHRASES, methods=["is", "gcswr"], seeds=list(range(8)), max_new_tokens=8,
                            model=embedded_model)
    assert answers(last.frame) == answers(one_batch)
    assert sorted(last.report.scores["seed"].unique()) == list(range(8))  # every round scored once, none twice


@pytest.mark.slow
def test_more_seeds_continues_the_same_sequence(embedded_model):
    """4 seeds with 2 comparisons can claim nothing (the exact test's floor 0.125 is above 0.025): the run ends
    undecided, and "more seeds" answers seeds 4 to 11 at the plan's first extension look."""
    (first,) = gcs.compare_rounds(PARAPHRASES, methods=["is", "gcs"], seeds=4, rounds=(4,), metrics=("aligned",),
                                  max_new_tokens=6, model=embedded_model, futility=0)
    assert first.final and first.more_seeds and set(first.tests["status"]) == {"undecided"}
    more = list(gcs.compare_rounds(PARAPHRASES, resume=first))
    assert more[0].seeds == list(range(12)) and more[-1].final  # then seeds 12 to 19 if it is still open
    assert more[0].look == first.look + 1 and more[0].plan.looks == first.plan.looks
    later = gcs.compare(PARAPHRASES, methods=["is", "gcs"], seeds=list(range(4, 12)), max_new_tokens=6,
                        model=embedded_model)
    assert answers(more[0].frame[more[0].frame["seed"] >= 4]) == answers(later)


@pytest.mark.slow
def test_bad_runs_are_refused_before_any_answer(embedded_model):
    for arguments, message in (({"methods": ["gcs", "gcswr"]}, "methods must hold is and another"),
                               ({"seeds": 0}, "seeds"), ({"seeds": []}, "seeds must not be empty"),
                               ({"futility": 1.0}, "futility must be in"),
                               ({"seeds": [gcs.checks.MAX_SEED]}, "runs past the largest seed"),
                               ({"settings": gcs.SamplingSettings(methods="is,gcs", ensemble=2)}, "does not ensemble")):
        with pytest.raises(ValueError, match=message):
            next(gcs.compare_rounds(PARAPHRASES, model=embedded_model, **arguments))
    for paraphrases, message in ((PARAPHRASES[:1], "needs at least 2, got 1"), ("Name a colour.", "must be a list")):
        with pytest.raises(ValueError, match=message):
            next(gcs.compare_rounds(paraphrases, model=embedded_model))
    (report,) = gcs.compare_rounds(PARAPHRASES, methods=["is", "gcs"], seeds=4, rounds=(4,),
                                   metrics=("aligned",), max_new_tokens=2, model=embedded_model)
    with pytest.raises(ValueError, match="only an undecided final report"):  # a round before the last
        next(gcs.compare_rounds(PARAPHRASES, resume=dataclasses.replace(report, final=False)))


def _round_report(differences: dict, seeds: int, plan: gcs.SequentialPlan) -> gcs.RoundReport:
    """A run's report at ``seeds`` seeds, from paired differences per method (IS scores 0.5 under both metrics)."""
    rows = [{"method": "is", "seed": s, "metric": metric, "consistency": 0.5}
            for s in range(seeds) for metric in ("e5", "aligned")]
    rows += [{"method": method, "seed": s, "metric": metric, "consistency": 0.5 + d[s]}
             for method, d in differences.items() for s in range(seeds) for metric in ("e5", "aligned")]
    scores = pd.DataFrame(rows)
    tests = gcs.sequential_tests(scores, plan=plan)
    look = max(k for k, n in enumerate(plan.looks) if n <= seeds)
    final = look == plan.maximum or not (tests["status"] == "open").any()
    reason = None if not final else "the maximum of 16 seeds reached"
    settings = gcs.SamplingSettings(methods=["is", *differences], seeds=list(range(seeds)))
    report = gcs.experiments.comparison.CompareReport.__new__(gcs.experiments.comparison.CompareReport)
    return gcs.RoundReport(pd.DataFrame(), report, tests, plan, look, settings, final, reason, None, "transformers")


def test_the_verdict_of_a_run_in_rounds_says_what_each_look_decided_and_why_it_stopped():
    rng = np.random.default_rng(0)
    plan = gcs.sequential_plan(16, comparisons=4)
    differences = {"gcswr": 0.05 + 0.01 * rng.standard_normal(16), "gcs": 0.02 * rng.standard_normal(16)}
    early = gcs.verdict(_round_report(differences, 4, plan))
    gcswr_early, gcs_early = ([line for line in early if f"{name} agreed" in line] for name in ("GCSwR", "GCS"))
    assert len(gcswr_early) == 2 and all(line.endswith("still deciding. " + line.split("still deciding. ")[-1])
                                         for line in gcswr_early)
    # the null method stops early for futility: it would very likely stay unclaimed
    assert all("within noise (decided after 4 seeds: the rest would very likely not resolve it)" in line
               for line in gcs_early) and "After 4 of at most 16 seeds" in early[-1]
    assert "next round runs to 16 seeds" in early[-1]
    final = gcs.verdict(_round_report(differences, 16, plan))
    gcswr = [line for line in final if "GCSwR" in line]
    assert len(gcswr) == 2 and all("beyond noise (decided after 16 seeds)" in line for line in gcswr)
    assert all("16 of 16 seeds" in line and "sequential interval" in line for line in gcswr)
    assert final[-1].startswith("Stopped: the maximum of 16 seeds reached.") and "over every look" in final[-1]
    assert not any("GCS agreed" in line and "beyond noise" in line for line in final)  # the null method: no claim
    flagged = gcs.verdict(_round_report(differences, 16, plan), excess=[9.0] * 10)
    assert flagged[0].startswith("These answers are not language") and "not interpreted" in flagged[1]
    assert not any(line.endswith("beyond noise (decided after 16 seeds).") for line in flagged)


def test_a_run_too_short_for_any_claim_says_so_not_within_noise():
    """At most 4 seeds (4 comparisons): no look can claim anything, so "within noise at this run's maximum" read as
    a finding where there was none (a run of 4 of 4 seeds, +5 points, all 4 agreeing)."""
    plan = gcs.sequential_plan(4, comparisons=4)
    differences = {"gcswr": np.full(4, 0.05), "gcs": np.full(4, 0.05)}
    lines = gcs.verdict(_round_report(differences, 4, plan))
    compared = [line for line in lines if " agreed " in line]
    assert len(compared) == 4 and all("4 of 4 seeds" in line and "within noise" not in line for line in compared)
    assert all("4 seeds are too few for any claim held at 95 % over every look" in line and "no claim either way"
               in line for line in compared), compared
    assert lines[-1].startswith("Stopped: the maximum of 16 seeds reached.")  # (the helper's reason, fixed)


@pytest.mark.slow
def test_a_run_in_rounds_scores_more_than_it_tests(embedded_model):
    (report,) = gcs.compare_rounds(PARAPHRASES, methods=["is", "gcs"], seeds=2, rounds=(2,), metrics=("aligned",),
                                   report_metrics=("jaccard", "aligned"), max_new_tokens=4, model=embedded_model)
    assert set(report.report.scores["metric"]) == {"jaccard", "aligned"} and set(report.tests["metric"]) == {"aligned"}
    with pytest.raises(ValueError, match="must be among report_metrics"):
        next(gcs.compare_rounds(PARAPHRASES, metrics=("e5",), report_metrics=("aligned",), model=embedded_model))
