"""Rows of responses laid out as one batch: left-padded model inputs, group ids and sampling keys.

A ``Row`` is one response to produce (a prompt under a method and seed, optionally with
rewordings for ensembling). A ``Batch`` lays rows out as left-padded model inputs and
draws every token with a ``GumbelLogitsProcessor``: each row with its own method and seed,
so a row's response does not depend on the batch it is in (IS rows take their stream from
a hash of their prompt). Its engine's runner (``gcs.engines``) decodes it: ``run`` to the end,
``stream`` decoded after every step. ``gcs.engines.batching.run_batches`` feeds any number of rows
through as few batches as a row budget allows.

    batch = Batch([Row("What is DNA?", "gcswr", 0), Row("Explain DNA.", "gcswr", 0)], model, SamplingSettings())
    batch.decode(batch.run())   # -> [{"response": "DNA, or ...", "n_tokens": 50, "token_ids": [...], ...}, ...]
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

import torch
from transformers import LogitsProcessorList

from gcs.checks import check_engine
from gcs.engines import runner_for
from gcs.engines.models import Model
from gcs.engines.padding import padded
from gcs.engines.prompts import format_prompt, strip_followups
from gcs.engines.streamed_text import PartialRows
from gcs.runtime.quoting import quoted
from gcs.sampling.noise import stream_id
from gcs.sampling.processor import EnsembleLogitsProcessor, ExcessRecorder, GumbelLogitsProcessor
from gcs.sampling.samplers import Sampler
from gcs.settings import SamplingSettings

if TYPE_CHECKING:
    from transformers import GenerationConfig

# Special tokens that open a new chat turn: a response that emits one has ended (the model is inventing the next turn).
TURN_START_TOKENS = ("<|im_start|>", "<|start_header_id|>", "<|user|>", "<|assistant|>", "<|system|>",
                     "<start_of_turn>", "[INST]", "<|endoftext|>", "<|eot_id|>", "<|im_end|>", "<end_of_turn>")


class Cancelled(Exception):
    """Work stopped on request (its ``stop`` event was set) before it finished."""


def stop_token_ids(model: Model) -> list[int]:
    """EOS ids plus, for chat models, the special tokens that open or close a turn (a hallucinated next turn)."""
    # gcs.Model types these as object and Module: they are a transformers tokenizer and model
    tokenizer: Any = model.tokenizer
    eos = cast("GenerationConfig", model.model.generation_config).eos_token_id
    ids = {*([eos] if isinstance(eos, int) else list(eos or [])), tokenizer.eos_token_id}
    if model.is_chat:  # look up just these tokens (the whole vocabulary dict costs ~40 ms per batch)
        found = zip(TURN_START_TOKENS, tokenizer.convert_tokens_to_ids(list(TURN_START_TOKENS)), strict=True)
        # an unknown token maps to the unknown-token id (or None): keep only ids that map back to the token
        ids |= {i for token, i in found if i is not None and tokenizer.convert_ids_to_tokens(i) == token}
    return sorted(ids - {None})


def special_tokens(tokenizer) -> list[str]:
    """The texts ``tokenizer`` reads as one of its special tokens wherever they appear (its chat markup, its end of
    text, tokens a code model reserves), longest first."""
    found = {*tokenizer.all_special_tokens,
             *(token.content for token in getattr(tokenizer, "added_tokens_decoder", {}).values() if token.special)}
    return sorted((token for token in found if token), key=len, reverse=True)


def check_plain_text(text: str | Sequence[str], model: Model, name: str) -> str | list[str]:
    """``text`` (or each text of a list, named ``name[i]``) if it holds none of the model's special tokens, else a
    ValueError naming the token. The tokenizer reads "<|im_end|>" typed in a prompt as the end of the turn itself:
    user text (a prompt, a paraphrase, a system message, a template, a response) would write the chat's markup,
    close the user's turn and open another. One rule for every entry point, library and app alike."""
    tokens = special_tokens(model.tokenizer)  # once for a whole list
    if isinstance(text, str):
        _refuse_special(text, tokens, model, name)
        return text
    for i, item in enumerate(text):
        _refuse_special(item, tokens, model, f"{name}[{i}]")
    return list(text)


def _refuse_special(text: str, tokens: list[str], model: Model, name: str) -> None:
    found = [(text.find(token), -len(token), token) for token in tokens if token in text]
    if found:
        at, _, token = min(found)
        tokenizer: Any = model.tokenizer  # a transformers tokenizer: gcs.Model types it as object
        ends = tokenizer.convert_tokens_to_ids(token) in stop_token_ids(model)
        raise ValueError(f"{name} holds {'an end-of-turn' if ends else 'a special'} token, {quoted(token)}, at "
                         f"character {at + 1}: the model would read it as its own markup, not as the text typed; "
                         "remove it")


def prompt_lengths(prompts: Sequence[str], *, model: Model) -> list[int]:
    """Tokens each prompt takes as the model sees it (chat template or base template included).

    Args:
        prompts: the user prompts.
        model: the loaded ``gcs.Model``.

    Returns:
        One token count per prompt.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> prompt_lengths(["What is DNA?"], model=gcs.load_model())
        [34]
    """
    tokenizer: Any = model.tokenizer  # a transformers tokenizer: gcs.Model types it as object
    texts = [format_prompt(p, tokenizer=tokenizer, is_chat=model.is_chat) for p in prompts]
    return [len(ids) for ids in tokenizer(texts, add_special_tokens=not model.is_chat)["input_ids"]]


def prompt_stream(prompt: str) -> int:
    """A stable 63-bit id of a prompt: the IS stream of its rows (batch-position independent)."""
    return stream_id(prompt.encode("utf-8"))


@dataclass(frozen=True)
class Row:
    """One response to produce: a prompt under a method and seed, optionally with rewordings.

    ``examples`` are (question, answer) pairs shown to the model before the prompt (few-shot); ``system`` a system
    message (``format_prompt``). ``stream``: the IS stream of the row, None for a hash of its prompt; rows that must
    not share IS draws although their prompts are equal (the two arms of ``gcs.ab``) name streams of their own.
    """

    prompt: str
    method: str
    seed: int
    rewordings: tuple[str, ...] = ()
    examples: tuple[tuple[str, str], ...] = ()
    system: str | None = None
    stream: int | None = None


@dataclass
class Batch:
    """Rows laid out as model inputs: each row's prompt and rewordings, group ids and sampling keys."""

    rows: list[Row]
    model: Model
    settings: SamplingSettings
    generate_kwargs: dict = field(default_factory=dict)
    engine: Any = "transformers"  # or "vllm": the same samplers inside vLLM (gcs.vllm.plugin); or served endpoints
    sampler: Sampler | None = None  # replaces the rows' own samplers (gcs.hindsight's posterior noise)
    observer: Callable | None = None  # sees every step's race (gcs.trace); see GumbelLogitsProcessor
    record_excess: bool = False  # each row's excess surprise from generation's own logits (``decode``'s "excess")

    def __post_init__(self):
        self.engine = check_engine(self.engine, ensembling=any(row.rewordings for row in self.rows))
        if self.engine != "transformers" and (self.sampler is not None or self.observer is not None):
            raise ValueError("tracing and hindsight run on the transformers engine only")
        if self.engine != "transformers" and self.generate_kwargs:
            raise ValueError(f"extra generate arguments ({', '.join(self.generate_kwargs)}) are for transformers' "
                             f"generate; the {'vLLM' if self.engine == 'vllm' else 'endpoints'} engine takes none")
        questions, texts, self.groups, methods, seeds, streams, self.main = [], [], [], [], [], [], []
        tokenizer = self.model.tokenizer
        for group, row in enumerate(self.rows):
            self.main.append(len(texts))
            for question in (row.prompt, *row.rewordings):
                questions.append(question)
                texts.append(format_prompt(question, tokenizer=tokenizer, is_chat=self.model.is_chat,
                                           examples=row.examples, system=row.system))
                self.groups.append(group)
                methods.append(row.method)
                seeds.append(row.seed)
                streams.append(prompt_stream(row.prompt) if row.stream is None else row.stream)
        inputs = tokenizer(
            texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=not self.model.is_chat,
            return_token_type_ids=False,  # generate() takes ids and mask only (some tokenizers add type ids)
        )
        limit = self.model.context_window - self.settings.max_new_tokens
        for question, length in zip(questions, inputs["attention_mask"].sum(dim=1).tolist(), strict=True):
            if length > limit:
                raise ValueError(
                    f"a prompt is too long: {length} tokens (it starts {quoted(question, 60)}); the model's context "
                    f"window of {self.model.context_window} tokens leaves {limit} for the prompt with max_new_tokens="
                    f"{self.settings.max_new_tokens}"
                )
        self.inputs = inputs.to(self.model.device)
        self.methods, self.seeds, self.streams = methods, seeds, streams
        self.order = self._runner_order(inputs["attention_mask"].sum(dim=1).tolist())
        self._places = None if self.order is None else places(self.order)
        self.stop_ids = stop_token_ids(self.model)
        self.runner = runner_for(self)
        # the last run's recorded excess surprise: its processors' (transformers), the plugin's records (vLLM, where
        # they reach this process; gcs.vllm.excess), or None; read through ``means(lengths)``
        self.excess_record: Any = None

    def _runner_order(self, lengths: list[int]) -> list[int] | None:
        """The order transformers runs the texts in: those of one prompt length side by side, longest first (None: as
        laid out). Row-invariant attention then reads each length's rows as one view of the KV cache instead of
        gathering a copy in every layer at every step; the order changes no token (each row's computation is its
        own), and every output comes back in the texts' order. A posterior sampler and an observer read rows by
        their place, so their batches keep it.

        >>> from types import SimpleNamespace
        >>> Batch._runner_order(SimpleNamespace(engine="transformers", sampler=None, observer=None), [5, 9, 5, 9])
        [1, 3, 0, 2]
        """
        if self.engine != "transformers" or self.sampler is not None or self.observer is not None:
            return None
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        return None if order == list(range(len(lengths))) else order

    @property
    def context(self) -> int | None:
        """The window of this batch's "ctx" rows (None without them: a batch of other rows takes no context, though
        its settings may carry one, as an A/B arm's IS control does)."""
        return self.settings.context if "ctx" in self.methods else None

    def processors(self) -> LogitsProcessorList:
        """The logits processors of one run, for the texts in the runner's ``order``."""
        processors = LogitsProcessorList()
        recorder = self.excess_record = ExcessRecorder() if self.record_excess else None
        if recorder is not None:
            processors.append(recorder.raw)
        groups, methods, seeds, streams = (self.in_order(values) for values in
                                           (self.groups, self.methods, self.seeds, self.streams))
        if len(self.groups) > len(self.rows):
            processors.append(EnsembleLogitsProcessor(groups))
        processors.append(GumbelLogitsProcessor(methods, seeds, *self.settings.warping, streams=streams,
                                                sampler=self.sampler, observer=self.observer,
                                                context=self.context))
        if recorder is not None:
            processors.append(recorder.chosen)
        return processors

    def in_order(self, values: list) -> list:
        """Per-text ``values`` (in the texts' order) in the runner's ``order``."""
        return values if self.order is None else [values[i] for i in self.order]

    def in_given_order(self, values):
        """Per-text ``values`` in the runner's ``order`` (a list, or a tensor along its first axis) back in the texts'
        order: what the runner hands out (tokens, streamed steps, the excess recorded)."""
        if self._places is None:
            return values
        return values[self._places] if isinstance(values, torch.Tensor) else [values[i] for i in self._places]

    @torch.inference_mode()
    def run(self, stop: threading.Event | None = None) -> torch.Tensor:
        """Generated token ids [texts, new tokens] (a stop token then padding after a row finishes).

        Setting ``stop`` ends generation after the current step (a cancelled stream).
        """
        return self.runner.run(stop)

    def complete(self, stop: threading.Event | None = None) -> torch.Tensor:
        """``run`` to the end; ``Cancelled`` when ``stop`` was set before it (nothing partial is returned)."""
        tokens = self.run(stop=stop)
        if stop is not None and stop.is_set():
            raise Cancelled("stopped on request before the end")
        return tokens

    def until_stop(self, ids: list[int]) -> tuple[list[int], bool]:
        """The ids before the first stop token, and whether there was one (a row's response as ``decode`` reads it)."""
        for i, token in enumerate(ids):
            if token in self.stop_ids:
                return ids[:i], True
        return ids, False

    def decode(self, new_tokens: torch.Tensor) -> list[dict]:
        """Per row: raw text, stripped response, number of tokens, the token ids themselves (before the stop
        token; text does not always read back as the same tokens) and whether it ended with a stop token; with
        ``record_excess``, also "excess": the mean excess surprise of those tokens (NaN where the engine recorded
        none: served endpoints, or a vLLM engine in other processes)."""
        results = []
        tokenizer: Any = self.model.tokenizer  # a transformers tokenizer: gcs.Model types it as object
        for index in self.main:
            ids, finished = self.until_stop(new_tokens[index].tolist())
            raw = tokenizer.decode(ids, skip_special_tokens=True)
            # a response cut by the token limit may end inside a character: its bytes so far decode to U+FFFD, which
            # the answer leaves out (as the streamed text does until the next byte; the raw text keeps it)
            answer = raw if finished else raw.rstrip("\ufffd")
            results.append({"raw_response": raw, "response": strip_followups(answer), "n_tokens": len(ids),
                            "token_ids": ids, "finished": finished})
        if self.record_excess:
            lengths = [0] * len(self.groups)
            for index, result in zip(self.main, results, strict=True):
                lengths[index] = result["n_tokens"]
            # the recorder saw the texts in the runner's order
            means = [math.nan] * len(lengths) if self.excess_record is None else \
                self.in_given_order(self.excess_record.means(self.in_order(lengths)))
            for index, result in zip(self.main, results, strict=True):
                result["excess"] = means[index]
        return results

    def stream(self, stop: threading.Event | None = None) -> Iterator[list[dict]]:
        """Decoded rows after every step (as ``decode``); the last item is the finished batch.

        Each step decodes only the new tokens of each row (``IncrementalText``), so streaming
        costs the same per token however long the responses grow. Closing the iterator early
        (a consumer that stops reading) stops the runner after the current step, so no
        generation outlives its stream. Setting ``stop`` (from any thread) stops it too, even
        during the prompts' prefill, with ``Cancelled`` instead of the finished batch.
        """
        partial, token_ids = PartialRows(self.model.tokenizer, self.stop_ids, self.main), []
        with closing(self.runner.steps(stop)) as steps:
            for token_ids in steps:
                yield partial.update(token_ids)
        if stop is not None and stop.is_set():
            raise Cancelled("stopped on request before the end")
        yield self.decode(padded(token_ids, self.stop_ids[0]))


def places(order: list[int]) -> list[int]:
    """Where each text sits in ``order`` (its inverse).

    >>> places([1, 3, 0, 2])
    [2, 0, 3, 1]
    """
    places = [0] * len(order)
    for place, text in enumerate(order):
        places[text] = place
    return places
