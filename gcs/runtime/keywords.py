"""Keyword arguments nothing takes, refused by name before any work, with the nearest name that would be taken.

Python's own error names no alternative (before 3.13), and a keyword that an entry point passes on to transformers'
``generate`` was found only once the model had loaded ("model_kwargs are not used by the model: ['temprature']",
42 s in). Both now end in one message, from the entry point's own names and transformers' generation options, read
from a list here rather than from transformers (importing it takes seconds):

>>> raise unexpected_keyword("gcs.compare", "temprature", ["methods", "seeds", "temperature"])
Traceback (most recent call last):
...
gcs.runtime.arguments.ArgumentTypeError: gcs.compare got an unexpected keyword argument 'temprature' (did you mean \
'temperature'?)
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Collection, Iterable
from typing import Any, ParamSpec, TypedDict, TypeVar

from gcs.runtime.arguments import ArgumentTypeError
from gcs.runtime.names import nearest_name
from gcs.runtime.quoting import quoted

P = ParamSpec("P")
R = TypeVar("R")

# What transformers' generate takes by name: GenerationConfig's fields and generate's own arguments (transformers
# 5.19; tests/test_option_checks.py compares GENERATE_OPTIONS with the installed transformers). Anything else that
# reaches generate is a model_kwarg, which transformers refuses only after the model has loaded.
class GenerateOptions(TypedDict, total=False):
    """The extra keywords an entry point passes on to transformers' ``generate`` (``**generate_kwargs:
    Unpack[GenerateOptions]``), so that an editor completes them and mypy flags ``gcs.compare(prompts,
    temprature=0.7)``. Not here: gcs's own sampling settings among transformers' options (``OWN_GENERATE_OPTIONS``),
    which an entry point takes by name or refuses, and the options gcs decides itself (``DECIDED_GENERATE_OPTIONS``).

    >>> "min_new_tokens" in GenerateOptions.__optional_keys__, "temperature" in GenerateOptions.__optional_keys__
    (True, False)
    """

    assistant_confidence_threshold: Any
    assistant_early_exit: Any
    assistant_ensemble_weight: Any
    assistant_lookbehind: Any
    bad_words_ids: Any
    begin_suppress_tokens: Any
    bos_token_id: Any
    cache_config: Any
    cache_implementation: Any
    compile_config: Any
    constraints: Any
    continuous_batching_config: Any
    decoder_start_token_id: Any
    disable_compile: Any
    early_stopping: Any
    encoder_no_repeat_ngram_size: Any
    encoder_repetition_penalty: Any
    eos_token_id: Any
    exponential_decay_length_penalty: Any
    force_words_ids: Any
    forced_bos_token_id: Any
    forced_eos_token_id: Any
    guidance_scale: Any
    is_assistant: Any
    length_penalty: Any
    low_memory: Any
    max_cache_len: Any
    max_length: Any
    max_matching_ngram_size: Any
    max_time: Any
    min_length: Any
    min_new_tokens: Any
    negative_prompt_attention_mask: Any
    negative_prompt_ids: Any
    no_repeat_ngram_size: Any
    num_assistant_tokens: Any
    num_assistant_tokens_schedule: Any
    output_attentions: Any
    output_hidden_states: Any
    output_logits: Any
    output_scores: Any
    pad_token_id: Any
    prefill_chunk_size: Any
    prefix_allowed_tokens_fn: Any
    remove_invalid_values: Any
    renormalize_logits: Any
    repetition_penalty: Any
    sequence_bias: Any
    speculation_type: Any
    stop_strings: Any
    stopping_criteria: Any
    suppress_tokens: Any
    synced_gpus: Any
    target_lookbehind: Any
    token_healing: Any
    transformers_version: Any
    use_cache: Any
    use_mtp: Any
    watermarking_config: Any


OWN_GENERATE_OPTIONS = frozenset({"max_new_tokens", "temperature", "top_k", "top_p"})
_SAMPLES = "gcs samples every token itself: transformers' sampling and its warpers are off"
_STRATEGY = "it would replace sampling with another decoding strategy"
_LAYOUT = "gcs sets it to lay out, sample and stream the rows"
# transformers' options that gcs decides itself, and why: passed on, each failed inside transformers after the model
# had loaded (num_beams, return_dict_in_generate, logits_processor) or was ignored without a word (min_p)
DECIDED_GENERATE_OPTIONS = {
    **dict.fromkeys(("do_sample", "min_p", "typical_p", "epsilon_cutoff", "eta_cutoff", "top_h"), _SAMPLES),
    **dict.fromkeys(("num_beams", "num_beam_groups", "diversity_penalty", "penalty_alpha", "dola_layers",
                     "assistant_model", "prompt_lookup_num_tokens", "custom_generate"), _STRATEGY),
    **dict.fromkeys(("num_return_sequences", "return_dict_in_generate", "generation_config", "logits_processor",
                     "streamer"), _LAYOUT),
}
GENERATE_OPTIONS = frozenset(GenerateOptions.__optional_keys__) | OWN_GENERATE_OPTIONS \
    | frozenset(DECIDED_GENERATE_OPTIONS)
SUGGESTED_LENGTH = 64  # a longer keyword is no typo of a name (and difflib's time grows with its square)


def unexpected_keyword(caller: str, keyword: str, known: Iterable[str], why: str = "") -> ArgumentTypeError:
    """The error for ``keyword``, which ``caller`` does not take: Python's words, the nearest of ``known`` (if one is
    near), then ``why`` (appended after a semicolon).

    >>> str(unexpected_keyword("gcs.ab", "methods", ["method", "seeds"]))
    "gcs.ab got an unexpected keyword argument 'methods' (did you mean 'method'?)"
    >>> len(str(unexpected_keyword("gcs.ab", "x" * 100_000, ["method"])))  # quoted in part: a bounded message
    166
    """
    nearest = nearest_name(keyword, sorted(known)) if len(keyword) <= SUGGESTED_LENGTH else None
    hint = f" (did you mean {nearest!r}?)" if nearest else ""
    return ArgumentTypeError(f"{caller} got an unexpected keyword argument {quoted(keyword)}{hint}"
                             + (f"; {why}" if why else ""))


def refuse_unknown(caller: str, keywords: Iterable[str], names: Collection[str]) -> None:
    """``unexpected_keyword``'s error for the first of ``keywords`` that is not among ``names``, if any.

    >>> refuse_unknown("gcs.trace", ["seed"], ["seed", "temperature"])  # all known: nothing
    """
    for keyword in keywords:
        if keyword not in names:
            raise unexpected_keyword(caller, keyword, names)


def keyword_names(function: Callable) -> tuple[str, ...]:
    """The names ``function`` takes as keywords (its signature's, through ``functools.wraps``).

    >>> keyword_names(lambda prompts, /, *, seeds=1, **more: None)
    ('seeds',)
    """
    return tuple(name for name, parameter in inspect.signature(function).parameters.items()
                 if parameter.kind in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD))


def keywords_checked(function: Callable[P, R], caller: str | None = None) -> Callable[P, R]:
    """``function``, refusing an unknown keyword with ``unexpected_keyword``'s message (named for ``caller``, else
    ``gcs.`` and its name) before it runs; its signature, name and docstring are kept. A generator function's checks
    of its own run on the first ``next``; an unknown keyword is refused at the call, as Python refuses it.

    >>> @keywords_checked
    ... def sweep(groups, *, temperatures=None, seeds=3):
    ...     return seeds
    >>> sweep([], seeds=2)
    2
    >>> sweep([], temperature=0.5)
    Traceback (most recent call last):
    ...
    gcs.runtime.arguments.ArgumentTypeError: gcs.sweep got an unexpected keyword argument 'temperature' (did you \
mean 'temperatures'?)
    """
    names = frozenset(keyword_names(function))
    called = caller or f"gcs.{function.__name__}"

    @functools.wraps(function)
    def checked(*args: P.args, **kwargs: P.kwargs) -> R:
        refuse_unknown(called, kwargs, names)
        return function(*args, **kwargs)

    return checked
