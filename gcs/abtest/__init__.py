"""A/B tests under shared luck: two prompts, settings or models answer with the same noise.

- ``variants``: ``Variant``, one arm (a model, a system message, a template, its sampling), and both arms loaded;
- ``answers``: ``gcs.ab``: both arms' answers to every prompt, seed by seed, with the IS control;
- ``scores``: how each pair of responses is scored; ``report``: the paired verdict (``gcs.ab_report``);
- ``divergence``: the race at the token where two arms' answers part (``gcs.parting``)."""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
