"""Rewordings written by the model itself, for distributional ensembling (section 5).

A small model asked to "rewrite this question" often answers it instead ("What is DNA?"
-> "DNA is a molecule ..."), and an answer used as a prompt would poison the ensemble.
So rewording is a checked procedure:

1. the model sees a few worked examples of rewording (few-shot) and samples candidates;
2. a candidate is accepted only if it is one line, reads as a question or request
   (``is_question``), differs from the original, and means the same: its E5 cosine
   similarity to the original is at least ``min_similarity``;
3. prompts still short of ``n`` accepted rewordings get further rounds with fresh
   sub-seeds; after ``attempts`` rounds a prompt keeps the ones it has (maybe none), and
   a warning names it: ensembling then averages over fewer wordings, never over answers.

``reword_report`` also returns how many candidates were accepted (``bench/bench_reword.py``
prints it for the built-in sets).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from gcs.checks import check_seed
from gcs.engines.batch import Row, check_plain_text
from gcs.engines.batching import run_batches
from gcs.engines.models import Model, resolve_model
from gcs.runtime.arguments import check_count, check_prompts
from gcs.sampling.noise import derive_seed
from gcs.settings import SamplingSettings

REQUEST = "Reword this question without answering it: {question}"
EXAMPLES = (
    ("What is the capital of France?", "Which city is the capital of France?"),
    ("How do vaccines work?", "In what way does a vaccine protect the body?"),
    ("Explain why the sky is blue.", "Why does the sky look blue?"),
    ("Name three famous painters.", "Can you list three well-known painters?"),
)
FEW_SHOT = tuple((REQUEST.format(question=q), a) for q, a in EXAMPLES)  # the examples as the model sees them
MIN_SIMILARITY = 0.86
QUESTION_START = re.compile(
    r"^(what|why|how|when|where|who|whom|whose|which|is|are|was|were|do|does|did|can|could|should|would|will|"
    r"shall|may|might|have|has|explain|describe|name|list|tell|give|define|compare|summari[sz]e|write|suggest|"
    r"outline|identify|provide|state|discuss|in what|for what|from what|to what)\b",
    re.IGNORECASE,
)


def is_question(text: str) -> bool:
    """A single line that asks: ends with "?" or opens like a question or a request.

    >>> (is_question("Why does the sky look blue?"), is_question("Explain photosynthesis."),
    ...  is_question("DNA is a molecule."))
    (True, True, False)
    """
    text = text.strip()
    return bool(text) and "\n" not in text and (text.endswith("?") or bool(QUESTION_START.match(text)))


def _normalised(text: str) -> str:
    return re.sub(r"[\W_]+", " ", text.lower()).strip()


_LABEL = re.compile(r"^(?:[\w-]+ ){0,3}?(?:question|reword\w*|rewrit\w*|rephras\w*|paraphras\w*)\s*:\s*", re.I)


def clean_candidate(text: str) -> str:
    """The first line of a sampled rewording, without quotes or a "Reworded question:" label.

    >>> clean_candidate('Reworded: "Why is the sky blue?"\\nBecause ...')
    'Why is the sky blue?'
    """
    line = text.strip().splitlines()[0] if text.strip() else ""
    return _LABEL.sub("", line.strip()).strip("\"'“”‘’` ").strip()


@dataclass(frozen=True)
class RewordReport:
    """What ``reword_report`` did.

    Attributes:
        candidates: candidates sampled.
        accepted: candidates that passed every check.
        requested: rewordings requested (n per prompt).
        delivered: rewordings delivered.
        short: prompts left with fewer than n rewordings.
    """

    candidates: int
    accepted: int
    requested: int
    delivered: int
    short: tuple[str, ...]  # prompts left with fewer than n rewordings

    @property
    def acceptance(self) -> float:
        """Fraction of sampled candidates that passed every check."""
        return self.accepted / self.candidates if self.candidates else float("nan")

    @property
    def delivery(self) -> float:
        """Fraction of requested rewordings delivered after retries."""
        return self.delivered / self.requested if self.requested else float("nan")


def reword_report(prompts: Sequence[str], *, n: int = 2, model: Model | str | None = None, seed: int = 0,
                  temperature: float = 0.7, attempts: int = 3,
                  min_similarity: float | None = MIN_SIMILARITY) -> tuple[list[list[str]], RewordReport]:
    """Up to ``n`` checked rewordings per prompt, and what it took (see the module docstring).

    Args:
        prompts: the prompts to reword.
        n: rewordings wanted per prompt (0 to 8).
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.
        seed: seeds the candidates (rounds after the first use hashed sub-seeds).
        temperature: the candidates' sampling temperature.
        attempts: rounds of candidates for prompts still short.
        min_similarity: the least E5 cosine a rewording needs to its prompt; None skips the meaning check (no
            embedding model needed).

    Returns:
        The rewordings (one list per prompt), and a ``RewordReport``.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> rewordings, report = gcs.reword_report(["What is DNA?"], n=1, min_similarity=None)
        >>> len(rewordings), report.requested
        (1, 1)
    """
    prompts = check_prompts(prompts)
    check_count(n, "n", 1, 8)
    check_count(attempts, "attempts", 1, 10)
    seed = check_seed(seed)
    model = resolve_model(model)
    check_plain_text(prompts, model, "prompts")
    settings = SamplingSettings(methods=["is"], temperature=temperature, top_p=0.95,
                                max_new_tokens=max(24, min(96, max(len(p) for p in prompts) // 2)))
    accepted: list[list[str]] = [[] for _ in prompts]
    candidates = passed = 0
    for attempt in range(attempts):
        pending = [i for i, found in enumerate(accepted) if len(found) < n]
        if not pending:
            break
        # 2n candidates per pending prompt and round, each with its own hashed sub-seed (IS: independent samples)
        units = [(i, derive_seed(seed, attempt * 64 + j)) for i in pending for j in range(2 * n)]
        rows_of = lambda unit: [Row(REQUEST.format(question=prompts[unit[0]]), "is", unit[1],  # noqa: E731
                                    examples=FEW_SHOT)]
        texts: dict[int, list[str]] = {i: [] for i in pending}
        for chunk, decoded in run_batches(units, rows_of, lambda unit: settings, model):
            for (i, _), (record,) in zip(chunk, decoded, strict=True):
                texts[i].append(clean_candidate(record["response"]))
        candidates += sum(len(t) for t in texts.values())
        passed += _accept(prompts, texts, accepted, min_similarity)
    delivered = [found[:n] for found in accepted]
    short = tuple(p for p, found in zip(prompts, delivered, strict=True) if len(found) < n)
    report = RewordReport(candidates, passed, n * len(prompts), sum(map(len, delivered)), short)
    return delivered, report


def _accept(prompts, texts: dict[int, list[str]], accepted: list[list[str]], min_similarity) -> int:
    """Move the candidates that pass every check into ``accepted``; returns how many passed."""
    checked = {i: [t for t in found if is_question(t) and _normalised(t) != _normalised(prompts[i])
                   and len(t) <= 3 * len(prompts[i]) + 40]
               for i, found in texts.items()}
    if min_similarity is not None:  # every prompt with its candidates, all embedded in one call
        from gcs.scoring.metrics import similarity_matrices

        checked = {i: found for i, found in checked.items() if found}
        matrices = similarity_matrices([[prompts[i], *found] for i, found in checked.items()], "e5")
        checked = {i: [t for t, s in zip(found, matrix[0, 1:], strict=True) if s >= min_similarity]
                   for (i, found), matrix in zip(checked.items(), matrices, strict=True)}
    kept = 0
    for i, found in checked.items():
        kept += len(found)
        for text in found:
            if _normalised(text) not in {_normalised(t) for t in accepted[i]}:
                accepted[i].append(text)
    return kept


def reword(prompts: Sequence[str], *, n: int = 2, model: Model | str | None = None, seed: int = 0,
           temperature: float = 0.7) -> list[list[str]]:
    """Up to ``n`` checked rewordings of each prompt, written by the model (see the module docstring).

    A prompt the model could not reword ``n`` times keeps fewer (a RuntimeWarning names it).

    Args:
        prompts: the prompts to reword.
        n: rewordings wanted per prompt (0 to 8).
        model: a loaded ``gcs.Model``, a name, or None for the embedded model.
        seed: seeds the candidates.
        temperature: the candidates' sampling temperature.

    Returns:
        One list of rewordings per prompt.

    Examples:
        On the embedded model:

        >>> import gcs, warnings
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", RuntimeWarning)  # a prompt left short says so
        ...     rewordings = gcs.reword(["What is DNA?"], n=1)
        >>> len(rewordings), len(rewordings[0]) <= 1
        (1, True)
    """
    rewordings, report = reword_report(prompts, n=n, model=model, seed=seed, temperature=temperature)
    if report.short:
        warnings.warn(f"gcs: could not reword {len(report.short)} prompt(s) {n} times with checked rewordings "
                      f"(first: {report.short[0][:60]!r}); ensembling uses fewer wordings for them",
                      RuntimeWarning, stacklevel=2)
    return rewordings
