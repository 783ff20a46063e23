"""Where row-invariant kernels go: installed on a model for good or for one call, and wanted by device
(``$GCS_ROW_INVARIANT``: auto, on, off; auto means CPU only)."""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, cast

import torch

from gcs.engines.invariance.attention import ATTENTION, _register
from gcs.engines.invariance.packed_weights import RowBlockLinear
from gcs.environment import setting as read_setting

if TYPE_CHECKING:
    from transformers import PreTrainedModel

logger = logging.getLogger(__name__)

SETTING = "GCS_ROW_INVARIANT"  # auto (CPU only), on, off
_CONVERTING = threading.Lock()


def refusal(model: torch.nn.Module) -> str | None:
    """Why row-invariant kernels cannot compute ``model`` (not a transformers model, logit soft-capping, attention
    sinks), or None when they can."""
    config = getattr(model, "config", None)
    if config is None or not hasattr(model, "set_attn_implementation"):
        return f"{type(model).__name__} is not a transformers model: row-invariant kernels need one"
    for name in ("attn_logit_softcapping", "attention_sinks", "use_sinks"):
        if getattr(config, name, None):
            return f"{type(model).__name__} uses {name}, which row-invariant attention does not compute"
    return None


def _install(model: torch.nn.Module) -> list[torch.nn.Linear]:
    """Row-invariant attention and linear layers on ``model``, in place; the layers whose class was swapped."""
    _register()
    cast("PreTrainedModel", model).set_attn_implementation(ATTENTION)  # ``refusal`` found a transformers model
    swapped = [module for module in model.modules() if type(module) is torch.nn.Linear]
    for module in swapped:
        module.__class__ = RowBlockLinear
    return swapped


def make_row_invariant(model: torch.nn.Module) -> torch.nn.Module:
    """Give a transformers causal LM row-invariant kernels for good, in place (idempotent).

    Every plain ``nn.Linear`` becomes a ``RowBlockLinear`` and attention runs through ``row_invariant_attention``. gcs
    does this to the models it loads itself (``gcs.load_model``); a model of yours is converted only for the duration of
    each gcs call (``row_invariant_kernels``) unless you call this on it: then it keeps the kernels, and saves the
    conversion each call costs. Its attention then refuses dropout, so do it to a model you no longer train.

    Args:
        model: a transformers causal LM.

    Returns:
        The same model.

    Raises:
        ValueError: a model this attention would compute wrongly (logit soft-capping, attention sinks) or cannot
            reach, naming the reason.

    Examples:
        >>> import transformers
        >>> config = transformers.LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
        ...                                   num_attention_heads=2, attn_implementation="sdpa")
        >>> model = make_row_invariant(transformers.LlamaForCausalLM(config))
        >>> type(model.lm_head).__name__, model.config._attn_implementation
        ('RowBlockLinear', 'gcs_row_invariant')
    """
    reason = refusal(model)
    if reason:
        raise ValueError(reason)
    with _CONVERTING:
        if not is_row_invariant(model):
            _install(model)
    return model


@contextmanager
def row_invariant_kernels(model: torch.nn.Module) -> Iterator[None]:
    """Row-invariant kernels on ``model`` inside a ``with`` block only.

    Its linear layers' classes and its attention implementation are put back as they were when the block ends (an
    exception included), so a model the caller gave gcs comes back as given. Nothing is swapped for a model that already
    has them (``make_row_invariant``, or an enclosing block: nesting is free). Callers keep other threads off the model
    meanwhile (``gcs.engines.transformers.generating`` holds the model's lock).

    Args:
        model: a transformers causal LM.

    Yields:
        Nothing; the model has the kernels until the block ends.

    Examples:
        >>> import transformers
        >>> config = transformers.LlamaConfig(vocab_size=8, hidden_size=8, intermediate_size=8, num_hidden_layers=1,
        ...                                   num_attention_heads=2, attn_implementation="sdpa")
        >>> model = transformers.LlamaForCausalLM(config)
        >>> with row_invariant_kernels(model):
        ...     type(model.lm_head).__name__, model.config._attn_implementation
        ('RowBlockLinear', 'gcs_row_invariant')
        >>> type(model.lm_head).__name__, model.config._attn_implementation
        ('Linear', 'sdpa')
    """
    reason = refusal(model)
    if reason:
        raise ValueError(reason)
    if is_row_invariant(model):
        yield
        return
    transformers_model = cast("PreTrainedModel", model)  # ``refusal`` found a transformers model
    attention = transformers_model.config._attn_implementation
    swapped = _install(model)
    try:
        yield
    finally:
        for module in swapped:
            module.__class__ = torch.nn.Linear
        transformers_model.set_attn_implementation(attention)


def is_row_invariant(model: torch.nn.Module) -> bool:
    """Whether ``model`` runs on row-invariant kernels now (``make_row_invariant``, or inside
    ``row_invariant_kernels``)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None) == ATTENTION


def wanted(device: torch.device | str) -> bool:
    """Whether models on ``device`` get row-invariant kernels: ``$GCS_ROW_INVARIANT`` (auto, on, off); auto means
    on CPU only (measured there; on CUDA the fused kernels are kept, see the promise table in docs/library.md)."""
    setting = read_setting(SETTING)
    return setting == "on" or (setting == "auto" and torch.device(device).type == "cpu")


_WARNED: weakref.WeakSet = weakref.WeakSet()  # models already warned about (nothing is written onto them)


def row_invariance(model: torch.nn.Module) -> bool:
    """Whether gcs computes ``model``'s rows apart: it has row-invariant kernels already, or ``wanted`` says so for its
    device and they can compute it. A model they cannot compute keeps its own kernels, with one warning: it
    still samples exactly, but a row's tokens may then depend on the batch it ran in."""
    if is_row_invariant(model):
        return True
    if not wanted(next(model.parameters()).device):
        return False
    reason = refusal(model)
    if reason and model not in _WARNED:
        logger.warning("keeping the model's own kernels (%s): a row's tokens may depend on its batch", reason)
        _WARNED.add(model)
    return reason is None
