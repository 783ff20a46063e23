"""OpenMP's idle threads, set before torch loads: gcs generates in more than one Python thread.

libgomp (PyTorch's OpenMP runtime on Linux) gives each Python thread that runs torch operations a pool of its own.
Once the pools hold more threads than the machine has cores (the main thread loaded the model, a worker thread
streams: ``gcs.stream_compare``, the app's requests), every waiting OpenMP thread stops spinning after a thousand
turns and sleeps, so each of a decode step's many small operations pays a wake-up, and a worker thread generates at
about half the main thread's speed. ``OMP_WAIT_POLICY=active`` and ``GOMP_SPINCOUNT=30000`` (a short spin, then
sleep, in every pool) bring it back (docs/benchmarks.md, "Threads": ``python bench/bench_streaming.py``). The
setting changes how long an idle thread waits, never what is computed: the same tokens either way.

``import gcs`` sets both (this module, on import) where neither is set and torch is not loaded yet (libgomp reads
them once, when it loads); a value you set yourself wins (``OMP_WAIT_POLICY=passive`` keeps idle threads from
spinning at all).

>>> environ = {}
>>> tune_openmp(environ, torch_loaded=False), environ
({'OMP_WAIT_POLICY': 'active', 'GOMP_SPINCOUNT': '30000'}, {'OMP_WAIT_POLICY': 'active', 'GOMP_SPINCOUNT': '30000'})
>>> tune_openmp({"OMP_WAIT_POLICY": "passive"}, torch_loaded=False), tune_openmp({}, torch_loaded=True)
({}, {})
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

SETTINGS = {"OMP_WAIT_POLICY": "active", "GOMP_SPINCOUNT": "30000"}


def tune_openmp(environ: MutableMapping[str, str] = os.environ, torch_loaded: bool | None = None) -> dict[str, str]:
    """Set ``SETTINGS`` in ``environ`` where none of them is set and torch is not loaded; return what was set."""
    if torch_loaded is None:
        torch_loaded = "torch" in sys.modules
    if torch_loaded or any(name in environ for name in SETTINGS):
        return {}
    environ.update(SETTINGS)
    return dict(SETTINGS)


tune_openmp()
