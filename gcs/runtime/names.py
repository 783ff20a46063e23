"""Lists of names, read by one rule wherever a caller may give several (methods, metrics, A/B scores, classifiers,
the command line's and the app's comma lists): one comma-separated string or an iterable of strings.

- Each name's surrounding spaces are stripped; empty items (a trailing comma, ``"a,,b"``) are dropped.
- A name is matched to its registry without regard to case and returned in the registry's spelling.
- A name given twice is kept once, where it first appears.
- An unknown name is a ValueError naming it, the nearest known one ("did you mean") and every known one.
- A string is split at its commas; an item of an iterable is one name, commas and all (``"regex:a{1,3}"``).

>>> parse_names("IS , gcswr,, is,", ["is", "gcs", "gcswr"], what="method")
['is', 'gcswr']
>>> parse_names(["E5:intfloat/multilingual-e5-small"], ["e5", "minilm"], what="metric", arguments=True)
['e5:intfloat/multilingual-e5-small']
>>> parse_names("gcsw", ["is", "gcs", "gcswr"], what="method")
Traceback (most recent call last):
...
ValueError: unknown method 'gcsw' (did you mean 'gcswr'?): expected one of is, gcs, gcswr
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from gcs.runtime.arguments import ArgumentTypeError
from gcs.runtime.quoting import quoted

KNOWN_SHOWN = 20  # names listed in an error at most: a scored table's metrics may be many


def split_names(names: str | Iterable[str], what: str = "name") -> list[str]:
    """The items of ``names`` (a comma-separated string or an iterable of strings), stripped, empty ones dropped,
    in order and repeats kept: the rule's first half, for lists whose items no registry knows (model ids, seeds).

    >>> split_names(" 5, 9,,")
    ['5', '9']
    """
    if isinstance(names, str):
        items: list = names.split(",")
    elif isinstance(names, Iterable) and not isinstance(names, (bytes, dict)):
        items = list(names)
    else:
        raise ArgumentTypeError(f"{what}s must be a list of {what}s or a comma-separated string, got "
                                f"{type(names).__name__} {quoted(names)}")
    for position, item in enumerate(items):
        if not isinstance(item, str):
            raise ArgumentTypeError(f"{what}s[{position}] must be a {what} (a string), got {type(item).__name__} "
                                    f"{quoted(item)}")
    return [item.strip() for item in items if item.strip()]


def parse_names(names: str | Iterable[str], known: Iterable[str], *, what: str = "name", arguments: bool = False,
                empty_ok: bool = False) -> list[str]:
    """Each name of ``names`` once, in the registry's spelling, by the module's rule.

    Args:
        names: one comma-separated string or an iterable of strings.
        known: the registry's names, spelled as returned.
        what: what a name is, for errors ("method", "metric", ...).
        arguments: a name may carry an argument after a colon ("e5:MODEL_ID", "contains:Paris"): the part before
            the colon is matched, the argument kept as typed (the caller checks it).
        empty_ok: whether no name at all is an answer (else a ValueError).

    Raises:
        TypeError: ``names`` is neither a string nor an iterable of strings.
        ValueError: an unknown name, or none where ``empty_ok`` is false.
    """
    registry = {name.lower(): name for name in known}
    chosen: dict[str, None] = {}  # a dict for its order
    for name in split_names(names, what):
        key, colon, argument = name.partition(":") if arguments else (name, "", "")
        spelled = registry.get(key.strip().lower())
        if spelled is None:
            raise ValueError(unknown(name, key.strip(), registry, what))
        chosen.setdefault(f"{spelled}:{argument}" if colon else spelled, None)
    if not chosen and not empty_ok:
        listed = ", ".join(list(registry.values())[:KNOWN_SHOWN])
        raise ValueError(f"{what}s must name at least one {what}: one of {listed}")
    return list(chosen)


def nearest_name(word: str, known: Iterable[str]) -> str | None:
    """The known name nearest to ``word`` (difflib's ratio at least 0.6; the first of equals in ``known``'s order),
    None when none is near: the "did you mean" of every refusal of a name or a keyword.

    >>> nearest_name("jacard", ["e5", "jaccard", "aligned"]), nearest_name("xyz", ["e5"])
    ('jaccard', None)
    """
    found = difflib.get_close_matches(word, list(known), n=1)
    return found[0] if found else None


def unknown(name: str, key: str, registry: dict[str, str], what: str) -> str:
    """The message for an unknown ``name``: the nearest known one, then those known (at most ``KNOWN_SHOWN``)."""
    nearest = nearest_name(key.lower(), registry)
    hint = f" (did you mean {quoted(registry[nearest])}?)" if nearest else ""
    shown = list(registry.values())
    listed = ", ".join(shown[:KNOWN_SHOWN]) + (f" and {len(shown) - KNOWN_SHOWN} more" if len(shown) > KNOWN_SHOWN
                                               else "")
    return f"unknown {what} {quoted(name)}{hint}: expected one of {listed}"
