"""A/B tests under shared luck: two prompts, settings or models answer with the same noise.

- ``variants``: ``Variant`` and ``gcs.ab``: both arms' responses, seed by seed;
- ``scores``: how each pair of responses is scored; ``report``: the paired verdict (``gcs.ab_report``);
- ``divergence``: the race at the token where two arms' answers part (``gcs.parting``)."""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
