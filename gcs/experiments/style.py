"""Stylistic consistency (section 6.3, Table 2): p_repeat per style dimension, IS vs GCSwR.

For each seed (one Gumbel latent vector) the model answers every question of a set;
each response gets a label per classifier ("python", "numbered", True, ...). For each
dimension "classifier = label", p_repeat is the probability that two responses drawn
with one seed to two different questions agree on it, estimated without bias per seed
(``gcs.p_repeat``, appendix C) and averaged over seeds. Under IS the seed only names an
independent stream, so p_repeat = p^2 + (1-p)^2; shared noise raises it.

Rule-based classifiers decide what rules can (``RULE_CLASSIFIERS``):

    >>> code_language("Here you go:\\n```python\\nprint('hi')\\n```")
    'python'
    >>> list_style("1. Paris\\n2. Rome\\n3. Oslo")
    'numbered'
    >>> is_terse("Paris, Rome, Oslo, Madrid and Lisbon.")
    True

Anything else plugs in as a ``Classifier``: a name and a function from (question,
response) to a label. ``LLMJudge`` is one, asking a language model the appendix G
prompts and reading its answer.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

import pandas as pd

from gcs.checks import DEFAULT_MAX_NEW_TOKENS, METHOD_NAMES, ArgumentTypeError, check_callback, check_stop
from gcs.engines.batch import Row, check_plain_text
from gcs.engines.batching import Progress, check_progress, run_batches
from gcs.engines.endpoints import EngineChoice
from gcs.engines.models import Model, resolve_model
from gcs.experiments.data import Group, as_groups
from gcs.experiments.results import finished_keys
from gcs.generation import generate
from gcs.runtime.quoting import quoted
from gcs.sampling.theory import p_repeat
from gcs.settings import SamplingSettings, check_settings, refuse_beside
from gcs.stats.intervals import standard_error

TERSE_WORDS = 40  # a response of fewer words is terse: a list of five names fits, an explanation does not
STYLE_KEYS = ("question", "method", "seed")

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_LANGUAGE_ALIASES = {
    "py": "python", "python3": "python", "js": "javascript", "node": "javascript", "ts": "typescript",
    "cpp": "c++", "cc": "c++", "cxx": "c++", "c#": "csharp", "cs": "csharp", "sh": "bash", "shell": "bash",
    "rb": "ruby", "golang": "go", "rs": "rust",
}
# Distinctive markers, checked in order, for code blocks without a language tag.
_LANGUAGE_MARKERS = [
    ("c++", r"#include\s*<|std::|cout\s*<<"),
    ("java", r"public\s+static\s+void\s+main|System\.out\.print|public\s+class\s"),
    ("csharp", r"Console\.Write|using\s+System;"),
    ("javascript", r"console\.log|\bfunction\s+\w+\s*\(|=>|\b(?:const|let|var)\s+\w+\s*="),
    ("go", r"\bfunc\s+\w+\s*\(|fmt\.Print"),
    ("rust", r"\bfn\s+\w+\s*\(|println!"),
    ("python", r"^\s*def\s+\w+\s*\(.*\)\s*:|^\s*import\s+\w+|\bprint\s*\(|^\s*for\s+\w+\s+in\s+.*:"),
    ("c", r"\bprintf\s*\(|\bint\s+main\s*\("),
]
_COMMENT = {
    "python": r"(^|\s)#(?!!)|\"\"\"|'''",
    "bash": r"(^|\s)#(?!!)",
    "ruby": r"(^|\s)#",
}
_C_STYLE_COMMENT = r"//|/\*"


def code_blocks(response: str) -> list[tuple[str, str]]:
    """The fenced code blocks of a response as (language tag, code); an unclosed fence runs to the end."""
    return [(tag.lower(), code) for tag, code in _FENCE.findall(response)]


def has_code_block(response: str) -> bool:
    """Contains a fenced (```) code block."""
    return bool(code_blocks(response))


def _language_of(tag: str, code: str) -> str:
    if tag:
        return _LANGUAGE_ALIASES.get(tag, tag)
    for language, pattern in _LANGUAGE_MARKERS:
        if re.search(pattern, code, re.M):
            return language
    return "unknown"


def code_language(response: str) -> str:
    """Language of the first code block (its fence tag, else distinctive syntax); "none" without code."""
    blocks = code_blocks(response)
    return _language_of(*blocks[0]) if blocks else "none"


def starts_with_code(response: str) -> bool:
    """The response opens with a code block, not with prose."""
    return response.lstrip().startswith("```")


def code_has_comments(response: str) -> bool:
    """Some code block contains a comment in its language's syntax (False without code)."""
    for tag, code in code_blocks(response):
        language = _language_of(tag, code)
        pattern = _COMMENT.get(language, _C_STYLE_COMMENT if language != "unknown" else rf"{_C_STYLE_COMMENT}|(^|\s)#")
        if re.search(pattern, code, re.M):
            return True
    return False


def list_style(response: str) -> str:
    """How items are separated: "numbered" (1. / 1)), "lettered" (a. / a)), "bulleted" (- * •) or "none".

    Two or more item lines of one kind are needed to count as a list.
    """
    counts = {
        "numbered": len(re.findall(r"^\s*\d+[.)]\s+\S", response, re.M)),
        "lettered": len(re.findall(r"^\s*[a-zA-Z][.)]\s+\S", response, re.M)),
        "bulleted": len(re.findall(r"^\s*[-*•+]\s+\S", response, re.M)),
    }
    kind, count = max(counts.items(), key=lambda item: item[1])
    return kind if count >= 2 else "none"


def is_terse(response: str) -> bool:
    """Fewer than ``TERSE_WORDS`` (40) words."""
    return len(response.split()) < TERSE_WORDS


class Classifier:
    """A style dimension of the style experiment: a name and a labelling function.

    Args:
        name: the dimension's name.
        label: ``label(question, response) -> label`` (a str or a bool).

    Examples:
        >>> terse = Classifier("terse", lambda question, response: len(response.split()) < 5)
        >>> terse.labels(["Hi?", "Hi?"], ["Hello.", "Hello there, how are you doing today?"])
        [True, False]
    """

    def __init__(self, name: str, label: Callable[[str, str], object]):
        if not isinstance(name, str):
            raise ArgumentTypeError(f"a classifier needs a non-empty name (a string), got {type(name).__name__} "
                                    f"{quoted(name)}")
        if not name.strip():
            raise ValueError("a classifier needs a non-empty name")
        if not callable(label):
            raise ArgumentTypeError(f"classifier {quoted(name)}: label must be a function (question, response) -> "
                                    f"label, got {type(label).__name__}")
        self.name, self.label = name.strip(), label

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def labels(self, questions: Sequence[str], responses: Sequence[str]) -> list:
        """One label per (question, response) pair, in order."""
        return [self.label(q, r) for q, r in zip(questions, responses, strict=True)]


def _rule(function: Callable[[str], object]) -> Classifier:
    return Classifier(function.__name__, lambda question, response: function(response))


RULE_CLASSIFIERS = {
    c.name: c
    for c in map(_rule, (has_code_block, code_language, starts_with_code, code_has_comments, list_style, is_terse))
}
"""The rule-based style classifiers by name (code blocks, code language, list style, terseness, ...)."""
STYLE_SETS = {"coding": ("has_code_block", "code_language", "starts_with_code", "code_has_comments"),
              "lists": ("list_style", "is_terse")}


class LLMJudge(Classifier):
    """A style dimension labelled by a language model asked (greedily) a zero-shot question about each response.

    Labels come from one batched ``generate`` per ``labels`` call.

    Args:
        name: the dimension's name.
        prompt: the question, with ``{response}`` (and optionally ``{question}``) placeholders; appendix G has the
            paper's.
        choices: the labels; a label is the first of them found in the judge's answer, else "unparsed".
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.
        max_new_tokens: the judge's answer length.
    """

    def __init__(self, name: str, prompt: str, choices: Sequence[str], model: Model | str | None = None,
                 max_new_tokens: int = 8):
        if not isinstance(prompt, str):
            raise ArgumentTypeError(f"an LLMJudge prompt must be a string with a {{response}} placeholder, got "
                                    f"{type(prompt).__name__}")
        if "{response}" not in prompt:
            raise ValueError("an LLMJudge prompt needs a {response} placeholder")
        if isinstance(choices, Sequence) and any(not isinstance(c, str) for c in choices):
            raise ArgumentTypeError("LLMJudge choices must be non-empty strings, got "
                                    f"{', '.join(sorted({type(c).__name__ for c in choices}))}")
        if not choices or any(not isinstance(c, str) or not c.strip() for c in choices):
            raise ValueError("LLMJudge choices must be non-empty strings")
        # Longer choices first, so "not terse" is not read as "terse".
        self.choices = sorted((c.strip().lower() for c in choices), key=len, reverse=True)
        self.prompt, self.model, self.max_new_tokens = prompt, model, max_new_tokens
        super().__init__(name, self._label_one)

    def _parse(self, answer: str) -> str:
        answer = answer.lower()
        found = [(answer.find(choice), -len(choice), choice) for choice in self.choices if choice in answer]
        return min(found)[2] if found else "unparsed"

    def _label_one(self, question: str, response: str) -> str:
        return self.labels([question], [response])[0]

    def labels(self, questions: Sequence[str], responses: Sequence[str]) -> list[str]:
        """One label per (question, response) pair, the judge model's greedy answers batched together."""
        prompts = [self.prompt.format(question=q, response=r) for q, r in zip(questions, responses, strict=True)]
        answers = generate(prompts, temperature=0, max_new_tokens=self.max_new_tokens, model=self.model)
        return [self._parse(answer) for answer in answers]


def check_classifiers(classifiers: Iterable[Classifier | str] | str) -> list[Classifier]:
    """Classifier objects from objects or rule names ("list_style", ...; comma-separated accepted)."""
    if not isinstance(classifiers, Iterable):
        raise ArgumentTypeError(f"classifiers must be a list of gcs.Classifier or rule names, or a comma-separated "
                                f"string, got {type(classifiers).__name__}")
    classifiers = classifiers.split(",") if isinstance(classifiers, str) else list(classifiers)
    if not classifiers:
        raise ValueError("classifiers must not be empty")
    result = []
    for classifier in classifiers:
        if isinstance(classifier, str):
            if classifier.strip() not in RULE_CLASSIFIERS:
                raise ValueError(f"unknown classifier {quoted(classifier)}: expected one of "
                                 f"{', '.join(RULE_CLASSIFIERS)}")
            classifier = RULE_CLASSIFIERS[classifier.strip()]
        if not isinstance(classifier, Classifier):
            raise ArgumentTypeError(f"a classifier must be a gcs.Classifier or a rule name, got "
                                    f"{type(classifier).__name__}")
        result.append(classifier)
    return result


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
    refuse_beside(settings, "gcs.style_responses", methods=(methods, ("is", "gcswr")), seeds=(seeds, 20),
                  temperature=(temperature, 1.0), max_new_tokens=(max_new_tokens, DEFAULT_MAX_NEW_TOKENS))
    if settings is None:
        settings = SamplingSettings(methods, seeds, temperature, max_new_tokens=max_new_tokens)
    elif check_settings(settings).ensemble:
        raise ValueError(f"style responses are not ensembled, but settings has ensemble={settings.ensemble}")
    done = finished_keys(resume, STYLE_KEYS)
    check_progress(progress)
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
