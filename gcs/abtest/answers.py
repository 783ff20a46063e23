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

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd

from gcs.abtest.scores import Score, check_scores, pair_scores
from gcs.abtest.variants import Arm, Variant, arms
from gcs.checks import DEFAULT_MAX_NEW_TOKENS, check_engine, quoted
from gcs.engines.batch import check_plain_text
from gcs.engines.batching import Progress, check_batch_rows, check_progress, default_batch_rows, reporting, run_batches
from gcs.engines.endpoints import EngineChoice
from gcs.experiments.results import finished_keys
from gcs.runtime.arguments import ArgumentTypeError, check_callback, check_prompts, check_stop
from gcs.runtime.keywords import keywords_checked
from gcs.settings import SamplingSettings, check_settings, settings_for

END = -1  # an answer's end, as a token: two answers that stop at different places part there
KEYS = ("prompt_index", "seed", "method")
FRAME_COLUMNS = ("prompt_index", "prompt", "method", "seed", "answer_a", "answer_b", "identical", "parts_at",
                 "n_tokens_a", "n_tokens_b", "finished_a", "finished_b", "token_ids_a", "token_ids_b", "aligned")


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


def _from_settings(settings: SamplingSettings) -> tuple[str, list[int], int, int | None]:
    """``ab``'s method, seeds, max_new_tokens and context from ``settings``, which must leave sampling to the
    variants."""
    check_settings(settings)
    if len(settings.methods) != 1:
        raise ValueError(f"gcs.ab shares one method between its arms (control=True adds IS), but settings holds "
                         f"methods {list(settings.methods)}")
    if (settings.temperature, settings.top_k, settings.top_p, settings.ensemble) != (1.0, None, None, 0):
        raise ValueError("gcs.ab samples each arm as its Variant says: set temperature and top_p on the variants "
                         "and leave the settings' temperature, top_k, top_p and ensemble at their defaults")
    return settings.methods[0], list(settings.seeds), settings.max_new_tokens, settings.context


def _keys(n_prompts: int, seeds: list[int], methods: list[str], resume) -> list[tuple[int, int, str]]:
    skip = {(int(i), int(s), str(m)) for i, s, m in finished_keys(resume, KEYS)}
    keys = [(i, s, m) for m in methods for s in seeds for i in range(n_prompts)]
    return [key for key in keys if key not in skip]


def _answers(pair: tuple[Arm, Arm], prompts: list[str], keys: list[tuple], batch_rows: int | None, engine: Any,
             stop: threading.Event | None) -> dict[tuple[str, tuple], dict]:
    """Both arms' decoded answer to every key, by (slot, key); arms of one model share its batches. ``engine``: as
    ``check_engine`` returns it (a name, or ``gcs.engines.endpoints.Endpoints``)."""
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


@keywords_checked
def ab(prompts: Sequence[str], a: Variant, b: Variant, *, seeds: int | Iterable[int] = range(16), method: str = "gcswr",
       metrics: Sequence[str] | str = ("length", "e5_between"), scorer: Callable[[str], float] | None = None,
       max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS, engine: EngineChoice | None = None, control: bool = True,
       settings: SamplingSettings | None = None, batch_rows: int | None = None,
       resume: pd.DataFrame | Iterable[tuple] = (), on_results: Callable[[pd.DataFrame], None] | None = None,
       progress: Progress = False, stop: threading.Event | None = None) -> pd.DataFrame:
    """Every prompt answered by both variants with every seed, the same luck for both: one row per prompt x seed.

    Arms of one model share its batches; arms that differ in model or dtype run in batches of their own (a row's
    answer does not depend on its batch, so this is exact).

    Args:
        prompts: the prompts, each once.
        a: arm A, a ``gcs.Variant``.
        b: arm B.
        seeds: a count or a list.
        method: "gcswr", "gcs", "is", or "ctx" (its window from ``settings.context``), shared by both arms, so under
            GCS, GCSwR and ctx a seed's two answers share their noise.
        metrics: arm scores ("length", "contains:WORD", "regex:PATTERN", "e5_to:REFERENCE") and pair scores
            ("e5_between", "aligned"; ``gcs.abtest.scores``), a list or a comma-separated string.
        scorer: any function answer -> number, one more arm score.
        max_new_tokens: at most ``MAX_NEW_TOKENS``.
        engine: "transformers" (None), "vllm", or served endpoints (a ``gcs.Endpoint`` or a list; both variants then
            run the client's one model).
        control: add the same rows under IS (each arm with IS streams of its own), the independent-sampling control
            ``gcs.ab_report`` measures the saving against.
        settings: a ``gcs.SamplingSettings`` of one method, in place of method, seeds and max_new_tokens (an arm's
            temperature and top_p are its ``Variant``'s, so the settings' must be the defaults).
        batch_rows: rows per generate call (None: automatic); the rows are done in chunks of that many keys, each
            handed to ``on_results`` once both arms answered it.
        resume: an earlier run's results (its frame, or the rows ``on_results`` received) or their keys
            (prompt_index, seed, method): not answered again.
        on_results: receives each finished chunk's rows.
        progress: as in ``gcs.sweep``.
        stop: as in ``gcs.sweep``.

    Returns:
        Columns prompt_index, prompt, method, seed, answer_a, answer_b, identical (the same tokens, ended alike),
        parts_at (the first token index where the answers differ, an end counting as a token; None when identical),
        n_tokens_*, finished_*, token_ids_*, aligned (their aligned agreement), e5_between (when asked for), and
        LABEL_a, LABEL_b per arm score. ``frame.attrs["arms"]`` holds the arms' names (``name``, else "A" and "B").

    Raises:
        TypeError: an argument of the wrong type.
        ValueError: a bad template, regex or metric, variants with other vocabularies, repeated prompts, before any
            answer is generated.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> frame = gcs.ab(["What is DNA?"], gcs.Variant(), gcs.Variant(system="Answer in one sentence."), seeds=2,
        ...                metrics=["length"], max_new_tokens=4)
        >>> frame[["method", "seed"]].values.tolist()
        [['gcswr', 0], ['gcswr', 1], ['is', 0], ['is', 1]]
    """
    prompts = check_prompts(prompts)
    repeated = next((i for i, p in enumerate(prompts) if prompts.index(p) != i), None)
    if repeated is not None:
        raise ValueError(f"prompts[{repeated}] repeats prompts[{prompts.index(prompts[repeated])}]: a prompt answered "
                         "twice with one seed is one observation counted twice")
    settings = settings_for(ab, settings, method=method, seeds=seeds, max_new_tokens=max_new_tokens)
    method, seeds, max_new_tokens, context = _from_settings(settings)
    scores, pair_names = check_scores(metrics, scorer)
    check_progress(progress)
    check_batch_rows(batch_rows)
    check_stop(stop)
    check_callback(on_results, "on_results")
    finished_keys(resume, KEYS)  # checked before the arms' models load
    engine = check_engine("transformers" if engine is None else engine)
    if not isinstance(control, bool):
        raise ArgumentTypeError(f"control must be True or False, got {type(control).__name__} {quoted(control)}")
    pair = arms(a, b, max_new_tokens, context)
    if not isinstance(engine, str) and pair[0].model is not pair[1].model:
        raise ValueError(f"variants {quoted(pair[0].name)} and {quoted(pair[1].name)} run other models (or dtypes), "
                         "and served endpoints serve one: compare models on the transformers or vLLM engine")
    check_plain_text(prompts, pair[0].model, "prompts")  # (both models read one vocabulary: arms checks it)
    for arm in pair:  # what the model reads: a token split between the template and a prompt is whole here
        check_plain_text([arm.variant.text(p) for p in prompts], arm.model,
                         f"the template of variant {quoted(arm.name)} filled with prompts")
    methods = list(dict.fromkeys([method, *(["is"] if control else [])]))
    keys = _keys(len(prompts), seeds, methods, resume)
    chunk = batch_rows or default_batch_rows(engine, pair[0].model, max_new_tokens, len(keys))
    frames = []
    with reporting(progress, len(keys), "ab", unit="pair") as advance:
        for start in range(0, len(keys), max(1, chunk)):
            part = keys[start : start + chunk]
            answers = _answers(pair, prompts, part, batch_rows, engine, stop)
            frame = _frame(pair, prompts, part, answers, scores, pair_names)
            frames.append(frame)
            if on_results is not None:
                on_results(frame)
            advance(len(part))
    columns = [*FRAME_COLUMNS, *(["e5_between"] if "e5_between" in pair_names else []),
               *(f"{score.label}_{slot}" for score in scores for slot in "ab")]
    frame = pd.concat(frames, ignore_index=True)[columns] if frames else pd.DataFrame(columns=columns)
    frame.attrs["arms"] = (pair[0].name, pair[1].name)
    return frame
