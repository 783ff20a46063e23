"""The coupling explorer's computations and the dashboard's helpers (figures, shared tokens, scores)."""

import numpy as np
import pytest
import torch

import gcs
from conftest import P_VALUE_THRESHOLD, Z_THRESHOLD, chi_square_p

P = [0.5, 0.3, 0.15, 0.05]


def test_coupling_curve_matches_theorem1_by_monte_carlo():
    curve = gcs.coupling_curve(P, epsilons=[0.0, 0.5, 1.0, 2.0], trials=20_000, seed=3)
    assert curve.loc[0, "theorem1"] == pytest.approx(1.0) and curve.loc[0, "monte_carlo_shared"] == 1.0
    for row in curve.itertuples():
        q = gcs.perturb(P, epsilon=row.epsilon, seed=3)
        assert row.theorem1 == pytest.approx(gcs.agreement_probability(torch.tensor(P), q, method="gcs"))
        assert row.independent == pytest.approx(float((torch.tensor(P, dtype=torch.float64) * q).sum()))
        if row.epsilon > 0:
            assert abs(row.monte_carlo_shared - row.theorem1) / row.stderr_shared < Z_THRESHOLD
        assert abs(row.monte_carlo_independent - row.independent) / row.stderr_independent < Z_THRESHOLD
        assert row.theorem1 >= row.independent  # sharing noise never lowers agreement


def test_largest_seed_is_accepted():
    """Sub-seeds are hashed: the explorer used seed * 200,000 + t, past 2**63 - 1 for large seeds."""
    curve = gcs.coupling_curve(P, epsilons=[0.0, 1.0], trials=200, seed=gcs.MAX_SEED)
    assert curve.loc[0, "monte_carlo_shared"] == 1.0
    other = gcs.coupling_curve(P, epsilons=[0.0, 1.0], trials=200, seed=gcs.MAX_SEED - 1)
    assert not other.equals(curve)  # neighbouring seeds do not share their draws


def test_given_q_is_the_last_point():
    q = [0.1, 0.2, 0.3, 0.4]
    curve = gcs.coupling_curve(P, q, epsilons=[0, 1, 2], trials=500)
    assert curve.iloc[-1]["theorem1"] == pytest.approx(gcs.agreement_probability(torch.tensor(P), torch.tensor(q)))
    assert curve.iloc[0]["theorem1"] == pytest.approx(1.0)


def test_recycling_histogram_is_exact_and_reuse_is_not():
    histogram, p_value = gcs.recycling_histogram(P, steps=20_000, seed=5)
    assert p_value > P_VALUE_THRESHOLD
    assert chi_square_p(histogram["gcswr"] * 20_000, P) == pytest.approx(p_value, rel=1e-6)  # our p-value = scipy's
    assert sorted(histogram["reuse"]) == [0, 0, 0, 1]


@pytest.mark.parametrize(
    "call, message",
    [(lambda: gcs.coupling_curve([1.0]), "2 to 64"), (lambda: gcs.coupling_curve([0.5, -1]), "non-negative"),
     (lambda: gcs.coupling_curve([0, 0]), "positive entry"), (lambda: gcs.coupling_curve(P, trials=0), "trials"),
     (lambda: gcs.coupling_curve(P, [0.5, 0.5]), "same number"), (lambda: gcs.perturb(P, epsilon=-1), "epsilon"),
     (lambda: gcs.recycling_histogram(P, steps=10**9), "steps"), (lambda: gcs.coupling_curve("abc"), "numbers")],
)
def test_bad_coupling_input(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_figures_carry_the_numbers():
    curve = gcs.coupling_curve(P, epsilons=[0, 1], trials=500)
    figure = gcs.coupling_figure(curve)
    assert len(figure.data) == 4 and list(figure.data[0].y) == list(curve["theorem1"])
    histogram, _ = gcs.recycling_histogram(P, steps=500)
    assert len(gcs.recycling_figure(histogram).data) == 3
    heatmap = gcs.similarity_heatmap(np.eye(2), ["a", "b" * 40])  # numbered axes, the whole text on hover
    assert list(heatmap.data[0].x) == ["1", "2"] and heatmap.data[0].z[0][0] == 1
    assert heatmap.data[0].customdata[0][1] == "1: a<br>2: " + "b" * 40


@pytest.mark.slow
def test_shared_tokens_mark_tokens_in_every_text(embedded_model):
    texts = ["DNA is a molecule.", "DNA is genetic code 🧬.", "DNA is what genes are made of."]
    marked = gcs.shared_tokens(texts, tokenizer=embedded_model.tokenizer)
    for text, pieces in zip(texts, marked, strict=True):
        assert "".join(piece for piece, _ in pieces) == text  # the pieces rebuild the text
    shared = {piece.strip() for piece, is_shared in marked[0] if is_shared}
    assert shared == {"DNA", "is", "."}
    assert all(not s for _, s in gcs.shared_tokens(["alone"], tokenizer=embedded_model.tokenizer)[0])


@pytest.mark.slow
def test_compare_report_groups_by_method_and_seed(embedded_model):
    frame = gcs.compare(["What is DNA?", "Explain DNA."], seeds=[0], temperature=0, max_new_tokens=6,
                        model=embedded_model)
    report = gcs.compare_report(frame, metrics=["jaccard"], tokenizer=embedded_model.tokenizer)
    assert list(report.scores["method"]) == ["is", "gcs", "gcswr"] and report.scores["consistency"].nunique() == 1
    assert report.matrices[("gcswr", 0, "jaccard")].shape == (2, 2)
    assert list(report.table["method"]) == ["is", "gcs", "gcswr"]
    assert list(report.table.columns) == ["method", "jaccard", "prefix"]  # prefix: mean common-prefix tokens
    assert list(report.per_seed.columns) == ["method", "seed", "jaccard", "prefix"] and len(report.per_seed) == 3
    gain = report.summary.set_index("method").loc["gcswr"]
    assert gain["n"] == 1 and gain["diff"] == 0 and gain["pairs"] == 1  # greedy: every method agrees


@pytest.mark.slow
@pytest.mark.parametrize("rewordings", [[["Describe DNA."], []], [[], []]])
def test_compare_report_with_partial_or_no_rewordings(embedded_model, rewordings):
    """Ensembling requested, but only some prompts (or none) got rewordings: one group per method and seed.

    The frame used to record "this row had rewordings", which split one method's responses into two groups (a
    2x2 heatmap under 3 labels, a NaN averaged into the table) or, with none, made the app's lookup a KeyError.
    """
    prompts = ["What is DNA?", "Explain DNA.", "Tell me about DNA."]
    rewordings = rewordings + [[]]
    frame = gcs.compare(prompts, seeds=[0, 1], max_new_tokens=4, model=embedded_model, ensemble=rewordings)
    assert frame["ensemble"].nunique() == 1  # one value for the frame: the most rewordings given for a prompt
    assert frame["ensemble"].iloc[0] == max(map(len, rewordings))
    report = gcs.compare_report(frame, metrics=["jaccard"], tokenizer=embedded_model.tokenizer)
    assert len(report.scores) == 3 * 2 and report.scores["consistency"].notna().all()
    assert all(matrix.shape == (3, 3) for matrix in report.matrices.values())
    assert report.table["jaccard"].notna().all()


@pytest.mark.slow
def test_compare_report_of_one_prompt_is_refused_by_name(embedded_model):
    # a frame of one prompt has no pair to compare: it used to end in pandas' KeyError naming no metric
    frame = gcs.compare(["What is DNA?"], seeds=[0, 1], max_new_tokens=2, model=embedded_model)
    with pytest.raises(ValueError, match="answers to 1 prompt.*needs at least 2"):
        gcs.compare_report(frame, metrics=["jaccard"], tokenizer=embedded_model.tokenizer)


@pytest.mark.slow
def test_closing_a_stream_stops_generation(embedded_model):
    """An abandoned UI request: generation must not run on for 500 tokens. The model's forward passes are counted:
    a stream whose stop were ignored would make 500 (closing waits for the worker either way)."""
    import threading

    passes = []
    hook = embedded_model.model.register_forward_hook(lambda *_: passes.append(1))
    try:
        stream = gcs.stream(["What is DNA?"], max_new_tokens=500, min_new_tokens=500, model=embedded_model)
        for step, _ in enumerate(stream):
            if step == 2:
                break
        stream.close()
    finally:
        hook.remove()
    assert not any(t.name == "gcs-generate" for t in threading.enumerate())
    assert 3 <= len(passes) < 250, f"{len(passes)} forward passes: generation went on after its stream was closed"
