"""One way to call it: every generating entry point takes one ``SamplingSettings`` and gives with it what its own
arguments give; ``stop``, ``progress``, ``resume`` and ``on_results`` mean the same wherever they exist; ``seeds`` is
a count or the seeds themselves (``compare_rounds`` included). On a tiny random model with a word-level tokenizer
(no download), so that the whole contract runs in the fast tier."""

from __future__ import annotations

import threading

import pandas as pd
import pytest
import torch

import gcs
from conftest import tiny_gcs_model

PROMPTS = ["w5 w6 w7", "w7 w6 w5"]
ONE = dict(method="gcs", seed=3, temperature=0.7, top_p=0.9, max_new_tokens=5)
ONE_SETTINGS = gcs.SamplingSettings(methods="gcs", seeds=[3], temperature=0.7, top_p=0.9, max_new_tokens=5)


@pytest.fixture(scope="module")
def tiny():
    return tiny_gcs_model()


def responses(frame: pd.DataFrame, column: str = "response") -> list:
    return frame.sort_values([c for c in ("prompt_index", "method", "seed", "group", "question") if c in frame])[
        column].tolist()


# -- one SamplingSettings at every generating entry point ----------------------------------------------------------
SINGLE = {
    "generate": lambda m, **kw: gcs.generate(PROMPTS, model=m, **kw),
    "stream": lambda m, **kw: list(gcs.stream(PROMPTS, model=m, **kw))[-1],
    "trace": lambda m, **kw: list(gcs.trace(PROMPTS, model=m, **kw).responses),
    "hindsight": lambda m, **kw: gcs.hindsight(PROMPTS[0], "w8 w9", PROMPTS, model=m, **kw),
    "hindsight_report": lambda m, **kw: gcs.hindsight_report(PROMPTS[0], "w8 w9", PROMPTS, model=m, **kw).answers,
    "counterfactual": lambda m, **kw: gcs.counterfactual(PROMPTS[0], "w8 w9 w10", at=1, replacement="w11", model=m,
                                                         **kw),
}


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_settings_of_one_method_and_seed_give_what_the_arguments_give(name, tiny):
    call = SINGLE[name]
    assert call(tiny, settings=ONE_SETTINGS) == call(tiny, **ONE)
    other = call(tiny, settings=ONE_SETTINGS.replace(seeds=[4], methods=["gcswr"]))
    assert other == call(tiny, **{**ONE, "seed": 4, "method": "gcswr"})  # the settings are what runs


@pytest.mark.parametrize("name", sorted(SINGLE))
def test_settings_a_single_entry_point_cannot_take_are_refused(name, tiny):
    with pytest.raises(ValueError, match="one method with one seed"):
        SINGLE[name](tiny, settings=gcs.SamplingSettings(methods="is,gcs"))
    with pytest.raises(TypeError, match="settings must be a gcs.SamplingSettings"):
        SINGLE[name](tiny, settings={"method": "gcs"})
    if name not in ("generate", "stream"):  # the race and the posterior are read over the whole vocabulary
        with pytest.raises(ValueError, match="takes no top_k"):
            SINGLE[name](tiny, settings=ONE_SETTINGS.replace(top_k=5))


MANY = dict(methods="is,gcswr", seeds=[2, 5], temperature=0.8, max_new_tokens=4)
MANY_SETTINGS = gcs.SamplingSettings(**MANY)


def test_compare_and_sweep_and_style_take_the_settings_of_many(tiny):
    assert responses(gcs.compare(PROMPTS, settings=MANY_SETTINGS, model=tiny)) == \
        responses(gcs.compare(PROMPTS, **MANY, model=tiny))
    groups = [PROMPTS, ["w9 w10", "w10 w9"]]
    by_settings = gcs.sweep(groups, settings=MANY_SETTINGS, metrics=["jaccard"], model=tiny)
    by_arguments = gcs.sweep(groups, temperatures=[0.8], methods="is,gcswr", seeds=[2, 5], max_new_tokens=4,
                             metrics=["jaccard"], model=tiny)
    assert responses(by_settings, "responses") == responses(by_arguments, "responses")
    assert set(by_settings["temperature"]) == {0.8}  # the settings' temperature, unless temperatures are given
    assert set(gcs.sweep(groups, settings=MANY_SETTINGS, temperatures=[0.0], metrics=["jaccard"],
                         model=tiny)["temperature"]) == {0.0}
    style = dict(temperature=0.8, max_new_tokens=4, model=tiny)
    assert responses(gcs.style_responses(PROMPTS, settings=MANY_SETTINGS, model=tiny)) == \
        responses(gcs.style_responses(PROMPTS, methods="is,gcswr", seeds=[2, 5], **style))


def test_ab_takes_method_seeds_and_tokens_from_the_settings_and_sampling_from_its_variants(tiny):
    a, b = gcs.Variant(model=tiny), gcs.Variant(model=tiny, template="{prompt} w12")
    common = dict(metrics=["length"], control=False)
    by_settings = gcs.ab(PROMPTS, a, b, settings=gcs.SamplingSettings(methods="gcs", seeds=3, max_new_tokens=4),
                         **common)
    by_arguments = gcs.ab(PROMPTS, a, b, method="gcs", seeds=3, max_new_tokens=4, **common)
    assert by_settings[["answer_a", "answer_b"]].equals(by_arguments[["answer_a", "answer_b"]])
    for bad, message in ((gcs.SamplingSettings(methods="gcs", temperature=0.5), "set temperature and top_p on"),
                         (gcs.SamplingSettings(methods="is,gcs"), "shares one method")):
        with pytest.raises(ValueError, match=message):
            gcs.ab(PROMPTS, a, b, settings=bad, **common)


# -- seeds, on_results and resume in rounds -------------------------------------------------------------------------
def test_compare_rounds_runs_the_seeds_it_is_given_and_continues_after_the_largest(tiny):
    run = dict(methods="is,gcs", rounds=(2, 2), metrics=("aligned",), max_new_tokens=4, model=tiny, futility=0)
    rounds_seen = []
    reports = list(gcs.compare_rounds(PROMPTS, seeds=[9, 3, 7, 5], on_results=rounds_seen.append, **run))
    assert [r.seeds for r in reports] == [[9, 3], [9, 3, 7, 5]]
    assert [sorted(set(frame["seed"])) for frame in rounds_seen] == [[3, 9], [5, 7]]  # each round's answers, once
    assert pd.concat(rounds_seen, ignore_index=True).equals(reports[-1].frame)
    by_settings = list(gcs.compare_rounds(PROMPTS, settings=gcs.SamplingSettings(methods="is,gcs", seeds=[9, 3, 7, 5],
                                                                                 max_new_tokens=4),
                                          **{k: v for k, v in run.items() if k not in ("methods", "max_new_tokens")}))
    assert by_settings[-1].frame.equals(reports[-1].frame)
    last = reports[-1]
    assert last.final and last.more_seeds  # 4 seeds cannot claim: the run ends undecided
    with pytest.raises(ValueError, match="paraphrases: resume continues its own run"):
        next(gcs.compare_rounds(["w20 w21", "w21 w20"], resume=last))
    with pytest.raises(ValueError, match="takes resume or methods, not both"):
        next(gcs.compare_rounds(PROMPTS, methods="is,gcswr", resume=last))
    more = list(gcs.compare_rounds(PROMPTS, resume=last))
    assert more[0].seeds[:4] == [9, 3, 7, 5] and more[0].seeds[4:] == list(range(10, 10 + len(more[0].seeds) - 4))
    fresh = gcs.compare(PROMPTS, methods="is,gcs", seeds=more[0].seeds[4:], max_new_tokens=4, model=tiny)
    later = more[0].frame[more[0].frame["seed"] >= 10]
    assert responses(later) == responses(fresh)  # the extension's seeds, answered as any run of them


# -- stop, progress and resume mean the same everywhere -------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda m, stop: gcs.generate(PROMPTS, model=m, stop=stop),
    lambda m, stop: list(gcs.stream(PROMPTS, model=m, stop=stop)),
    lambda m, stop: gcs.compare(PROMPTS, model=m, stop=stop),
    lambda m, stop: gcs.trace(PROMPTS, model=m, stop=stop),
    lambda m, stop: gcs.sweep([PROMPTS], temperatures=[1.0], seeds=1, metrics=["jaccard"], model=m, stop=stop),
], ids=["generate", "stream", "compare", "trace", "sweep"])
def test_a_set_stop_cancels_every_generating_call(call, tiny):
    stop = threading.Event()
    stop.set()
    with pytest.raises(gcs.Cancelled):
        call(tiny, stop)


def test_progress_is_true_a_bar_or_a_callback_and_nothing_else(tiny, capsys):
    groups = [PROMPTS, ["w9 w10", "w10 w9"]]
    common = dict(temperatures=[1.0], seeds=2, metrics=["jaccard"], max_new_tokens=2, batch_rows=4, model=tiny)
    seen: list = []
    gcs.sweep(groups, progress=lambda done, total: seen.append((done, total)), **common)
    assert seen[-1] == (12, 12) and [d for d, _ in seen] == sorted(d for d, _ in seen)  # 2 groups x 3 methods x 2
    gcs.sweep(groups, progress=True, **common)
    assert "sweep" in capsys.readouterr().err  # a tqdm bar of its own
    answered = []
    gcs.style_responses(PROMPTS, seeds=2, max_new_tokens=2, model=tiny,
                        progress=lambda done, total: answered.append((done, total)))
    assert answered[-1] == (8, 8)
    for call in (lambda: gcs.sweep(groups, progress="yes", **common),
                 lambda: gcs.style_responses(PROMPTS, progress=3, model=tiny)):
        with pytest.raises(TypeError, match="progress must be True, False, a tqdm-like bar or a callback"):
            call()


def test_resume_takes_an_earlier_run_s_results_or_their_keys(tiny):
    first = gcs.style_responses(PROMPTS, seeds=2, max_new_tokens=2, model=tiny)
    assert gcs.style_responses(PROMPTS, seeds=2, max_new_tokens=2, model=tiny, resume=first).empty
    rest = gcs.style_responses(PROMPTS, seeds=3, max_new_tokens=2, model=tiny, resume=first)
    assert set(rest["seed"]) == {2}
    keys = {("0", "is", 0), ("0", "is", 1)}
    assert len(gcs.style_responses(PROMPTS, seeds=2, max_new_tokens=2, model=tiny, resume=keys)) == len(first) - 2
    a, b = gcs.Variant(model=tiny), gcs.Variant(model=tiny, template="{prompt} w12")
    done = gcs.ab(PROMPTS, a, b, seeds=2, max_new_tokens=2, metrics=["length"])
    assert gcs.ab(PROMPTS, a, b, seeds=2, max_new_tokens=2, metrics=["length"], resume=done).empty
    with pytest.raises(ValueError, match="resume: the earlier results lack the columns"):
        gcs.ab(PROMPTS, a, b, seeds=2, metrics=["length"], resume=first)


# -- nothing silently ignored, every argument checked first ---------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda m: gcs.generate(PROMPTS, method="is", settings=ONE_SETTINGS, model=m),
    lambda m: gcs.trace(PROMPTS, seed=7, settings=ONE_SETTINGS, model=m),
    lambda m: gcs.compare(PROMPTS, temperature=0.5, settings=MANY_SETTINGS, model=m),
    lambda m: next(gcs.compare_rounds(PROMPTS, seeds=8, settings=MANY_SETTINGS, model=m)),
    lambda m: gcs.sweep([PROMPTS], max_new_tokens=2, settings=MANY_SETTINGS, model=m),
    lambda m: gcs.style_responses(PROMPTS, seeds=2, settings=MANY_SETTINGS, model=m),
    lambda m: gcs.ab(PROMPTS, gcs.Variant(model=m), gcs.Variant(model=m), seeds=2,
                     settings=gcs.SamplingSettings(methods="gcs")),
], ids=["generate", "trace", "compare", "compare_rounds", "sweep", "style_responses", "ab"])
def test_an_argument_beside_the_settings_that_replace_it_is_refused(call, tiny):
    with pytest.raises(ValueError, match="takes settings or .*, not both"):
        call(tiny)


def test_stop_callbacks_and_resume_of_the_wrong_type_are_refused_before_any_work(tiny):
    refused = {
        "stop": [lambda: gcs.generate(PROMPTS, stop=True, model=tiny),
                 lambda: gcs.sweep([PROMPTS], stop=True, model=tiny),
                 lambda: gcs.style_responses(PROMPTS, stop="now", model=tiny),
                 lambda: next(gcs.compare_rounds(PROMPTS, stop=1, model=tiny)),
                 lambda: gcs.trace(PROMPTS, stop=True, model=tiny)],
        "on_results": [lambda: gcs.sweep([PROMPTS], on_results=5, model=tiny),
                       lambda: next(gcs.compare_rounds(PROMPTS, on_results=5, model=tiny))],
        "resume": [lambda: next(gcs.compare_rounds(PROMPTS, resume=5, model=tiny))],
    }
    for name, calls in refused.items():
        for call in calls:
            with pytest.raises(TypeError, match=rf"^{name} must be"):
                call()


def test_compare_rounds_takes_metrics_as_a_list_or_a_comma_string(tiny):
    run = dict(methods="is,gcs", seeds=2, rounds=(2,), max_new_tokens=2, model=tiny)
    (listed,) = gcs.compare_rounds(PROMPTS, metrics=["aligned", "jaccard"], **run)
    (comma,) = gcs.compare_rounds(PROMPTS, metrics="aligned,jaccard", **run)
    assert listed.tests.equals(comma.tests) and set(comma.tests["metric"]) == {"aligned", "jaccard"}
    with pytest.raises(ValueError, match="unknown metric 'bleu'"):
        next(gcs.compare_rounds(PROMPTS, metrics="aligned,bleu", **run))


@pytest.mark.parametrize("call, keyword, nearest", [
    (lambda tiny, **k: gcs.compare(PROMPTS, model=tiny, **k), "seed", "seeds"),
    (lambda tiny, **k: list(gcs.stream_compare(PROMPTS, model=tiny, **k)), "method", "methods"),
    (lambda tiny, **k: gcs.generate(PROMPTS, model=tiny, **k), "seeds", "seed"),
    (lambda tiny, **k: list(gcs.stream(PROMPTS, model=tiny, **k)), "methods", "method"),
    (lambda tiny, **k: gcs.sweep([PROMPTS], model=tiny, **k), "temperature", "temperatures"),
    (lambda tiny, **k: gcs.hindsight("w5", "w6", ["w7"], model=tiny, **k), "seeds", "seed"),
    (lambda tiny, **k: gcs.hindsight_report("w5", "w6", ["w7"], model=tiny, **k).answers, "metrics", None),
])
def test_a_gcs_option_an_entry_point_does_not_take_is_refused_not_passed_to_transformers(call, keyword, nearest,
                                                                                        tiny):
    """Extra keywords go to transformers' generate: gcs.sweep(temperature=0.5) ran the default temperatures (under
    gcs's sampling transformers ignores a temperature), gcs.compare(seed=3) failed inside transformers. Refused first,
    by name, with the entry point's own option nearest to it; transformers' own keywords still pass."""
    with pytest.raises(TypeError, match=f"got an unexpected keyword argument '{keyword}'") as refused:
        call(tiny, **{keyword: 3})
    assert (f"did you mean '{nearest}'?" in str(refused.value)) == (nearest is not None), str(refused.value)
    assert len(call(tiny, max_new_tokens=2, min_new_tokens=1)) > 0


@pytest.mark.parametrize("batch_rows, error", [(-5, ValueError), (0, ValueError), (2.5, TypeError), ("8", TypeError)])
def test_batch_rows_is_checked_where_it_is_taken(batch_rows, error, tiny):
    """``gcs run --batch-rows -5`` ran (a batch per cell) and exited 0; ``batch_rows="x"`` failed inside the packing."""
    calls = [lambda: gcs.sweep([PROMPTS], batch_rows=batch_rows, model=tiny),
             lambda: gcs.style_responses(PROMPTS, batch_rows=batch_rows, model=tiny),
             lambda: gcs.ab(PROMPTS, gcs.Variant(tiny), gcs.Variant(tiny, system="Be brief."), batch_rows=batch_rows)]
    for call in calls:
        with pytest.raises(error, match="^batch_rows must be"):
            call()


@pytest.mark.parametrize("device, error, message", [
    ("tpu", ValueError, "device 'tpu' is not a torch device name"),
    (3, TypeError, "device must be a device name"),
    pytest.param("cuda", ValueError, "asks for CUDA, which this machine's torch cannot use",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: 'cuda' loads")),
])
def test_a_device_the_machine_lacks_is_named_before_loading(device, error, message):
    """torch's own errors: an AssertionError for "cuda" on a CPU build, "Expected one of cpu, cuda, ipu, ..." for
    "tpu", "Cannot access accelerator device" for 3."""
    with pytest.raises(error, match=message):
        gcs.load_model(device=device)
