"""Why two arms' answers parted: the first token where they differ, and the race there under each arm.

    a, b = gcs.Variant(), gcs.Variant(system="Answer in one sentence.")
    why = gcs.parting(a, b, "What is the capital of France?", seed=3)
    why.sentence   # -> "At token 4, after 'The capital of France is', A wrote ' Lyon' and B wrote ' Paris': under B,
                   #    p(' Paris') rose from 0.21 to 0.48 and its clock arrived first ..."
    why.frame()    # one row per arm and token: probability, noise, arrival, won

Both arms run ``gcs.trace`` with the same seed and method, so up to the parting position they wrote the same
tokens with the same luck; there each arm's race is read for both arms' tokens (the trace is asked to
``watch`` them, so a token far down the other arm's list still has its probability and clock). Under GCS both
races hold the same noise; under GCSwR each race holds its recycled clocks, which the two histories wore down
at slightly different rates. IS shares no luck between the arms, so it has no parting to explain.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from gcs.abtest.answers import parts_at
from gcs.abtest.variants import Variant, arms
from gcs.checks import DEFAULT_MAX_NEW_TOKENS, check_max_new_tokens, check_seed
from gcs.engines.batch import check_plain_text, stop_token_ids
from gcs.instrument.tracing import DEFAULT_TOP, Trace, TraceStep, trace_with
from gcs.runtime.arguments import ArgumentTypeError, check_count, check_prompts
from gcs.runtime.quoting import quoted

END_TEXT = "end"  # an answer's end (a stop token) where one arm stopped and the other went on


@dataclass(frozen=True)
class Parting:
    """Where and why the arms' answers to ``prompt`` under ``seed`` parted (``gcs.parting``).

    Attributes:
        prompt: the prompt.
        seed: the seed.
        method: "gcs" or "gcswr".
        names: the arms' names.
        position: the first token index where the answers differ.
        tokens: each arm's token there (A's, B's; a stop token when that answer ended there).
        texts: their text (quoted; "end" for a stop token).
        prefix: the text both wrote before.
        steps: each arm's race at ``position`` as ``gcs.trace`` records it, both tokens among its candidates.
        traces: the two traces themselves.
    """

    prompt: str
    seed: int
    method: str
    names: tuple[str, str]
    position: int
    tokens: tuple[int, int]
    texts: tuple[str, str]
    prefix: str
    steps: tuple[TraceStep, TraceStep]
    traces: tuple[Trace, Trace]

    def candidate(self, arm: int, token: int):
        """``token``'s candidate (probability, noise, arrival) in arm ``arm``'s race (0: A, 1: B)."""
        return next(c for c in self.steps[arm].candidates if c.token_id == token)

    def frame(self) -> pd.DataFrame:
        """One row per arm and parting token: the token's probability, noise, arrival, and whether it won there."""
        return pd.DataFrame.from_records(
            [{"arm": self.names[arm], "token": self.texts[which], "token_id": token,
              "probability": self.candidate(arm, token).probability, "noise": self.candidate(arm, token).noise,
              "arrival": self.candidate(arm, token).arrival, "won": self.steps[arm].winner == token}
             for arm in (0, 1) for which, token in enumerate(self.tokens)])

    @property
    def sentence(self) -> str:
        """The parting in words: what each arm wrote, how B moved both tokens' probabilities, whose clock won."""
        (a, b), (x, y) = self.names, self.texts
        p = lambda arm, which: self.candidate(arm, self.tokens[which]).probability  # noqa: E731
        verb = lambda before, after: "rose" if after > before else "fell" if after < before else "stayed"  # noqa: E731
        moved = lambda i: f"{verb(p(0, i), p(1, i))} from {p(0, i):.2f} to {p(1, i):.2f}"  # noqa: E731
        wrote = lambda text: "ended its answer" if text == END_TEXT else f"wrote {text}"  # noqa: E731
        arrival = lambda which: self.candidate(1, self.tokens[which]).arrival  # noqa: E731
        after = f"after {self.prefix[-40:]!r}" if self.position else "at the start"
        return (f"At token {self.position}, {after}, {a} {wrote(x)} and {b} {wrote(y)}: under {b}, p({y}) "
                f"{moved(1)} and its clock arrived first (at {arrival(1):.3g}, before the clock of {x} at "
                f"{arrival(0):.3g}); p({x}) {moved(0)}.")


def parting(a: Variant, b: Variant, prompt: str, *, seed: int, method: str = "gcswr",
            max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
            top: int = DEFAULT_TOP) -> Parting | None:
    """Why the arms' answers to ``prompt`` under ``seed`` parted.

    Traces both arms (``gcs.trace``, transformers) as ``gcs.ab`` answers them with that seed and ``method``, finds the
    first token where they differ, and reads both races there.

    Args:
        a: arm A, a ``gcs.Variant``.
        b: arm B.
        prompt: the prompt.
        seed: the seed of the row to explain.
        method: "gcs" or "gcswr" (IS shares no luck, so it is refused).
        max_new_tokens: as in ``gcs.ab`` (one more than a frame row's ``parts_at`` is enough).
        top: candidates recorded per race.

    Returns:
        The ``Parting`` (its ``sentence`` and ``frame()``), or None when the answers are identical.

    Raises:
        ValueError: method "is", or another bad value.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> parting(gcs.Variant(), gcs.Variant(), "What is DNA?", seed=0, max_new_tokens=4) is None  # equal arms
        True
    """
    prompt = check_prompts([prompt], "prompt")[0]
    seed, max_new_tokens, top = check_seed(seed), check_max_new_tokens(max_new_tokens), check_count(top, "top", 1, 100)
    if not isinstance(method, str):
        raise ArgumentTypeError(f"method must be 'gcs' or 'gcswr', got {type(method).__name__} {quoted(method)}")
    if method.strip().lower() not in ("gcs", "gcswr"):
        raise ValueError(f"method must be 'gcs' or 'gcswr' (the arms share luck only there; under IS they share "
                         f"nothing, so a parting has no race to explain), got {quoted(method)}")
    method = method.strip().lower()
    pair = arms(a, b, max_new_tokens)
    check_plain_text(prompt, pair[0].model, "prompt")

    def traced(arm, tokens=(), length=max_new_tokens) -> Trace:
        settings = arm.settings.replace(methods=[method], seeds=[seed], max_new_tokens=length)
        return trace_with([arm.variant.text(prompt)], settings, top, arm.model, system=arm.variant.system,
                          watch=tokens)

    traces = [traced(arm) for arm in pair]
    ends = [set(stop_token_ids(arm.model)) for arm in pair]
    finished = [len(t.steps) > len(t.token_ids[0]) and t.steps[len(t.token_ids[0])][0].winner in e
                for t, e in zip(traces, ends, strict=True)]
    position = parts_at(traces[0].token_ids[0], finished[0], traces[1].token_ids[0], finished[1])
    if position is None:
        return None
    tokens = (traces[0].steps[position][0].winner, traces[1].steps[position][0].winner)
    if any(token not in {c.token_id for c in t.steps[position][0].candidates} for t in traces for token in tokens):
        traces = [traced(arm, tokens, position + 1) for arm in pair]  # the other arm's token was not among the top
    steps = (traces[0].steps[position][0], traces[1].steps[position][0])
    if (steps[0].winner, steps[1].winner) != tokens:  # a trace is a pure function of its settings: never seen
        raise RuntimeError(f"tracing {prompt!r} again under seed {seed} gave other tokens at position {position}")
    tokenizers: list[Any] = [arm.model.tokenizer for arm in pair]  # transformers' (gcs.Model types them as object)
    text_a, text_b = (END_TEXT if token in e else repr(tokenizer.decode([token]))
                      for token, e, tokenizer in zip(tokens, ends, tokenizers, strict=True))
    prefix = tokenizers[0].decode(list(traces[0].token_ids[0][:position]), skip_special_tokens=True)
    return Parting(prompt, seed, method, (pair[0].name, pair[1].name), position, tokens, (text_a, text_b), prefix,
                   steps, (traces[0], traces[1]))
