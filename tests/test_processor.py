"""GumbelLogitsProcessor inside transformers' generate, on a tiny random Llama."""

import math

import pytest
import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

import gcs
from conftest import P_VALUE_THRESHOLD, chi_square_p

PROMPTS = torch.tensor([[2, 5, 6, 7], [2, 9, 10, 11], [2, 12, 13, 14]])


def generate(model, processor, prompts=PROMPTS, do_sample=False, **kwargs):
    return model.generate(
        prompts,
        attention_mask=torch.ones_like(prompts),
        do_sample=do_sample,
        max_new_tokens=kwargs.pop("max_new_tokens", 10),
        logits_processor=LogitsProcessorList([processor]),
        **kwargs,
    )[:, prompts.shape[1] :]


def warped_distribution(scores, temperature, top_k, top_p):
    warpers = [TemperatureLogitsWarper(temperature), TopKLogitsWarper(top_k), TopPLogitsWarper(top_p)]
    for warper in warpers:
        scores = warper(None, scores)
    return torch.softmax(scores.double(), dim=-1)


@pytest.mark.parametrize("method", gcs.METHODS)
def test_processor_draws_from_the_warped_distribution(method):
    rows = 20_000
    scores = torch.randn(1, 40, generator=torch.Generator().manual_seed(0)) * 2
    processor = gcs.GumbelLogitsProcessor(method, seed=list(range(rows)), temperature=0.7, top_k=8, top_p=0.9)
    out = processor(torch.zeros(rows, 3, dtype=torch.long), scores.expand(rows, -1).clone())
    assert (out.isfinite().sum(dim=-1) == 1).all() and (out.max(dim=-1).values == 0).all()
    counts = torch.bincount(out.argmax(dim=-1), minlength=40).numpy()
    assert chi_square_p(counts, warped_distribution(scores, 0.7, 8, 0.9)[0].numpy()) > P_VALUE_THRESHOLD


@pytest.mark.parametrize("method", gcs.METHODS)
def test_generate_first_token_follows_the_model(tiny_model, method):
    rows = 4000
    prompts = PROMPTS[:1].expand(rows, -1)
    processor = gcs.GumbelLogitsProcessor(method, seed=list(range(rows)), temperature=1.3, top_p=0.95)
    first = generate(tiny_model, processor, prompts, max_new_tokens=1)[:, 0]
    with torch.no_grad():
        scores = tiny_model(PROMPTS[:1]).logits[:, -1].float()
    expected = warped_distribution(scores, 1.3, 64, 0.95)[0].numpy()
    counts = torch.bincount(first, minlength=64).numpy()
    # Pool the rare tokens so that every expected count is at least 5.
    common = expected * rows >= 5
    pooled_counts = list(counts[common]) + [counts[~common].sum()]
    pooled_expected = list(expected[common]) + [expected[~common].sum()]
    assert chi_square_p(pooled_counts, pooled_expected) > P_VALUE_THRESHOLD


@pytest.mark.parametrize("method", gcs.METHODS)
def test_generate_is_deterministic_and_resets_between_calls(tiny_model, method):
    processor = gcs.GumbelLogitsProcessor(method, seed=[1, 1, 2], temperature=0.9, streams=[0, 1, 2])
    first = generate(tiny_model, processor)
    second = generate(tiny_model, processor)  # the same instance, reused: must start over
    fresh = generate(tiny_model, gcs.GumbelLogitsProcessor(method, seed=[1, 1, 2], temperature=0.9, streams=[0, 1, 2]))
    with_sampling = generate(tiny_model, processor, do_sample=True)
    assert torch.equal(first, second) and torch.equal(first, fresh) and torch.equal(first, with_sampling)
    other_seed = generate(tiny_model, gcs.GumbelLogitsProcessor(method, seed=[5, 5, 6], temperature=0.9))
    assert not torch.equal(first, other_seed)


def test_temperature_zero_is_greedy_for_every_method(tiny_model):
    greedy = tiny_model.generate(PROMPTS, attention_mask=torch.ones_like(PROMPTS), do_sample=False, max_new_tokens=10)
    for method in gcs.METHODS:
        processor = gcs.GumbelLogitsProcessor(method, seed=3, temperature=0)
        assert torch.equal(generate(tiny_model, processor), greedy[:, PROMPTS.shape[1] :])


@pytest.mark.parametrize("method", gcs.METHODS)
def test_rows_finishing_early_do_not_disturb_the_others(method):
    # A frequent EOS token makes rows stop at different steps; each row must match its solo run.
    from conftest import tiny_llama

    model = tiny_llama(vocab_size=8, seed=1)
    prompts = torch.tensor([[2, 5, 6, 7], [2, 4, 5, 6], [2, 7, 7, 5]])
    eos = 3
    settings = dict(eos_token_id=eos, pad_token_id=0, max_new_tokens=16)
    seeds, streams = [7, 8, 9], [70, 80, 90]
    batch = generate(model, gcs.GumbelLogitsProcessor(method, seed=seeds, streams=streams), prompts, **settings)
    lengths = [(row == eos).nonzero()[0].item() + 1 if (row == eos).any() else 16 for row in batch]
    assert min(lengths) < max(lengths), "test design: rows should finish at different steps"
    for i in range(3):
        solo = generate(model, gcs.GumbelLogitsProcessor(method, seed=[seeds[i]], streams=[streams[i]]),
                        prompts[i : i + 1], **settings)[0]
        assert torch.equal(batch[i, : lengths[i]], solo[: lengths[i]])
        assert (batch[i, lengths[i] :] == 0).all()


def test_finished_rows_are_frozen():
    processor = gcs.GumbelLogitsProcessor("gcswr", seed=[1, 2])
    ids = torch.tensor([[3, 4], [3, 4]])
    scores = torch.randn(2, 30, generator=torch.Generator().manual_seed(0))
    chosen = processor(ids, scores).argmax(-1)
    appended = torch.tensor([chosen[0].item(), (chosen[1].item() + 1) % 30])  # row 1 got a pad instead
    processor(torch.cat([ids, appended[:, None]], dim=1), scores)
    assert processor.finished.tolist() == [False, True]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": math.nan}, "temperature"),
        ({"temperature": math.inf}, "temperature"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 2.5}, "top_k"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"method": "beam"}, "unknown method"),
        ({"seed": -3}, "seed"),
    ],
)
def test_bad_settings(kwargs, message):
    with pytest.raises(ValueError, match=message):
        gcs.GumbelLogitsProcessor(**kwargs)


PHRASES = ["w5 w6 w7", "w9 w10", "w12 w13 w14 w15"]


def test_model_generation_defaults_do_not_change_the_distribution():
    """A checkpoint's generation_config (repetition_penalty, no_repeat_ngram_size, min_p, ...) is not applied.

    transformers fills every unset generation field from the model's defaults and runs those processors before
    ours; gcs pins them, so a model carrying such defaults samples exactly as the same model without them.
    """
    from conftest import tiny_gcs_model

    clean = tiny_gcs_model()
    carrying = tiny_gcs_model(repetition_penalty=1.5, no_repeat_ngram_size=1, encoder_repetition_penalty=1.2,
                              min_length=30, min_new_tokens=10, typical_p=0.2, min_p=0.3, epsilon_cutoff=0.05,
                              top_k=2, temperature=0.1, do_sample=True, renormalize_logits=True)
    for method in gcs.METHODS:
        for seed in (0, 1):
            expected = gcs.generate(PHRASES, method=method, seed=seed, max_new_tokens=24, model=clean)
            assert gcs.generate(PHRASES, method=method, seed=seed, max_new_tokens=24, model=carrying) == expected


@pytest.mark.parametrize("field, value", [("bad_words_ids", [[5], [6], [7]]), ("sequence_bias", {(5,): -30.0}),
                                          ("forced_eos_token_id", 1), ("suppress_tokens", list(range(3, 40)))])
def test_model_defaults_that_only_none_neutralises_are_not_applied(field, value):
    from conftest import tiny_gcs_model

    expected = gcs.generate(PHRASES, method="gcswr", seed=2, max_new_tokens=24, model=tiny_gcs_model())
    carrying = tiny_gcs_model(**{field: value})
    assert gcs.generate(PHRASES, method="gcswr", seed=2, max_new_tokens=24, model=carrying) == expected
    assert getattr(carrying.model.generation_config, field) == value  # the model itself is left as it was


@pytest.mark.parametrize("method", gcs.METHODS)
def test_tiny_temperatures_are_greedy(method):
    """As T -> 0 every method equals greedy: at the temperature floor (logits / 1e-9 used to break IS and GCSwR;
    temperatures below the floor are refused, tests/test_temperature_floor.py)."""
    from conftest import tiny_gcs_model

    model = tiny_gcs_model(seed=3)
    greedy = gcs.generate(PHRASES, method=method, seed=0, temperature=0, max_new_tokens=16, model=model)
    assert gcs.generate(PHRASES, method=method, seed=7, temperature=gcs.MIN_TEMPERATURE, max_new_tokens=16,
                        model=model) == greedy
