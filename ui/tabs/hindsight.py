"""Hindsight: given a response to one wording, what would the model have answered to the others, with the
same luck? (``gcs.hindsight``: the shared noise drawn from its posterior given the response.)"""

from __future__ import annotations

import gradio as gr
import pandas as pd

import gcs
from ui.server.serving import run_cancellable
from ui.server.zerogpu import gpu
from ui.shared.deployment import DEFAULT_MODEL, ENGINE, load_allowed_model, method_choices, model_dropdown
from ui.shared.highlights import HIGHLIGHTS, SPAN_COLORS, SPAN_LABELS, highlighted
from ui.shared.limits import (
    LIMITS,
    PAGE_SEED_MAX,
    check,
    check_count_of,
    check_flag,
    check_text,
    check_work,
    parse_paraphrases,
    visible,
)
from ui.shared.messages import as_text, click_working, failed, user_error
from ui.shared.tab import Tab

OUTPUTS = ("answers", "replay", "explanation", "token choices", "status")
EXPLAIN = {
    "gcswr": "GCSwR: the noise that produced the response was drawn from its exact posterior (walking the race "
             "backward from the last token), then every paraphrase was answered with it. Where the paraphrase "
             "leads to similar probabilities, the same words win again.",
    "gcs": "GCS: each position's noise was drawn from its posterior given the token the response chose there, "
           "then every paraphrase was answered with it.",
    "is": "IS: independent sampling shares no noise, so these answers are **independent of the response**: "
          "an ordinary sample for each paraphrase.",
}


ENDED = (" The response was observed **ending** there, so the noise drawn favours an early end of turn too: short "
         "answers are likely. Untick \"the response ended there\" to observe it as the start of a longer answer.")


def explanation(method: str, finished: bool) -> str:
    """What the answers are, for ``method``; where they share the response's noise and it ended, why they end early."""
    method = method.strip().lower()
    return EXPLAIN[method] + (ENDED if finished and method != "is" else "")


def hindsight_inputs(prompt, response, paraphrases, method, seed, temperature, top_p, max_new_tokens, model_name,
                     finished=True, taken=None):
    """The request, checked. ``taken``: what "Take the side-by-side run" took ({"text", "ids"}); while the response
    box still holds that text, the response is observed as those token ids (text does not always read back as the
    tokens that wrote it), else the typed text is tokenized."""
    (prompt,) = parse_paraphrases(prompt, minimum=1, maximum=1, name="prompt")
    most = int(LIMITS["hindsight paraphrases"].high)
    others = check_count_of("hindsight paraphrases", parse_paraphrases(paraphrases, minimum=1, maximum=most))
    model, response = load_allowed_model(model_name), checked_response(response)
    if isinstance(taken, dict) and str(taken.get("text", "")).strip() == response and taken.get("ids"):
        response = [int(i) for i in taken["ids"]]
    tokens = len(response) if isinstance(response, list) else len(model.tokenizer.encode(response,
                                                                                          add_special_tokens=False))
    if tokens > LIMITS["hindsight response tokens"].high:
        raise ValueError(f"the response is {tokens:,} tokens; the limit here is "
                         f"{int(LIMITS['hindsight response tokens'].high):,}")
    new_tokens = check("max_new_tokens", max_new_tokens)
    # the work: the response forced through the prompt, then the prompt and each paraphrase answered
    check_work([prompt, *others], model, 1, new_tokens + tokens, "work tokens")
    top_p = check("top_p", top_p)
    return dict(prompt=prompt, response=response, paraphrases=others, method=method, seed=check("seed", seed),
                temperature=check("temperature", temperature), top_p=None if top_p == 1 else top_p,
                max_new_tokens=new_tokens, finished=check_flag(finished, "finished"), model=model)


def checked_response(response) -> str:
    if not isinstance(response, str) or not visible(response):
        raise ValueError("enter the response to explain (or take one from a side-by-side run)")
    if len(response) > RESPONSE_CHARACTERS:
        raise ValueError(f"the response has {len(response):,} characters; the limit here is {RESPONSE_CHARACTERS:,}")
    return check_text(response.strip(), "the response")


RESPONSE_CHARACTERS = 4_000  # counted before tokenizing: 256 tokens are rarely more than ~1,500 characters


def response_text(arguments: dict) -> str:
    """The observed response as text (it may have been taken as token ids)."""
    response = arguments["response"]
    return response if isinstance(response, str) else arguments["model"].tokenizer.decode(response,
                                                                                           skip_special_tokens=True)


def answers_view(arguments: dict, answers: list[str]):
    """The response first, then each paraphrase's answer, aligned spans against the response."""
    names = ["response", *(f"paraphrase {i + 1}" for i in range(len(answers)))]
    return highlighted([response_text(arguments), *answers], HIGHLIGHTS[0], arguments["model"].tokenizer, names)


def replay_check(report: gcs.HindsightReport) -> str:
    """The premise shown: the prompt answered with the same posterior noise gives the response back."""
    if report.replay is None:
        return "**Replay check:** IS shares no noise with the response, so there is nothing to replay."
    tokens = len(report.response_tokens)
    if report.replayed:
        end = ", then ended as it did" if report.finished else " (the response was unfinished; the replay goes on)"
        return (f"**Replay check ✓** The prompt itself, answered with the same noise, gave the response back: all "
                f"{tokens} tokens{end}. The noise is consistent with what was observed.")
    where = report.parted_at
    token = report.response_tokens[where] if where < tokens else "the end of turn"
    return (f"**Replay check ✗** The replay of the prompt parted from the response at token {where + 1} "
            f"({as_text(repr(token))}): {as_text(report.replay)}")  # the user's text, as text


def token_choices(tokens: list[str], finished: bool) -> list[tuple[str, int]]:
    """The response's tokens for the counterfactual picker, as "index: 'token'" (and the end, when finished)."""
    choices = [(f"{i}: {token!r}", i) for i, token in enumerate(tokens)]
    return choices + [(f"{len(tokens)}: (end of turn)", len(tokens))] if finished else choices


@gpu
def hindsight_ui(prompt, response, paraphrases, method, seed, temperature, top_p, max_new_tokens, model_name,
                 finished=True, taken=None):
    try:
        arguments = hindsight_inputs(prompt, response, paraphrases, method, seed, temperature, top_p, max_new_tokens,
                                     model_name, finished, taken)
        report = yield from run_cancellable(lambda stop: gcs.hindsight_report(**arguments, stop=stop),
                                            (gr.skip(),) * len(OUTPUTS))
        choices = token_choices(report.response_tokens, arguments["finished"])
        yield (answers_view(arguments, report.answers), replay_check(report),
               explanation(arguments["method"], arguments["finished"]), gr.update(choices=choices, value=None),
               "Done." + ENGINE.local_note(arguments["model"].name))
    except Exception as error:
        yield failed(error, len(OUTPUTS))


def counterfactual_inputs(prompt, response, at, replacement, method, seed, temperature, top_p, max_new_tokens,
                          model_name, finished=True, taken=None) -> dict:
    arguments = hindsight_inputs(prompt, response, "-", method, seed, temperature, top_p, max_new_tokens, model_name,
                                 finished, taken)
    del arguments["paraphrases"]
    if at is None or at == "":
        raise ValueError("pick the token to change (answer in hindsight first to list the response's tokens)")
    if not isinstance(replacement, str) or not replacement or len(replacement) > 200:
        raise ValueError("type the replacement text (1 to 200 characters; a leading space is part of a word)")
    check_text(replacement, "the replacement")
    return dict(arguments, at=check("token to change", at), replacement=replacement)


@gpu
def counterfactual_ui(prompt, response, at, replacement, method, seed, temperature, top_p, max_new_tokens, model_name,
                      finished=True, taken=None):
    try:
        arguments = counterfactual_inputs(prompt, response, at, replacement, method, seed, temperature, top_p,
                                          max_new_tokens, model_name, finished, taken)
        edited = yield from run_cancellable(lambda stop: gcs.counterfactual(**arguments, stop=stop),
                                            (gr.skip(), gr.skip()))
        view = highlighted([response_text(arguments), edited], HIGHLIGHTS[0], arguments["model"].tokenizer,
                           ["response", "had it said that"])
        yield view, "Done." + ENGINE.local_note(arguments["model"].name)
    except Exception as error:
        yield failed(error, 2)


def from_side_by_side(run: dict | None):
    """The side-by-side run's first paraphrase and GCSwR's answer to it (first seed), as the model wrote it (its raw
    text, follow-up turns included, and its token ids, which hindsight observes while the text is left as taken),
    with whether it ended and the run's temperature, top-p and max new tokens."""
    if not run:
        return failed(ValueError("run Side by side first: this takes its first paraphrase and GCSwR's answer to it"),
                      TAKEN)
    frame = pd.DataFrame(run["frame"])
    method = "gcswr" if "gcswr" in run["methods"] else run["methods"][0]
    first = frame[(frame["method"] == method) & (frame["seed"] == run["seeds"][0]) & (frame["prompt_index"] == 0)]
    row = first.iloc[0]
    top_p = 1.0 if pd.isna(row["top_p"]) else float(row["top_p"])
    ended, ids = bool(row["finished"]), [int(i) for i in row["token_ids"]]
    model = load_allowed_model(run["model"])
    reading = "" if gcs.reads_back(ids, model=model) else (" Its text would read back as other tokens, so its own "
                                                     f"{len(ids)} tokens are observed (while the text is left as is).")
    return (run["prompts"][0], row["raw_response"], "\n".join(run["prompts"][1:]), method, ended,
            float(row["temperature"]), top_p, int(run.get("max_new_tokens", 64)),
            {"text": row["raw_response"], "ids": ids},
            f"Took {gcs.METHOD_NAMES[method]}'s answer to paraphrase 1 (seed {run['seeds'][0]}), "
            f"{'finished' if ended else 'cut at the token limit'}, with that run's temperature and top-p.{reading}")


TAKEN = 10  # outputs of from_side_by_side


@gpu
def hindsight(prompt: str, response: str, paraphrases: str, method: str = "gcswr", seed: int = 0,
              temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 64,
              model: str = DEFAULT_MODEL, finished: bool = True) -> dict:
    """Hindsight: what the model would have answered to each paraphrase with the luck that gave `response` to
    `prompt` (the noise drawn from its exact posterior given the response). The prompt itself, replayed with that
    noise, gives the response back: the result says so.

    Args:
        prompt: the question that was asked.
        response: the answer it got (typed, or from /compare).
        paraphrases: 1 to 4 rewordings to answer with the same luck, one per line.
        method: gcswr or gcs (noise shared across positions or per position); is gives independent answers.
        seed: seed of the posterior draw, a whole number from 0 to 2^63 - 1.
        temperature: the temperature the response was sampled at, 0.0001 to 2.
        top_p: the nucleus mass the response was sampled with, in (0, 1].
        max_new_tokens: tokens per answer, 1 to 256.
        model: a model offered by this server.
        finished: true if the response ended there (its end is part of what was observed); false if it is the beginning of a longer answer.
    Returns:
        {"answers": [one per paraphrase], "method", "posterior_seed", "replayed" (the prompt replayed under the posterior noise gave the response back; null under IS), "replay" (that replay's text), "parted_at" (the token where it parted, or null), "tokens" (the response's tokens as the model reads them)}.
        While it works it streams {"status": "working"}; a client that leaves stops the work.
    """  # noqa: E501 (gradio's API and MCP docs read each argument, and each line of Returns, from one line)
    try:
        arguments = hindsight_inputs(prompt, response, paraphrases, method, seed, temperature, top_p, max_new_tokens,
                                     model, finished)
        report = yield from run_cancellable(lambda stop: gcs.hindsight_report(**arguments, stop=stop),
                                            {"status": "working"})
    except Exception as error:
        raise user_error(error) from error
    yield {"answers": report.answers, "method": report.method, "posterior_seed": arguments["seed"],
            "replayed": report.replayed, "replay": report.replay, "parted_at": report.parted_at,
            "tokens": report.response_tokens}


@gpu
def counterfactual(prompt: str, response: str, at: int, replacement: str, method: str = "gcswr", seed: int = 0,
                   temperature: float = 1.0, top_p: float = 1.0, max_new_tokens: int = 64,
                   model: str = DEFAULT_MODEL, finished: bool = True) -> dict:
    """A counterfactual edit: what the response would have been had it written `replacement` at token `at`, with
    the same luck (the noise drawn from its posterior given the response); tokens before `at` stay as they were.

    Args:
        prompt: the question that was asked.
        response: the answer it got.
        at: index of the token to replace, in the response's tokens as /hindsight lists them ("tokens").
        replacement: the text written there instead (one token as the model tokenizes it).
        method: gcswr, gcs or is.
        seed: seed of the posterior draw, a whole number from 0 to 2^63 - 1.
        temperature: the temperature the response was sampled at, 0.0001 to 2.
        top_p: the nucleus mass the response was sampled with, in (0, 1].
        max_new_tokens: tokens of the whole counterfactual response, 1 to 256.
        model: a model offered by this server.
        finished: true if the response ended there; false if it is the beginning of a longer answer.
    Returns:
        {"counterfactual": the edited response, "method", "posterior_seed"}; with `replacement` equal to the original token it is the response itself.
        While it works it streams {"status": "working"}; a client that leaves stops the work.
    """  # noqa: E501 (gradio's API and MCP docs read each argument, and each line of Returns, from one line)
    try:
        arguments = counterfactual_inputs(prompt, response, at, replacement, method, seed, temperature, top_p,
                                          max_new_tokens, model, finished)
        edited = yield from run_cancellable(lambda stop: gcs.counterfactual(**arguments, stop=stop),
                                            {"status": "working"})
    except Exception as error:
        raise user_error(error) from error
    yield {"counterfactual": edited, "method": arguments["method"].strip().lower(), "posterior_seed": arguments["seed"]}


def build(compare_run: gr.State) -> Tab:
    """The "Hindsight" tab; ``compare_run`` is the side-by-side tab's run. Its inputs by query name."""
    with gr.Tab("Hindsight", id="hindsight"):
        gr.Markdown("A model answered one wording of a question. *With the same luck*, what would it have said to "
                    "the other wordings? Hindsight draws the shared noise from what the response reveals about it, "
                    "then answers the paraphrases with that noise. Below: what it would have said had it written "
                    "something else at one point.")
        with gr.Row():
            with gr.Column():
                prompt = gr.Textbox(value="Why is the sky blue?", label="the prompt that was answered",
                                    elem_id="hindsight-prompt")
                response = gr.Textbox(value="The sky appears blue because sunlight is scattered by the air.",
                                      lines=3, label="its response (typed in, or taken from a side-by-side run)",
                                      elem_id="hindsight-response")
                finished = gr.Checkbox(value=True, label="the response ended there (its end of turn was observed "
                                                         "too; untick for the beginning of a longer answer)",
                                       elem_id="hindsight-finished")
                paraphrases = gr.Textbox(value="What makes the sky look blue?\nExplain the blue colour of the sky.",
                                         lines=3, label="paraphrases to answer (1–4, one per line)",
                                         elem_id="hindsight-paraphrases")
                take = gr.Button("Take the side-by-side run's first GCSwR answer", size="sm")
                taken = gr.State(None)  # the taken answer's text and token ids (from_side_by_side)
            with gr.Column():
                method = gr.Radio(method_choices(), value="gcswr", label="method")
                seed = gr.Number(value=0, precision=0, maximum=PAGE_SEED_MAX,
                               label="posterior seed (another seed, another draw)")
                temperature = gr.Slider(0.05, LIMITS["temperature"].high, value=1.0, step=0.05, label="temperature")
                top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="top-p")
                tokens = gr.Slider(8, LIMITS["max_new_tokens"].high, value=48, step=8, label="max new tokens")
                model = model_dropdown()
        run = gr.Button("Answer in hindsight", variant="primary", elem_id="run-hindsight")
        status = gr.Markdown(elem_id="hindsight-status")
        answers = gr.HighlightedText(label="the response, then each paraphrase's answer in hindsight (aligned spans: "
                                           "the same words in the same order as the response)",
                                     color_map={"paraphrase": "#e0e0e0",
                                                **dict(zip(SPAN_LABELS, SPAN_COLORS, strict=True))},
                                     show_legend=False, show_inline_category=False,
                                     combine_adjacent=True, elem_id="hindsight-answers", elem_classes="response-text")
        replay = gr.Markdown(elem_id="hindsight-replay")
        explain = gr.Markdown(elem_id="hindsight-explanation")
        with gr.Accordion("What if it had said something else here? (a counterfactual edit)", open=True):
            gr.Markdown("Pick a token of the response and type what it should have said instead. The response is "
                        "replayed with the same noise up to that token, your text is forced there, and the model "
                        "goes on with the same luck. Each such answer is still an exact sample of the model given "
                        "the edited beginning.")
            with gr.Row():
                at = gr.Dropdown(choices=[], label="token to change (listed after Answer in hindsight)",
                                 elem_id="counterfactual-at")
                replacement = gr.Textbox(value=" Light", label="replacement (a leading space starts a new word)",
                                         elem_id="counterfactual-replacement")
            edit = gr.Button("What if it had said this?", elem_id="run-counterfactual")
            edited = gr.HighlightedText(label="the response, then the counterfactual (aligned spans)",
                                        color_map={"paraphrase": "#e0e0e0",
                                                   **dict(zip(SPAN_LABELS, SPAN_COLORS, strict=True))},
                                        show_legend=False, show_inline_category=False, combine_adjacent=True,
                                        elem_id="counterfactual-answer", elem_classes="response-text")
        inputs = [prompt, response, paraphrases, method, seed, temperature, top_p, tokens, model, finished, taken]
        click_working(run, status, hindsight_ui, inputs, [answers, replay, explain, at, status],
                      concurrency_id="model", concurrency_limit=1)
        edit_inputs = [prompt, response, at, replacement, method, seed, temperature, top_p, tokens, model, finished,
                       taken]
        click_working(edit, status, counterfactual_ui, edit_inputs, [edited, status], concurrency_id="model",
                      concurrency_limit=1)
        take.click(from_side_by_side, [compare_run],
                   [prompt, response, paraphrases, method, finished, temperature, top_p, tokens, taken, status],
                   api_visibility="private")
    return Tab({"prompt": prompt, "response": response, "q": paraphrases, "method": method, "seed": seed,
                "temperature": temperature, "top_p": top_p, "max_new_tokens": tokens, "model": model,
                "finished": finished})
