"""Where a run's time goes: the stages gcs logs on ``gcs.timing`` at DEBUG (and nothing when that level is off), and
how ``bench/bench_browser.py`` reads them beside what the browser showed."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pytest

import gcs
from conftest import tiny_gcs_model
from gcs.runtime.stage_timing import parse

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
PARAPHRASES = ["w5 w6 w7", "w8 w9 w10"]


def rounds_run(**options) -> list:
    return list(gcs.compare_rounds(PARAPHRASES, methods=["is", "gcs"], seeds=6, rounds=(2, 6),
                                   metrics=("jaccard",), report_metrics=("jaccard", "aligned"), max_new_tokens=4,
                                   model=tiny_gcs_model(), futility=0, **options))


def test_a_run_in_rounds_logs_each_round_s_generation_and_each_metric(caplog):
    with caplog.at_level(logging.DEBUG, logger="gcs.timing"):
        reports = rounds_run()
    records = [parse(r.getMessage()) for r in caplog.records if r.name == "gcs.timing"]
    generated = [r for r in records if r["stage"] == "generate"]
    assert [(r["round"], r["seeds"], r["rows"]) for r in generated] == [(1, 2, 8), (2, 4, 16)]
    assert len(reports) == 2
    for round_ in (0, 1):  # after each generation: its metrics, each once, on that round's answers
        after = records[records.index(generated[round_]) + 1:][:3]
        assert [(r["stage"], r.get("metric")) for r in after] == [("score", "jaccard"), ("score", "aligned"),
                                                                  ("score", "prefix")]
        assert {r["texts"] for r in after} == {generated[round_]["rows"]}
    assert all(r["seconds"] >= 0 and r["end"] > 0 for r in records)


def test_nothing_is_logged_or_timed_when_the_level_is_off(caplog):
    with caplog.at_level(logging.INFO, logger="gcs.timing"):
        rounds_run()
    assert not [r for r in caplog.records if r.name == "gcs.timing"]


def test_the_browser_bench_lines_up_the_app_s_stages_with_what_the_page_showed(tmp_path):
    from bench_browser import breakdown, page_work, shown

    clicked = 1000.0
    log = tmp_path / "app.log"
    lines = [
        {"stage": "generate", "seconds": 3.0, "round": 1, "end": 999.0},  # before the click: an earlier run's
        {"stage": "generate", "seconds": 3.0, "round": 1, "end": 1003.0},
        {"stage": "score", "seconds": 0.5, "metric": "e5", "end": 1003.5},
        {"stage": "surprise", "seconds": 1.0, "round": 1, "end": 1004.5},
        {"stage": "page update", "seconds": 0.25, "round": 1, "end": 1005.0},
        {"stage": "update handed over", "round": 1, "what": "verdict", "end": 1005.0},
        {"stage": "generate", "seconds": 9.0, "round": 2, "end": 1014.0},
        {"stage": "score", "seconds": 1.5, "metric": "e5", "end": 1015.5},
        {"stage": "page update", "seconds": 0.5, "round": 2, "end": 1016.0},
        {"stage": "update handed over", "round": 2, "what": "verdict", "end": 1016.0},
        {"stage": "update handed over", "round": 2, "what": "done", "end": 1016.25},
    ]
    log.write_text("".join(f'12:00 gcs.timing DEBUG timing {__import__("json").dumps(line)}\nother line\n'
                           for line in lines))

    class Page:  # what the recorder in the page holds after the run
        def evaluate(self, _):
            return {"busy": 0.75, "events": [["first answer", "", 1001.0], ["verdict", "after 4 seeds: …", 1005.5],
                                             ["status", "Round 1: 4 seeds scored; the next …", 1005.5],
                                             ["status", "Done: every comparison decided after 16 seeds.", 1017.0]],
                    "calls": {"requestAnimationFrame statustracker": 1020, "setTimeout index": 34,
                              "requestAnimationFrame index": 170}}

    seen = shown(Page(), clicked)
    assert seen == {"busy": 0.75, "first answer": 1.0, "first verdict": 5.5, "final": 17.0, "rounds": {1: 5.5},
                    "calls": Page().evaluate("")["calls"]}
    # what the page scheduled, per second of the run (17 s), the most first
    assert page_work(seen, top=2) == "requestAnimationFrame statustracker 60/s, requestAnimationFrame index 10/s"
    assert breakdown(log, clicked, seen, cpu=[]) == [
        "    round 1: generate 3.00, score e5 0.50, surprise 1.00, page update 0.25; to screen 0.50 s",
        "    round 2: generate 9.00, score e5 1.50, page update 0.50; to screen 0.75 s"]
    # sampled each second: the app on 1.5 cores and the browser on 0.25 while round 1 generates, then 2 and 0.1
    cpu = [(t, 1.5 * (t - 1000) if t <= 1003 else 4.5 + 2 * (t - 1003),
            0.25 * (t - 1000) if t <= 1003 else 0.75 + 0.1 * (t - 1003)) for t in range(1000, 1018)]
    assert breakdown(log, clicked, seen, cpu) == [
        "    round 1: generate 3.00, score e5 0.50, surprise 1.00, page update 0.25; to screen 0.50 s (meanwhile the "
        "app 1.50 cores, the browser 0.25)",
        "    round 2: generate 9.00, score e5 1.50, page update 0.50; to screen 0.75 s (meanwhile the app 2.00 cores, "
        "the browser 0.10)"]


@pytest.mark.parametrize("line", ["timing {not json", "gcs.app INFO timing", ""])
def test_other_lines_are_not_timings(line):
    assert parse(line) is None
