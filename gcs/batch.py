"""Rows of responses as one batched ``model.generate`` call, and the runner that packs many rows into batches.

A ``Row`` is one response to produce (a prompt under a method and seed, optionally with
rewordings for ensembling). A ``Batch`` lays rows out as left-padded model inputs,
decodes them with the KV cache through transformers, and draws every token with a
``GumbelLogitsProcessor``: each row with its own method and seed, so a row's response
does not depend on the batch it is in (IS rows take their stream from a hash of their
prompt). ``run_batches`` feeds any number of rows through as few batches as a row
budget allows: sweeps, style experiments and rewording all use it.

Generation settings are pinned: transformers fills generation fields from the model's own
``generation_config`` and runs the resulting processors *before* ours, so a checkpoint's
``repetition_penalty=1.1`` would silently change the sampled distribution. Every call runs
with every such field neutral (``neutral_generation_defaults``).
"""

from __future__ import annotations

import copy
import hashlib
import logging
import queue
import threading
import weakref
from contextlib import closing, contextmanager
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm
from transformers import DynamicCache, GenerationConfig, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from .checks import check_engine
from .invariance import ensure_row_invariant
from .models import Model
from .processor import EnsembleLogitsProcessor, GumbelLogitsProcessor
from .samplers import Sampler
from .prompts import format_prompt, strip_followups
from .settings import SamplingSettings

logger = logging.getLogger(__name__)

# Neutral values of every generation field that would add a logits processor before ours
# (min_new_tokens also replaces a model's min_length, which is left unset: transformers warns when both are
# given; do_sample=False drops every sampling warper).
NEUTRAL_GENERATION = dict(
    do_sample=False, num_beams=1, num_return_sequences=1, repetition_penalty=1.0, encoder_repetition_penalty=1.0,
    no_repeat_ngram_size=0, encoder_no_repeat_ngram_size=0, min_new_tokens=0, guidance_scale=1.0,
    renormalize_logits=False, remove_invalid_values=False, suppress_tokens=None, begin_suppress_tokens=None,
    bad_words_ids=None, sequence_bias=None, forced_bos_token_id=None, forced_eos_token_id=None,
    exponential_decay_length_penalty=None, watermarking_config=None, dola_layers=None, penalty_alpha=None,
    token_healing=False,
)
# Special tokens that open a new chat turn: a response that emits one has ended (the model is inventing the next turn).
TURN_START_TOKENS = ("<|im_start|>", "<|start_header_id|>", "<|user|>", "<|assistant|>", "<|system|>",
                     "<start_of_turn>", "[INST]", "<|endoftext|>", "<|eot_id|>", "<|im_end|>", "<end_of_turn>")
_GENERATING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> lock around the swap below
_GENERATING_LOCK = threading.Lock()
_WARNED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> warnings said about it


def _warn_once(model: Model, message: str) -> None:
    """Log ``message`` as a warning the first time it is said about ``model``."""
    said = _WARNED.setdefault(model.model, set())
    if message not in said:
        said.add(message)
        logger.warning(message)


@contextmanager
def neutral_generation_defaults(model: Model):
    """While generating, the model's own ``generation_config`` holds no distribution-changing default.

    transformers fills generation fields from the model's defaults (5.x: every field left
    None; 4.x: every field *equal to the global default*, so even an explicit
    ``repetition_penalty=1.0`` is replaced by the checkpoint's 1.1). Swapping in a copy with
    the neutral values makes both behave; a lock per model keeps concurrent calls apart.
    """
    with _GENERATING_LOCK:
        lock = _GENERATING.setdefault(model.model, threading.Lock())
    with lock:
        original = model.model.generation_config
        neutral = copy.deepcopy(original)
        for name, value in NEUTRAL_GENERATION.items():
            if hasattr(neutral, name):
                setattr(neutral, name, copy.copy(value))
        model.model.generation_config = neutral
        try:
            yield
        finally:
            model.model.generation_config = original


def generation_config(model: Model, max_new_tokens: int, stop_ids: Sequence[int], generate_kwargs: dict):
    """A ``GenerationConfig`` under which transformers adds no processor of its own, and the leftover kwargs.

    Use it inside ``neutral_generation_defaults(model)``. Keywords in ``generate_kwargs``
    (say ``min_new_tokens``) are the caller's explicit choice and are kept.
    """
    config = GenerationConfig(**NEUTRAL_GENERATION, max_new_tokens=max_new_tokens, eos_token_id=list(stop_ids),
                              pad_token_id=model.tokenizer.pad_token_id)
    return config, config.update(**generate_kwargs)


def stop_token_ids(model: Model) -> list[int]:
    """EOS ids plus, for chat models, the special tokens that open or close a turn (a hallucinated next turn)."""
    tokenizer = model.tokenizer
    eos = model.model.generation_config.eos_token_id
    ids = {*([eos] if isinstance(eos, int) else list(eos or [])), tokenizer.eos_token_id}
    if model.is_chat:  # look up just these tokens (the whole vocabulary dict costs ~40 ms per batch)
        found = zip(TURN_START_TOKENS, tokenizer.convert_tokens_to_ids(list(TURN_START_TOKENS)))
        # an unknown token maps to the unknown-token id (or None): keep only ids that map back to the token
        ids |= {i for token, i in found if i is not None and tokenizer.convert_ids_to_tokens(i) == token}
    return sorted(ids - {None})


def prompt_lengths(prompts: Sequence[str], model: Model) -> list[int]:
    """Tokens each prompt takes as the model sees it (chat template or base template included)."""
    texts = [format_prompt(p, model.tokenizer, model.is_chat) for p in prompts]
    return [len(ids) for ids in model.tokenizer(texts, add_special_tokens=not model.is_chat)["input_ids"]]


def prompt_stream(prompt: str) -> int:
    """A stable 63-bit id of a prompt: the IS stream of its rows (batch-position independent)."""
    return int.from_bytes(hashlib.blake2b(prompt.encode("utf-8"), digest_size=8).digest(), "little") >> 1


@dataclass(frozen=True)
class Row:
    """One response to produce: a prompt under a method and seed, optionally with rewordings.

    ``examples`` are (question, answer) pairs shown to the model before the prompt (few-shot).
    """

    prompt: str
    method: str
    seed: int
    rewordings: tuple[str, ...] = ()
    examples: tuple[tuple[str, str], ...] = ()


@dataclass
class Batch:
    """Rows laid out as model inputs: each row's prompt and rewordings, group ids and sampling keys."""

    rows: list[Row]
    model: Model
    settings: SamplingSettings
    generate_kwargs: dict = field(default_factory=dict)
    engine: str = "transformers"  # or "vllm": the same samplers inside vLLM (gcs.vllm)
    sampler: Sampler | None = None  # replaces the rows' own samplers (gcs.hindsight's posterior noise)
    observer: Callable | None = None  # sees every step's race (gcs.trace); see GumbelLogitsProcessor

    def __post_init__(self):
        self.engine = check_engine(self.engine, ensembling=any(row.rewordings for row in self.rows))
        if self.engine == "vllm" and (self.sampler is not None or self.observer is not None):
            raise ValueError("tracing and hindsight run on the transformers engine only")
        if self.engine == "vllm" and self.generate_kwargs:
            raise ValueError(f"extra generate arguments ({', '.join(self.generate_kwargs)}) are for transformers' "
                             "generate; the vLLM engine takes none")
        questions, texts, self.groups, methods, seeds, streams, self.main = [], [], [], [], [], [], []
        tokenizer = self.model.tokenizer
        for group, row in enumerate(self.rows):
            self.main.append(len(texts))
            for question in (row.prompt, *row.rewordings):
                questions.append(question)
                texts.append(format_prompt(question, tokenizer, self.model.is_chat, row.examples))
                self.groups.append(group)
                methods.append(row.method)
                seeds.append(row.seed)
                streams.append(prompt_stream(row.prompt))
        inputs = tokenizer(
            texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=not self.model.is_chat,
            return_token_type_ids=False,  # generate() takes ids and mask only (some tokenizers add type ids)
        )
        limit = self.model.context_window - self.settings.max_new_tokens
        for question, length in zip(questions, inputs["attention_mask"].sum(dim=1).tolist()):
            if length > limit:
                raise ValueError(
                    f"a prompt is too long: {length} tokens (it starts {question[:60]!r}); the model's context window "
                    f"of {self.model.context_window} tokens leaves {limit} for the prompt with max_new_tokens="
                    f"{self.settings.max_new_tokens}"
                )
        self.inputs = inputs.to(self.model.device)
        self.methods, self.seeds, self.streams = methods, seeds, streams
        if self.engine == "transformers":
            self.row_invariant = ensure_row_invariant(self.model.model)
        self.stop_ids = stop_token_ids(self.model)

    def processors(self) -> LogitsProcessorList:
        processors = LogitsProcessorList()
        if len(self.groups) > len(self.rows):
            processors.append(EnsembleLogitsProcessor(self.groups))
        processors.append(GumbelLogitsProcessor(self.methods, self.seeds, *self.settings.warping, streams=self.streams,
                                                sampler=self.sampler, observer=self.observer))
        return processors

    @torch.inference_mode()
    def run(self, streamer: BaseStreamer | None = None, stop: threading.Event | None = None) -> torch.Tensor:
        """Generated token ids [texts, new tokens] (a stop token then padding after a row finishes).

        Setting ``stop`` ends generation after the current step (a cancelled stream). On the
        vLLM engine every row is one vLLM request (``streamer`` is not used; ``stop`` aborts them).
        """
        if self.engine == "vllm":
            from .vllm import run_batch

            return run_batch(self, stop)
        config, other_kwargs = generation_config(self.model, self.settings.max_new_tokens, self.stop_ids,
                                                 self.generate_kwargs)
        if stop is not None:
            other_kwargs["stopping_criteria"] = StoppingCriteriaList([_StopWhenSet(stop)])
        if "past_key_values" not in other_kwargs:
            other_kwargs["past_key_values"] = self._prefill()
        with neutral_generation_defaults(self.model):
            output = self.model.model.generate(**self.inputs, generation_config=config,
                                               logits_processor=self.processors(), streamer=streamer, **other_kwargs)
        return output[:, self.inputs["input_ids"].shape[1] :].cpu()

    def complete(self, stop: threading.Event | None = None) -> torch.Tensor:
        """``run`` to the end; ``Cancelled`` when ``stop`` was set before it (nothing partial is returned)."""
        tokens = self.run(stop=stop)
        if stop is not None and stop.is_set():
            raise Cancelled("stopped on request before the end")
        return tokens

    def _prefill(self):
        """The KV cache of every row's prompt but its last token, computed once per *distinct* padded prompt.

        Every row then takes the same two steps whatever the batch holds: its prompt's prefix, then its last
        token as the first step of ``generate``. A prompt that repeats in the batch (every method x seed
        answers the same paraphrases) is prefilled once: a side-by-side run of 4 seeds x 3 methods prefills 3
        prompts instead of 36 rows. None (each row prefilled whole, for every batch of this model) where the
        model's cache cannot be built this way.
        """
        ids, mask = self.inputs["input_ids"], self.inputs["attention_mask"]
        if ids.shape[1] < 2:
            return None
        distinct, rows = torch.unique(torch.cat([ids, mask], dim=1), dim=0, return_inverse=True)
        first = torch.full((len(distinct),), len(ids), dtype=torch.long, device=ids.device)
        first.scatter_reduce_(0, rows, torch.arange(len(ids), device=ids.device), reduce="amin")
        try:
            cache = DynamicCache(config=self.model.model.config)
            prefix_mask = mask[first, :-1]
            positions = (prefix_mask.cumsum(dim=-1) - 1).clamp(min=0)  # left padding: count real tokens only
            with torch.inference_mode():
                self.model.model(input_ids=ids[first, :-1], attention_mask=prefix_mask, position_ids=positions,
                                 past_key_values=cache, use_cache=True)
            cache.reorder_cache(rows)  # one cache row per batch row, by index
            return cache
        except (TypeError, AttributeError, NotImplementedError) as error:  # a cache class without these methods
            _warn_once(self.model, f"this model's cache cannot be prefilled apart ({error}): every row is prefilled "
                                   "whole")
            return None

    def _response(self, ids: list[int]) -> tuple[list[int], bool]:
        """The ids before the first stop token, and whether there was one."""
        for i, token in enumerate(ids):
            if token in self.stop_ids:
                return ids[:i], True
        return ids, False

    def decode(self, new_tokens: torch.Tensor) -> list[dict]:
        """Per row: raw text, stripped response, number of tokens and whether it ended with a stop token."""
        results = []
        for index in self.main:
            ids, finished = self._response(new_tokens[index].tolist())
            raw = self.model.tokenizer.decode(ids, skip_special_tokens=True)
            results.append({"raw_response": raw, "response": strip_followups(raw), "n_tokens": len(ids),
                            "finished": finished})
        return results

    def _stream_vllm(self) -> Iterator[list[dict]]:
        """``stream`` on the vLLM engine: decoded rows after each engine step (new tokens only), then the final rows."""
        from .vllm import padded, stream_batch

        partial = _PartialRows(self)
        seen, token_ids, complete = [0] * len(self.main), [], False
        try:
            with closing(stream_batch(self)) as steps:  # leaving early aborts the unfinished requests
                for token_ids in steps:
                    for i, index in enumerate(self.main):
                        partial.extend(i, token_ids[index][seen[i]:])
                        seen[i] = len(token_ids[index])
                    yield partial.rows()
            complete = True
        finally:
            if not complete:
                logger.info("generation stopped early: its consumer went away")
        yield self.decode(padded(token_ids, self.stop_ids[0]))

    def stream(self) -> Iterator[list[dict]]:
        """Decoded rows after every step (as ``decode``); the last item is the finished batch.

        Each step decodes only the new tokens of each row (``IncrementalText``), so streaming
        costs the same per token however long the responses grow. Closing the iterator early
        (a consumer that stops reading) stops generation after the current step and waits
        for the worker thread, so no generation outlives its stream.
        """
        if self.engine == "vllm":
            yield from self._stream_vllm()
            return
        tokens, outcome, done, stop = _TokenQueue(), {}, object(), threading.Event()

        def work():
            try:
                outcome["tokens"] = self.run(streamer=tokens, stop=stop)
            except BaseException as error:  # re-raised in the consumer's thread
                outcome["error"] = error
            tokens.steps.put(done)

        worker = threading.Thread(target=work, daemon=True, name="gcs-generate")
        worker.start()
        try:
            partial = _PartialRows(self)
            while (step := tokens.steps.get()) is not done:
                for i, index in enumerate(self.main):
                    partial.extend(i, [int(step[index])])
                yield partial.rows()
            if "error" in outcome:
                raise outcome["error"]
            yield self.decode(outcome["tokens"])
        finally:
            if worker.is_alive():
                logger.info("generation stopped early: its consumer went away")
            stop.set()
            worker.join()


class _PartialRows:
    """The streamed rows of a batch: each response's text so far, up to its first stop token."""

    def __init__(self, batch: Batch):
        self.stop_ids = batch.stop_ids
        self.texts = [IncrementalText(batch.model.tokenizer) for _ in batch.main]
        self.ended = [False] * len(batch.main)

    def extend(self, row: int, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.ended[row] = self.ended[row] or token in self.stop_ids
            if not self.ended[row]:
                self.texts[row].append(token)

    def rows(self) -> list[dict]:
        return [{"raw_response": t.text, "response": strip_followups(t.text), "n_tokens": t.n_tokens, "finished": e}
                for t, e in zip(self.texts, self.ended)]


class IncrementalText:
    """Text of a growing token sequence, decoding only a few tokens per step.

    Decodes the tokens since the previous step together with the ones before them (so a
    tokenizer that drops a word's leading space at the start of a text, or a character
    split over several byte tokens, decodes as it would in the whole text) and appends the
    difference; an unfinished character (U+FFFD) waits for its next byte.

    >>> from types import SimpleNamespace
    >>> words = SimpleNamespace(decode=lambda ids, skip_special_tokens: " ".join(map(str, ids)))
    >>> text = IncrementalText(words)
    >>> for token in (1, 22, 333):
    ...     text.append(token)
    >>> text.text
    '1 22 333'
    """

    def __init__(self, tokenizer):
        self.tokenizer, self.ids, self.text = tokenizer, [], ""
        self._prefix_offset = self._read_offset = 0

    @property
    def n_tokens(self) -> int:
        return len(self.ids)

    def append(self, token: int) -> None:
        self.ids.append(token)
        decode = lambda ids: self.tokenizer.decode(ids, skip_special_tokens=True)  # noqa: E731
        before = decode(self.ids[self._prefix_offset : self._read_offset])
        after = decode(self.ids[self._prefix_offset :])
        if len(after) > len(before) and not after.endswith("\ufffd"):
            self.text += after[len(before) :]
            self._prefix_offset, self._read_offset = self._read_offset, len(self.ids)


class _TokenQueue(BaseStreamer):
    """Receives each step's tokens from transformers (the first put is the prompt) into a queue."""

    def __init__(self):
        self.steps: queue.Queue = queue.Queue()
        self._prompt_seen = False

    def put(self, value):
        if self._prompt_seen:
            self.steps.put(value.reshape(-1).clone())
        self._prompt_seen = True

    def end(self):
        pass


class _StopWhenSet(StoppingCriteria):
    """Stops every row once ``event`` is set: how an abandoned stream frees the model."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)


# -- the runner ----------------------------------------------------------------------------------
MAX_BATCH_ROWS_CPU = 48


class Cancelled(Exception):
    """Work stopped on request (its ``stop`` event was set) before it finished."""


def auto_batch_rows(model: Model, tokens_per_row: int) -> int:
    """Rows per ``generate`` call: a fixed 48 on CPU (larger batches gain nothing there);
    on CUDA as many as half the free memory holds in KV cache."""
    if model.device.type != "cuda":
        return MAX_BATCH_ROWS_CPU
    config = model.model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    bytes_per_token = 2 * config.num_hidden_layers * heads * head_dim * next(model.model.parameters()).element_size()
    free, _ = torch.cuda.mem_get_info(model.device)
    return max(1, min(1024, int(0.5 * free / (bytes_per_token * tokens_per_row))))


def pack(units: Sequence, rows_of: Callable, settings_of: Callable, batch_rows: int) -> list[list]:
    """Consecutive units with equal settings, chunked so each chunk has at most ``batch_rows`` rows.

    >>> settings = {0: "T=0", 1: "T=1"}
    >>> pack([(0, "a"), (0, "b"), (0, "c"), (1, "d")], lambda u: ["row"] * 2, lambda u: settings[u[0]], 4)
    [[(0, 'a'), (0, 'b')], [(0, 'c')], [(1, 'd')]]
    """
    chunks, current, size = [], [], 0
    for unit in units:
        rows = len(rows_of(unit))
        if current and (size + rows > batch_rows or settings_of(unit) != settings_of(current[0])):
            chunks.append(current)
            current, size = [], 0
        current.append(unit)
        size += rows
    if current:
        chunks.append(current)
    return chunks


def run_batches(
    units: Sequence,
    rows_of: Callable[[object], list[Row]],
    settings_of: Callable[[object], SamplingSettings],
    model: Model,
    batch_rows: int | None = None,
    generate_kwargs: dict | None = None,
    progress=None,
    show_progress: bool = False,
    description: str = "generate",
    stop: threading.Event | None = None,
    engine: str = "transformers",
) -> Iterator[tuple[list, list[list[dict]]]]:
    """Generate the rows of every unit in as few batches as ``batch_rows`` allows; yield per batch.

    A unit is whatever the caller counts (a sweep cell, one style response, a set of
    rewordings): ``rows_of(unit)`` gives its rows, ``settings_of(unit)`` its sampling
    settings (units with different settings never share a batch). Yields ``(units,
    decoded)`` for each batch, ``decoded[i]`` being ``Batch.decode``'s records of
    ``units[i]``'s rows. ``progress`` is a tqdm-like bar (``update(n)`` gets the units done)
    or a callback ``progress(done, total)``; ``show_progress`` shows a tqdm bar of its own.
    ``batch_rows`` defaults to ``auto_batch_rows``; on the vLLM engine, to all rows (vLLM batches
    them itself). Setting ``stop`` ends the running batch after its current token and raises
    ``Cancelled`` (nothing partial is yielded).
    """
    tokens = max((settings_of(u).max_new_tokens for u in units), default=1)
    unit_rows = [rows_of(unit) for unit in units]  # each unit's rows, built once
    if not batch_rows:  # vLLM batches (and queues) requests itself: hand it all rows of a setting at once
        batch_rows = max(1, sum(map(len, unit_rows))) if engine == "vllm" else auto_batch_rows(model, tokens + 128)
    chunks = pack(range(len(units)), lambda i: unit_rows[i], lambda i: settings_of(units[i]), batch_rows)
    done = 0
    with tqdm(total=len(units), desc=description, unit="unit", disable=not show_progress) as bar:
        for chunk in chunks:
            batch = Batch([row for i in chunk for row in unit_rows[i]], model, settings_of(units[chunk[0]]),
                          dict(generate_kwargs or {}), engine)
            try:
                tokens = batch.complete(stop)
            except Cancelled:
                raise Cancelled(f"{description} stopped after {done} of {len(units)} units") from None
            decoded, start = batch.decode(tokens), 0
            per_unit = []
            for i in chunk:
                per_unit.append(decoded[start : start + len(unit_rows[i])])
                start += len(unit_rows[i])
            yield [units[i] for i in chunk], per_unit
            done += len(chunk)
            bar.update(len(chunk))
            if hasattr(progress, "update"):  # a tqdm-like bar (tqdm, gr.Progress().tqdm, ...)
                progress.update(len(chunk))
            elif progress is not None:
                progress(done, len(units))
