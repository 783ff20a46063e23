"""Excess surprise (gcs.excess_surprise) and the degenerate-output rule.

Theory: for the model's own samples at temperature 1, each token's surprise minus its step's entropy has
mean 0, so over many responses the summed excess is a sum of mean-zero terms (a z test at |z| < 4.5).
The rule itself is checked on real samples of the embedded model at T = 1 (not flagged) and T = 2
(flagged), where the calibration (bench/bench_surprise.py) puts them far apart, with the excess generation records
(checked against a separate pass of the model over the same tokens).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

import gcs
from conftest import Z_THRESHOLD, tiny_gcs_model
from gcs.scoring.surprise import DEGENERATE_EXCESS, degenerate


def test_the_model_s_own_samples_have_no_excess_surprise_on_average():
    model = tiny_gcs_model(vocab_size=64, seed=5)
    model.model.lm_head.weight.data *= 8  # peaked distributions, as a trained model's are

    def z_of(temperature: float) -> float:
        prompts = [f"w{3 + i % 20} w{10 + i % 7} w{30 + i % 11}" for i in range(150)]
        frame = gcs.compare(prompts, methods=["is"], temperature=temperature, max_new_tokens=12, model=model)
        responses = list(frame["raw_response"])
        lengths = np.array([len(model.tokenizer.encode(r, add_special_tokens=False)) for r in responses])
        sums = np.nan_to_num(gcs.excess_surprise(prompts, responses, model=model)) * lengths
        return sums.sum() / math.sqrt((sums**2).sum())  # each response's summed excess: mean 0, independent

    assert abs(z_of(1.0)) < Z_THRESHOLD
    assert z_of(2.0) > Z_THRESHOLD  # the same test sees hotter samples


def test_a_degenerate_run_gets_no_claim_in_the_verdict():
    import pandas as pd

    scores = pd.DataFrame({"method": ["is"] * 6 + ["gcswr"] * 6, "seed": list(range(6)) * 2, "metric": "e5",
                           "consistency": [0.70, 0.71, 0.69, 0.70, 0.72, 0.70, 0.80, 0.82, 0.81, 0.83, 0.80, 0.82]})
    assert "beyond noise" in gcs.verdict(scores)[0]
    flagged = gcs.verdict(scores, excess=[2.4, 3.1, 2.8])
    assert flagged[0].startswith("These answers are not language the model stands behind")
    assert "not interpreted" in flagged[1] and "beyond noise" not in " ".join(flagged)


def test_bad_input_is_refused():
    model = tiny_gcs_model()
    with pytest.raises(ValueError, match="2 prompts but 1 responses"):
        gcs.excess_surprise(["w5", "w6"], ["w7"], model=model)
    with pytest.raises(ValueError, match="prompts must not be empty"):
        gcs.excess_surprise([], [], model=model)
    assert math.isnan(gcs.excess_surprise(["w5"], [""], model=model)[0])


def test_generation_records_the_excess_a_pass_over_the_drawn_tokens_computes():
    """The recorder reads the logits generation computed anyway: each answer's mean excess equals a separate pass of
    the model over exactly the tokens drawn (rows of different lengths, an unfinished one, IS and coupled rows,
    streamed or not), and recording changes no token."""
    from gcs.generation.cores import compare_with

    model = tiny_gcs_model(vocab_size=64, seed=5)
    model.model.lm_head.weight.data *= 4
    prompts = ["w5 w6 w7", "w8 w9", "w10 w11 w12 w13"]
    settings = gcs.SamplingSettings(methods=["is", "gcswr"], seeds=[0, 1, 2], temperature=1.3, max_new_tokens=10)
    plain = gcs.compare(prompts, settings=settings, model=model)
    for streaming in (False, True):
        *_, recorded = compare_with(prompts, settings, model, streaming=streaming, record_excess=True)
        assert recorded["token_ids"].tolist() == plain["token_ids"].tolist()
        assert list(recorded.columns) == [*plain.columns, "excess_surprise"]
        assert recorded["n_tokens"].nunique() > 1 and not recorded["finished"].all()  # the cases it must handle
        passed = gcs.excess_surprise(list(recorded["prompt"]), list(recorded["token_ids"]), model=model)
        np.testing.assert_allclose(recorded["excess_surprise"], passed, atol=1e-4)
    assert "excess_surprise" not in plain


@pytest.mark.slow
def test_a_run_in_rounds_flags_degenerate_answers_from_what_generation_recorded(embedded_model):
    """The rounds' own excess (no second pass) flags T = 2 at the default dtype, and ``gcs.verdict`` of the run says so
    without being given it; and the excess recorded is what a pass over the drawn tokens gives. That equality is
    checked in float32: in bfloat16 (the default on an AVX512-BF16 machine) a cached decode step and a whole pass
    round apart, by up to 0.025 nats a token in a row's mean, against 7e-6 in float32."""
    paraphrases = ["What is DNA?", "Can you explain what DNA is?", "Describe the molecule called DNA."]
    medians = {}
    for temperature in (1.0, 2.0):
        first = next(gcs.compare_rounds(paraphrases, seeds=4, rounds=[2, 2], temperature=temperature,
                                        max_new_tokens=24, model=embedded_model))
        assert "excess_surprise" not in first.frame and len(first.excess) == len(first.frame)
        flagged = gcs.verdict(first)[0].startswith("These answers are not language the model stands behind")
        assert flagged == (temperature == 2.0) == degenerate(first.excess)
        medians[temperature] = float(np.nanmedian(first.excess))
    assert medians[1.0] < DEGENERATE_EXCESS - 0.5 and medians[2.0] > DEGENERATE_EXCESS + 0.5, medians  # margin
    exact = gcs.load_model(dtype=torch.float32)
    for temperature in (1.0, 2.0):
        first = next(gcs.compare_rounds(paraphrases, seeds=4, rounds=[2, 2], temperature=temperature,
                                        max_new_tokens=24, model=exact))
        passed = gcs.excess_surprise(list(first.frame["prompt"]), list(first.frame["token_ids"]), model=exact)
        np.testing.assert_allclose(first.excess, passed, atol=1e-4)


def test_token_ids_out_of_the_vocabulary_are_refused():
    model = tiny_gcs_model(vocab_size=64)
    with pytest.raises(ValueError, match=r"responses\[1\] must be token ids: whole numbers in \[0, 64\)"):
        gcs.excess_surprise(["w5", "w6"], [[5, 6], [7, 64]], model=model)
    assert gcs.excess_surprise(["w5"], [[]], model=model).shape == (1,)
