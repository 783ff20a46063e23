"""The private APIs gcs relies on (gcs.runtime.internals): present on the versions we pin, and when one is missing or
renamed,
a fallback with one WARNING that names what is lost. vLLM's cpu_linear count is checked on a real engine in
tests/test_vllm.py; the app's Gradio and mcp internals (ui/server/internals.py) in tests/test_serving.py and
tests/test_http_guard.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from torch.nn import functional as F

import gcs
from gcs.engines.invariance import RowBlockLinear, in_row_blocks, packed_weights
from gcs.engines.invariance.packed_weights import packing
from gcs.runtime import internals


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(internals, "_SAID", set())


def test_the_pinned_torch_has_every_private_api_gcs_uses(caplog):
    with caplog.at_level(logging.WARNING, logger="gcs.runtime.internals"):
        assert internals.in_tested_range(torch.__version__, internals.TESTED_TORCH), torch.__version__
        assert all(hasattr(torch.cpu, name) for name in internals.CPU_BF16_PROBES)
        assert isinstance(internals.cpu_multiplies_bf16(), bool)
        assert internals.version_counter(torch.zeros(2)) == 0
        with torch.inference_mode():
            assert internals.version_counter(torch.zeros(2)) is None  # inference tensors have none: never packed
        weight = torch.randn(32, 64).to(torch.bfloat16)
        kernel = internals.packed_bf16_linear(weight, 16)
        if torch.ops.mkldnn._is_mkldnn_bf16_supported():
            block = torch.randn(16, 64).to(torch.bfloat16)
            assert torch.equal(kernel(block, None), F.linear(block, weight))
        else:
            assert kernel is None
    assert not caplog.records, caplog.text


def test_renamed_mkldnn_ops_warn_once_that_speed_is_lost_and_the_bits_stay(monkeypatch, caplog):
    monkeypatch.setitem(internals.MKLDNN_OPS, "pack", "_reorder_linear_weight_renamed")
    # packing is tried whatever memory the rest of the suite holds (a busy worker may leave < 25 % free)
    monkeypatch.setattr(packed_weights, "_room_for", lambda weight: True)
    layer = torch.nn.Linear(64, 32).to(torch.bfloat16)
    layer.__class__ = RowBlockLinear
    x = torch.randn(5, 64).to(torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="gcs.runtime.internals"), torch.no_grad():
        got = layer(x)
        layer(x)  # said once
    assert torch.equal(got, in_row_blocks(F.linear, x, layer.weight, layer.bias))
    assert packing(layer).kernel is None
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        assert caplog.text.count("packed bf16 weights unavailable") == 1
        assert "slower, with the same tokens" in caplog.text


def test_missing_cpu_probes_warn_and_default_to_float32(monkeypatch, caplog):
    for name in internals.CPU_BF16_PROBES:
        monkeypatch.delattr(torch.cpu, name)
    monkeypatch.delenv("GCS_DTYPE", raising=False)
    with caplog.at_level(logging.WARNING, logger="gcs.runtime.internals"):
        assert gcs.engines.models.default_dtype("cpu") == torch.float32
    assert "cannot tell whether this CPU multiplies bf16" in caplog.text and "GCS_DTYPE=bfloat16" in caplog.text


def test_a_tensor_without_a_version_counter_is_never_packed_and_says_so(caplog):
    with caplog.at_level(logging.WARNING, logger="gcs.runtime.internals"):
        assert internals.version_counter(SimpleNamespace()) is None
    assert "weights are not packed" in caplog.text


def test_an_untested_version_is_named_once(caplog):
    with caplog.at_level(logging.WARNING, logger="gcs.runtime.internals"):
        internals.check_version("torch", "2.99.0", internals.TESTED_TORCH, "packing")
        internals.check_version("torch", "2.99.0", internals.TESTED_TORCH, "packing")
    assert caplog.text.count("torch 2.99.0 is outside the versions gcs was tested on (2.5 to below 2.14)") == 1


def test_a_vllm_layer_without_cpu_linear_is_counted_and_warned_about(caplog):
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod

    from gcs.engines.invariance import RowBlocks

    wrapped, bare = torch.nn.Module(), torch.nn.Module()
    for module in (wrapped, bare):
        module.quant_method = UnquantizedLinearMethod()
    wrapped.cpu_linear = F.linear
    model = torch.nn.Sequential(wrapped, bare, torch.nn.Linear(2, 2))  # the plain Linear is no vLLM layer
    assert internals.wrap_cpu_linears(model, RowBlocks, RowBlocks) == (1, 2)
    assert isinstance(wrapped.cpu_linear, RowBlocks)
    assert internals.wrap_cpu_linears(model, RowBlocks, RowBlocks) == (1, 2)  # wrapped once
    assert wrapped.cpu_linear.linear is F.linear
    with caplog.at_level(logging.WARNING, logger="gcs.runtime.internals"):
        assert not internals.check_wrapped([(1, 2)])
        assert not internals.check_wrapped([(0, 0)])  # no layer found at all: vLLM changed more
    assert caplog.text.count("1 of 2 linear layers have no cpu_linear") == 1
    assert internals.check_wrapped([(3, 3), (3, 3)])


def test_an_engine_that_cannot_be_shut_down_is_dropped_with_one_warning(caplog):
    no_core = SimpleNamespace(llm_engine=None)  # an LLM of a vLLM release whose engine core moved
    caplog.set_level(logging.WARNING, logger="gcs.runtime.internals")
    assert internals.shut_down_vllm(no_core) is False and internals.shut_down_vllm(no_core) is False
    assert [r.getMessage() for r in caplog.records if "cannot be shut down" in r.getMessage()] == [
        "vLLM: an engine cannot be shut down here ('NoneType' object has no attribute 'engine_core'): it is dropped "
        "and freed when the garbage collector runs"]
