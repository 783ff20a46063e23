"""A package's submodules as attributes on first use, as if each had been imported.

    >>> import gcs
    >>> gcs.stats.intervals.CONFIDENCE        # imports gcs.stats, then gcs.stats.intervals
    0.95

Each ``__init__`` of gcs hands its unknown attributes here (``__getattr__``), so ``import gcs`` imports none of its
subpackages, and a vLLM server that loads ``gcs.vllm.plugin`` imports no engine, scoring or figures.
"""

from __future__ import annotations

import importlib
from types import ModuleType


def submodule(package: str, name: str) -> ModuleType:
    """``package.name`` imported, or ``AttributeError`` where ``package`` has no such submodule (as for any missing
    attribute), while an import error inside the submodule is raised as it is."""
    qualified = f"{package}.{name}"
    try:
        return importlib.import_module(qualified)
    except ModuleNotFoundError as error:
        if error.name != qualified:
            raise
        raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
