"""Batched side-by-side generation: many prompts x methods x seeds in one ``model.generate`` call.

    gcs.generate(["What is DNA?", "Explain what DNA is."], method="gcswr", seed=0)
    # -> ['DNA, or deoxyribonucleic acid, is ...', 'DNA, or deoxyribonucleic acid, is ...']

Every row is one response. Rows are left-padded into one batch and decoded with the KV
cache by transformers; a ``GumbelLogitsProcessor`` draws each row's tokens with its own
method and seed, so a row's response does not depend on the batch it is in (IS rows
take their stream from a hash of their prompt). With ensembling, a prompt's rewordings
join the batch as extra rows of its group; an ``EnsembleLogitsProcessor`` gives the
group the geometric mean of their next-token distributions, and all rows of the group
append the same token, sharing the response prefix.
"""

from __future__ import annotations

import hashlib
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd
import torch
from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteria, StoppingCriteriaList
from transformers.generation.streamers import BaseStreamer

from .models import Model, resolve_model
from .processor import EnsembleLogitsProcessor, GumbelLogitsProcessor, check_sampling_settings
from .prompts import format_prompt, strip_followups
from .samplers import METHODS, check_method, check_seed

MAX_NEW_TOKENS = 1024
REWORD_INSTRUCTION = (
    "Rewrite the following question in different words, keeping its meaning exactly. "
    "Reply with the rewritten question only.\n\nQuestion: {question}"
)

Ensemble = None | int | Sequence[Sequence[str]]


# -- validation (all of it runs before any model work) -----------------------------------------
def check_prompts(prompts: Sequence[str], name: str = "prompts") -> list[str]:
    """A non-empty list of non-blank strings, or ValueError naming the offending entry."""
    if isinstance(prompts, str) or not isinstance(prompts, Sequence):
        raise ValueError(f"{name} must be a list of strings, got {type(prompts).__name__}")
    if len(prompts) == 0:
        raise ValueError(f"{name} must not be empty")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, str):
            raise ValueError(f"{name}[{i}] must be a string, got {type(prompt).__name__}")
        if not prompt.strip():
            raise ValueError(f"{name}[{i}] is blank")
    return list(prompts)


def check_max_new_tokens(max_new_tokens: int) -> int:
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"max_new_tokens must be an integer in [1, {MAX_NEW_TOKENS}], got {max_new_tokens!r}")
    return max_new_tokens


def _check_seeds(seeds) -> list[int]:
    seeds = [seeds] if isinstance(seeds, int) else list(seeds)
    if not seeds:
        raise ValueError("seeds must not be empty")
    return [check_seed(s, f"seeds[{i}]") for i, s in enumerate(seeds)]


def _check_ensemble(ensemble: Ensemble, n_prompts: int) -> None:
    if ensemble is None or (isinstance(ensemble, int) and not isinstance(ensemble, bool) and 0 <= ensemble <= 8):
        return
    if isinstance(ensemble, (str, bool, int)) or not isinstance(ensemble, Sequence):
        raise ValueError("ensemble must be None, a number of rewordings (0-8), or one list of rewordings per prompt")
    if len(ensemble) != n_prompts:
        raise ValueError(f"ensemble has {len(ensemble)} lists of rewordings for {n_prompts} prompts")
    for i, rewordings in enumerate(ensemble):
        if len(rewordings):  # an empty list means: no rewordings for this prompt
            check_prompts(rewordings, f"ensemble[{i}]")


def prompt_stream(prompt: str) -> int:
    """A stable 63-bit id of a prompt: the IS stream of its rows (batch-position independent)."""
    return int.from_bytes(hashlib.blake2b(prompt.encode("utf-8"), digest_size=8).digest(), "little") >> 1


# -- one batch ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Row:
    """One response to produce: a prompt under a method and seed, optionally with rewordings."""

    prompt: str
    method: str
    seed: int
    rewordings: tuple[str, ...] = ()


@dataclass
class Batch:
    """Rows laid out as model inputs: each row's prompt and rewordings, group ids and sampling keys."""

    rows: list[Row]
    model: Model
    temperature: float
    top_k: int | None
    top_p: float | None
    max_new_tokens: int
    generate_kwargs: dict = field(default_factory=dict)

    def __post_init__(self):
        questions, texts, self.groups, methods, seeds, streams, self.main = [], [], [], [], [], [], []
        for group, row in enumerate(self.rows):
            self.main.append(len(texts))
            for question in (row.prompt, *row.rewordings):
                questions.append(question)
                texts.append(format_prompt(question, self.model.tokenizer, self.model.is_chat))
                self.groups.append(group)
                methods.append(row.method)
                seeds.append(row.seed)
                streams.append(prompt_stream(row.prompt))
        tokenizer = self.model.tokenizer
        inputs = tokenizer(
            texts, return_tensors="pt", padding=True, padding_side="left", add_special_tokens=not self.model.is_chat
        )
        limit = self.model.context_window - self.max_new_tokens
        for question, length in zip(questions, inputs["attention_mask"].sum(dim=1).tolist()):
            if length > limit:
                raise ValueError(
                    f"a prompt is too long: {length} tokens (it starts {question[:60]!r}); the model's context window "
                    f"of {self.model.context_window} tokens leaves {limit} for the prompt with max_new_tokens="
                    f"{self.max_new_tokens}"
                )
        self.inputs = inputs.to(self.model.device)
        self.methods, self.seeds, self.streams = methods, seeds, streams
        eos = self.model.model.generation_config.eos_token_id
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        self.eos_ids = sorted({*eos, tokenizer.eos_token_id} - {None})

    def processors(self) -> LogitsProcessorList:
        processors = LogitsProcessorList()
        if len(self.groups) > len(self.rows):
            processors.append(EnsembleLogitsProcessor(self.groups))
        processors.append(
            GumbelLogitsProcessor(
                self.methods, self.seeds, self.temperature, self.top_k, self.top_p, streams=self.streams
            )
        )
        return processors

    @torch.inference_mode()
    def run(self, streamer: BaseStreamer | None = None, stop: threading.Event | None = None) -> torch.Tensor:
        """Generated token ids [texts, new tokens] (EOS then padding after a row finishes).

        Setting ``stop`` ends generation after the current step (a cancelled stream).
        """
        config = GenerationConfig(
            max_new_tokens=self.max_new_tokens,
            do_sample=False,
            eos_token_id=self.eos_ids,
            pad_token_id=self.model.tokenizer.pad_token_id,
        )
        other_kwargs = config.update(**self.generate_kwargs)  # generation settings go into the config
        if stop is not None:
            other_kwargs["stopping_criteria"] = StoppingCriteriaList([_StopWhenSet(stop)])
        output = self.model.model.generate(
            **self.inputs, generation_config=config, logits_processor=self.processors(), streamer=streamer, **other_kwargs
        )
        return output[:, self.inputs["input_ids"].shape[1] :].cpu()

    def decode(self, new_tokens: torch.Tensor) -> list[dict]:
        """Per row: raw text, stripped response, number of tokens and whether it ended with EOS."""
        results = []
        for index in self.main:
            ids = new_tokens[index].tolist()
            ends = [i for i, token in enumerate(ids) if token in self.eos_ids]
            n_tokens = ends[0] if ends else len(ids)
            raw = self.model.tokenizer.decode(ids[:n_tokens], skip_special_tokens=True)
            results.append({"raw_response": raw, "response": strip_followups(raw), "n_tokens": n_tokens, "finished": bool(ends)})
        return results


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


def _stream(batch: Batch) -> Iterator[list[dict]]:
    """Decoded rows after every step; the last item is the finished batch (same as ``batch.run``).

    Closing the iterator early (a consumer that stops reading) stops generation after
    the current step and waits for the worker thread, so no generation outlives its stream.
    """
    tokens, outcome, done, stop = _TokenQueue(), {}, object(), threading.Event()

    def work():
        try:
            outcome["tokens"] = batch.run(streamer=tokens, stop=stop)
        except BaseException as error:  # re-raised in the consumer's thread
            outcome["error"] = error
        tokens.steps.put(done)

    worker = threading.Thread(target=work, daemon=True, name="gcs-generate")
    worker.start()
    try:
        generated = []
        while (step := tokens.steps.get()) is not done:
            generated.append(step)
            yield batch.decode(torch.stack(generated, dim=1))
        if "error" in outcome:
            raise outcome["error"]
        yield batch.decode(outcome["tokens"])
    finally:
        stop.set()
        worker.join()


# -- public API --------------------------------------------------------------------------------
def _prepare(prompts, methods, seeds, temperature, top_k, top_p, max_new_tokens, model, ensemble, generate_kwargs) -> Batch:
    prompts = check_prompts(prompts)
    methods = [check_method(m) for m in ([methods] if isinstance(methods, str) else methods)]
    if not methods:
        raise ValueError("methods must not be empty")
    seeds = _check_seeds(seeds)
    check_sampling_settings(temperature, top_k, top_p)
    check_max_new_tokens(max_new_tokens)
    _check_ensemble(ensemble, len(prompts))
    model = resolve_model(model)
    if isinstance(ensemble, int):
        ensemble = reword(prompts, n=ensemble, model=model) if ensemble else None
    rewordings = [tuple(r) for r in ensemble] if ensemble is not None else [()] * len(prompts)
    rows = [Row(p, m, s, r) for m in methods for s in seeds for p, r in zip(prompts, rewordings)]
    return Batch(rows, model, temperature, top_k, top_p, max_new_tokens, dict(generate_kwargs))


def generate(
    prompts: Sequence[str],
    method: str = "gcswr",
    seed: int = 0,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 50,
    model: Model | str | None = None,
    ensemble: Ensemble = None,
    **generate_kwargs,
) -> list[str]:
    """One response per prompt, all rows in one batched ``generate`` (KV cache, left padding).

    ``method`` is "is", "gcs" or "gcswr"; prompts generated with one ``seed`` share their
    noise. ``temperature`` 0 is greedy (all methods agree). ``model`` is a loaded
    ``gcs.Model``, a transformers id or local path, or None for the embedded default.
    ``ensemble``: None (off), a list of rewordings per prompt, or a number of rewordings
    for the model to write itself (section 5). ``max_new_tokens`` is at most 1024.
    Follow-up turns the model invents after its answer are removed (``compare`` keeps the
    raw text). Extra keyword arguments go to transformers' ``generate``. A prompt too
    long for the context window (after making room for ``max_new_tokens``) is refused.
    """
    batch = _prepare(prompts, method, seed, temperature, top_k, top_p, max_new_tokens, model, ensemble, generate_kwargs)
    return [row["response"] for row in batch.decode(batch.run())]


def stream(prompts: Sequence[str], method: str = "gcswr", seed: int = 0, temperature: float = 1.0, top_k=None,
           top_p=None, max_new_tokens: int = 50, model=None, ensemble: Ensemble = None, **generate_kwargs) -> Iterator[list[str]]:
    """Like ``generate``, but yields all partial responses after every token; the last yield is final."""
    batch = _prepare(prompts, method, seed, temperature, top_k, top_p, max_new_tokens, model, ensemble, generate_kwargs)
    for rows in _stream(batch):
        yield [row["response"] for row in rows]


def _frame(batch: Batch, decoded: list[dict]) -> pd.DataFrame:
    prompts = list(dict.fromkeys(row.prompt for row in batch.rows))
    records = [
        {
            "prompt_index": prompts.index(row.prompt),
            "prompt": row.prompt,
            "method": row.method,
            "seed": row.seed,
            "temperature": batch.temperature,
            "top_k": batch.top_k,
            "top_p": batch.top_p,
            "ensemble": len(row.rewordings) > 0,
            **result,
        }
        for row, result in zip(batch.rows, decoded)
    ]
    return pd.DataFrame.from_records(records)


def compare(
    prompts: Sequence[str],
    methods: Sequence[str] = METHODS,
    seeds: Sequence[int] | int = (0,),
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    max_new_tokens: int = 50,
    model: Model | str | None = None,
    ensemble: Ensemble = None,
    **generate_kwargs,
) -> pd.DataFrame:
    """Every method x seed x prompt, generated in one batch, as a tidy DataFrame.

    Columns: prompt_index, prompt, method, seed, temperature, top_k, top_p, ensemble,
    raw_response, response (follow-ups stripped), n_tokens, finished (ended with EOS).
    """
    batch = _prepare(prompts, methods, seeds, temperature, top_k, top_p, max_new_tokens, model, ensemble, generate_kwargs)
    return _frame(batch, batch.decode(batch.run()))


def stream_compare(prompts: Sequence[str], methods: Sequence[str] = METHODS, seeds=(0,), temperature: float = 1.0,
                   top_k=None, top_p=None, max_new_tokens: int = 50, model=None, ensemble: Ensemble = None,
                   **generate_kwargs) -> Iterator[pd.DataFrame]:
    """Like ``compare``, but yields the DataFrame of partial responses after every token; the last is final."""
    batch = _prepare(prompts, methods, seeds, temperature, top_k, top_p, max_new_tokens, model, ensemble, generate_kwargs)
    for decoded in _stream(batch):
        yield _frame(batch, decoded)


def reword(prompts: Sequence[str], n: int = 2, model: Model | str | None = None, seed: int = 0,
           temperature: float = 0.8) -> list[list[str]]:
    """``n`` rewordings of each prompt written by the model itself (independent samples, one batch)."""
    prompts = check_prompts(prompts)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= 8:
        raise ValueError(f"n must be an integer in [1, 8], got {n!r}")
    model = resolve_model(model)
    requests = [REWORD_INSTRUCTION.format(question=p) for p in prompts]
    rows = [Row(q, "is", check_seed(seed) + i) for i in range(n) for q in requests]
    batch = Batch(rows, model, temperature, None, 0.95, max(32, min(128, 2 * max(len(p) for p in prompts) // 3)))
    texts = [row["response"].strip().splitlines()[0].strip(' "') if row["response"].strip() else "" for row in batch.decode(batch.run())]
    by_prompt = [[texts[i * len(prompts) + j] for i in range(n)] for j in range(len(prompts))]
    # An empty or parroted rewording adds nothing: fall back to fewer members.
    return [[t for t in dict.fromkeys(texts_j) if t and t != prompts[j]] for j, texts_j in enumerate(by_prompt)]
