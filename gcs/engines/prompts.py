"""Prompt formatting (appendix E) and removal of hallucinated follow-up turns.

Chat/instruct models get their own chat template; base models get a plain template with
one in-context example, which keeps them on topic. Appendix E scores "responses ...
with any follow-up questions or answers hallucinated by the language model removed":

- a new *chat* turn is a special token (``<|im_start|>``, ...): generation stops on it
  (``gcs.engines.batch.stop_token_ids``), so it never reaches the text;
- a new *textual* turn is a line that starts with a turn label of the prompt formats
  (``Question:``, ``Answer:``, ``User:``, ``Assistant:``, ``Human:``, or ``### Instruction``)
  after some answer text: ``strip_followups`` cuts there. Other labels (``Q:``, ``A:``,
  ``Input:``, ``Output:``) are left alone: answers use them legitimately.

>>> strip_followups("Paris is the capital.\\nUser: And of Spain?")
'Paris is the capital.'
>>> strip_followups("The options are:\\nA: red\\nB: blue")
'The options are:\\nA: red\\nB: blue'
"""

from __future__ import annotations

import re
from collections.abc import Sequence

EXAMPLE = ("What is the boiling point of water at sea level?",
           "Water boils at 100 degrees Celsius (212 degrees Fahrenheit) at sea level.")
BASE_TURN = "Question: {question}\nAnswer:"

# A follow-up turn: one of the prompt formats' own turn labels, at the start of a line.
_FOLLOWUP = re.compile(
    r"^[ \t]*(?:(?:Question|Answer|User|Assistant|Human)[ \t]*:|#{2,}[ \t]*(?:Instruction|Input|Response|Question)\b)",
    re.MULTILINE,
)


def format_prompt(question: str, *, tokenizer, is_chat: bool, examples: Sequence[tuple[str, str]] = (),
                  system: str | None = None) -> str:
    """The text fed to the model for one user question, after optional (question, answer) examples.

    Args:
        question: the user's question.
        tokenizer: the model's tokenizer (its chat template formats chat models; unused for base models).
        is_chat: whether the model is a chat model (``Model.is_chat``).
        examples: (question, answer) pairs shown first; base models always see one example (the paper's in-context
            example) unless given others.
        system: a system message; chat models get it as their template's system turn (None keeps the template's
            default, if it has one), base models, which have no such turn, as the text's first paragraph, before
            the examples.

    Returns:
        The prompt text.

    Examples:
        >>> format_prompt("Why is the sky blue?", tokenizer=None, is_chat=False).splitlines()[-2:]
        ['Question: Why is the sky blue?', 'Answer:']
        >>> format_prompt("Why is the sky blue?", tokenizer=None, is_chat=False,
        ...               system="Answer in one sentence.").splitlines()[0]
        'Answer in one sentence.'
    """
    if is_chat:
        turns = [turn for q, a in examples for turn in ({"role": "user", "content": q},
                                                          {"role": "assistant", "content": a})]
        head = [] if system is None else [{"role": "system", "content": system}]
        return tokenizer.apply_chat_template(
            [*head, *turns, {"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
        )
    shots = "".join(f"{BASE_TURN.format(question=q)} {a}\n\n" for q, a in (examples or [EXAMPLE]))
    return ("" if system is None else f"{system}\n\n") + shots + BASE_TURN.format(question=question)


def strip_followups(text: str) -> str:
    """The answer alone: cut at the first follow-up turn label that starts a line after the answer, trimmed.

    Only the prompt formats' own labels count (``Question:``, ``Answer:``, ``User:``, ``Assistant:``, ``Human:``,
    ``### Instruction``); ``Q:`` / ``A:`` and labels inside an answer stay.

    Args:
        text: a generated response.

    Returns:
        The response without invented follow-up turns.

    Examples:
        >>> strip_followups("DNA is a molecule.\\n\\n### Instruction: Explain RNA")
        'DNA is a molecule.'
        >>> strip_followups("FAQ about DNA\\nQ: What is DNA?\\nA: A molecule.")
        'FAQ about DNA\\nQ: What is DNA?\\nA: A molecule.'
    """
    for match in _FOLLOWUP.finditer(text):
        if text[: match.start()].strip():  # a label before any answer text is part of the answer
            return text[: match.start()].strip()
    return text.strip()
