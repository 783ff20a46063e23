"""Engines: a ``gcs.engines.batch.Batch`` decoded step by step into token ids.

    runner = runner_for(batch)            # TransformersRunner; VLLMRunner where batch.engine == "vllm"
    for token_ids in runner.steps():      # [[5], [7]] -> [[5, 9], [7, 2]] -> ...
        ...
    runner.run()                          # tensor([[5, 9, ...], [7, 2, ...]])

A runner has one method that does the work, ``steps(stop)``: every row's token ids so far, after each decoding
step; ``run`` is its last step as a tensor [rows, new tokens] (a stop token, then padding, after a row finishes).

- ``transformers``: transformers' ``generate`` with gcs's processors only (``TransformersRunner``);
- ``vllm``: vLLM with the gcs plugin (``gcs.vllm.plugin``) loaded (``VLLMRunner``; imports vLLM);
- ``endpoints``, ``remote``: served vLLM endpoints with the plugin, ``gcs.Endpoint`` (``EndpointRunner``; over HTTP);
- ``endpoint_answers``: what an endpoint answers, checked (at connect and event by event) before it is used;
- ``invariance``: the kernels that make a row's logits independent of the rest of its batch, on both engines;
- ``threads``: on transformers on CPU, each decode step on torch's threads or one, whichever is faster now;
- ``padding``: rows of token ids of different lengths as one tensor;
- ``streamed_text``: each row's text so far while a batch streams.

What the vLLM engine shares with the plugin and ``gcs vllm-serve`` (the CPU defaults, the plugin's entry point) is
``gcs.vllm.options``, outside this package: a serving process never imports an engine.
"""

from __future__ import annotations

from gcs.runtime.lazy import submodule


def runner_for(batch):
    """The runner of ``batch.engine``: ``TransformersRunner``, ``VLLMRunner`` (imports vLLM) or ``EndpointRunner``."""
    if batch.engine == "vllm":
        from gcs.engines.vllm import VLLMRunner

        return VLLMRunner(batch)
    if not isinstance(batch.engine, str):  # served endpoints (gcs.engines.endpoints)
        from gcs.engines.remote import EndpointRunner

        return EndpointRunner(batch)
    from gcs.engines.transformers import TransformersRunner

    return TransformersRunner(batch)


def __getattr__(name: str):
    return submodule(__name__, name)
