"""A model the caller passes in comes back as given: gcs runs it on row-invariant kernels, in eval mode and with a
neutral generation config for the duration of each call only (``gcs.engines.transformers.generating``), and the same
seed still gives the same answer whatever the path (a model gcs loaded itself keeps its kernels for good)."""

from __future__ import annotations

import copy
import threading

import pytest
import torch

import gcs
from conftest import tiny_gcs_model


def snapshot(model: torch.nn.Module) -> dict:
    """Everything of a model that a library might change behind its caller's back."""
    return {
        "classes": [type(module) for module in model.modules()],
        "attention": model.config._attn_implementation,
        "config": model.config.to_dict(),
        "generation": model.generation_config.to_dict(),
        "training": [module.training for module in model.modules()],
        "requires_grad": [p.requires_grad for p in model.parameters()],
        "parameters": {name: p.detach().clone() for name, p in model.named_parameters()},
    }


def assert_unchanged(model: torch.nn.Module, before: dict, after: str) -> None:
    now = snapshot(model)
    for key in ("classes", "attention", "config", "generation", "training", "requires_grad"):
        assert now[key] == before[key], f"{key} changed by {after}"
    for name, value in before["parameters"].items():
        assert torch.equal(now["parameters"][name], value), f"parameter {name} changed by {after}"


@pytest.fixture
def training_model():
    """A user's model in the middle of training: train mode, attention dropout, a checkpoint-style penalty."""
    model = tiny_gcs_model(seed=7, repetition_penalty=1.3)
    for module in model.model.modules():  # as LlamaConfig(attention_dropout=0.1) builds them
        if hasattr(module, "attention_dropout"):
            module.attention_dropout = 0.1
    model.model.config.attention_dropout = 0.1
    model.model.train()
    return model


PROMPTS = ["w5 w6 w7", "w8 w9"]


def test_every_call_leaves_the_caller_s_model_as_given_and_training_works_after(training_model):
    model = training_model
    before = snapshot(model.model)
    calls = {
        "generate": lambda: gcs.generate(PROMPTS, max_new_tokens=6, model=model),
        "compare": lambda: gcs.compare(PROMPTS, seeds=[0, 1], max_new_tokens=6, model=model),
        "a stream closed early": lambda: next(iter(gcs.stream(PROMPTS, max_new_tokens=6, model=model))),
        "trace": lambda: gcs.trace(PROMPTS, method="gcswr", seed=0, max_new_tokens=4, model=model),
        "hindsight": lambda: gcs.hindsight("w5 w6", "w9 w10", ["w8 w9"], max_new_tokens=4, model=model),
        "counterfactual": lambda: gcs.counterfactual("w5 w6", "w9 w10", 0, "w11", max_new_tokens=4, model=model),
        "an error mid-call": lambda: gcs.generate(["w5"], max_new_tokens=4, model=model, bad_words_ids="x"),
    }
    for name, call in calls.items():
        try:
            call()
        except (TypeError, ValueError):
            assert name == "an error mid-call"
        assert_unchanged(model.model, before, name)
    # the caller goes on training the same object: dropout in attention, gradients, an optimizer step
    optimizer = torch.optim.SGD(model.model.parameters(), lr=0.1)
    ids = torch.tensor([[5, 6, 7, 8, 9]])
    loss = model.model(input_ids=ids, labels=ids).loss
    loss.backward()
    optimizer.step()
    assert all(p.grad is not None for p in model.model.parameters() if p.requires_grad)


def test_the_same_seed_gives_the_same_answer_on_a_caller_s_model_as_on_a_converted_copy(training_model):
    """Per-call kernels compute exactly what ``gcs.make_row_invariant``'s permanent ones do, and eval mode holds
    during the call (a model left in train mode would otherwise sample through dropout)."""
    mine = training_model
    converted = gcs.Model("converted", gcs.make_row_invariant(copy.deepcopy(mine.model).eval()), mine.tokenizer)
    settings = dict(methods="is,gcs,gcswr", seeds=[0, 1, 2], max_new_tokens=8)
    frame = gcs.compare(PROMPTS, model=mine, **settings)
    assert frame["response"].tolist() == gcs.compare(PROMPTS, model=converted, **settings)["response"].tolist()
    alone = gcs.generate(PROMPTS[:1], method="gcswr", seed=2, max_new_tokens=8, model=mine)
    assert alone == frame.query("method == 'gcswr' and seed == 2")["response"].tolist()[:1]


def test_concurrent_calls_on_one_caller_s_model_get_their_own_answers_and_restore_it(training_model):
    model = training_model
    before = snapshot(model.model)
    expected = {seed: gcs.generate(PROMPTS, seed=seed, max_new_tokens=8, model=model) for seed in range(4)}
    got, errors = {}, []

    def call(seed):
        try:
            got[seed] = gcs.generate(PROMPTS, seed=seed, max_new_tokens=8, model=model)
        except Exception as error:  # noqa: BLE001 -- reported below
            errors.append(error)

    threads = [threading.Thread(target=call, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors and got == expected
    assert_unchanged(model.model, before, "4 concurrent calls")


def test_nested_calls_restore_only_at_the_outermost(training_model):
    module = training_model.model
    with gcs.engines.transformers.generating(training_model, row_invariant=True):
        with gcs.engines.transformers.generating(training_model, row_invariant=True):
            assert gcs.engines.invariance.is_row_invariant(module) and not module.training
        assert gcs.engines.invariance.is_row_invariant(module) and not module.training
    assert not gcs.engines.invariance.is_row_invariant(module) and module.training


@pytest.mark.slow
def test_a_model_gcs_loaded_keeps_its_kernels(embedded_model):
    gcs.generate(["Hi"], max_new_tokens=2, model=embedded_model)
    assert gcs.engines.invariance.is_row_invariant(embedded_model.model) == gcs.engines.invariance.wanted("cpu")
