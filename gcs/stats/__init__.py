"""Statistics over seeds, with numpy, pandas and scipy only (no torch, no model: a test keeps it so).

- ``intervals``: the standard error, the t interval of a mean, ``CONFIDENCE``, how many seeds a difference needs;
- ``paired``: the verdict: paired tests of one method against another over the same seeds (``gcs.verdict``,
  ``gcs.paired_tests``, the exact sign-flip test);
- ``sequential``: rounds of seeds with looks that keep the error rate (``gcs.sequential_plan``)."""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
