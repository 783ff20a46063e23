"""``SamplingSettings``: what to sample, validated once where it is built.

    >>> settings = SamplingSettings(methods="is,gcswr", seeds=[3, 3, 4], temperature=0.7, max_new_tokens=32)
    >>> settings.methods, settings.seeds, settings.ensemble
    (('is', 'gcswr'), (3, 4), 0)
    >>> settings.replace(temperature=0.0).temperature
    0.0
    >>> SamplingSettings(methods="gcs,ctx", context=2).context
    2
    >>> SamplingSettings(top_p=1.5)
    Traceback (most recent call last):
    ...
    ValueError: top_p must be None or a number in (0, 1], got 1.5

Everything downstream (batches, the runner, sweeps, the app) takes one of these instead
of a long list of keyword arguments, and trusts it: a frozen object cannot become invalid.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gcs.checks import (
    DEFAULT_MAX_NEW_TOKENS,
    METHODS,
    check_context,
    check_max_new_tokens,
    check_method,
    check_methods,
    check_rewordings,
    check_sampling_settings,
    check_seed,
    check_seeds,
    check_temperature,
)
from gcs.runtime.arguments import ArgumentTypeError
from gcs.runtime.keywords import (
    DECIDED_GENERATE_OPTIONS,
    GenerateOptions,
    keyword_names,
    keywords_checked,
    unexpected_keyword,
)
from gcs.runtime.quoting import quoted


@dataclass(frozen=True)
class SamplingSettings:
    """Methods x seeds to run, and how each response is sampled.

    Args:
        methods: "is", "gcs", "gcswr" (a list or a comma-separated string); duplicates dropped.
        seeds: a count n (seeds 0 to n - 1) or the seeds themselves (a list); responses generated with one seed
            share their noise.
        temperature: softmax temperature; 0 is greedy (all methods agree), else at least
            ``MIN_TEMPERATURE`` (1e-4, ``gcs.checks``).
        top_k: optional top-k truncation after temperature, as in transformers.
        top_p: optional nucleus (top-p) truncation after temperature, as in transformers.
        max_new_tokens: at most 1024.
        ensemble: rewordings the model writes per prompt for distributional ensembling
            (section 5); 0 is off.
        context: how many generated tokens key the noise of method "ctx" (docs/context.md), in [1, 64]; None is
            ``DEFAULT_CONTEXT`` (4) where "ctx" runs, and the only value allowed without it.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a bad value (an unknown method, a temperature below ``MIN_TEMPERATURE``, ...).

    Examples:
        >>> settings = SamplingSettings(methods="is,gcswr", seeds=3)
        >>> settings.methods, settings.seeds
        (('is', 'gcswr'), (0, 1, 2))
    """

    methods: tuple[str, ...] = METHODS
    seeds: tuple[int, ...] = (0,)
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS
    ensemble: int = 0
    context: int | None = None

    if TYPE_CHECKING:
        # What the generated __init__ accepts: __post_init__ turns a comma-separated string or any list of methods,
        # and a count or any iterable of seeds, into the tuples above (the fields keep their tuple types).
        def __init__(self, methods: Sequence[str] | str = METHODS, seeds: int | Iterable[int] = (0,),
                     temperature: float = 1.0, top_k: int | None = None, top_p: float | None = None,
                     max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, ensemble: int = 0,
                     context: int | None = None) -> None: ...

    def __post_init__(self):
        check_sampling_settings(self.temperature, self.top_k, self.top_p)
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen dataclass)
        set_("methods", tuple(check_methods(self.methods)))
        set_("seeds", tuple(check_seeds(self.seeds)))
        set_("temperature", check_temperature(self.temperature))
        set_("top_p", None if self.top_p is None else float(self.top_p))
        set_("max_new_tokens", check_max_new_tokens(self.max_new_tokens))
        set_("ensemble", check_rewordings(self.ensemble))
        set_("context", check_context(self.context, self.methods))

    @classmethod
    def single(cls, method: str = "gcswr", seed: int = 0, **fields) -> SamplingSettings:
        """Settings of one method and one seed, each checked as one (errors name ``method`` and ``seed``); ``fields``
        as the constructor takes them (its defaults are the fields').

        >>> SamplingSettings.single("GCS", 3, temperature=0.5).methods
        ('gcs',)
        """
        return cls(methods=[check_method(method)], seeds=[check_seed(seed)], **fields)

    def method_and_seed(self) -> tuple[str, int]:
        """The method and the seed of settings that hold one of each; ValueError otherwise.

        >>> SamplingSettings.single("is", 7).method_and_seed()
        ('is', 7)
        """
        if len(self.methods) != 1 or len(self.seeds) != 1:
            raise ValueError(f"these settings must hold one method and one seed, got methods={list(self.methods)} "
                             f"and seeds={list(self.seeds)}")
        return self.methods[0], self.seeds[0]

    def replace(self, **changes) -> SamplingSettings:
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    @property
    def warping(self) -> tuple[float, int | None, float | None]:
        """(temperature, top_k, top_p): all that a sampler's warpers need."""
        return self.temperature, self.top_k, self.top_p


# SamplingSettings(method="gcs") is refused as every entry point refuses a keyword it does not take, naming the
# field nearest to it ("did you mean 'methods'?"); Python's own error names none.
SamplingSettings.__init__ = keywords_checked(SamplingSettings.__init__, "gcs.SamplingSettings")  # type: ignore[method-assign]


def check_settings(settings) -> SamplingSettings:
    """``settings`` if it is a ``SamplingSettings``, else ArgumentTypeError (every entry point's one type check)."""
    if not isinstance(settings, SamplingSettings):
        raise ArgumentTypeError(f"settings must be a gcs.SamplingSettings, got {type(settings).__name__}")
    return settings


def settings_for(entry_point: Callable, settings: SamplingSettings | None, /, *, takes_top_k: bool = True,
                 **arguments) -> SamplingSettings:
    """The settings ``entry_point`` samples with: every entry point's one way from its arguments to them.

    ``arguments`` are the entry point's own (by their names in its signature; ``method`` and ``seed`` give one of
    each). Without ``settings`` they make the ``SamplingSettings`` (an ``ensemble`` of None is off). ``settings``
    replaces them all: an argument beside it that is not at the entry point's default (read from its signature, the
    one place a default is written) is refused, so that none is silently ignored; an entry point without an
    ``ensemble`` argument does not ensemble, and one that ``takes_top_k=False`` reads the whole vocabulary.

    >>> def compare(prompts, *, methods=METHODS, seeds=(0,), temperature=1.0, settings=None): ...
    >>> settings_for(compare, None, methods="gcs", seeds=2, temperature=0.5).seeds
    (0, 1)
    >>> settings_for(compare, SamplingSettings(), methods=METHODS, seeds=(0,), temperature=0.5)
    Traceback (most recent call last):
    ...
    ValueError: gcs.compare takes settings or temperature, not both: settings replaces temperature=0.5 ...
    >>> settings_for(compare, SamplingSettings(ensemble=2), methods=METHODS, seeds=(0,), temperature=1.0)
    Traceback (most recent call last):
    ...
    ValueError: gcs.compare does not ensemble, but settings has ensemble=2
    """
    caller = f"gcs.{entry_point.__name__}"
    refuse_beside(settings, caller, **at_defaults(entry_point, **arguments))
    if settings is None:
        if "method" in arguments:  # checked as one, so that an error names ``method`` (and ``seed``)
            arguments["methods"] = [check_method(arguments.pop("method"))]
        if "seed" in arguments:
            arguments["seeds"] = [check_seed(arguments.pop("seed"))]
        if arguments.get("ensemble", 0) is None:
            arguments["ensemble"] = 0
        settings = SamplingSettings(**arguments)
    check_settings(settings)
    if settings.ensemble and "ensemble" not in _defaults(entry_point):
        raise ValueError(f"{caller} does not ensemble, but settings has ensemble={settings.ensemble}")
    if not takes_top_k and settings.top_k is not None:
        raise ValueError(f"{caller} takes no top_k (its race is read over the whole vocabulary; top_p is "
                         f"supported), but settings has top_k={settings.top_k}")
    return settings


def one_or_built(entry_point: Callable, settings: SamplingSettings | None, /, *, takes_top_k: bool = True,
                 **arguments) -> SamplingSettings:
    """``settings_for`` an entry point that samples one method with one seed (``generate``, ``trace``,
    ``hindsight``...): the settings must hold one of each.

    >>> def generate(prompts, *, method="gcswr", seed=0, settings=None): ...
    >>> one_or_built(generate, None, method="gcs", seed=2).methods
    ('gcs',)
    >>> one_or_built(generate, SamplingSettings(methods="is,gcs"), method="gcswr", seed=0)
    Traceback (most recent call last):
    ...
    ValueError: gcs.generate samples one method with one seed, but settings holds methods ['is', 'gcs'] ...
    """
    settings = settings_for(entry_point, settings, takes_top_k=takes_top_k, **arguments)
    if len(settings.methods) != 1 or len(settings.seeds) != 1:
        raise ValueError(f"gcs.{entry_point.__name__} samples one method with one seed, but settings holds methods "
                         f"{list(settings.methods)} and seeds {list(settings.seeds)}: pass one of each "
                         "(gcs.compare runs several)")
    return settings


@functools.cache
def _defaults(entry_point: Callable) -> dict[str, object]:
    return {name: parameter.default for name, parameter in inspect.signature(entry_point).parameters.items()}


def at_defaults(entry_point: Callable, /, **arguments) -> dict[str, Any]:
    """Each argument with ``entry_point``'s default for it (name -> (value, default)), as ``refuse_beside`` takes
    them.

    >>> def sweep(groups, *, seeds=3, top_p=None): ...
    >>> at_defaults(sweep, seeds=5, top_p=None)
    {'seeds': (5, 3), 'top_p': (None, None)}
    """
    defaults = _defaults(entry_point)
    return {name: (value, defaults[name]) for name, value in arguments.items()}


def refuse_beside(replacing: object, caller: str, /, *, what: str = "settings", **given: tuple) -> None:
    """ValueError where ``replacing`` (the settings, or what else ``what`` names: a report to resume) was given
    together with an argument it replaces (``given``: name -> (value, default); an argument left at its default is not
    counted), so that no argument is silently ignored.

    >>> refuse_beside(SamplingSettings(), "gcs.compare", temperature=(0.5, 1.0), seeds=((0,), (0,)))
    Traceback (most recent call last):
    ...
    ValueError: gcs.compare takes settings or temperature, not both: settings replaces temperature=0.5 ...
    """
    if replacing is None:
        return
    clashing = [f"{name}={quoted(value)}" for name, (value, default) in given.items() if _differs(value, default)]
    if clashing:
        names = ", ".join(name.partition("=")[0] for name in clashing)
        hint = "(set it in the settings: settings.replace(...))" if what == "settings" else f"(they come from {what})"
        raise ValueError(f"{caller} takes {what} or {names}, not both: {what} replaces {', '.join(clashing)} {hint}")


def _differs(value, default) -> bool:
    if isinstance(value, Iterable) and isinstance(default, Iterable) and not isinstance(value, str) \
            and not isinstance(default, str):
        try:
            return tuple(value) != tuple(default)
        except TypeError:
            return True
    return bool(value != default)


SAMPLING_FIELDS = frozenset(field.name for field in dataclasses.fields(SamplingSettings))


def check_generate_kwargs(entry_point: Callable, generate_kwargs: Mapping[str, Any]) -> None:
    """TypeError, before any work, where an entry point's extra keywords (``**generate_kwargs``, passed on to
    transformers' ``generate``) hold one that transformers' generate does not take (``gcs.compare(temprature=0.7)``
    failed in transformers after the model had loaded), or one of gcs's own sampling settings (``gcs.sweep
    (temperature=0.5)`` ran the default temperatures: transformers ignores a temperature under gcs's sampling), or
    one that gcs decides itself (``num_beams=2`` failed inside transformers, ``min_p`` was ignored). Names the keyword
    and the nearest name the entry point or transformers' generate takes, or why gcs keeps it.

    >>> def compare(prompts, *, seeds=(0,), temperature=1.0, **generate_kwargs): ...
    >>> check_generate_kwargs(compare, {"min_new_tokens": 4})  # transformers' own: passed on
    >>> check_generate_kwargs(compare, {"temprature": 0.7})
    Traceback (most recent call last):
    ...
    gcs.runtime.arguments.ArgumentTypeError: gcs.compare got an unexpected keyword argument 'temprature' (did you \
mean 'temperature'?)
    >>> check_generate_kwargs(compare, {"num_beams": 2})
    Traceback (most recent call last):
    ...
    gcs.runtime.arguments.ArgumentTypeError: gcs.compare got an unexpected keyword argument 'num_beams'; \
transformers' 'num_beams' is gcs's to set: it would replace sampling with another decoding strategy
    """
    own = keyword_names(entry_point)
    caller = f"gcs.{entry_point.__name__}"
    passable = GenerateOptions.__optional_keys__
    for keyword in generate_kwargs:
        if keyword in SAMPLING_FIELDS:
            raise unexpected_keyword(caller, keyword, own, f"{keyword!r} is one of gcs's sampling settings, which "
                                     f"{caller} does not take (its extra keywords go to transformers' generate)")
        if keyword in DECIDED_GENERATE_OPTIONS:
            raise unexpected_keyword(caller, keyword, own, f"transformers' {keyword!r} is gcs's to set: "
                                     f"{DECIDED_GENERATE_OPTIONS[keyword]}")
        if keyword not in passable:
            raise unexpected_keyword(caller, keyword, {*own, *passable})
