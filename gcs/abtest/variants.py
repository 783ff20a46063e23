"""The arms of an A/B test: ``Variant`` (a model, its dtype, a system message, a prompt template, a temperature and a
top-p) and ``arms``, the two loaded and checked (one vocabulary: the noise is keyed by token id).

    >>> Variant(template="{prompt} Be brief.", temperature=0.8).describe()
    "template '{prompt} Be brief.', T 0.8"
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from gcs.checks import METHODS, check_sampling_settings, check_temperature, quoted
from gcs.engines.batch import Row, check_plain_text, prompt_stream
from gcs.engines.models import Model, check_dtype, load_model
from gcs.engines.prompts import format_prompt
from gcs.runtime.arguments import ArgumentTypeError
from gcs.settings import SamplingSettings


def check_template(template: str) -> str:
    """A ``str.format`` template holding the field ``{prompt}`` exactly once and no other field.

    >>> check_template("Q: {prompt} (be brief)")
    'Q: {prompt} (be brief)'
    >>> check_template("{prompt} {style}")
    Traceback (most recent call last):
    ...
    ValueError: template must hold the field {prompt} exactly once and no other field, got '{prompt} {style}'
    """
    if not isinstance(template, str):
        raise ArgumentTypeError(f"template must be a string holding {{prompt}}, got {type(template).__name__}")
    try:
        fields = [(name, spec, conversion) for _, name, spec, conversion in string.Formatter().parse(template)
                  if name is not None]
    except ValueError as error:  # a lone "{" or "}": write "{{" or "}}" for a literal brace
        raise ValueError(f"template {quoted(template)} is not a valid str.format template ({error}); "
                         "write {{ and }} for literal braces") from None
    if fields != [("prompt", "", None)]:
        raise ValueError(f"template must hold the field {{prompt}} exactly once and no other field, got "
                         f"{quoted(template)}")
    return template


@dataclass(frozen=True)
class Variant:
    """One arm of ``gcs.ab``: the model and how it is prompted and sampled.

    Args:
        model: a loaded ``gcs.Model``, a transformers id or local path, or None (the embedded default).
        system: a system message (None: the chat template's default; ``gcs.format_prompt``).
        template: the user turn, a ``str.format`` template with exactly one ``{prompt}`` and no other field.
        temperature: as in ``gcs.generate``.
        top_p: as in ``gcs.generate``.
        dtype: the dtype to load the model in (a name or a torch dtype; None: ``gcs.load_model``'s default); a loaded
            model is used as it is, so its dtype must match.
        name: the arm's name in reports.

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a template without ``{prompt}`` or with another field, or another bad value.

    Examples:
        >>> Variant(template="{prompt} Be brief.", temperature=0.8).describe()
        "template '{prompt} Be brief.', T 0.8"
        >>> Variant(template="{prompt} Be brief.").text("Why is the sky blue?")
        'Why is the sky blue? Be brief.'
    """

    model: Model | str | None = None
    system: str | None = None
    template: str = "{prompt}"
    temperature: float = 1.0
    top_p: float | None = None
    dtype: torch.dtype | None = None
    name: str | None = None

    if TYPE_CHECKING:
        # What the generated __init__ accepts: __post_init__ turns a dtype's name into the torch dtype (check_dtype).
        def __init__(self, model: Model | str | None = None, system: str | None = None, template: str = "{prompt}",
                     temperature: float = 1.0, top_p: float | None = None, dtype: torch.dtype | str | None = None,
                     name: str | None = None) -> None: ...

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen dataclass)
        if self.model is not None and not isinstance(self.model, (Model, str)):
            raise ArgumentTypeError(f"model must be a gcs.Model, a model name or None, got "
                                    f"{type(self.model).__name__} {quoted(self.model)}")
        if isinstance(self.model, str) and not self.model.strip():
            raise ValueError(f"model must be a gcs.Model, a model name or None, got {quoted(self.model)}")
        for field in ("system", "name"):
            value = getattr(self, field)
            if value is not None and not isinstance(value, str):
                raise ArgumentTypeError(f"{field} must be None or a non-blank string, got {type(value).__name__} "
                                        f"{quoted(value)}")
            if value is not None and not value.strip():
                raise ValueError(f"{field} must be None or a non-blank string, got {quoted(value)}")
        check_template(self.template)
        check_sampling_settings(self.temperature, None, self.top_p)
        set_("temperature", check_temperature(self.temperature))
        set_("top_p", None if self.top_p is None else float(self.top_p))
        set_("dtype", check_dtype(self.dtype))

    def text(self, prompt: str) -> str:
        """The user turn this arm sends for ``prompt``."""
        return self.template.format(prompt=prompt)

    def describe(self) -> str:
        """What this arm sets, in a few words (its defaults left out)."""
        model = self.model.name if isinstance(self.model, Model) else self.model
        parts = [f"model {model}" if model is not None else "", str(self.dtype).removeprefix("torch.") if self.dtype
                 else "", f"system {self.system!r}" if self.system else "",
                 f"template {self.template!r}" if self.template != "{prompt}" else "",
                 f"T {self.temperature:g}" if self.temperature != 1.0 else "",
                 f"top-p {self.top_p:g}" if self.top_p is not None else ""]
        return ", ".join(p for p in parts if p) or "the defaults"

    def load(self) -> Model:
        """The arm's model, loaded in its dtype (a loaded model as given)."""
        if not isinstance(self.model, Model):
            return load_model(self.model, dtype=self.dtype)
        dtype = next(self.model.model.parameters()).dtype
        if self.dtype is not None and self.dtype != dtype:
            raise ValueError(f"variant {quoted(self.name or self.describe())}: dtype {self.dtype} asks to convert the "
                             f"loaded model {quoted(self.model.name)} ({dtype}); pass the model by name to load it in "
                             "that dtype, or convert it yourself")
        return self.model


@dataclass(frozen=True)
class Arm:
    """A variant ready to run: its slot ("a" or "b"), its name, its loaded model and sampling settings."""

    slot: str
    name: str
    variant: Variant
    model: Model
    settings: SamplingSettings

    def row(self, prompt: str, method: str, seed: int) -> Row:
        """The row answering ``prompt``; its IS stream is the arm's own, so two arms never share IS draws."""
        text = self.variant.text(prompt)
        return Row(text, method, seed, system=self.variant.system, stream=prompt_stream(f"gcs.ab {self.slot}\n{text}"))


def same_vocabulary(a: Model, b: Model) -> None:
    """Refuse two models whose tokenizers differ in vocabulary: the noise is keyed by token id."""
    tokenizer_a: Any = a.tokenizer  # transformers tokenizers (gcs.Model types them as object)
    tokenizer_b: Any = b.tokenizer
    if tokenizer_a is tokenizer_b:
        return
    if len(tokenizer_a) != len(tokenizer_b) or tokenizer_a.get_vocab() != tokenizer_b.get_vocab():
        raise ValueError(f"the variants' models {a.name!r} ({len(tokenizer_a)} tokens) and {b.name!r} "
                         f"({len(tokenizer_b)} tokens) have different vocabularies: shared luck keys the noise by "
                         "token id, so their answers could not share it; compare models with one tokenizer")


def arms(a: Variant, b: Variant, max_new_tokens: int, context: int | None = None) -> tuple[Arm, Arm]:
    """Both variants loaded and checked: their vocabularies equal, their system messages accepted. ``context``: the
    window of method "ctx" (None: its default), carried by each arm's settings."""
    for slot, variant in (("a", a), ("b", b)):
        if not isinstance(variant, Variant):
            raise ArgumentTypeError(f"{slot} must be a gcs.Variant, got {type(variant).__name__}")
    names = (a.name or "A", b.name or "B")
    if names[0] == names[1]:
        raise ValueError(f"a and b need different names to be told apart, both are {quoted(names[0])}")
    ready = []
    for slot, name, variant in zip("ab", names, (a, b), strict=True):
        model = variant.load()
        check_plain_text(variant.template, model, f"the template of variant {quoted(name)}")
        if variant.system is not None:
            check_plain_text(variant.system, model, f"the system message of variant {quoted(name)}")
            try:  # a chat template may refuse a system turn (it raises a template error of its own)
                format_prompt("probe", tokenizer=model.tokenizer, is_chat=model.is_chat, examples=(),
                              system=variant.system)
            except Exception as error:  # noqa: BLE001
                raise ValueError(f"variant {name}: the chat template of {model.name!r} refuses a system message "
                                 f"({error})") from None
        # the settings' methods are not the rows' (each row names its own); "ctx" is listed so they may carry context
        settings = SamplingSettings(methods=("ctx",) if context is not None else METHODS,
                                    temperature=variant.temperature, top_p=variant.top_p,
                                    max_new_tokens=max_new_tokens, context=context)
        ready.append(Arm(slot, name, variant, model, settings))
    same_vocabulary(ready[0].model, ready[1].model)
    return ready[0], ready[1]
