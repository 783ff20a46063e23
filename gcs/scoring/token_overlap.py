"""Token-level agreement of responses, from the generating model's token ids: the shared stretches that shared
noise produces, which a bag of words cannot tell from common words.

- ``jaccard_matrix``: |A ∩ B| / |A ∪ B| of the sets of token ids (the ``"jaccard"`` metric).
- ``aligned_agreement``: the fraction of two responses' tokens that lie in identical aligned runs of at least
  ``MIN_ALIGNED_RUN`` (3) tokens (``difflib`` matching blocks; the ``"aligned"`` metric).
- ``common_prefix_length``: the tokens two responses share before they first differ.
- ``shared_tokens``, ``aligned_spans``: the responses cut into pieces marked shared or aligned, for display.

``gcs.scoring.metrics`` turns the first two into similarity matrices beside the embedding metrics.
"""

from __future__ import annotations

import difflib
import itertools
import os
from collections.abc import Sequence
from typing import TypeVar

import numpy as np

from gcs.runtime.arguments import ArgumentTypeError, check_texts

MIN_ALIGNED_RUN = 3


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
