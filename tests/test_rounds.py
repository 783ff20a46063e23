"""gcs.compare_rounds: a side by side that runs its seeds a round at a time and looks after each round.

Every seed's answers equal a one-batch run of the same seeds (a row's answer does not depend on its batch), the last
report says why the run stopped, and "more seeds" continues the same sequence of seeds and looks."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

import gcs

PARAPHRASES = ["Why is the sky blue?", "What makes the sky look blue?"]
KEYS = ["method", "seed", "prompt_index"]


def answers(frame: pd.DataFrame) -> list[tuple]:
    return list(frame.sort_values(KEYS)[[*KEYS, "raw_response"]].itertuples(index=False, name=None))


def test_each_round_s_answers_are_a_one_batch_run_s_and_the_last_report_says_why_it_stopped(embedded_model):
    reports = list(gcs.compare_rounds(PARAPHRASES, methods=["is", "gcswr"], max_seeds=8, rounds=(3, 5),
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


def test_more_seeds_continues_the_same_sequence(embedded_model):
    """4 seeds with 2 comparisons can claim nothing (the exact test's floor 0.125 is above 0.025): the run ends
    undecided, and "more seeds" answers seeds 4 to 11 at the plan's first extension look."""
    (first,) = gcs.compare_rounds(PARAPHRASES, methods=["is", "gcs"], max_seeds=4, rounds=(4,), metrics=("aligned",),
                                  max_new_tokens=6, model=embedded_model, futility=0)
    assert first.final and first.more_seeds and set(first.tests["status"]) == {"undecided"}
    more = list(gcs.compare_rounds(PARAPHRASES, resume=first))
    assert more[0].seeds == list(range(12)) and more[-1].final  # then seeds 12 to 19 if it is still open
    assert more[0].look == first.look + 1 and more[0].plan.looks == first.plan.looks
    later = gcs.compare(PARAPHRASES, methods=["is", "gcs"], seeds=list(range(4, 12)), max_new_tokens=6,
                        model=embedded_model)
    assert answers(more[0].frame[more[0].frame["seed"] >= 4]) == answers(later)


def test_bad_runs_are_refused_before_any_answer(embedded_model):
    for arguments, message in (({"methods": ["gcs", "gcswr"]}, "methods must hold is and another"),
                               ({"max_seeds": 0}, "max_seeds"), ({"futility": 1.0}, "futility must be in"),
                               ({"seed": gcs.checks.MAX_SEED}, "runs past the largest seed")):
        with pytest.raises(ValueError, match=message):
            next(gcs.compare_rounds(PARAPHRASES, model=embedded_model, **arguments))
    (report,) = gcs.compare_rounds(PARAPHRASES, methods=["is", "gcs"], max_seeds=4, rounds=(4,),
                                   metrics=("aligned",), max_new_tokens=2, model=embedded_model)
    with pytest.raises(ValueError, match="only an undecided final report"):  # a round before the last
        next(gcs.compare_rounds(PARAPHRASES, resume=dataclasses.replace(report, final=False)))
