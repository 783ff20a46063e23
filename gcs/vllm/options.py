"""What the plugin (``gcs.vllm.plugin``), vLLM as gcs's engine (``gcs.engines.vllm``) and ``gcs vllm-serve``
(``gcs.cli.vllm_server``) share, without importing vLLM: the plugin's entry point, the defaults on CPU, and how an error
names a request's keys.

>>> # LLM(**CPU_DEFAULTS), --max-num-seqs 48
>>> CPU_DEFAULTS["max_num_seqs"], CPU_DEFAULTS["kv_cache_memory_bytes"] // 2**30
(48, 2)
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence

from gcs.checks import quoted

# what pyproject.toml registers under vLLM's "vllm.logits_processors"
PLUGIN = "gcs.vllm.plugin:GumbelSamplingProcessor"

# On CPU: eager (it starts in about 30 s here; compiling the graphs had not finished after 3 minutes), at most
# 4,096 tokens of context, a fixed 2 GiB KV cache (vLLM's CPU default reserves 92 % of memory and refuses to start
# on a busy machine) and at most 48 requests at once (the transformers runner's CPU batch).
MAX_MODEL_LEN = 4096  # the engine's context everywhere (or the model's, if shorter)
CPU_KV_CACHE_BYTES = 2 << 30
CPU_MAX_NUM_SEQS = 48
CPU_DEFAULTS = {"enforce_eager": True, "max_model_len": MAX_MODEL_LEN, "kv_cache_memory_bytes": CPU_KV_CACHE_BYTES,
                "max_num_seqs": CPU_MAX_NUM_SEQS}


def plugin_registered() -> bool:
    """Whether the installed gcs registers the plugin under vLLM's entry point (then every vLLM engine loads it)."""
    return any(e.value == PLUGIN for e in importlib.metadata.entry_points(group="vllm.logits_processors"))


NAMED_KEYS = 3  # an error names this many of the keys it refuses


def named_keys(keys: Sequence[str]) -> str:
    """The first ``NAMED_KEYS`` of ``keys`` and how many more, each as written when it is a name of at most 100
    characters, else quoted briefly: a request's keys are its sender's text, and an error naming them all sent
    back a megabyte key whole, or 20,000 keys in 229 KB.

    >>> named_keys(["gcs_x"]), named_keys([f"gcs_{i}" for i in range(5)]), named_keys(["gcs x"])
    ('gcs_x', 'gcs_0, gcs_1, gcs_2 and 2 more', "'gcs x'")
    >>> len(named_keys(["gcs_" + "k" * 10**6])) < 130
    True
    """
    shown = ", ".join(key if key.isidentifier() and len(key) <= 100 else quoted(key) for key in keys[:NAMED_KEYS])
    return shown + (f" and {len(keys) - NAMED_KEYS:,} more" if len(keys) > NAMED_KEYS else "")
