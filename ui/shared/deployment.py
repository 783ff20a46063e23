"""The demo's settings, read from the environment once: which models it offers, which it loads first, and what it
generates with.

    GCS_ALLOWED_MODELS   extra models to offer (comma-separated; self-hosting)
    GCS_DEFAULT_MODEL    the model the page opens with
    GCS_ENGINE           "transformers", "vllm" or "auto" (vLLM where it is installed)
    GCS_ENDPOINTS        served vLLM endpoints (comma-separated URLs) that generate the default model's answers
    GCS_ENDPOINT_KEY     their key (never shown: not on the page, in a log, an error, a download or an MCP answer)

``SETTINGS`` never changes after start-up. What can change is whether the vLLM engine actually started:
``ENGINE`` holds that, and falls back to transformers (once, logged) when it cannot start; so do the endpoints,
checked at start (``gcs.engines.endpoints``), which fall back to this process. Only the operator names endpoints:
no request, link or upload carries a URL the server would call.
"""

from __future__ import annotations

import copy
import importlib.util
import threading
from dataclasses import dataclass

import gradio as gr
import torch

import gcs
from gcs.checks import quoted
from gcs.engines.endpoints import Endpoints, configured_endpoints
from gcs.environment import env_list, env_text, setting
from ui.shared.logs import logger

HUB_MODELS = ("HuggingFaceTB/SmolLM2-360M-Instruct", "Qwen/Qwen2.5-0.5B-Instruct")
GPU_MODELS = ("meta-llama/Meta-Llama-3-8B-Instruct",)


def _hub_reachable() -> bool:
    return bool(env_text("SPACE_ID")) and env_text("HF_HUB_OFFLINE", "0") == "0"


@dataclass(frozen=True)
class Settings:
    """What the demo offers and runs: ``allowed_models`` (the allowlist, ``default_model`` first among them when
    it was added) and ``engine`` (what it generates with, before any fallback)."""

    allowed_models: tuple[str, ...]
    default_model: str
    engine: str

    @classmethod
    def from_environment(cls) -> Settings:
        hub = _hub_reachable()
        models = [gcs.DEFAULT_MODEL] if gcs.embedded_model_installed() or not hub else []
        if hub:
            models += [*HUB_MODELS, *(GPU_MODELS if torch.cuda.is_available() else ())]
        models += env_list("GCS_ALLOWED_MODELS")
        default = env_text("GCS_DEFAULT_MODEL") or (HUB_MODELS[0] if hub else gcs.DEFAULT_MODEL)
        if default not in models:
            models.insert(0, default)
        return cls(tuple(dict.fromkeys(models)), default, _engine_setting())


def _engine_setting() -> str:
    """``$GCS_ENGINE`` ("transformers" or "vllm"), else vLLM where it is installed (2-2.5x faster here,
    bench/bench_vllm.py) and transformers elsewhere."""
    choice = setting("GCS_ENGINE")
    if choice == "auto":
        return "vllm" if importlib.util.find_spec("vllm") is not None else "transformers"
    return choice


SETTINGS = Settings.from_environment()
DEFAULT_MODEL = SETTINGS.default_model


class Engine:
    """What the demo generates with now: ``SETTINGS.engine``, until a vLLM engine fails to start; and for the default
    model, the endpoints of ``GCS_ENDPOINTS`` while they pass their checks."""

    def __init__(self, name: str, endpoints: Endpoints | None = None):
        self.name, self.endpoints = name, endpoints
        self.configured = endpoints  # (kept after a fallback: an error may still name them)

    def for_visitors(self, text: str) -> str:
        """``text`` (an error) as a visitor reads it: each endpoint by its name ("endpoint 1"), never its URL.

        >>> Engine("transformers", configured_endpoints({"GCS_ENDPOINTS": "http://gpu:8000"})).for_visitors(
        ...     "endpoint http://gpu:8000 refused a request")
        'endpoint 1 refused a request'
        """
        return text if self.configured is None else self.configured.for_visitors(text)

    def start(self, model: gcs.Model) -> None:
        """Check the endpoints against ``model`` and start the vLLM engine for it (nothing to do for transformers);
        what cannot start is logged, and the demo generates in this process from then on."""
        if self.endpoints is not None:
            try:
                self.endpoints.connect(model)
                logger.info("generating %s on %d endpoint(s): %s", model.name, len(self.endpoints.endpoints),
                            self.endpoints.describe())
            except Exception as error:  # (its text names the endpoint, never the key: gcs.engines.endpoints)
                logger.error("the endpoints cannot generate %s, so this process will: %s", model.name, error)
                self.endpoints = None
        if self.name != "vllm":
            return
        try:
            from gcs.engines.vllm import engine

            engine(model)
            logger.info("generating with vLLM (GCS_ENGINE=transformers switches it off)")
        except Exception:
            logger.exception("could not start the vLLM engine: generating with transformers instead")
            self.name = "transformers"

    def for_request(self, ensembling: bool, model: gcs.Model | None = None):
        """Ensembling mixes several rows' logits in each step, which only the transformers engine does; the
        endpoints serve the default model only."""
        if ensembling:
            return "transformers"
        if self.endpoints is not None and (model is None or model.name == SETTINGS.default_model):
            return self.endpoints
        return self.name

    def for_arms(self, a: gcs.Variant, b: gcs.Variant) -> Endpoints | None:
        """The endpoints for an A/B test whose two arms both run the default model (loaded: the page's arms at
        their default precision), else None (this process: another model or precision is only here)."""
        models = {variant.model.name if isinstance(variant.model, gcs.Model) else None for variant in (a, b)}
        if self.endpoints is None or models != {SETTINGS.default_model} or a.dtype or b.dtype:
            return None
        return self.endpoints

    def done(self, ensembling: bool, model_name: str) -> str:
        """A finished run's status line: "Done.", and where served endpoints answered, which model they served
        (no URL: they are the operator's).

        >>> Engine("transformers").done(False, "m")
        'Done.'
        """
        if ensembling or self.endpoints is None or model_name != SETTINGS.default_model:
            return "Done."
        return f"Done: {model_name}, generated on {len(self.endpoints.endpoints)} served vLLM endpoint(s)."

    @staticmethod
    def answered_by(engine, model_name: str) -> str:
        """What a run in rounds adds to its final status where ``engine`` (the one it ran on) was served endpoints:
        which model answered, and where (no URL: they are the operator's); "" elsewhere.

        >>> Engine.answered_by("transformers", "m")
        ''
        """
        endpoints = getattr(engine, "endpoints", None)
        if endpoints is None:
            return ""
        return f" Answers of {model_name}, generated on {len(endpoints)} served vLLM endpoint(s)."

    def local_note(self, model_name: str) -> str:
        """What a tab that reads every logit (the step-through, hindsight, counterfactual) adds to its status where
        served endpoints answer the side by side for ``model_name``: that it ran here instead, and why ("" where
        nothing is served, so that no visitor takes the local answer for the endpoint's).

        >>> Engine("transformers").local_note("m")
        ''
        """
        if self.endpoints is None or model_name != SETTINGS.default_model:
            return ""
        return (f" Computed on this server's local copy of {model_name}: served endpoints give tokens, not every "
                "logit.")


ENGINE = Engine(SETTINGS.engine, configured_endpoints())


def check_allowed_model(name: str) -> str:
    """``name`` if this server offers that model (before anything is loaded), else ValueError listing the offer."""
    if name not in SETTINGS.allowed_models:
        raise ValueError(f"model {quoted(name)} is not offered here; choose one of: "
                         f"{', '.join(SETTINGS.allowed_models)}")
    return name


def load_allowed_model(name: str) -> gcs.Model:
    return gcs.load_model(check_allowed_model(name))


_THREAD_TOKENIZERS = threading.local()


def thread_tokenizer(name: str):
    """The model's tokenizer for this thread alone: a fast tokenizer keeps its padding and truncation state
    between calls, so the browse lane's tokenizing beside a generation (or beside another browse request)
    must not share one (seen: a padded batch built with another thread's settings)."""
    tokenizers = _THREAD_TOKENIZERS.__dict__.setdefault("by_model", {})
    if name not in tokenizers:
        tokenizers[name] = copy.deepcopy(load_allowed_model(name).tokenizer)
    return tokenizers[name]


def model_dropdown() -> gr.Dropdown:
    return gr.Dropdown(choices=list(SETTINGS.allowed_models), value=SETTINGS.default_model, label="model",
                       info="embedded SmolLM2-135M-Instruct works offline")


def method_choices() -> list[tuple[str, str]]:
    return [(gcs.METHOD_NAMES[m], m) for m in gcs.METHODS]
