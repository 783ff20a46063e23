"""The instrument: what the shared noise did, looked at after the fact.

- ``tracing``: the race step by step: each token's candidates and their clocks (``gcs.trace``);
- ``conditioning``: the noise given an observed response, sampled exactly (``gcs.posterior``);
- ``replay``: hindsight: paraphrases answered under the observed response's noise (``gcs.hindsight``);
- ``edits``: a response edited at one token, continued under its noise (``gcs.counterfactual``)."""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
