"""Every public endpoint's arguments checked against its own type annotations, before it runs.

Gradio passes an API call's values as the client sent them (``gr.api`` converts nothing): a list where the
signature says ``str`` reached code that hashes it, and the caller read "generation failed (TypeError)" while the
log took a traceback. MCP's schema (built from the same annotations) stops such values; HTTP and ``gradio_client``
did not. ``typed`` holds every route to the annotations: a wrong type is the caller's mistake, refused in one
sentence that names the argument and the type expected, logged in one line.

    >>> def ab(method: str) -> str:
    ...     return method
    >>> typed(ab)(["gcs"])
    Traceback (most recent call last):
    ...
    gradio.exceptions.Error: "method must be text, got ['gcs']"
"""

from __future__ import annotations

import functools
import inspect
import types
import typing

from gcs.checks import quoted
from gcs.runtime.arguments import ArgumentTypeError
from ui.shared.messages import user_error

# What each annotation admits, and how a message says it. JSON has one kind of number: 4.0 passes as a whole number
# here, and the endpoint's own limits check (``ui.shared.limits.check``) says whether it is one.
ADMITS = {str: (str,), int: (int, float), float: (int, float), bool: (bool,)}
SAID = {str: "text", int: "a whole number", float: "a number", bool: "true or false"}


def _union(hint) -> tuple | None:
    return typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, types.UnionType) else None


def admits(hint, value) -> bool:
    """Whether ``value``, as a JSON client sends it, has the type ``hint`` (str, int, float, bool, list[...] and
    unions of them).

    >>> admits(int | list[int], [1, 2]), admits(int | list[int], [1, "2"]), admits(float, True)
    (True, False, False)
    """
    if (options := _union(hint)) is not None:
        return any(admits(option, value) for option in options)
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return isinstance(value, list) and all(admits(item, element) for element in value)
    return isinstance(value, ADMITS[hint]) and (hint is bool or not isinstance(value, bool))


def said(hint) -> str:
    """``hint`` in words.

    >>> said(int | list[int])
    'a whole number or a list of whole numbers'
    """
    if (options := _union(hint)) is not None:
        return " or ".join(said(option) for option in options)
    if typing.get_origin(hint) is list:
        (item,) = typing.get_args(hint)
        return "a list of " + {str: "texts", int: "whole numbers", float: "numbers", bool: "booleans"}[item]
    return SAID[hint]


def check_arguments(signature: inspect.Signature, hints: dict, args: tuple, kwargs: dict) -> None:
    """ArgumentTypeError (a TypeError, and a ValueError: refused as bad input) for the first argument whose type is
    not its annotation's."""
    try:
        arguments = signature.bind(*args, **kwargs).arguments
    except TypeError:  # too many values, or a name it does not take (quoted by Python whole: not echoed here)
        raise ArgumentTypeError(f"this endpoint takes {len(signature.parameters)} arguments: "
                                f"{', '.join(signature.parameters)}") from None
    for name, value in arguments.items():
        if name in hints and not admits(hints[name], value):
            raise ArgumentTypeError(f"{name} must be {said(hints[name])}, got {quoted(value)}")


def typed(endpoint):
    """``endpoint`` (plain or streaming) that first checks its arguments against its annotations and refuses a
    mismatch as a ``gr.Error``. The adapter keeps the function's name, signature and docstring (its API and MCP
    schema)."""
    signature = inspect.signature(endpoint)
    hints = {key: hint for key, hint in typing.get_type_hints(endpoint).items() if key in signature.parameters}
    for hint in hints.values():
        said(hint)  # a KeyError here, at start-up: an annotation with no rule above (a new endpoint's, say)

    def checked(args, kwargs) -> None:
        try:
            check_arguments(signature, hints, args, kwargs)
        except ArgumentTypeError as error:
            raise user_error(error) from error

    if inspect.isgeneratorfunction(endpoint):
        @functools.wraps(endpoint)
        def streamed(*args, **kwargs):
            checked(args, kwargs)
            return (yield from endpoint(*args, **kwargs))

        adapted = streamed
    else:
        @functools.wraps(endpoint)
        def adapted(*args, **kwargs):
            checked(args, kwargs)
            return endpoint(*args, **kwargs)

    return adapted
