"""ZeroGPU Spaces: ``spaces`` must be imported before anything initialises CUDA, so ``ui`` imports this first.

Elsewhere its decorator is a no-op, so the same code runs on CPU, a GPU and ZeroGPU.
"""

from __future__ import annotations

try:
    import spaces

    gpu = spaces.GPU
except ImportError:

    def gpu(function=None, **_):
        return function if function is not None else (lambda f: f)
