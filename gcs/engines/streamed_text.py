"""A batch's responses as they stream: each row's text so far, decoded a few tokens at a time (``Batch.stream``)."""

from __future__ import annotations

from collections.abc import Sequence

from gcs.engines.prompts import strip_followups


class PartialRows:
    """The streamed rows of a batch: each response's text so far, up to its first stop token."""

    def __init__(self, tokenizer, stop_ids: Sequence[int], main: Sequence[int]):
        """``main``: each row's text in the batch (the one its response is read from)."""
        self.stop_ids, self.main = stop_ids, main
        self.texts = [IncrementalText(tokenizer) for _ in main]
        self.ended = [False] * len(main)
        self.seen = [0] * len(main)  # tokens of each row read so far

    def update(self, token_ids: Sequence[Sequence[int]]) -> list[dict]:
        """The rows after a step, given every text's token ids so far (only the new ones are read)."""
        for row, index in enumerate(self.main):
            ids = token_ids[index]
            for token in ids[self.seen[row] :]:
                self.ended[row] = self.ended[row] or token in self.stop_ids
                if not self.ended[row]:
                    self.texts[row].append(token)
            self.seen[row] = len(ids)
        return self.rows()

    def rows(self) -> list[dict]:
        return [{"raw_response": t.text, "response": strip_followups(t.text), "n_tokens": t.n_tokens,
                 "token_ids": list(t.ids), "finished": e} for t, e in zip(self.texts, self.ended, strict=True)]


class IncrementalText:
    """Text of a growing token sequence, decoding only a few tokens per step.

    Decodes the tokens since the previous step together with the ones before them (so a
    tokenizer that drops a word's leading space at the start of a text, or a character
    split over several byte tokens, decodes as it would in the whole text) and appends the
    difference; an unfinished character (U+FFFD) waits for its next byte.

    >>> from types import SimpleNamespace
    >>> words = SimpleNamespace(decode=lambda ids, skip_special_tokens: " ".join(map(str, ids)))
    >>> text = IncrementalText(words)
    >>> for token in (1, 22, 333):
    ...     text.append(token)
    >>> text.text
    '1 22 333'
    """

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.text = tokenizer, [], ""
        self._prefix_offset = self._read_offset = 0

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    def append(self, token: int) -> None:
        self.ids.append(token)
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
        before = decode(self.ids[self._prefix_offset : self._read_offset])
        after = decode(self.ids[self._prefix_offset :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.text += after[len(before) :]
            self._prefix_offset, self._read_offset = self._read_offset, len(self.ids)
