"""Hindsight: given a response to one wording, what would the model have answered to the others, with the
same luck? (``gcs.hindsight``: the shared noise drawn from its posterior given the response.)"""

from __future__ import annotations

import gradio as gr
import pandas as pd

import gcs

from .common import (
    DEFAULT_MODEL, LIMITS, check, check_count_of, failed, gpu, load_allowed_model, method_choices, model_dropdown,
    parse_paraphrases, user_error,
)
from .compare import HIGHLIGHTS, SPAN_COLORS, SPAN_LABELS, highlighted

OUTPUTS = ("answers", "explanation", "status")
EXPLAIN = {
    "gcswr": "GCSwR: the noise that produced the response was drawn from its exact posterior (walking the race "
             "backward from the last token), then every paraphrase was answered with it. Where the paraphrase "
             "leads to similar probabilities, the same words win again.",
    "gcs": "GCS: each position's noise was drawn from its posterior given the token the response chose there, "
           "then every paraphrase was answered with it.",
    "is": "IS: independent sampling shares no noise, so these answers are **independent of the response**: "
          "an ordinary sample for each paraphrase.",
}


def hindsight_inputs(prompt, response, paraphrases, method, seed, temperature, top_p, max_new_tokens, model_name):
    (prompt,) = parse_paraphrases(prompt, minimum=1, maximum=1, name="prompt")
    others = check_count_of("hindsight paraphrases", parse_paraphrases(paraphrases, minimum=1,
                                                                       maximum=int(LIMITS["hindsight paraphrases"].high)))
    if not isinstance(response, str) or not response.strip():
        raise ValueError("enter the response to explain (or take one from a side-by-side run)")
    model = load_allowed_model(model_name)
    tokens = len(model.tokenizer.encode(response, add_special_tokens=False))
    if tokens > LIMITS["hindsight response tokens"].high:
        raise ValueError(f"the response is {tokens:,} tokens; the limit here is "
                         f"{int(LIMITS['hindsight response tokens'].high):,}")
    top_p = check("top_p", top_p)
    return dict(prompt=prompt, response=response.strip(), paraphrases=others, method=method, seed=check("seed", seed),
                temperature=check("temperature", temperature), top_p=None if top_p == 1 else top_p,
                max_new_tokens=check("max_new_tokens", max_new_tokens), model=model)


def answers_view(arguments: dict, answers: list[str]):
    """The response first, then each paraphrase's answer, aligned spans against the response."""
    names = ["response", *(f"paraphrase {i + 1}" for i in range(len(answers)))]
    return highlighted([arguments["response"], *answers], HIGHLIGHTS[0], arguments["model"].tokenizer, names)


@gpu
def hindsight_ui(prompt, response, paraphrases, method, seed, temperature, top_p, max_new_tokens, model_name):
    try:
        arguments = hindsight_inputs(prompt, response, paraphrases, method, seed, temperature, top_p, max_new_tokens,
                                     model_name)
        answers = gcs.hindsight(**arguments)
        return answers_view(arguments, answers), EXPLAIN[arguments["method"].strip().lower()], "Done."
    except Exception as error:
        return failed(error, len(OUTPUTS))


def from_side_by_side(run: dict | None):
    """Prompt, response and paraphrases from the side-by-side run: its first paraphrase's GCSwR answer (first seed)."""
    if not run:
        return failed(ValueError("run Side by side first: this takes its first paraphrase and GCSwR's answer to it"),
                      4)
    frame = pd.DataFrame(run["frame"])
    method = "gcswr" if "gcswr" in run["methods"] else run["methods"][0]
    first = frame[(frame["method"] == method) & (frame["seed"] == run["seeds"][0]) & (frame["prompt_index"] == 0)]
    return (run["prompts"][0], first["response"].iloc[0], "\n".join(run["prompts"][1:]),
            f"Took {gcs.METHOD_NAMES[method]}'s answer to paraphrase 1 (seed {run['seeds'][0]}).")


@gpu
def api_hindsight(prompt: str, response: str, paraphrases: str, method: str = "gcswr", seed: int = 0,
                  temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 64,
                  model: str = DEFAULT_MODEL) -> dict:
    """What the model would have answered to each paraphrase (one per line) with the luck that gave ``response``
    to ``prompt``. Returns {"answers": [...], "method", "posterior_seed"}; under IS the answers are
    independent of the response."""
    try:
        arguments = hindsight_inputs(prompt, response, paraphrases, method, seed, temperature, top_p, max_new_tokens,
                                     model)
        answers = gcs.hindsight(**arguments)
    except Exception as error:
        raise user_error(error) from error
    return {"answers": answers, "method": arguments["method"].strip().lower(), "posterior_seed": arguments["seed"]}


def build(compare_run: gr.State) -> dict:
    """The "Hindsight" tab; ``compare_run`` is the side-by-side tab's run. Returns its inputs by query name."""
    with gr.Tab("Hindsight", id="hindsight"):
        gr.Markdown("A model answered one wording of a question. *With the same luck*, what would it have said to "
                    "the other wordings? Hindsight draws the shared noise from what the response reveals about it, "
                    "then answers the paraphrases with that noise.")
        with gr.Row():
            with gr.Column():
                prompt = gr.Textbox(value="Why is the sky blue?", label="the prompt that was answered",
                                    elem_id="hindsight-prompt")
                response = gr.Textbox(value="The sky appears blue because sunlight is scattered by the air",
                                      lines=3, label="its response (typed in, or taken from a side-by-side run)",
                                      elem_id="hindsight-response")
                paraphrases = gr.Textbox(value="What makes the sky look blue?\nExplain the blue colour of the sky.",
                                         lines=3, label="paraphrases to answer (1–4, one per line)",
                                         elem_id="hindsight-paraphrases")
                take = gr.Button("Take the side-by-side run's first GCSwR answer", size="sm")
            with gr.Column():
                method = gr.Radio(method_choices(), value="gcswr", label="method")
                seed = gr.Number(value=0, precision=0, minimum=0, label="posterior seed (another seed, another draw)")
                temperature = gr.Slider(0.05, LIMITS["temperature"].high, value=1.0, step=0.05, label="temperature")
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p")
                tokens = gr.Slider(8, LIMITS["max_new_tokens"].high, value=48, step=8, label="max new tokens")
                model = model_dropdown()
        run = gr.Button("Answer in hindsight", variant="primary", elem_id="run-hindsight")
        status = gr.Markdown(elem_id="hindsight-status")
        answers = gr.HighlightedText(label="the response, then each paraphrase's answer in hindsight (aligned spans: "
                                           "the same words in the same order as the response)",
                                     color_map={"paraphrase": "#e0e0e0", **dict(zip(SPAN_LABELS, SPAN_COLORS))},
                                     show_legend=False, show_inline_category=False,
                                     combine_adjacent=True, elem_id="hindsight-answers", elem_classes="response-text")
        explain = gr.Markdown(elem_id="hindsight-explanation")
        inputs = [prompt, response, paraphrases, method, seed, temperature, top_p, tokens, model]
        run.click(hindsight_ui, inputs, [answers, explain, status], api_visibility="private", concurrency_id="model",
                  concurrency_limit=1)
        take.click(from_side_by_side, [compare_run], [prompt, response, paraphrases, status], api_visibility="private")
    return {"prompt": prompt, "response": response, "q": paraphrases, "method": method, "seed": seed,
            "temperature": temperature, "top_p": top_p, "max_new_tokens": tokens, "model": model}
