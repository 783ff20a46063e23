"""transformers as gcs's engine: a ``gcs.engines.batch.Batch`` decoded by ``generate``, token ids step by step.

``TransformersRunner`` runs transformers' ``generate`` with the KV cache. Generation settings
are pinned: transformers fills generation fields from the model's own ``generation_config``
and runs the resulting processors *before* ours, so a checkpoint's ``repetition_penalty=1.1``
would silently change the sampled distribution. Every call runs with every such field
neutral, in eval mode, and leaves the model as it was given (``generating``). Every row's prompt but its last token is
prefilled once per distinct prompt (``prefill``), so a row takes the same two steps whatever
the batch holds.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import queue
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, cast

import torch
from transformers import DynamicCache, GenerationConfig, StoppingCriteria, StoppingCriteriaList
from transformers.cache_utils import DynamicLayer
from transformers.generation.streamers import BaseStreamer

from gcs.engines.invariance import make_row_invariant, row_invariance, row_invariant_kernels
from gcs.engines.models import Model, loaded_here
from gcs.engines.threads import StepThreads, adapting, threads_agree
from gcs.runtime.background import Background

if TYPE_CHECKING:
    from transformers import PreTrainedConfig

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
_GENERATING: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its lock (``generating``)
_GENERATING_LOCK = threading.Lock()
_WARNED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> warnings said about it


def _warn_once(model: Model, message: str) -> None:
    """Log ``message`` as a warning the first time it is said about ``model``."""
    said = _WARNED.setdefault(model.model, set())
    if message not in said:
        said.add(message)
        logger.warning(message)


@contextmanager
def generating(model: Model, row_invariant: bool):
    """``model`` ready for one gcs call inside the block, and as the caller gave it after: its own
    ``generation_config``, training flags, layer classes and attention implementation.

    Inside, the model's ``generation_config`` holds no distribution-changing default: transformers fills
    generation fields from it (5.x: every field left None; 4.x: every field *equal to the global default*,
    so even an explicit ``repetition_penalty=1.0`` is replaced by the checkpoint's 1.1), and a copy with the
    neutral values makes both behave. Every module is in eval mode (dropout would make the tokens no sample of
    the model). With ``row_invariant``, it runs on row-invariant kernels (``gcs.engines.invariance``): for good on a
    model gcs loaded itself (``gcs.load_model``), for the block only on one the caller passed in. One lock per
    model keeps concurrent calls apart; it is re-entrant, and an inner block changes nothing more.
    """
    module = model.model
    with _GENERATING_LOCK:
        lock = _GENERATING.setdefault(module, threading.RLock())
    with lock:
        training = [m for m in module.modules() if m.training]
        original = module.generation_config
        neutral = copy.deepcopy(original)
        for name, value in NEUTRAL_GENERATION.items():
            if hasattr(neutral, name):
                setattr(neutral, name, copy.copy(value))
        if row_invariant and loaded_here(module):
            make_row_invariant(module)
        kernels = row_invariant_kernels(module) if row_invariant else contextlib.nullcontext()
        module.eval()
        module.generation_config = neutral
        try:
            with kernels:
                yield
        finally:
            module.generation_config = original
            for m in training:
                m.train()


def generation_config(model: Model, max_new_tokens: int, stop_ids: Sequence[int], generate_kwargs: dict):
    """A ``GenerationConfig`` under which transformers adds no processor of its own, and the leftover kwargs.

    Use it inside ``generating(model, ...)``. Keywords in ``generate_kwargs``
    (say ``min_new_tokens``) are the caller's explicit choice and are kept.
    """
    tokenizer: Any = model.tokenizer  # a transformers tokenizer: gcs.Model types it as object
    config = GenerationConfig(**NEUTRAL_GENERATION, max_new_tokens=max_new_tokens, eos_token_id=list(stop_ids),
                              pad_token_id=tokenizer.pad_token_id)
    return config, config.update(**generate_kwargs)


PREFILL_CHUNK_TOKENS = 512  # prompt tokens per prefill forward: a stop is seen between chunks (well under a second)


def prefill(model: Model, ids: torch.Tensor, mask: torch.Tensor, stop: threading.Event | None = None):
    """The KV cache of every row's prompt but its last token, computed once per *distinct* padded prompt.

    Every row then takes the same two steps whatever the batch holds: its prompt's prefix, then its last
    token as the first step of ``generate``. A prompt that repeats in the batch (every method x seed
    answers the same paraphrases) is prefilled once: a side-by-side run of 4 seeds x 3 methods prefills 3
    prompts instead of 36 rows. None (each row prefilled whole, for every batch of this model) where the
    model's cache cannot be built this way. The prompts go through in chunks of rows of about
    ``PREFILL_CHUNK_TOKENS`` (each row's result is the same: the kernels are row-invariant), and ``stop`` is
    checked between chunks: a 48-row prefill can take tens of seconds on a small, shared CPU, and an abandoned
    request must free the model sooner (the cache is then incomplete: ``run`` returns no token).
    """
    if ids.shape[1] < 2:
        return None
    distinct, rows = torch.unique(torch.cat([ids, mask], dim=1), dim=0, return_inverse=True)
    first = torch.full((len(distinct),), len(ids), dtype=torch.long, device=ids.device)
    first.scatter_reduce_(0, rows, torch.arange(len(ids), device=ids.device), reduce="amin")
    try:
        model_config = cast("PreTrainedConfig", model.model.config)  # gcs.Model types the model as a Module
        cache = DynamicCache(config=model_config)
        chunk = len(first) if not _joinable(cache) else max(1, PREFILL_CHUNK_TOKENS // ids.shape[1])
        parts = []
        for start in range(0, len(first), chunk):
            if stop is not None and stop.is_set():
                return cache  # incomplete: the run stops before its first step
            part = cache if start == 0 else DynamicCache(config=model_config)
            _prefill_rows(model, ids[first[start : start + chunk], :-1], mask[first[start : start + chunk], :-1], part)
            parts.append(part)
        _join(cache, parts[1:])
        cache.reorder_cache(rows)  # one cache row per batch row, by index
        return cache
    except (TypeError, AttributeError, NotImplementedError) as error:  # a cache class without these methods
        _warn_once(model, f"this model's cache cannot be prefilled apart ({error}): every row is prefilled whole")
        return None


def _prefill_rows(model: Model, ids: torch.Tensor, mask: torch.Tensor, cache: DynamicCache) -> None:
    positions = (mask.cumsum(dim=-1) - 1).clamp(min=0)  # left padding: count real tokens only
    with torch.inference_mode():
        model.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True)


def _joinable(cache: DynamicCache) -> bool:
    """Whether caches of several chunks of rows can be joined into one: plain key/value layers only (a sliding
    window or a recurrent state keeps more than its keys and values)."""
    return bool(cache.layers) and all(type(layer) is DynamicLayer for layer in cache.layers)


def _join(cache: DynamicCache, more: list[DynamicCache]) -> None:
    """The rows of every cache in ``more`` appended to ``cache``'s, layer by layer (one copy per layer)."""
    if more:
        # only joinable caches come here (``_joinable``): DynamicLayers, each holding the keys and values prefilled
        layers = [cast("list[DynamicLayer]", part.layers) for part in (cache, *more)]
        for index, layer in enumerate(layers[0]):
            layer.keys = torch.cat([cast(torch.Tensor, part[index].keys) for part in layers])
            layer.values = torch.cat([cast(torch.Tensor, part[index].values) for part in layers])


def probe_threads(model: Model, rows: Sequence[int]) -> None:
    """Run ``gcs.engines.threads.threads_agree`` for batches of ``rows`` rows now (under the model's lock), where decode
    steps choose their threads: the app does it at start, on free cores, so that a run beside another job, where a
    step on all threads is slow, does not pay for the probe."""
    module = model.model
    if not adapting(model.device):
        return
    with generating(model, row_invariance(module)), torch.inference_mode():
        for count in rows:
            threads_agree(module, count, torch.get_num_threads(), 1)


class TransformersRunner:
    """A batch through transformers' ``generate``: KV cache, left padding, gcs's processors only.

    Runs the model on row-invariant kernels where that is wanted (``gcs.engines.invariance``; on CPU by default):
    ``row_invariant`` says whether it does. The model comes back as it was given (``generating``).
    """

    def __init__(self, batch):
        self.batch = batch
        self.row_invariant = row_invariance(batch.model.model)

    @torch.inference_mode()
    def run(self, stop: threading.Event | None = None, streamer: BaseStreamer | None = None) -> torch.Tensor:
        """Generated token ids [texts, new tokens] (a stop token then padding after a row finishes).

        The last step of ``steps``, computed without its per-step queue: one ``generate`` call.
        Setting ``stop`` ends generation after the current step (a cancelled stream), or during the
        prefill (then with no token).
        """
        batch = self.batch
        config, other_kwargs = generation_config(batch.model, batch.settings.max_new_tokens, batch.stop_ids,
                                                 batch.generate_kwargs)
        criteria = StoppingCriteriaList(other_kwargs.pop("stopping_criteria", None) or [])  # the caller's, kept
        if stop is not None:
            criteria.append(_StopWhenSet(stop))
        order = batch.order
        inputs = batch.inputs if order is None else {key: value[order] for key, value in batch.inputs.items()}
        rows = len(inputs["input_ids"])
        with generating(batch.model, self.row_invariant):
            if "past_key_values" not in other_kwargs:
                other_kwargs["past_key_values"] = prefill(batch.model, inputs["input_ids"], inputs["attention_mask"],
                                                          stop)
            if stop is not None and stop.is_set():  # stopped before the first step
                return torch.empty((rows, 0), dtype=torch.long)
            module = batch.model.model
            threads = StepThreads(module, rows, stop) if adapting(module.device) else None
            if threads is not None:
                criteria.append(threads)
            try:
                output = module.generate(**inputs, generation_config=config, logits_processor=batch.processors(),
                                         streamer=streamer, stopping_criteria=criteria, **other_kwargs)
            finally:
                if threads is not None:
                    threads.close()
        output = output[:, inputs["input_ids"].shape[1] :].cpu()
        return batch.in_given_order(output)

    def steps(self, stop: threading.Event | None = None) -> Iterator[list[list[int]]]:
        """Every row's token ids so far, after each step (``run`` in a worker thread, read through a queue).

        Closing the iterator early (a consumer that stops reading) sets ``stop`` (an event of its own when
        none is given), so generation ends after the current step, and waits for the worker thread: no
        generation outlives its consumer. A generation that ends by itself leaves ``stop`` as it was (the
        caller's event then says whether the caller stopped it).
        """
        tokens, done = _TokenQueue(self.batch.in_given_order), object()

        def work(stop):
            try:
                self.run(stop, streamer=tokens)
            finally:
                tokens.steps.put(done)

        job = Background(work, "gcs-generate", stop)
        ended = False
        try:
            token_ids: list[list[int]] = [[] for _ in range(len(self.batch.groups))]
            while (step := tokens.steps.get()) is not done:
                for ids, token in zip(token_ids, step.tolist(), strict=True):
                    ids.append(token)
                yield token_ids
            ended = True
            job.result()  # the worker's error, if any, raised here
        finally:
            if not ended:
                if job.thread.is_alive():
                    logger.info("generation stopped early: its consumer went away")
                job.stop.set()
            job.wait()


class _TokenQueue(BaseStreamer):
    """Receives each step's tokens from transformers (the first put is the prompt) into a queue, put back in the texts'
    order by ``reorder`` (``Batch.in_given_order``)."""

    def __init__(self, reorder: Callable[[torch.Tensor], torch.Tensor]):
        self.steps: queue.Queue = queue.Queue()
        self.reorder = reorder
        self._prompt_seen = False

    def put(self, value):
        if self._prompt_seen:
            self.steps.put(self.reorder(value.reshape(-1).clone()))
        self._prompt_seen = True

    def end(self):
        pass


class _StopWhenSet(StoppingCriteria):
    """Stops every row once ``event`` is set: how an abandoned stream frees the model."""

    def __init__(self, event: threading.Event):
        self.event = event

    def __call__(self, input_ids: torch.LongTensor, scores, **kwargs) -> torch.BoolTensor:
        stopped = torch.full((input_ids.shape[0],), self.event.is_set(), dtype=torch.bool, device=input_ids.device)
        return cast(torch.BoolTensor, stopped)  # StoppingCriteria's legacy type: torch's ops return Tensor
