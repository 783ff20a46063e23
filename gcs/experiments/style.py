"""Stylistic consistency (section 6.3, Table 2): p_repeat per style dimension, IS vs GCSwR.

For each seed (one Gumbel latent vector) the model answers every question of a set;
each response gets a label per classifier ("python", "numbered", True, ...). For each
dimension "classifier = label", p_repeat is the probability that two responses drawn
with one seed to two different questions agree on it, estimated without bias per seed
(``gcs.p_repeat``, appendix C) and averaged over seeds. Under IS the seed only names an
independent stream, so p_repeat = p^2 + (1-p)^2; shared noise raises it.

Each response is labelled by ``Classifier`` objects: the rule-based ones (``RULE_CLASSIFIERS``), an ``LLMJudge``
or any other (``gcs.experiments.classifiers``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import pandas as pd

from gcs.checks import DEFAULT_MAX_NEW_TOKENS, METHOD_NAMES
from gcs.engines.batch import Row, check_plain_text
from gcs.engines.batching import Progress, check_batch_rows, check_progress, run_batches
from gcs.engines.endpoints import EngineChoice
from gcs.engines.models import Model, resolve_model
from gcs.experiments.classifiers import Classifier, check_classifiers
from gcs.experiments.data import Group, as_groups
from gcs.experiments.results import finished_keys
from gcs.runtime.arguments import ArgumentTypeError, check_callback, check_stop
from gcs.runtime.keywords import keywords_checked
from gcs.sampling.theory import p_repeat
from gcs.settings import SamplingSettings, settings_for
from gcs.stats.intervals import standard_error

STYLE_KEYS = ("question", "method", "seed")


@keywords_checked
def style_responses(
    questions: Sequence[Group] | Sequence[str],
    *, methods: Sequence[str] | str = ("is", "gcswr"),
    seeds: int | Iterable[int] = 20,
    temperature: float = 1.0,
    max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    model: Model | str | None = None,
    settings: SamplingSettings | None = None,
    batch_rows: int | None = None,
    resume: pd.DataFrame | Iterable[tuple] = (),
    on_results: Callable[[pd.DataFrame], None] | None = None,
    progress: Progress = False,
    stop: threading.Event | None = None,
    engine: EngineChoice = "transformers",
) -> pd.DataFrame:
    """Responses to every question under every (method, seed), for the style experiment (Table 2).

    Each question is the first prompt of its group. All questions answered with one seed share its noise (gcs, gcswr).

    Args:
        questions: ``Group`` objects (their first prompt is asked) or questions.
        methods: a list or a comma-separated string of methods.
        seeds: a count (0..n-1) or a list.
        temperature: 0 is greedy; else at least ``MIN_TEMPERATURE``.
        max_new_tokens: at most ``MAX_NEW_TOKENS``.
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.
        settings: a ``gcs.SamplingSettings`` (no ensembling) in place of methods, seeds, temperature and
            max_new_tokens (and bringing its top_k and top_p).
        batch_rows: rows per batch (None: automatic).
        resume: an earlier run's results (its frame, or the rows ``on_results`` received, e.g. read back from a file)
            or their cell keys: those cells are not run again, and the frame returned holds the cells this call ran.
        on_results: receives each finished batch's rows.
        progress: True for a tqdm bar (gradio's ``Progress(track_tqdm=True)`` follows it), a tqdm-like bar
            (``update(n)`` gets the cells done) or a callback ``progress(done, total)``.
        stop: a ``threading.Event``; setting it ends the run after the current token with ``gcs.Cancelled``; batches
            already passed to ``on_results`` stay there.
        engine: "transformers", "vllm" or served endpoints (a ``gcs.Endpoint`` or a list).

    Returns:
        Columns question, method, seed, prompt, response: what this call answered.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> frame = gcs.style_responses(["Write hello world in Python."], seeds=2, max_new_tokens=4)
        >>> frame[["method", "seed"]].values.tolist()
        [['is', 0], ['is', 1], ['gcswr', 0], ['gcswr', 1]]
    """
    if isinstance(questions, str) or not isinstance(questions, Sequence):
        raise ArgumentTypeError(f"questions must be a list of questions (strings) or of gcs.Group, got "
                                f"{type(questions).__name__}")
    if not questions:
        raise ValueError("questions must not be empty")
    if all(isinstance(q, str) for q in questions):
        questions = [Group(str(i), (cast(str, q),)) for i, q in enumerate(questions)]  # all strings, as checked
    questions = as_groups(questions)
    settings = settings_for(style_responses, settings, methods=methods, seeds=seeds, temperature=temperature,
                            max_new_tokens=max_new_tokens)
    done = finished_keys(resume, STYLE_KEYS)
    check_progress(progress)
    check_batch_rows(batch_rows)
    check_stop(stop)
    check_callback(on_results, "on_results")
    model = resolve_model(model)
    check_plain_text([question.prompts[0] for question in questions], model, "questions")
    todo = [(q, m, s) for m in settings.methods for s in settings.seeds for q in questions if (q.id, m, s) not in done]
    columns = [*STYLE_KEYS, "prompt", "response"]
    frames = []

    def rows_of(unit: Any) -> list[Row]:  # a unit is (question, method, seed); run_batches types it object
        return [Row(unit[0].prompts[0], unit[1], unit[2])]

    for chunk, decoded in run_batches(todo, rows_of, lambda unit: settings, model, batch_rows,
                                      progress=progress, description="style", stop=stop, engine=engine):
        frame = pd.DataFrame.from_records(
            [{"question": q.id, "method": m, "seed": s, "prompt": q.prompts[0], "response": row["response"]}
             for (q, m, s), (row,) in zip(chunk, decoded, strict=True)],
            columns=columns,
        )
        frames.append(frame)
        if on_results is not None:
            on_results(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def label_responses(responses: pd.DataFrame, *, classifiers: Iterable[Classifier | str]) -> pd.DataFrame:
    """``responses`` with one label column per classifier.

    Args:
        responses: a ``style_responses`` frame.
        classifiers: ``Classifier`` objects or the names of ``RULE_CLASSIFIERS``.

    Returns:
        A copy of ``responses`` with a column per classifier.

    Examples:
        >>> import pandas as pd
        >>> responses = pd.DataFrame({"question": ["q1", "q2", "q1", "q2"], "method": "is", "seed": [0, 0, 1, 1],
        ...                           "prompt": "", "response": ["```\\nx = 1\\n```", "plain", "```y```", "```z```"]})
        >>> label_responses(responses, classifiers=["has_code_block"])["has_code_block"].tolist()
        [True, False, False, False]
    """
    labelled = responses.copy()
    for classifier in check_classifiers(classifiers):
        labelled[classifier.name] = classifier.labels(list(labelled["prompt"]), list(labelled["response"]))
    return labelled


def style_consistency(labelled: pd.DataFrame, *, classifiers: Iterable[Classifier | str]) -> pd.DataFrame:
    """p_repeat per (dimension, method): mean ± std.err over seeds of the per-seed unbiased estimate.

    A multi-valued classifier gives one binary dimension per label seen ("code_language = python"); a boolean one gives
    a single dimension. Seeds with fewer than two questions answered are left out (the estimator needs two).

    Args:
        labelled: a ``label_responses`` frame.
        classifiers: the classifiers it was labelled with.

    Returns:
        Columns dimension, method, p_repeat, stderr, seeds.

    Examples:
        >>> import pandas as pd
        >>> responses = pd.DataFrame({"question": ["q1", "q2", "q1", "q2"], "method": "is", "seed": [0, 0, 1, 1],
        ...                           "prompt": "", "response": ["```\\nx = 1\\n```", "plain", "```y```", "```z```"]})
        >>> labelled = label_responses(responses, classifiers=["has_code_block"])
        >>> style_consistency(labelled, classifiers=["has_code_block"]).to_dict("records")
        [{'dimension': 'has_code_block', 'method': 'is', 'p_repeat': 0.5, 'stderr': 0.5, 'seeds': 2}]
    """
    records = []
    for classifier in check_classifiers(classifiers):
        values = labelled[classifier.name]
        boolean = values.map(lambda v: isinstance(v, bool)).all()
        levels = [True] if boolean else sorted(values.astype(str).unique())
        for level in levels:
            dimension = classifier.name if boolean else f"{classifier.name} = {level}"
            hits = values.astype(bool) if boolean else values.astype(str) == level
            for method, part in labelled.assign(hit=hits).groupby("method", sort=False):
                per_seed = [p_repeat(g["hit"].tolist()) for _, g in part.groupby("seed") if len(g) >= 2]
                series = pd.Series(per_seed, dtype=float)
                records.append(
                    {
                        "dimension": dimension,
                        "method": method,
                        "p_repeat": series.mean(),
                        "stderr": standard_error(series),
                        "seeds": len(series),
                    }
                )
    return pd.DataFrame.from_records(records, columns=["dimension", "method", "p_repeat", "stderr", "seeds"])


def style_table(consistency: pd.DataFrame) -> pd.DataFrame:
    """Table 2's layout: rows = style dimensions, columns = methods, "p_repeat ± std.err".

    Args:
        consistency: a ``style_consistency`` frame.

    Returns:
        The table.

    Examples:
        >>> import pandas as pd
        >>> responses = pd.DataFrame({"question": ["q1", "q2", "q1", "q2"], "method": "is", "seed": [0, 0, 1, 1],
        ...                           "prompt": "", "response": ["```\\nx = 1\\n```", "plain", "```y```", "```z```"]})
        >>> labelled = label_responses(responses, classifiers=["has_code_block"])
        >>> style_table(style_consistency(labelled, classifiers=["has_code_block"])).to_dict()
        {'IS': {'has_code_block': '0.50 ± 0.50'}}
    """
    table = consistency.assign(
        cell=[f"{p:.2f} ± {e:.2f}"
              for p, e in zip(consistency["p_repeat"], consistency["stderr"].fillna(0), strict=True)]
    ).pivot(index="dimension", columns="method", values="cell")
    order = [m for m in ("is", "gcs", "gcswr") if m in table.columns]
    table = table[order]
    table.columns = [METHOD_NAMES[m] for m in order]
    return table
