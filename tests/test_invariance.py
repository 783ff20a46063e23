"""Same seed, same answer: a row's tokens do not depend on the rest of its batch (gcs.engines.invariance).

Kernels first, on tiny random models (bit-for-bit logits, every dtype), then the promise where users
meet it: the embedded model at the default dtype, a row alone, beside 2 rows and beside 47 rows of
other prompts and lengths, on the transformers engine (the vLLM engine: tests/test_vllm.py).
"""

from __future__ import annotations

import logging

import pytest
import torch
from torch.nn import functional as F
from transformers import DynamicCache

import gcs
from conftest import tiny_llama
from gcs.engines.batch import Batch, Row
from gcs.engines.invariance import (
    ROW_BLOCK,
    RowBlockLinear,
    RowBlocks,
    attend,
    in_row_blocks,
    is_row_invariant,
    make_row_invariant,
    packed_weights,
    row_blocks,
    row_invariance,
    wanted,
)
from gcs.engines.invariance.packed_weights import _PACKED, packing
from gcs.engines.invariance.row_blocks import FALLBACK_CHUNK, WIDEST, _kernel_key
from gcs.runtime import internals


def decode_logits(model, prompts: list[list[int]], steps: int = 4) -> torch.Tensor:
    """Last-position logits [rows, steps, vocab]: left-padded prefill, then ``steps`` decode steps of token 5."""
    width = max(map(len, prompts))
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    cache, out = DynamicCache(config=model.config), []
    with torch.inference_mode():
        logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache).logits
        for _ in range(steps):
            out.append(logits[:, -1].float())
            mask = torch.cat([mask, torch.ones(len(prompts), 1, dtype=mask.dtype)], dim=1)
            positions = positions[:, -1:] + 1
            logits = model(input_ids=torch.full((len(prompts), 1), 5), attention_mask=mask, position_ids=positions,
                           past_key_values=cache).logits
    return torch.stack(out, dim=1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_row_s_logits_are_the_same_bits_alone_and_in_any_batch(dtype):
    model = make_row_invariant(tiny_llama(vocab_size=64, seed=1).to(dtype))
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 64, (n,), generator=generator).tolist() for n in (7, 1, 12, 3, 7, 30, 9)]
    alone = decode_logits(model, prompts[:1])[0]
    for batch in ([prompts[0], prompts[0]], prompts, prompts[::-1], prompts * 7):
        assert torch.equal(decode_logits(model, batch)[batch.index(prompts[0])], alone)


def test_the_stock_kernels_do_depend_on_the_batch():
    """The test above can fail: the same check on stock kernels (padding, row counts) sees other bits."""
    model = tiny_llama(vocab_size=64, seed=1).to(torch.bfloat16)
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 64, (n,), generator=generator).tolist() for n in (7, 1, 12, 3, 7, 30, 9)]
    alone = decode_logits(model, prompts[:1])[0]
    assert any(not torch.equal(decode_logits(model, batch)[batch.index(prompts[0])], alone)
               for batch in (prompts, prompts[::-1], prompts * 7))


@pytest.mark.parametrize("q_length, kv_length, window", [(1, 9, None), (9, 9, None), (4, 9, None), (9, 9, 3),
                                                         (1, 40, 16)])
def test_attend_computes_causal_attention(q_length, kv_length, window):
    """``attend`` against PyTorch's own attention with an explicit causal (and sliding-window) mask."""
    generator = torch.Generator().manual_seed(q_length * kv_length)
    query = torch.randn(3, 4, q_length, 8, generator=generator)
    key, value = torch.randn(2, 3, 2, kv_length, 8, generator=generator)
    allowed = torch.ones(q_length, kv_length, dtype=torch.bool).tril(kv_length - q_length)
    if window is not None:
        allowed &= ~allowed.tril(kv_length - q_length - window)
    expected = F.scaled_dot_product_attention(query, key.repeat_interleave(2, dim=1), value.repeat_interleave(2, dim=1),
                                              attn_mask=allowed, scale=0.3)
    got = attend(query, key, value, 0.3, window)
    assert torch.allclose(got, expected.transpose(1, 2), atol=1e-5)


def test_row_blocks_compute_the_linear_layer():
    weight, bias = torch.randn(5, 8), torch.randn(5)
    x = torch.randn(2, ROW_BLOCK + 3, 8)
    assert torch.allclose(in_row_blocks(F.linear, x, weight, bias), F.linear(x, weight, bias), atol=1e-6)
    layer = torch.nn.Linear(8, 5)
    expected = layer(x)
    layer.__class__ = RowBlockLinear
    assert torch.allclose(layer(x), expected, atol=1e-6)


@pytest.fixture(autouse=True)
def fresh_verdicts(monkeypatch):
    """Each test probes its own widths: verdicts kept from another test's kernels would hide a missing probe."""
    monkeypatch.setattr(row_blocks, "_WIDTHS", {})


def _rounding_by_width(rare: bool, precision: str | None = None):
    """A linear kernel whose rounding depends on how many rows it is given, as BLAS and oneDNN kernels' can: at a
    width that is not a multiple of 8 its products are rounded to float16 in some rows (every row, or only ~1
    in 10 where ``rare``, as oneDNN's one-row kernel did for the embedded model's 1536-wide layer); with
    ``precision``, only while that is torch's float32 matmul precision."""
    def linear(x, weight, bias):
        products = (x.unsqueeze(-2) * weight).sum(-1)  # each row alone: the same bits at any width
        if x.shape[0] % 8 and precision in (None, torch.get_float32_matmul_precision()):
            rows = x[:, :1] > 1.28 if rare else torch.ones_like(x[:, :1], dtype=torch.bool)
            products = torch.where(rows, products.half().to(products.dtype), products)
        return products + bias
    return linear


@pytest.mark.parametrize("rare", [False, True])
def test_one_call_stands_in_for_the_blocks_only_at_widths_where_it_gives_their_bits(rare):
    """Every row gets the bits 16-row blocks give it, at every row count (chunks above WIDEST included); widths at
    which one call rounds otherwise, even in only 1 row in 10, are padded to one that does not."""
    linear = _rounding_by_width(rare)
    weight, bias = torch.randn(24, 12, generator=torch.Generator().manual_seed(3)), torch.randn(24)
    layer = RowBlocks(linear)
    x = torch.randn(2 * WIDEST + 21, 12, generator=torch.Generator().manual_seed(4))
    for count in [1, 2, 3, 5, 8, 15, 16, 17, 24, 40, WIDEST, WIDEST + 1, 2 * WIDEST + 21]:
        for _ in range(2):  # the first call of a layer is in blocks; later ones use the widths probed
            assert torch.equal(layer(x[:count], weight, bias), in_row_blocks(linear, x[:count], weight, bias)), count
    chosen = {count: width for (count, _), width in layer.widths.items()}
    # the narrowest of the count, the powers of two up to 16 and the next multiple of 16 that is a multiple of 8: a
    # row alone takes 8 rows, not a block of 16
    assert {count: chosen[count] for count in (1, 3, 5, 8, 15, 17, 21, 24, 40, WIDEST)} == {
        1: 8, 3: 8, 5: 8, 8: 8, 15: 16, 17: 32, 21: 32, 24: 24, 40: 40, WIDEST: WIDEST}  # 21: the last chunk
    # the check can fail: one unpadded call of 5 rows does not give the blocks' bits
    bumped = x[:5].clone()
    bumped[:, 0] = 2.0
    assert not torch.equal(linear(bumped, weight, bias), in_row_blocks(linear, bumped, weight, bias))


def test_wide_calls_that_round_otherwise_fall_back_to_chunks_not_to_blocks():
    """A kernel that rounds otherwise above FALLBACK_CHUNK rows (oneDNN may switch kernels with the width): a 144-row
    call goes in chunks of FALLBACK_CHUNK, each in one call, with every row the blocks' bits; 16-row blocks only
    where a chunk too rounds otherwise."""
    def linear(x, weight, bias):
        products = (x.unsqueeze(-2) * weight).sum(-1)
        if x.shape[0] > FALLBACK_CHUNK:
            products = products.half().to(products.dtype)
        return products + bias

    calls = []
    counted = lambda x, weight, bias: calls.append(x.shape[0]) or linear(x, weight, bias)  # noqa: E731
    weight, bias = torch.randn(24, 12, generator=torch.Generator().manual_seed(3)), torch.randn(24)
    x = torch.randn(144, 12, generator=torch.Generator().manual_seed(4))
    assert not torch.equal(linear(x, weight, bias), in_row_blocks(linear, x, weight, bias))  # one call can fail
    layer = RowBlocks(counted)
    for _ in range(2):  # the first call of a layer is in blocks; later ones use the widths probed
        assert torch.equal(layer(x, weight, bias), in_row_blocks(linear, x, weight, bias))
    calls.clear()
    assert torch.equal(layer(x, weight, bias), in_row_blocks(linear, x, weight, bias))
    assert calls == [FALLBACK_CHUNK, FALLBACK_CHUNK, 16]  # 144 = 64 + 64 + 16, not nine blocks

def test_a_layer_whose_outputs_ignore_the_input_vouches_for_no_width():
    """A zero weight (PEFT's lora_B before training, a pruned layer) agrees with the blocks at any width: its probe
    proves nothing, so another layer of the same kernel and shape probes for itself."""
    linear = _rounding_by_width(rare=False)
    real, bias = torch.randn(24, 12, generator=torch.Generator().manual_seed(6)), torch.randn(24)
    x = torch.randn(5, 12, generator=torch.Generator().manual_seed(7))
    untrained = RowBlocks(linear)
    for _ in range(2):  # the first call shows the kernel; the second probes
        assert torch.equal(untrained(x, torch.zeros(24, 12), bias), in_row_blocks(linear, x, torch.zeros(24, 12), bias))
    assert not row_blocks._WIDTHS and untrained.widths  # a verdict for this layer only
    trained = RowBlocks(linear)
    for _ in range(2):
        assert torch.equal(trained(x, real, bias), in_row_blocks(linear, x, real, bias))
    assert {width for (_, width, _), verdict in row_blocks._WIDTHS.items()} == {5, 8}


def test_a_width_probed_under_one_matmul_precision_is_probed_again_under_another():
    """torch.set_float32_matmul_precision changes which kernels fp32 products take (at width 1-3 here, "highest"
    rounds unlike the blocks and "medium" does not): the verdicts are kept per precision."""
    linear = _rounding_by_width(rare=False, precision="highest")
    weight, bias = torch.randn(24, 12, generator=torch.Generator().manual_seed(8)), torch.randn(24)
    x = torch.randn(5, 12, generator=torch.Generator().manual_seed(9))
    layer, before = RowBlocks(linear), torch.get_float32_matmul_precision()
    try:
        for precision in ("medium", "medium", "highest"):
            torch.set_float32_matmul_precision(precision)
            assert torch.equal(layer(x, weight, bias), in_row_blocks(linear, x, weight, bias)), precision
    finally:
        torch.set_float32_matmul_precision(before)
    assert sorted(layer.widths.values()) == [5, 8]  # one call of 5 rows under "medium", padded to 8 under "highest"


def test_kernels_that_differ_only_in_what_their_closure_holds_have_different_keys():
    x, weight = torch.randn(3, 12), torch.randn(24, 12)
    keys = {_kernel_key(_rounding_by_width(rare), x, 24, (weight, None)) for rare in (False, True)}
    assert len(keys) == 2
    assert _kernel_key(F.linear, x, 24, (weight, None)) != _kernel_key(F.linear, x, 24, (weight.t().contiguous().t(),
                                                                                          None))  # strides


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("packed", [False, True])
def test_real_kernels_in_one_call_give_every_row_the_blocks_bits(dtype, packed):
    """F.linear and the packed oneDNN kernel, at every row count up to 150 and after the widths are known."""
    layer = torch.nn.Linear(96, 200).to(dtype)
    layer.__class__ = RowBlockLinear
    headroom = packed_weights.PACKING_HEADROOM
    # 0.0: room whatever else runs on the machine now (the suite's other worker may hold a vLLM engine); 1.0: none
    packed_weights.PACKING_HEADROOM = 0.0 if packed else 1.0
    try:
        x = torch.randn(150, 96, generator=torch.Generator().manual_seed(5)).to(dtype)
        with torch.no_grad():
            for count in range(1, 151):
                assert torch.equal(layer(x[:count]), in_row_blocks(F.linear, x[:count], layer.weight, layer.bias))
    finally:
        packed_weights.PACKING_HEADROOM = headroom
    assert (packing(layer).kernel is not None) == (packed and dtype == torch.bfloat16
                                                   and torch.ops.mkldnn._is_mkldnn_bf16_supported())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packed_weights_give_the_bits_of_plain_blocks_and_follow_the_weight(dtype, monkeypatch):
    """Packing a bf16 weight once (oneDNN) is a speed lever only: the blocks' bits stay F.linear's, and a changed
    weight is packed again, however it changed (in place, replaced, cut to fewer rows at the same address,
    edited through .data as a merged LoRA adapter is). fp32 is never packed."""
    monkeypatch.setattr(packed_weights, "PACKING_HEADROOM", 0.0)  # room whatever else the machine runs now
    layer = torch.nn.Linear(24, 40).to(dtype)
    layer.__class__ = RowBlockLinear
    x = torch.randn(2, ROW_BLOCK + 5, 24, generator=torch.Generator().manual_seed(1)).to(dtype)
    packs = dtype == torch.bfloat16 and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    changes = [None, lambda: layer.weight.mul_(-3),
               lambda: setattr(layer, "weight", torch.nn.Parameter(torch.randn(40, 24).to(dtype))),
               lambda: layer.weight.data.add_(0.5),
               lambda: (setattr(layer, "weight", torch.nn.Parameter(layer.weight[:32])),
                        setattr(layer, "bias", torch.nn.Parameter(layer.bias[:32]))),
               lambda: layer.bias.data.add_(1)]  # the bias is never packed: read at every call
    for change in changes:
        with torch.no_grad():
            if change is not None:
                change()
            got = layer(x)
        assert torch.equal(got, in_row_blocks(F.linear, x, layer.weight, layer.bias))
        assert (packing(layer).kernel is not None) == packs  # packed where this CPU and torch build can
    assert got.shape[-1] == 32 and got.abs().sum() > 0
    with torch.no_grad():
        assert layer(x[:, :0]).shape == (2, 0, 32)  # no rows
    trained = layer(x.requires_grad_())  # with autograd: plain blocks, gradients flow
    trained.sum().backward()
    assert layer.weight.grad is not None and x.grad is not None


@pytest.mark.parametrize("element", ["first", "last"])
def test_an_edit_through_data_of_a_sampled_element_packs_the_weight_again(element, monkeypatch):
    """The sampled elements span the weight: an edit autograd does not see, of the first or the last of them, still
    reaches the output (the packed copy is made again)."""
    monkeypatch.setattr(packed_weights, "PACKING_HEADROOM", 0.0)
    layer = torch.nn.Linear(64, 50, bias=False).to(torch.bfloat16)  # 3,200 elements: runs, not all of them
    layer.__class__ = RowBlockLinear
    x = torch.randn(3, 64, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16)
    with torch.no_grad():
        before = layer(x)
        assert packing(layer).kernel is not None or not torch.ops.mkldnn._is_mkldnn_bf16_supported()
        sampled = packing(layer)._sampled(layer.weight)
        assert sampled.numel() == packed_weights.SAMPLED < layer.weight.numel()
        last = sampled.stride(0) * (packed_weights.SAMPLED_RUNS - 1) + packed_weights.SAMPLED_RUN - 1
        layer.weight.data.view(-1)[0 if element == "first" else last] += 64
        got = layer(x)
    assert not torch.equal(got, before)  # the edit changes the output...
    assert torch.equal(got, in_row_blocks(F.linear, x, layer.weight, None))  # ...as the edited weight computes it


def test_a_packing_serves_each_thread_count_and_is_dropped_when_the_weight_changes(monkeypatch):
    """Moving between thread counts (``gcs.engines.threads``) packs at most once per count, never at every move (one
    copy serves both where it gives F.linear's bits on each); a changed weight drops every copy (each holds the old
    weight's memory), and the outputs are F.linear's blocks' throughout."""
    monkeypatch.setattr(packed_weights, "PACKING_HEADROOM", 0.0)
    made = []
    monkeypatch.setattr(packed_weights, "_PackedWeight",
                        lambda *args, made_by=packed_weights._PackedWeight: made.append(made_by(*args)) or made[-1])
    layer = torch.nn.Linear(64, 50).to(torch.bfloat16)
    layer.__class__ = RowBlockLinear
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(4)).to(torch.bfloat16)
    set_threads = internals.openmp_threads_setter()  # as gcs.engines.threads sets them (a vLLM engine started in
    before = torch.get_num_threads()  # this process pins torch.set_num_threads)
    try:
        with torch.no_grad():
            for threads in (2, 1, 2, 1, 2):
                set_threads(threads)
                assert torch.equal(layer(x), in_row_blocks(F.linear, x, layer.weight, layer.bias))
            assert set(_PACKED[layer]) == {1, 2} and len(made) == len({id(p) for p in _PACKED[layer].values()}) <= 2
            packed = packing(layer).kernel is not None
            layer.weight.data.mul_(2)  # unseen by autograd: caught by the sampled elements where packed
            assert torch.equal(layer(x), in_row_blocks(F.linear, x, layer.weight, layer.bias))
            if packed:
                assert set(_PACKED[layer]) == {2} and _PACKED[layer][2] is made[-1] not in made[:-1]
    finally:
        set_threads(before)


def test_under_autocast_the_blocks_compute_as_f_linear_does():
    """A packed fp32 weight would compute in fp32; autocast asks for bf16, as F.linear gives it."""
    layer = torch.nn.Linear(24, 40)
    layer.__class__ = RowBlockLinear
    x = torch.randn(ROW_BLOCK + 5, 24, generator=torch.Generator().manual_seed(2))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        got, expected = layer(x), in_row_blocks(F.linear, x, layer.weight, layer.bias)
    assert got.dtype == torch.bfloat16 and torch.equal(got, expected)


def test_packing_leaves_the_memory_headroom(monkeypatch):
    x = torch.randn(3, 8).to(torch.bfloat16)
    layers = [torch.nn.Linear(8, 4).to(torch.bfloat16) for _ in range(2)]
    for layer in layers:
        layer.__class__ = RowBlockLinear
    with torch.no_grad():
        monkeypatch.setattr(packed_weights, "PACKING_HEADROOM", 0.0)  # any copy leaves no share free: room
        layers[0](x)
        monkeypatch.setattr(packed_weights, "PACKING_HEADROOM", 1.0)  # no copy can leave all memory free
        layers[1](x)
    assert (packing(layers[0]).kernel is not None) == torch.ops.mkldnn._is_mkldnn_bf16_supported()
    assert packing(layers[1]).kernel is None


def test_a_layer_accelerate_offloads_is_never_packed():
    """Its hook brings the weight in at every call: a packed copy would be made again each time, and kept."""
    from accelerate.hooks import ModelHook, add_hook_to_module

    layer = torch.nn.Linear(8, 4).to(torch.bfloat16)
    layer.__class__ = RowBlockLinear
    add_hook_to_module(layer, ModelHook())
    x = torch.randn(3, 8).to(torch.bfloat16)
    with torch.no_grad():
        got = layer(x)
    assert layer not in _PACKED and torch.equal(got, in_row_blocks(F.linear, x, layer.weight, layer.bias))


def test_conversion_is_idempotent_and_refuses_what_it_cannot_compute(monkeypatch, caplog):
    model = tiny_llama(seed=2)
    assert make_row_invariant(make_row_invariant(model)) is model and is_row_invariant(model)
    capped = tiny_llama(seed=3)
    capped.config.attn_logit_softcapping = 30.0
    with pytest.raises(ValueError, match="attn_logit_softcapping"):
        make_row_invariant(capped)
    with pytest.raises(ValueError, match="not a transformers model"):
        make_row_invariant(torch.nn.Linear(2, 2))
    monkeypatch.setenv("GCS_ROW_INVARIANT", "on")
    with caplog.at_level(logging.WARNING, logger="gcs.engines.invariance.policy"):
        assert not row_invariance(capped) and not row_invariance(capped)
    assert caplog.text.count("a row's tokens may depend on its batch") == 1  # said once per model


def test_the_setting_chooses_where_rows_are_computed_apart(monkeypatch):
    assert wanted("cpu") and not wanted("cuda")
    monkeypatch.setenv("GCS_ROW_INVARIANT", "off")
    assert not wanted("cpu") and not row_invariance(tiny_llama(seed=4))
    monkeypatch.setenv("GCS_ROW_INVARIANT", "on")
    assert wanted("cuda")
    monkeypatch.setenv("GCS_ROW_INVARIANT", "sometimes")
    with pytest.raises(ValueError, match="GCS_ROW_INVARIANT='sometimes'; expected one of auto, on, off"):
        wanted("cpu")


# -- the promise at the defaults ------------------------------------------------------------------
PROMPT = "Why do leaves change color in autumn?"
OTHERS = ["Hi", "Explain photosynthesis to a ten year old child, with an example from a garden and a pond.",
          "What is DNA?", "Name three rivers in Europe and say which one is the longest of them."]


def rows_of(prompt: str, seeds) -> list[Row]:
    return [Row(prompt, method, seed) for method in gcs.METHODS for seed in seeds]


@pytest.mark.slow
def test_a_row_gets_the_same_tokens_alone_beside_2_and_beside_47_rows(embedded_model):
    settings = gcs.SamplingSettings(temperature=1.0, max_new_tokens=24)
    mine = rows_of(PROMPT, [3, 11])  # 6 rows: every method, two seeds
    alone = [Batch([row], embedded_model, settings).run()[0] for row in mine]
    beside_two = Batch([mine[0], Row(OTHERS[0], "gcswr", 3), Row(OTHERS[1], "is", 5)], embedded_model, settings).run()
    crowd = [Row(OTHERS[i % 4], gcs.METHODS[i % 3], i) for i in range(42)]
    beside_47 = Batch(crowd[:20] + mine + crowd[20:], embedded_model, settings).run()
    width = lambda tokens: min(len(tokens), settings.max_new_tokens)  # noqa: E731
    assert torch.equal(beside_two[0, : width(alone[0])], alone[0][: beside_two.shape[1]])
    for i, tokens in enumerate(alone):
        assert torch.equal(beside_47[20 + i, : width(tokens)], tokens[: beside_47.shape[1]]), mine[i]


@pytest.mark.slow
def test_a_batch_runs_rows_of_one_length_side_by_side_and_answers_in_the_order_given(embedded_model, monkeypatch):
    """transformers runs a batch's texts longest first, so that row-invariant attention reads each prompt length's
    rows as one view of the KV cache (no gathered copy); every output comes back in the texts' order: tokens,
    streamed frames and the excess recorded from generation's logits are each row's own, as when it runs alone."""
    from gcs.engines.invariance import attention

    settings = gcs.SamplingSettings(temperature=1.0, max_new_tokens=6)
    rows = [Row(prompt, method, 2) for method in ("is", "gcswr") for prompt in (OTHERS[0], OTHERS[1], OTHERS[2])]
    batch = Batch(rows, embedded_model, settings, record_excess=True)
    lengths = batch.inputs["attention_mask"].sum(dim=1).tolist()
    assert lengths != sorted(lengths, reverse=True)  # laid out with the lengths interleaved...
    assert [lengths[i] for i in batch.order] == sorted(lengths, reverse=True)  # ...and run longest first
    groups, original = [], attention._groups

    def seen(padding):  # each forward's groups of rows by left padding
        groups.append(original(padding))
        return groups[-1]

    monkeypatch.setattr(attention, "_groups", seen)
    tokens = batch.run()
    assert groups and all(isinstance(rows_of_pad, slice) for found in groups for _, rows_of_pad in found)
    monkeypatch.undo()
    decoded = batch.decode(tokens)
    assert list(batch.stream())[-1] == decoded
    for i, row in enumerate(rows):
        alone = Batch([row], embedded_model, settings, record_excess=True)
        alone_tokens = alone.run()
        assert torch.equal(tokens[i, : alone_tokens.shape[1]], alone_tokens[0, : tokens.shape[1]]), row
        # the recorder's softmax and sums over the vocabulary round by the batch's shape (not a token's business)
        assert alone.decode(alone_tokens)[0]["excess"] == pytest.approx(decoded[i]["excess"], rel=1e-4), row
