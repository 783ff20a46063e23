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
import difflib
import functools
import inspect
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
    def single(cls, method: str = "gcswr", seed: int = 0, temperature: float = 1.0, top_k: int | None = None,
               top_p: float | None = None, max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
               ensemble: int = 0) -> SamplingSettings:
        """Settings of one method and one seed, each checked as one (errors name ``method`` and ``seed``).

        >>> SamplingSettings.single("GCS", 3, temperature=0.5).methods
        ('gcs',)
        """
        return cls([check_method(method)], [check_seed(seed)], temperature, top_k, top_p, max_new_tokens, ensemble)

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


def check_settings(settings) -> SamplingSettings:
    """``settings`` if it is a ``SamplingSettings``, else ArgumentTypeError (every entry point's one type check)."""
    if not isinstance(settings, SamplingSettings):
        raise ArgumentTypeError(f"settings must be a gcs.SamplingSettings, got {type(settings).__name__}")
    return settings


def one_or_built(settings: SamplingSettings | None, *, caller: str, method: str, seed: int, temperature: float,
                 top_k: int | None = None, top_p: float | None, max_new_tokens: int, ensemble: int = 0,
                 takes_top_k: bool = True, takes_ensemble: bool = True) -> SamplingSettings:
    """The settings of an entry point that samples one method with one seed (``generate``, ``trace``,
    ``hindsight``...): ``settings`` when given (it replaces ``method`` ... ``ensemble``; it must hold one method and
    one seed, and only what ``caller`` can take), else the single settings those arguments make.

    >>> one_or_built(None, caller="gcs.trace", method="gcs", seed=2, temperature=0.5, top_p=None,
    ...              max_new_tokens=8).methods
    ('gcs',)
    >>> one_or_built(SamplingSettings(methods="is,gcs"), caller="gcs.generate", method="gcswr", seed=0,
    ...              temperature=1.0, top_p=None, max_new_tokens=64)
    Traceback (most recent call last):
    ...
    ValueError: gcs.generate samples one method with one seed, but settings holds methods ['is', 'gcs'] ...
    """
    if settings is None:
        return SamplingSettings.single(method, seed, temperature, top_k, top_p, max_new_tokens, ensemble)
    refuse_beside(settings, caller, method=(method, "gcswr"), seed=(seed, 0), temperature=(temperature, 1.0),
                  top_k=(top_k, None), top_p=(top_p, None), max_new_tokens=(max_new_tokens, DEFAULT_MAX_NEW_TOKENS),
                  ensemble=(ensemble, 0))
    check_settings(settings)
    if len(settings.methods) != 1 or len(settings.seeds) != 1:
        raise ValueError(f"{caller} samples one method with one seed, but settings holds methods "
                         f"{list(settings.methods)} and seeds {list(settings.seeds)}: pass one of each "
                         "(gcs.compare runs several)")
    if not takes_top_k and settings.top_k is not None:
        raise ValueError(f"{caller} takes no top_k (its race is read over the whole vocabulary; top_p is "
                         f"supported), but settings has top_k={settings.top_k}")
    if not takes_ensemble and settings.ensemble:
        raise ValueError(f"{caller} does not ensemble, but settings has ensemble={settings.ensemble}")
    return settings


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


@functools.cache
def option_names() -> frozenset[str]:
    """Every keyword that a public gcs function takes (``gcs.__all__``)."""
    import gcs

    names: set[str] = set()
    for name in gcs.__all__:
        function = getattr(gcs, name)
        if inspect.isfunction(function):
            names |= {parameter.name for parameter in inspect.signature(function).parameters.values()
                      if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)}
    return frozenset(names)


def refuse_gcs_options(entry_point: Callable, generate_kwargs: dict) -> None:
    """TypeError where an entry point's extra keywords (``**generate_kwargs``, passed on to transformers' ``generate``)
    hold one of gcs's own options that this entry point does not take: ``gcs.sweep(temperature=0.5)`` ran the
    default temperatures (transformers ignores a temperature under gcs's sampling), ``gcs.compare(seed=3)`` failed in
    transformers after loading the model. Names the keyword and the entry point's own option nearest to it.

    >>> def compare(prompts, *, seeds=(0,), **generate_kwargs): ...
    >>> refuse_gcs_options(compare, {"min_new_tokens": 4})  # transformers' own: passed on
    >>> refuse_gcs_options(compare, {"seed": 3})
    Traceback (most recent call last):
    ...
    gcs.runtime.arguments.ArgumentTypeError: gcs.compare got an unexpected keyword argument 'seed' (did you mean ...
    """
    own = [name for name, parameter in inspect.signature(entry_point).parameters.items()
           if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)]
    for keyword in generate_kwargs:
        if keyword in option_names():
            nearest = difflib.get_close_matches(keyword, own, n=1, cutoff=0.6)
            hint = f" (did you mean {nearest[0]!r}?)" if nearest else ""
            raise ArgumentTypeError(f"gcs.{entry_point.__name__} got an unexpected keyword argument {keyword!r}{hint}; "
                                    f"its extra keywords go to transformers' generate, and {keyword!r} is one of "
                                    "gcs's own options")
