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
from collections.abc import Callable, Iterable
from typing import ParamSpec, TypeVar

from gcs.runtime.arguments import ArgumentTypeError
from gcs.runtime.names import nearest_name
from gcs.runtime.quoting import quoted

P = ParamSpec("P")
R = TypeVar("R")

# What transformers' generate takes by name: GenerationConfig's fields and generate's own arguments (transformers
# 5.19; tests/test_option_checks.py compares it with the installed transformers). Anything else that reaches generate
# is a model_kwarg, which transformers refuses only after the model has loaded.
GENERATE_OPTIONS = frozenset({
    "assistant_confidence_threshold", "assistant_early_exit", "assistant_ensemble_weight", "assistant_lookbehind",
    "assistant_model", "bad_words_ids", "begin_suppress_tokens", "bos_token_id", "cache_config",
    "cache_implementation", "compile_config", "constraints", "continuous_batching_config", "custom_generate",
    "decoder_start_token_id", "disable_compile", "diversity_penalty", "do_sample", "dola_layers", "early_stopping",
    "encoder_no_repeat_ngram_size", "encoder_repetition_penalty", "eos_token_id", "epsilon_cutoff", "eta_cutoff",
    "exponential_decay_length_penalty", "force_words_ids", "forced_bos_token_id", "forced_eos_token_id",
    "generation_config", "guidance_scale", "is_assistant", "length_penalty", "logits_processor", "low_memory",
    "max_cache_len", "max_length", "max_matching_ngram_size", "max_new_tokens", "max_time", "min_length",
    "min_new_tokens", "min_p", "negative_prompt_attention_mask", "negative_prompt_ids", "no_repeat_ngram_size",
    "num_assistant_tokens", "num_assistant_tokens_schedule", "num_beam_groups", "num_beams", "num_return_sequences",
    "output_attentions", "output_hidden_states", "output_logits", "output_scores", "pad_token_id", "penalty_alpha",
    "prefill_chunk_size", "prefix_allowed_tokens_fn", "prompt_lookup_num_tokens", "remove_invalid_values",
    "renormalize_logits", "repetition_penalty", "return_dict_in_generate", "sequence_bias", "speculation_type",
    "stop_strings", "stopping_criteria", "streamer", "suppress_tokens", "synced_gpus", "target_lookbehind",
    "temperature", "token_healing", "top_h", "top_k", "top_p", "transformers_version", "typical_p", "use_cache",
    "use_mtp", "watermarking_config",
})
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
        for keyword in kwargs:
            if keyword not in names:
                raise unexpected_keyword(called, keyword, names)
        return function(*args, **kwargs)

    return checked
