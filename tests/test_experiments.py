"""Sweeps on the real embedded model, and the Table 1 / Fig. 2 summaries on crafted frames."""

import math

import numpy as np
import pandas as pd
import pytest

import gcs
from gcs.experiments import sweeps as experiments

GROUPS = [gcs.Group("capital", ("What is the capital of France?", "Name the capital of France.")),
          gcs.Group("dna", ("What is DNA?", "Explain what DNA is.", "Describe DNA."))]
FEW = 8


@pytest.fixture(scope="module")
def small_sweep(embedded_model):
    seen, progress = [], []
    frame = gcs.sweep(GROUPS, temperatures=[0, 1], seeds=2, metrics=["e5", "jaccard"], model=embedded_model,
                      max_new_tokens=FEW, batch_rows=10, on_results=seen.append,
                      progress=lambda d, t: progress.append((d, t)))
    return frame, seen, progress


@pytest.mark.slow
def test_sweep_frame_is_tidy_and_complete(small_sweep):
    frame, seen, progress = small_sweep
    assert list(frame.columns) == list(experiments.RESULT_COLUMNS)
    cells = 2 * 3 * 2 * 2  # temperatures x methods x seeds x groups
    assert len(frame) == cells * 2 and not frame.duplicated(["group", "method", "seed", "temperature", "metric"]).any()
    assert frame["consistency"].between(-1, 1).all()
    assert pd.concat(seen, ignore_index=True).equals(frame)  # every row reached on_results, in order
    assert len(seen) > 2 and progress[-1] == (cells, cells)  # several batches of at most 10 rows
    assert all(len(r) == len(GROUPS[0].prompts if g == "capital" else GROUPS[1].prompts)
               for g, r in zip(frame["group"], frame["responses"], strict=True))


@pytest.mark.slow
def test_sweep_responses_match_compare_and_greedy_agrees(small_sweep, embedded_model):
    frame, _, _ = small_sweep
    chosen = (frame.group == "dna") & (frame.method == "gcswr") & (frame.seed == 1) & (frame.temperature == 1)
    row = frame[chosen].iloc[0]
    assert row["responses"] == gcs.generate(list(GROUPS[1].prompts), method="gcswr", seed=1, temperature=1.0,
                                            max_new_tokens=FEW, model=embedded_model)
    greedy = frame[frame.temperature == 0].groupby(["group", "metric"])["consistency"].nunique()
    assert (greedy == 1).all()  # at T=0 every method and seed gives the same responses


@pytest.mark.slow
def test_sweep_resumes_from_earlier_results_or_their_keys(small_sweep, embedded_model):
    frame, _, _ = small_sweep
    assert gcs.sweep(GROUPS, temperatures=[0, 1], seeds=2, model=embedded_model, max_new_tokens=FEW,
                     resume=frame).empty  # an earlier sweep's frame: every cell is done
    keys = {tuple(k) for k in frame[list(experiments.CELL_KEYS)].itertuples(index=False)}
    one_left = keys - {("dna", "is", 1, 1.0, 0)}
    rest = gcs.sweep(GROUPS, temperatures=[0, 1], seeds=2, metrics=["e5", "jaccard"], model=embedded_model,
                     max_new_tokens=FEW, resume=one_left)
    expected = frame[(frame.group == "dna") & (frame.method == "is") & (frame.seed == 1) & (frame.temperature == 1)]
    assert rest.drop(columns="consistency").equals(expected.drop(columns="consistency").reset_index(drop=True))
    np.testing.assert_allclose(rest["consistency"], expected["consistency"], atol=1e-6)


@pytest.mark.slow
def test_sweep_drives_a_tqdm_bar(embedded_model):
    import io

    from tqdm import tqdm

    with tqdm(total=2, file=io.StringIO()) as bar:
        gcs.sweep(GROUPS, temperatures=[0], methods=["gcswr"], seeds=1, metrics=["jaccard"], model=embedded_model,
                  max_new_tokens=2, batch_rows=3, progress=bar)
        assert bar.n == 2  # one cell per batch of at most 3 rows


@pytest.mark.slow
def test_sweep_scores_aligned_agreement(embedded_model):
    frame = gcs.sweep(GROUPS[:1], temperatures=[1], methods=["is", "gcswr"], seeds=1, metrics=["aligned", "jaccard"],
                      model=embedded_model, max_new_tokens=12)
    for _, row in frame[frame.metric == "aligned"].iterrows():
        expected = gcs.consistency(row["responses"], metric="aligned", tokenizer=embedded_model.tokenizer)
        assert row["consistency"] == pytest.approx(expected) and 0 <= expected <= 1
    assert "aligned agreement" in gcs.consistency_figure(frame, metric="aligned").to_json()


@pytest.mark.slow
def test_sweep_with_ensembling(embedded_model):
    frame = gcs.sweep(GROUPS[:1], temperatures=[1], methods=["gcswr"], seeds=1, metrics=["jaccard"],
                      model=embedded_model, max_new_tokens=FEW, ensemble=[0, 1])
    assert sorted(frame["ensemble"]) == [0, 1]
    assert gcs.summary_table(frame).shape == (1, 2)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(groups=[["only one"]]), "at least 2"),
        (dict(groups=[]), "non-empty"),
        (dict(temperatures=[]), "temperatures must not be empty"),
        (dict(temperatures=[float("nan")]), "temperature"),
        (dict(methods=["beam"]), "method"),
        (dict(seeds=0), "seeds"),
        (dict(seeds=[-1]), "seed"),
        (dict(metrics=["bleu"]), "unknown metric"),
        (dict(max_new_tokens=0), "max_new_tokens"),
        (dict(top_p=0), "top_p"),
        (dict(ensemble=[]), "ensemble must not be empty"),
        (dict(ensemble=[0, 9]), "rewordings"),
        (dict(settings=gcs.SamplingSettings(), temperatures=[]), "temperatures must not be empty"),
        (dict(progress="yes"), "progress must be"),
        (dict(resume=[("dna", "is")]), "resume"),
    ],
)
def test_sweep_bad_settings(kwargs, message):
    arguments = dict(groups=[["a?", "b?"]], model="no-such-model-is-loaded")
    arguments.update(kwargs)
    with pytest.raises(ValueError, match=message):  # refused before the (unloadable) model is touched
        gcs.sweep(**arguments)


def _crafted():
    rows = []
    for method, base in (("is", 0.80), ("gcswr", 0.90)):
        for ensemble, bonus in ((False, 0.0), (True, 0.02)):
            for seed in range(3):
                for group in range(4):
                    for temperature in (0.5, 1.0):
                        value = base + bonus + 0.01 * seed + 0.001 * group - 0.05 * temperature
                        rows.append(dict(group=str(group), method=method, seed=seed, temperature=temperature,
                                         ensemble=ensemble, metric="e5", consistency=value, responses=[]))
    return pd.DataFrame(rows)


def test_summary_table_layout_and_values():
    table = gcs.summary_table(_crafted())
    assert list(table.index) == ["IS", "GCSwR"] and list(table.columns) == ["without ensembling", "with ensembling"]
    # per-seed means at T=1 for IS without ensembling: 0.80 + 0.0015 + 0.01 s - 0.05, s = 0, 1, 2
    per_seed = np.array([0.7515, 0.7615, 0.7715])
    mean, stderr = per_seed.mean(), per_seed.std(ddof=1) / math.sqrt(3)
    assert table.loc["IS", "without ensembling"] == f"{100 * mean:.2f} ± {100 * stderr:.2f}"
    assert table.loc["GCSwR", "with ensembling"].startswith(f"{100 * (mean + 0.12):.2f}")


def test_consistency_curves_and_figure():
    frame = _crafted()
    curves = gcs.consistency_by_temperature(frame)
    is_half = curves[(curves.method == "is") & (~curves.ensemble) & (curves.temperature == 0.5)].iloc[0]
    values = frame[(frame.method == "is") & (~frame.ensemble) & (frame.temperature == 0.5)]["consistency"]
    assert is_half["n"] == 12 and is_half["seeds"] == 3 and is_half["mean"] == pytest.approx(values.mean())
    # clustered by seed (cells of one seed share noise): the spread of the 3 per-seed means, not of 12 cells
    per_seed = frame[(frame.method == "is") & (~frame.ensemble) & (frame.temperature == 0.5)].groupby("seed")
    per_seed = per_seed["consistency"].mean()
    assert is_half["stderr"] == pytest.approx(per_seed.std(ddof=1) / math.sqrt(3))
    figure = gcs.consistency_figure(frame)
    assert len(figure.data) == 4 and {t.name for t in figure.data} >= {"IS", "GCSwR + ensembling"}
    trace = next(t for t in figure.data if t.name == "IS")
    np.testing.assert_allclose(trace.error_y.array[0], is_half["stderr"])


@pytest.mark.parametrize("seeds, labelled", [(4, True), (8, False)])
def test_the_paired_figure_says_on_the_plot_where_a_mean_has_no_interval(seeds, labelled):
    """At 4 seeds the exact test has no interval: the mean's diamond stood alone, well above 0, while the verdict said
    "too few for any claim" (only the hover said why). It is open and labelled on the plot now."""
    rows = [{"method": method, "seed": seed, "e5": 0.8 + (0.05 if method == "gcswr" else 0.0) + 0.01 * seed}
            for method in ("is", "gcswr") for seed in range(seeds)]
    per_seed = pd.DataFrame(rows)
    scores = per_seed.rename(columns={"e5": "consistency"}).assign(metric="e5")
    summary = gcs.paired_tests(scores).assign(metric="e5")
    figure = gcs.paired_figure(per_seed, summary, metric="e5")
    mean = [trace for trace in figure.data if trace.marker.symbol in ("diamond", "diamond-open")][0]
    texts = [annotation.text for annotation in figure.layout.annotations]
    assert (mean.marker.symbol == "diamond-open") == labelled and (mean.error_y.array is None) == labelled
    assert ("too few seeds<br>for an interval" in texts) == labelled, texts
