"""The style experiment's classifiers: each labels a response along one style dimension (section 6.3, Table 2).

Rule-based classifiers decide what rules can (``RULE_CLASSIFIERS``):

    >>> code_language("Here you go:\\n```python\\nprint('hi')\\n```")
    'python'
    >>> list_style("1. Paris\\n2. Rome\\n3. Oslo")
    'numbered'
    >>> is_terse("Paris, Rome, Oslo, Madrid and Lisbon.")
    True

Anything else plugs in as a ``Classifier``: a name and a function from (question,
response) to a label. ``LLMJudge`` is one, asking a language model the appendix G
prompts and reading its answer. ``gcs.experiments.style`` runs the experiment with them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from gcs.engines.models import Model
from gcs.generation.responses import generate
from gcs.runtime.arguments import ArgumentTypeError
from gcs.runtime.names import parse_names
from gcs.runtime.quoting import quoted

TERSE_WORDS = 40  # a response of fewer words is terse: a list of five names fits, an explanation does not
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
    items = [classifiers] if isinstance(classifiers, str) else list(classifiers)
    result = []
    for item in items:
        if isinstance(item, str):  # rule names, by the one rule for lists of names (gcs.runtime.names)
            result += [RULE_CLASSIFIERS[name] for name in
                       parse_names(item, RULE_CLASSIFIERS, what="classifier", empty_ok=len(items) > 1)]
        elif isinstance(item, Classifier):
            result.append(item)
        else:
            raise ArgumentTypeError(f"a classifier must be a gcs.Classifier or a rule name, got "
                                    f"{type(item).__name__}")
    if not result:
        raise ValueError("classifiers must not be empty")
    return list(dict.fromkeys(result))
