"""How the demo marks what paraphrases' responses share: aligned spans (one colour per span) or the words present in
every response; the side by side, hindsight and A/B tabs show responses this way."""

from __future__ import annotations

import gcs
from ui.shared.messages import one_paragraph, one_paragraph_pieces

HIGHLIGHTS = ("aligned spans", "words present in every response")
SPAN_COLORS = ("#ffd54f", "#80deea", "#ef9a9a", "#a5d6a7", "#ce93d8", "#ffab91", "#90caf9", "#e6ee9c")
SPAN_LABELS = [f"span {i + 1}" for i in range(len(SPAN_COLORS))]


def response_pieces(responses: list[str], marked: list | None = None,
                    names: list[str] | None = None) -> list[tuple[str, str | None]]:
    """HighlightedText value: numbered (or ``names``d) responses, each one paragraph (a line break inside shows as
    " ↵ "); ``marked`` (per response, (text, label) pieces) colours them."""
    value = []
    for i, response in enumerate(responses):
        value.append((f"[{names[i] if names else i + 1}] ", "paraphrase"))
        plain = [(one_paragraph(response.strip()) or "…", None)]
        value += plain if marked is None else one_paragraph_pieces(marked[i])
        value.append(("\n\n", None))
    return value


def highlighted(responses: list[str], highlight: str, tokenizer, names: list[str] | None = None):
    """The responses with the chosen highlight: aligned spans (one colour per span) or the bag-of-words view."""
    if highlight == HIGHLIGHTS[1]:
        marked = [[(text, "shared" if shared else None) for text, shared in pieces]
                  for pieces in gcs.shared_tokens(responses, tokenizer=tokenizer)]
    else:
        marked = [[(text, None if span is None else SPAN_LABELS[(span - 1) % len(SPAN_LABELS)])
                   for text, span in pieces]
                  for pieces in gcs.aligned_spans(responses, tokenizer=tokenizer)]
    return response_pieces(responses, marked, names)

