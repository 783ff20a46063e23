"""The side by side in rounds, in the page's handlers: the first round streams, each round lands with its verdict so
far, the run stops once decided (saying after how many seeds and why), "more seeds" continues an undecided run, and
every seed's answers equal a one-batch run of the same seeds. The /compare endpoint gains the stopping fields."""

from __future__ import annotations

import pandas as pd
import pytest

import gcs
from conftest import refused_in_ui
from ui.shared import deployment
from ui.tabs.side_by_side import compare

PARAPHRASES = "Name a colour.\nSay one colour."
KEYS = ["method", "seed", "prompt_index"]


pytestmark = pytest.mark.usefixtures("transformers_engine")  # (tests/conftest.py: the page on vLLM is not theirs)


def answers(frame) -> list[tuple]:
    frame = pd.DataFrame(frame)
    return list(frame.sort_values(KEYS)[[*KEYS, "raw_response"]].itertuples(index=False, name=None))


def one_batch(seeds: list[int], tokens: int, model) -> list[tuple]:
    return answers(gcs.compare(PARAPHRASES.split("\n"), methods=["is", "gcswr"], seeds=seeds, max_new_tokens=tokens,
                               model=model))


def run_page(seeds: int, tokens: int) -> list[dict]:
    return list(compare.compare_stream(PARAPHRASES, 1.0, tokens, 0, 1.0, ["is", "gcswr"], False,
                                       deployment.DEFAULT_MODEL, seeds))


@pytest.mark.slow
def test_the_page_streams_the_first_round_lands_each_round_and_says_why_it_stopped(embedded_model):
    updates = run_page(8, 6)
    verdicts = [i for i, update in enumerate(updates) if "verdict" in update]
    streamed = [i for i, update in enumerate(updates) if "responses-gcswr" in update and "verdict" not in update]
    assert streamed and verdicts and streamed[0] < verdicts[0], "no answer was shown before the first round landed"
    assert "Round 1: generating" in updates[streamed[0]]["status"]
    final = updates[-1]
    assert final["status"].startswith("Done: ") and "seeds" in final["status"]
    state = final.get("run-state") or next(u["run-state"] for u in reversed(updates) if "run-state" in u)
    used = state["seeds"]
    assert used in ([0, 1, 2, 3], list(range(8)))
    last_verdict = updates[verdicts[-1]]["verdict"]
    assert f"over {len(used)} seeds" in last_verdict and "Stopped: " in last_verdict
    if len(used) == 8:  # the first round did not decide: it said so, then the second landed
        assert "still deciding" in updates[verdicts[0]]["verdict"] and len(verdicts) >= 2
    assert answers(state["frame"]) == one_batch(used, 6, embedded_model)  # rounds change no seed's answer
    assert len(final["downloads"]) == 2


@pytest.mark.slow
def test_more_seeds_continues_an_undecided_run(embedded_model):
    updates = run_page(4, 4)  # 4 seeds can claim nothing: the run ends undecided at its maximum
    state = next(u["run-state"] for u in reversed(updates) if "run-state" in u)
    assert updates[-1]["status"] == "Done: the maximum of 4 seeds reached. More seeds can continue this run."
    assert updates[-1]["more-seeds"]["visible"] and state["resume"] is not None
    more = list(compare.compare_more(state))
    after = next(u["run-state"] for u in reversed(more) if "run-state" in u)
    used = after["seeds"]  # the extension's looks: 12 seeds, then 20 if still open
    assert used in (list(range(12)), list(range(20)))
    assert f"over {len(used)} seeds" in next(u["verdict"] for u in reversed(more) if "verdict" in u)
    assert answers(after["frame"]) == one_batch(used, 4, embedded_model)
    refused_in_ui(lambda: list(compare.compare_more({"resume": None})), "no undecided run to continue")


@pytest.mark.slow
def test_a_run_without_is_or_with_rounds_off_is_one_batch(embedded_model):
    fixed = list(compare.compare_stream(PARAPHRASES, 1.0, 4, 0, 1.0, ["is", "gcswr"], False, deployment.DEFAULT_MODEL,
                                        4, compare.HIGHLIGHTS[0], False))
    assert fixed[-1]["status"] == "Done." and fixed[-1]["run-state"]["seeds"] == [0, 1, 2, 3]
    assert "Stopped" not in fixed[-1]["verdict"]
    refused_in_ui(lambda: list(compare.compare_stream(PARAPHRASES, 1.0, 4, 0, 1.0, ["is", "gcswr"], False,
                                                      deployment.DEFAULT_MODEL, 4, compare.HIGHLIGHTS[0], "yes")),
                  "stop once decided must be true or false")


@pytest.mark.slow
def test_the_endpoint_says_how_many_seeds_it_used_and_why_it_stopped(embedded_model):
    *_, answer = compare.compare(PARAPHRASES, 1.0, 4, 4, methods="is,gcswr")
    stopping = answer["stopping"]
    assert stopping["in_rounds"] and stopping["seeds_used"] == 4 and stopping["max_seeds"] == 4
    assert stopping["reason"] == "the maximum of 4 seeds reached" and stopping["more_seeds"]
    assert {(t["method"], t["metric"]) for t in stopping["tests"]} == {("gcswr", "e5"), ("gcswr", "aligned")}
    assert answer["settings"]["seeds"] == [0, 1, 2, 3] and "Stopped" in "\n".join([answer["verdict"]])
    *_, fixed = compare.compare(PARAPHRASES, 1.0, 4, [3, 5], methods="is,gcswr")
    assert not fixed["stopping"]["in_rounds"] and fixed["stopping"]["seeds_used"] == 2
    assert "a list of seeds runs in one batch" in fixed["stopping"]["reason"]
    with pytest.raises(Exception, match="rounds must be true or false"):
        list(compare.compare(PARAPHRASES, 1.0, 4, 4, rounds="yes"))
