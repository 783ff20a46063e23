"""The instrument: what the shared noise did, looked at after the fact.

- ``tracing``: the race step by step: each token's candidates and their clocks (``gcs.trace``);
- ``carrying``: GCSwR's carried wins, races won by a clock that already won another row's (``gcs.carried_win``);
- ``conditioning``: the noise given an observed response, sampled exactly (``gcs.posterior``);
- ``forcing``: an observed response's token ids and the logits that generated them (teacher forcing);
- ``replay``: hindsight: paraphrases answered under the observed response's noise (``gcs.hindsight``);
- ``edits``: a response edited at one token, continued under its noise (``gcs.counterfactual``)."""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
