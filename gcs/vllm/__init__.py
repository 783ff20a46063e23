"""The vLLM plugin: gcs's samplers inside any vLLM engine where gcs is installed (an entry point in pyproject.toml).

- ``plugin``: the logits processor vLLM loads (``GumbelSamplingProcessor``); requests without ``gcs_*`` arguments
  are untouched;
- ``requests``: a request's ``gcs_*`` arguments checked, and its noise state; ``slots``: that state kept per batch
  slot across engine steps; ``excess``: each keyed request's excess surprise, recorded as it is drawn;
- ``options``: what the plugin, the vLLM engine and ``gcs vllm-serve`` share (CPU defaults, the entry point).

A serving process imports this package and ``sampling`` only: no engine, scoring or figures."""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
