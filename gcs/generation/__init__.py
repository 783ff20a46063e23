"""Side-by-side generation: every prompt x method x seed in one batch.

- ``responses``: the public entry points, keyword wrappers around the cores (``gcs.generate``, ``gcs.stream``,
  ``gcs.compare``, ``gcs.stream_compare``);
- ``cores``: one core per operation taking a ``SamplingSettings``: the batch laid out, decoded into responses or a
  tidy frame."""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
