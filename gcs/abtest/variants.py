"""Shared luck for A/B: did the answers change because of my change, or by luck?

    a, b = gcs.Variant(), gcs.Variant(system="Answer in one sentence.")
    frame = gcs.ab(["What is DNA?", "Why is the sky blue?"], a, b, seeds=range(16))
    gcs.ab_report(frame).lines   # -> ['... B is shorter than A by ... tokens (95 % CI ...): beyond noise.', ...]

A ``Variant`` is one arm: a model (and its dtype), a system message, a prompt template, a temperature and a
top-p. Both arms answer every prompt with every seed under one method, so under GCS/GCSwR they share their
noise (it is keyed by seed and token id): a seed's two answers differ only where the change moved a race,
and the paired difference of a score over seeds has far less variance than between independent runs
(common random numbers). With ``control=True`` the same prompts and seeds are answered once more under IS,
each arm with IS streams of its own (independent answers, even where the arms are equal), so
``gcs.ab_report`` can say how many seeds the shared luck saved.

Arms of one model share batches (where their sampling settings are equal); arms that differ in model or
dtype run in batches of their own. A row's answer does not depend on its batch (``gcs.engines.batch``), so either
way is exact. The noise is keyed by token id, so variants whose vocabularies differ are refused.
"""

from __future__ import annotations

import string
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch
from tqdm.auto import tqdm

from gcs.abtest.scores import Score, check_scores, pair_scores
from gcs.checks import (
    DEFAULT_MAX_NEW_TOKENS,
    ArgumentTypeError,
    check_count,
    check_engine,
    check_max_new_tokens,
    check_method,
    check_prompts,
    check_sampling_settings,
    check_seeds,
    check_temperature,
    quoted,
)
from gcs.engines.batch import Row, check_plain_text, prompt_stream
from gcs.engines.batching import auto_batch_rows, run_batches
from gcs.engines.models import Model, check_dtype, load_model
from gcs.engines.prompts import format_prompt
from gcs.settings import SamplingSettings

END = -1  # an answer's end, as a token: two answers that stop at different places part there
KEYS = ("prompt_index", "seed", "method")
FRAME_COLUMNS = ("prompt_index", "prompt", "method", "seed", "answer_a", "answer_b", "identical", "parts_at",
                 "n_tokens_a", "n_tokens_b", "finished_a", "finished_b", "token_ids_a", "token_ids_b", "aligned")


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

    ``model``: a loaded ``gcs.Model``, a transformers id or local path, or None (the embedded default);
    ``dtype``: the dtype to load it in (a name or a torch dtype; None: ``gcs.load_model``'s default; a loaded
    model is used as it is, so its dtype must match); ``system``: a system message (None: the chat template's
    default; ``gcs.format_prompt``); ``template``: the user turn, a ``str.format`` template with ``{prompt}``;
    ``temperature``, ``top_p``: as in ``gcs.generate``; ``name``: the arm's name in reports.

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


def arms(a: Variant, b: Variant, max_new_tokens: int) -> tuple[Arm, Arm]:
    """Both variants loaded and checked: their vocabularies equal, their system messages accepted."""
    for slot, variant in (("a", a), ("b", b)):
        if not isinstance(variant, Variant):
            raise ArgumentTypeError(f"{slot} must be a gcs.Variant, got {type(variant).__name__}")
    names = (a.name or "A", b.name or "B")
    if names[0] == names[1]:
        raise ValueError(f"the variants need different names to be told apart, both are {quoted(names[0])}")
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
        settings = SamplingSettings(temperature=variant.temperature, top_p=variant.top_p,
                                    max_new_tokens=max_new_tokens)
        ready.append(Arm(slot, name, variant, model, settings))
    same_vocabulary(ready[0].model, ready[1].model)
    return ready[0], ready[1]


def parts_at(ids_a: Sequence[int], finished_a: bool, ids_b: Sequence[int], finished_b: bool) -> int | None:
    """The first token index where two answers differ (an answer's end counts as a token there), None if identical.

    >>> parts_at([5, 6], True, [5, 6], True), parts_at([5, 6], True, [5, 6, 8], False)
    (None, 2)
    >>> parts_at([5, 9], False, [5, 6], False)
    1
    """
    a, b = [*ids_a, *([END] if finished_a else [])], [*ids_b, *([END] if finished_b else [])]
    for index, (x, y) in enumerate(zip(a, b, strict=False)):  # up to the shorter answer's end
        if x != y:
            return index
    return None if len(a) == len(b) else min(len(a), len(b))


def _keys(n_prompts: int, seeds: list[int], methods: list[str], skip: Iterable[tuple]) -> list[tuple[int, int, str]]:
    skip = {(int(i), int(s), str(m)) for i, s, m in skip}
    keys = [(i, s, m) for m in methods for s in seeds for i in range(n_prompts)]
    return [key for key in keys if key not in skip]


def _answers(pair: tuple[Arm, Arm], prompts: list[str], keys: list[tuple], batch_rows: int | None, engine: str,
             stop: threading.Event | None) -> dict[tuple[str, tuple], dict]:
    """Both arms' decoded answer to every key, by (slot, key); arms of one model share its batches."""
    answers = {}

    def settings_of(unit: Any) -> SamplingSettings:  # a unit is (arm, key); run_batches types it object
        return unit[0].settings

    for model in {id(arm.model): arm.model for arm in pair}.values():
        units = [(arm, key) for arm in pair if arm.model is model for key in keys]
        rows_of = lambda unit: [unit[0].row(prompts[unit[1][0]], unit[1][2], unit[1][1])]  # noqa: E731
        for done, decoded in run_batches(units, rows_of, settings_of, model, batch_rows, None, description="ab",
                                         stop=stop, engine=engine):
            answers.update({(arm.slot, key): rows[0] for (arm, key), rows in zip(done, decoded, strict=True)})
    return answers


def _frame(pair: tuple[Arm, Arm], prompts: list[str], keys: list[tuple], answers: dict, scores: list[Score],
           pair_names: list[str]) -> pd.DataFrame:
    """One row per key: both answers, where they part, the pair scores and each arm's scores."""
    a, b = ([answers[(slot, key)] for key in keys] for slot in "ab")

    def where(i: int) -> str:  # answer i of both arms' answers (A's, then B's), named for an error message
        prompt, seed, method = keys[i % len(keys)]
        return f"{pair[i // len(keys)].name}'s answer to prompt {prompt} under seed {seed} ({method})"

    parted = [parts_at(x["token_ids"], x["finished"], y["token_ids"], y["finished"]) for x, y in zip(a, b, strict=True)]
    columns = {"prompt_index": [k[0] for k in keys], "prompt": [prompts[k[0]] for k in keys],
               "method": [k[2] for k in keys], "seed": [k[1] for k in keys],
               "answer_a": [x["response"] for x in a], "answer_b": [y["response"] for y in b],
               "identical": [p is None for p in parted], "parts_at": pd.Series(parted, dtype=object)}
    for field in ("n_tokens", "finished", "token_ids"):
        columns[f"{field}_a"], columns[f"{field}_b"] = [x[field] for x in a], [y[field] for y in b]
    columns.update(pair_scores(pair_names, columns["answer_a"], columns["answer_b"], columns["token_ids_a"],
                               columns["token_ids_b"]))
    for score in scores:
        values = score.of(columns["answer_a"] + columns["answer_b"], columns["n_tokens_a"] + columns["n_tokens_b"],
                          where)
        columns[f"{score.label}_a"], columns[f"{score.label}_b"] = values[: len(keys)], values[len(keys):]
    return pd.DataFrame(columns)


def ab(prompts: Sequence[str], a: Variant, b: Variant, *, seeds: int | Iterable[int] = range(16), method: str = "gcswr",
       metrics: Sequence[str] | str = ("length", "e5_between"), scorer: Callable[[str], float] | None = None,
       max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, engine: str | None = None, control: bool = True,
       batch_rows: int | None = None,
       skip: Iterable[tuple] = (), on_results: Callable[[pd.DataFrame], None] | None = None, progress=None,
       show_progress: bool = False, stop: threading.Event | None = None) -> pd.DataFrame:
    """Every prompt answered by both variants with every seed, the same luck for both: one row per prompt x seed.

    ``method`` ("gcswr", "gcs" or "is") is shared by both arms, so under GCS/GCSwR a seed's two answers share
    their noise; ``control=True`` adds the same rows under IS (each arm with IS streams of its own), the
    independent-sampling control ``gcs.ab_report`` measures the saving against. ``seeds``: a count or a list.
    ``metrics``: arm scores ("length", "contains:WORD", "regex:PATTERN", "e5_to:REFERENCE") and pair scores
    ("e5_between", "aligned"; ``gcs.abtest.scores``); ``scorer``: any function answer -> number, one more arm score.

    Columns: prompt_index, prompt, method, seed, answer_a, answer_b, identical (the same tokens, ended alike),
    parts_at (the first token index where the answers differ, an end counting as a token; None when identical),
    n_tokens_*, finished_*, token_ids_*, aligned (their aligned agreement), e5_between (when asked for), and
    LABEL_a, LABEL_b per arm score. ``frame.attrs["arms"]`` holds the arms' names (``name``, else "A" and "B").

    ``engine``: "transformers" (None) or "vllm". ``batch_rows``: rows per generate call (default: automatic);
    the rows are done in chunks of that many keys, each handed to ``on_results`` once both arms answered it, so a
    caller can save results as they come and pass the keys (prompt_index, seed, method) it has as ``skip``.
    ``progress`` (a tqdm-like bar or a callback ``progress(done, total)``), ``show_progress`` and ``stop`` work as
    in ``gcs.sweep``. Bad input (a bad template, regex or metric, variants with other vocabularies, repeated
    prompts) raises ``ValueError`` before any answer is generated.
    """
    prompts = check_prompts(prompts)
    repeated = next((i for i, p in enumerate(prompts) if prompts.index(p) != i), None)
    if repeated is not None:
        raise ValueError(f"prompts[{repeated}] repeats prompts[{prompts.index(prompts[repeated])}]: a prompt answered "
                         "twice with one seed is one observation counted twice")
    method, seeds = check_method(method), check_seeds(seeds)
    scores, pair_names = check_scores(metrics, scorer)
    max_new_tokens = check_max_new_tokens(max_new_tokens)
    engine = check_engine("transformers" if engine is None else engine)
    if not isinstance(control, bool):
        raise ArgumentTypeError(f"control must be True or False, got {type(control).__name__} {quoted(control)}")
    if batch_rows is not None:
        check_count(batch_rows, "batch_rows", 1, 1_000_000)
    pair = arms(a, b, max_new_tokens)
    check_plain_text(prompts, pair[0].model, "prompts")  # (both models read one vocabulary: arms checks it)
    for arm in pair:  # what the model reads: a token split between the template and a prompt is whole here
        check_plain_text([arm.variant.text(p) for p in prompts], arm.model,
                         f"the template of variant {quoted(arm.name)} filled with prompts")
    methods = list(dict.fromkeys([method, *(["is"] if control else [])]))
    keys = _keys(len(prompts), seeds, methods, skip)
    chunk = batch_rows or (len(keys) if engine == "vllm" else auto_batch_rows(pair[0].model, max_new_tokens + 128))
    frames = []
    with tqdm(total=len(keys), desc="ab", unit="pair", disable=not show_progress) as bar:
        for start in range(0, len(keys), max(1, chunk)):
            part = keys[start : start + chunk]
            answers = _answers(pair, prompts, part, batch_rows, engine, stop)
            frame = _frame(pair, prompts, part, answers, scores, pair_names)
            frames.append(frame)
            if on_results is not None:
                on_results(frame)
            bar.update(len(part))
            if hasattr(progress, "update"):
                progress.update(len(part))
            elif progress is not None:
                progress(start + len(part), len(keys))
    columns = [*FRAME_COLUMNS, *(["e5_between"] if "e5_between" in pair_names else []),
               *(f"{score.label}_{slot}" for score in scores for slot in "ab")]
    frame = pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
    frame.attrs["arms"] = (pair[0].name, pair[1].name)
    return frame
