"""How an error message quotes a value: short whatever the value's size, and still short once a page escapes it.

Every error that echoes what a caller passed (a method name, a template, a metric, a file's group id) quotes it with
``quoted``: a megabyte sent as a method name must not come back whole. The app shows these messages on web pages
and in API errors as HTML-escaped text, where ``<`` becomes ``&lt;``: a quote's characters are counted as they
read there, so that 985 "<" cannot turn 100 quoted characters into 400.

>>> quoted("gcswr"), quoted("x" * 1000, 5)
("'gcswr'", "'xxxxx'… (1,000 characters)")
>>> quoted("<" * 1000, 8)
"'<<'… (1,000 characters)"
"""

from __future__ import annotations

import html
import reprlib

QUOTED_CHARACTERS = 100
_SHORT = reprlib.Repr()  # (keyword arguments only from Python 3.12)
_SHORT.maxstring = _SHORT.maxlong = _SHORT.maxother = QUOTED_CHARACTERS
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 8


def escaped_length(text: str) -> int:
    """How many characters ``text`` takes once HTML-escaped, as the app shows every message.

    >>> escaped_length("a < b & c")
    16
    """
    return len(html.escape(text, quote=False))


def _prefix(text: str, most: int, width) -> str:
    """The longest beginning of ``text`` whose characters, each ``width(c)`` wide, take at most ``most``."""
    used = 0
    for i, character in enumerate(text[:most]):
        used += width(character)
        if used > most:
            return text[:i]
    return text[:most]


def quoted(value, most: int = QUOTED_CHARACTERS) -> str:
    """``value`` as an error message quotes it: its repr, its characters cut to about ``most`` as they read once
    escaped (a character that its repr or HTML escaping writes as several counts as several).

    >>> quoted(list(range(100)))[:30], quoted("a\\n" * 80, 9)
    ('[0, 1, 2, 3, 4, 5, 6, 7, ...]', "'a\\\\na\\\\na\\\\n'… (160 characters)")
    """
    if isinstance(value, str):
        shown = _prefix(value, most, lambda c: escaped_length(repr(c)[1:-1]))
        return repr(shown) + (f"… ({len(value):,} characters)" if len(shown) < len(value) else "")
    try:
        text = _SHORT.repr(value)
    except ValueError:  # an int past Python's limit on converting digits to text
        return f"an {type(value).__name__} too long to show"
    shown = _prefix(text, most, escaped_length)
    return shown if len(shown) == len(text) else shown + "…"
