"""From noise and logits to a token: the paper's samplers and what they need.

- ``noise``: counter-based Gumbel / exponential noise, keyed by seed and position (no generator state);
- ``samplers``: IS, GCS and GCSwR (Algorithm 1) over a batch of rows (``gcs.make_sampler``);
- ``reference``: the literal algorithms, one row at a time, that the fast samplers are tested against;
- ``kernels``: GCSwR's fused CPU step, compiled from ``recycling_kernel.cpp`` on first use;
- ``processor``: the samplers as transformers logits processors; ``ensembling``: the geometric mean over rewordings;
- ``theory``: Theorem 1's agreement probability; ``coupling``: measured agreement against it."""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
