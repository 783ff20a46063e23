"""Argument shapes, with no knowledge of what gcs samples: the error for an argument of the wrong type, integers
and counts in a range, finite numbers, shares, lists of strings, callbacks and stop events.

Each check names the argument and the problem, raising ``ArgumentTypeError`` (a TypeError, and a ValueError too) for
an argument of the wrong type and ValueError for a bad value of the right type; ``gcs.checks`` builds the library's
own checks (methods, seeds, temperatures, engines) on them.

>>> check_count(3, "n", 1, 8), finite(float("inf"))
(3, False)
>>> check_prompts(["What is DNA?", " "])
Traceback (most recent call last):
...
ValueError: prompts[1] is blank
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import TypeGuard

from gcs.runtime.quoting import quoted


class ArgumentTypeError(TypeError, ValueError):
    """An argument of the wrong type: a TypeError, and a ValueError too, so that whatever refuses bad input
    (``except ValueError``: the app, the CLI) refuses this as bad input, not as a fault."""


def is_integer(value) -> TypeGuard[int]:
    """A true integer (bools and integral floats are not)."""
    return isinstance(value, int) and not isinstance(value, bool)


def finite(number: int | float) -> bool:
    """Whether ``number`` is finite as a float (an int past a float's range is not: ``math.isfinite`` raises on it).

    >>> finite(1.5), finite(float("nan")), finite(10**400)
    (True, False, False)
    """
    try:
        return math.isfinite(number)
    except OverflowError:
        return False


def check_count(value, name: str, low: int, high: int) -> int:
    """An integer in [low, high].

    >>> check_count(3, "n", 1, 8)
    3
    """
    if not is_integer(value):
        raise ArgumentTypeError(f"{name} must be an integer in [{low}, {high}], got {type(value).__name__} "
                                f"{quoted(value)}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {quoted(value)}")
    return value


def check_share(value, name: str, low: float) -> float:
    """A number in [``low``, 1): a confidence level, a futility bound.

    >>> check_share(0.95, "confidence", 0.5)
    0.95
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ArgumentTypeError(f"{name} must be a number in [{low:g}, 1), got {type(value).__name__} {quoted(value)}")
    number = float(value)
    if not low <= number < 1:
        raise ValueError(f"{name} must be in [{low:g}, 1), got {quoted(value)}")
    return number


def check_prompts(prompts: Sequence[str], name: str = "prompts") -> list[str]:
    """A non-empty list of non-blank strings; ArgumentTypeError (a wrong type) or ValueError (empty, blank) naming the
    offending entry."""
    if isinstance(prompts, str) or not isinstance(prompts, Sequence):
        raise ArgumentTypeError(f"{name} must be a list of strings, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise ValueError(f"{name} must not be empty")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise ArgumentTypeError(f"{name}[{i}] must be a string, got {type(prompt).__name__}")
        if not prompt.strip():
            raise ValueError(f"{name}[{i}] is blank")
    return list(prompts)


def check_texts(texts: Sequence[str], name: str = "texts") -> list[str]:
    """A list of strings (empty strings allowed: an empty response is still a response)."""
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise ArgumentTypeError(f"{name} must be a list of strings, got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ArgumentTypeError(f"{name}[{i}] must be a string, got {type(text).__name__}")
    return list(texts)


def check_stop(stop) -> None:
    """``stop``: None or a ``threading.Event`` (anything with ``is_set``), which ends the work when set."""
    if stop is not None and not callable(getattr(stop, "is_set", None)):
        raise ArgumentTypeError(f"stop must be None or a threading.Event, got {type(stop).__name__}")


def check_callback(callback, name: str) -> None:
    """A callback argument (``on_results``, ``on_partial``): None or callable."""
    if callback is not None and not callable(callback):
        raise ArgumentTypeError(f"{name} must be None or a function, got {type(callback).__name__}")
