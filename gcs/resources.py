"""What gcs keeps loaded between calls, and how to let it go.

gcs keeps the language models ``load_model`` loaded (the 4 most recently used), the embedding models scoring uses
(the 4 most recently used) and, on ``engine="vllm"``, the vLLM engines (``gcs.engines.vllm.MAX_ENGINES`` at once:
the least recently used idle one is shut down when another is needed). ``close()`` drops them all now::

    gcs.close()  # {'models': 0, 'embedders': 0, 'engines': 0}: what is left of each

A model or embedder the caller still holds stays usable (gcs only drops its own reference); a vLLM engine is shut
down unless a run is using it (the count is of the engines left). The next call loads again.
"""

from __future__ import annotations

import gc
import sys


def close() -> dict[str, int]:
    """Drop every model, embedder and vLLM engine gcs keeps.

    A model or embedder you still hold stays usable; the next call that needs one loads it again. A vLLM engine a run is
    using stays until the run ends.

    Returns:
        What is left of each kind: models, embedders, engines.

    Examples:
        >>> close()
        {'models': 0, 'embedders': 0, 'engines': 0}
    """
    from gcs.engines.models import _load
    from gcs.scoring.metrics import embedder

    _load.cache_clear()
    embedder.cache_clear()
    engines = sys.modules.get("gcs.engines.vllm")  # never import vLLM to close nothing
    left = {"models": _load.cache_info().currsize, "embedders": embedder.cache_info().currsize,
            "engines": engines.close_engines() if engines is not None else 0}
    gc.collect()
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_initialized():
        sys.modules["torch"].cuda.empty_cache()
    return left
