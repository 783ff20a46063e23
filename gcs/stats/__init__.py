"""Statistics over seeds, with numpy, pandas and scipy only (no torch, no model: a test keeps it so).

- ``intervals``: the standard error, the t interval of a mean, ``CONFIDENCE``, how many seeds a difference needs;
- ``signflip``: the one paired test of every verdict, the exact sign-flip test, and its interval
  (``gcs.sign_flip_test``, ``gcs.fewest_seeds``: how many seeds can claim at all);
- ``paired``: the verdict: each method against the baseline over the same seeds (``gcs.verdict``,
  ``gcs.paired_tests``);
- ``sequential``: rounds of seeds with looks that keep the error rate (``gcs.sequential_plan``)."""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
