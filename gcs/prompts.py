"""Prompt formatting (appendix E) and removal of hallucinated follow-up turns.

Chat/instruct models get their own chat template; base models get a plain template with
one in-context example, which keeps them on topic. Before scoring, anything the model
invents after its answer (a new "User:" turn, another "Question:", a new chat-template
turn, ...) is cut off.

>>> strip_followups("Paris is the capital.\\nUser: And of Spain?")
'Paris is the capital.'
"""

from __future__ import annotations

import re

BASE_TEMPLATE = (
    "Question: What is the boiling point of water at sea level?\n"
    "Answer: Water boils at 100 degrees Celsius (212 degrees Fahrenheit) at sea level.\n\n"
    "Question: {question}\n"
    "Answer:"
)

# A follow-up starts on a new line (or right after the answer, for template tokens).
_FOLLOWUP = re.compile(
    r"(\n\s*(User|Human|Question|Q|Instruction|Assistant|A|Answer|Input|Response)\s*:"
    r"|\n\s*#{2,}\s*(Instruction|Input|Response|Question)"
    r"|<\|im_start\|>|<\|im_end\|>|<\|eot_id\|>|<\|start_header_id\|>|<\|user\|>|<\|assistant\|>|\[INST\]|</s>|<\|endoftext\|>)",
    re.IGNORECASE,
)


def format_prompt(question: str, tokenizer, is_chat: bool) -> str:
    """The text fed to the model for one user question.

    >>> format_prompt("Why is the sky blue?", None, is_chat=False).splitlines()[-2:]
    ['Question: Why is the sky blue?', 'Answer:']
    """
    if is_chat:
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": question}], tokenize=False, add_generation_prompt=True
        )
    return BASE_TEMPLATE.format(question=question)


def strip_followups(text: str) -> str:
    """The answer alone: cut at the first hallucinated follow-up turn, trim whitespace.

    >>> strip_followups("DNA is a molecule.\\n\\n### Instruction: Explain RNA")
    'DNA is a molecule.'
    >>> strip_followups("  Five: 1. Paris 2. Rome  ")
    'Five: 1. Paris 2. Rome'
    """
    match = _FOLLOWUP.search(text)
    return (text[: match.start()] if match else text).strip()
