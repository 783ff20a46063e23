"""The public demo's limits and input parsing (the library itself allows more).

``LIMITS`` is the one table of the demo's bounds, and ``check(name, value)`` the one place they are enforced,
so the UI, the API and the robustness table in docs/ say the same thing.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass

import gcs
from gcs.checks import quoted  # the app's errors quote values as the library's do


@dataclass(frozen=True)
class Limit:
    """A number the demo accepts: ``low`` to ``high`` (``low`` excluded when ``open_low``; with a ``floor``, ``low``
    itself or from ``floor`` on), whole or not."""

    low: float
    high: float
    whole: bool = False
    open_low: bool = False
    high_text: str = ""  # how to write ``high`` in a message, when its digits would not help
    floor: float | None = None

    def describe(self) -> str:
        high = self.high_text or (f"{int(self.high):,}" if self.whole else f"{self.high:g}")
        if self.whole:
            return f"a whole number from {int(self.low):,} to {high}"
        if self.floor is not None:
            return f"between {self.low:g} and {high} ({self.low:g} or at least {self.floor:g})"
        return f"in ({self.low:g}, {high}]" if self.open_low else f"between {self.low:g} and {high}"

    def holds(self, value: float) -> bool:
        above = self.low < value if self.open_low else self.low <= value
        return above and value <= self.high and not (self.floor is not None and self.low < value < self.floor)


# The page holds numbers as JavaScript doubles: whole numbers are exact up to 2^53 - 1, so the seed boxes stop
# there (a larger typed or linked seed would silently become another). The API takes seeds up to 2^63 - 1.
# The seed boxes set no minimum: Gradio would refuse a negative seed before any handler ran, naming no setting,
# with an "Error" badge over every output; the handlers' own check names it in the status line.
PAGE_SEED_MAX = 2**53 - 1

LIMITS = {
    "paraphrases": Limit(2, 8, whole=True),
    "paraphrase characters": Limit(1, 1000, whole=True),
    "temperature": Limit(0, 2, floor=gcs.MIN_TEMPERATURE),  # 0 is greedy; just above it logits / T overflows
    "top_p": Limit(0, 1, open_low=True),
    "max_new_tokens": Limit(1, 256, whole=True),
    "prompt tokens": Limit(1, 256, whole=True),  # one paraphrase as the model sees it (template included)
    "work tokens": Limit(1, 64 * (256 + 256), whole=True),  # rows x (prompt + new tokens) of one side-by-side run
    "seed": Limit(0, gcs.MAX_SEED, whole=True, high_text="2^63 - 1"),
    "seeds per run": Limit(1, 16, whole=True),  # side by side: every method x seed x paraphrase in one batch
    "ensemble": Limit(0, 2, whole=True),  # side by side: rewordings the model writes per paraphrase
    "trace tokens": Limit(1, 64, whole=True),
    "hindsight paraphrases": Limit(1, 4, whole=True),
    "hindsight response tokens": Limit(1, 256, whole=True),
    "seeds": Limit(1, 10, whole=True),
    "sweep max_new_tokens": Limit(1, 128, whole=True),
    "temperatures": Limit(1, 8, whole=True),
    "groups": Limit(1, 50, whole=True),
    "sweep cells": Limit(1, 240, whole=True),
    "sweep work tokens": Limit(1, 150_000, whole=True),
    "upload bytes": Limit(1, 1_000_000, whole=True),
    # within the time an uploaded file stays on disk (ui.server.http_limits.UPLOAD_WINDOW_S): what the disk holds is
    # bounded
    "uploads per client": Limit(1, 20, whole=True),
    "upload bytes per client": Limit(1, 20_000_000, whole=True),
    "uploads in total": Limit(1, 1_000, whole=True),
    "upload bytes in total": Limit(1, 500_000_000, whole=True),
    "token to change": Limit(0, 256, whole=True),  # a counterfactual's token index (a response is at most 256)
    "max ε": Limit(0, 10),
    "trials": Limit(100, 20_000, whole=True),
    "steps": Limit(100, 20_000, whole=True),
    "coupling seed": Limit(0, 2**31, whole=True),
    "ab prompts": Limit(1, 8, whole=True),
    "ab seeds": Limit(2, 16, whole=True),
    "ab max_new_tokens": Limit(1, 128, whole=True),
    "ab work tokens": Limit(1, 25_000, whole=True),  # each arm's rows x (prompt + new tokens), IS control included
}


def check(name: str, value) -> float | int:
    """``value`` if it is within ``LIMITS[name]`` (as int for whole numbers), else ValueError naming the limit.

    >>> check("temperature", 0.7), check("seeds", 4.0)
    (0.7, 4)
    >>> check("top_p", 0)
    Traceback (most recent call last):
    ...
    ValueError: top_p must be in (0, 1], got 0
    >>> check("temperature", 1e-300)
    Traceback (most recent call last):
    ...
    ValueError: temperature must be between 0 and 2 (0 or at least 0.0001), got 1e-300
    """
    limit = LIMITS[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or \
            (isinstance(value, float) and math.isnan(value)):
        raise ValueError(f"{name} must be a number, got {quoted(value)}")
    if not limit.holds(value) or (limit.whole and value != int(value)):  # (held: finite, so int() cannot overflow)
        raise ValueError(f"{name} must be {limit.describe()}, got {value:g}" if isinstance(value, float)
                         else f"{name} must be {limit.describe()}, got {quoted(value)}")
    return int(value) if limit.whole else float(value)


def check_count_of(name: str, items: list) -> list:
    """``items`` if their number is within ``LIMITS[name]``."""
    limit = LIMITS[name]
    if not limit.low <= len(items) <= limit.high:
        raise ValueError(f"give {int(limit.low)} to {int(limit.high)} {name}, got {len(items)}")
    return items


METRICS = gcs.METRICS  # the demo offers the bundled metrics only (the library also takes "e5:MODEL_ID")


def check_metric(metric) -> str:
    if metric not in METRICS:
        raise ValueError(f"metric {quoted(metric)} is not offered here; choose one of: {', '.join(METRICS)}")
    return metric


def check_flag(value, name: str) -> bool:
    """A true boolean (the API must not read "yes" or 1 as true)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false, got {quoted(value)}")
    return value


def check_work(prompts: list[str], model: gcs.Model, rows_per_prompt: int, new_tokens: int, limit: str, *,
               fewer: str = "paraphrases, methods, seeds or new tokens") -> None:
    """Refuse a paraphrase over the prompt-token limit, or a request whose total work (every row's prompt and
    new tokens) is over ``LIMITS[limit]``: each parameter within its range can still multiply into too much.
    ``fewer``: what the request's tab can lower."""
    lengths = gcs.prompt_lengths(prompts, model=model)
    most = int(LIMITS["prompt tokens"].high)
    for i, length in enumerate(lengths, start=1):
        if length > most:
            raise ValueError(f"paraphrase {i} is {length:,} tokens long as the model sees it; "
                             f"the limit here is {most:,}")
    work = rows_per_prompt * sum(length + new_tokens for length in lengths)
    if work > LIMITS[limit].high:
        raise ValueError(f"this request is {work:,} tokens of work (every response's prompt and new tokens); the limit "
                         f"here is {int(LIMITS[limit].high):,}: use fewer {fewer}")


_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# Invisible text that reads differently than it shows: Unicode tag characters (four tokens each, unseen) and
# bidirectional embeddings, overrides and isolates (they reorder what is displayed).
_INVISIBLE = re.compile("[\U000e0000-\U000e007f\u202a-\u202e\u2066-\u2069]")
_SURROGATE = re.compile("[\ud800-\udfff]")  # half of a pair: JSON can carry one ("\\ud800"), no tokenizer takes it
# What shows as nothing: spaces, format characters (zero-width space, joiners, word joiner, BOM), controls,
# combining marks with nothing to combine with, and the letters that are blank by design (Hangul and Braille fillers).
_BLANK_CATEGORIES = {"Zs", "Zl", "Zp", "Cf", "Cc", "Mn", "Me"}
_BLANK_LETTERS = set("\u115f\u1160\u3164\uffa0\u2800")


def visible(text: str) -> bool:
    """Whether ``text`` shows anything at all.

    >>> visible("Why?"), visible("\u200b\u200d \ufeff\u3164")
    (True, False)
    """
    return any(c not in _BLANK_LETTERS and unicodedata.category(c) not in _BLANK_CATEGORIES for c in text)


def check_text(text: str, name: str) -> str:
    """``text`` if it holds no control character, no invisible or direction-overriding one, and no unpaired
    surrogate (not Unicode text: it would fail in the tokenizer as a fault instead of being refused)."""
    if _CONTROL.search(text):
        raise ValueError(f"{name} contains control characters")
    if _INVISIBLE.search(text):
        raise ValueError(f"{name} contains invisible or direction-overriding characters")
    if _SURROGATE.search(text):
        raise ValueError(f"{name} contains an unpaired surrogate (not valid Unicode text)")
    return text


def check_paraphrase(text: str, name: str) -> str:
    """One paraphrase, wherever it came from (typed, a link, the API, an uploaded file): up to 1,000 characters,
    some of them visible, none a control, invisible or direction-overriding character."""
    chars = int(LIMITS["paraphrase characters"].high)
    if len(text) > chars:
        raise ValueError(f"{name} has {len(text):,} characters; the limit here is {chars:,}")
    check_text(text, name)
    if not visible(text):
        raise ValueError(f"{name} shows nothing (only spaces or invisible characters)")
    return text


def parse_paraphrases(text: str, minimum: int | None = None, maximum: int | None = None,
                      name: str = "paraphrases") -> list[str]:
    """Paraphrases typed one per line: 2 to 8 of them (or ``minimum`` to ``maximum``), each a ``check_paraphrase``."""
    if not isinstance(text, str):
        raise ValueError(f"{name} must be text, one per line")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    limit = LIMITS["paraphrases"]
    low, high = int(limit.low if minimum is None else minimum), int(limit.high if maximum is None else maximum)
    singular = name[:-1] if name.endswith("s") else name
    if len(lines) > high > low:
        raise ValueError(f"at most {high} {name} here, got {len(lines)}")
    if not low <= len(lines) <= high:
        what = f"one {singular}" if low == high == 1 else f"exactly {low} {name}" if low == high else \
            f"{low} to {high} {name}"
        raise ValueError(f"enter {what}" + ("" if low == high == 1 else ", one per line") + f" (got {len(lines)})")
    return [check_paraphrase(line, f"{singular} {i}") for i, line in enumerate(lines, start=1)]


def parse_builtin(text, limit: str) -> int | None:
    """N of an API's "builtin:N" (the first N built-in items), or None when ``text`` is not such a reference. N is
    checked against ``LIMITS[limit]`` by the caller; here only that it is a short whole number.

    >>> parse_builtin("builtin: 3", "groups"), parse_builtin("What is DNA?", "groups")
    (3, None)
    """
    if not (isinstance(text, str) and text.strip().startswith("builtin:")):
        return None
    count = text.split(":", 1)[1].strip()
    # ASCII digits only: str.isdigit() and int() take any script's digits ("٣" is 3) and "²" passes one, not the other
    if not _ASCII_COUNT.fullmatch(count):
        raise ValueError(f"builtin:N needs a whole number N from 1 to {int(LIMITS[limit].high)} in the digits 0-9, "
                         f"got {quoted(count)}")
    return int(count)


_ASCII_COUNT = re.compile("[0-9]{1,3}")  # (three digits: Python refuses to read an int of over 4,300 digits)


MAX_NUMBERS_CHARACTERS = 2_000


def parse_numbers(text: str, name: str, separators: str = r"[,;\s]+") -> list[float]:
    """Numbers separated by commas (or spaces), or ValueError naming the field (quoting about 60 characters).

    >>> parse_numbers("0.5, 0.25 0.25", "p")
    [0.5, 0.25, 0.25]
    """
    text = str(text or "").strip()
    if len(text) > MAX_NUMBERS_CHARACTERS:
        raise ValueError(f"{name} has {len(text):,} characters; the limit here is {MAX_NUMBERS_CHARACTERS:,}")
    found = [x for x in re.split(separators, text) if x]
    try:
        values = [float(x) for x in found]
    except ValueError:
        values = None
    if values is None or not all(x.isascii() for x in found):  # as builtin:N: float() reads "٣" as 3.0
        raise ValueError(f"{name} must be numbers separated by commas, got {quoted(text, 60)} (ASCII digits 0-9, a "
                         "point and a sign)")
    return values
