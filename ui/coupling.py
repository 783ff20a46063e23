"""Coupling explorer: Theorem 1 against Monte Carlo as q moves from p, and GCSwR's recycling histogram."""

from __future__ import annotations

import gradio as gr

import gcs

from .common import check, parse_numbers, user_error


def explore(p_text, q_text, max_epsilon, trials, steps, seed):
    """The curve, the recycling histogram and its chi-square p-value, for the demo's inputs."""
    p = parse_numbers(p_text, "p")
    q = parse_numbers(q_text, "q") if str(q_text or "").strip() else None
    max_epsilon, trials, steps, seed = (check("max ε", max_epsilon), check("trials", trials), check("steps", steps),
                                        check("coupling seed", seed))
    curve = gcs.coupling_curve(p, q, [max_epsilon * i / 10 for i in range(11)], trials=trials, seed=seed)
    histogram, p_value = gcs.recycling_histogram(p, steps=steps, seed=seed)
    return curve, histogram, p_value


def coupling_ui(p_text, q_text, max_epsilon, trials, steps, seed):
    try:
        curve, histogram, p_value = explore(p_text, q_text, max_epsilon, trials, steps, seed)
    except Exception as error:
        raise user_error(error) from error
    verdict = (f"GCSwR drew {int(steps):,} tokens from one fixed distribution, recycling its noise after every "
               f"draw. Chi-square against the target: **p = {p_value:.3f}** (a p-value far below 0.001 would "
               f"mean the draws are not exact). Reusing the noise *without* recycling picks one token forever.")
    return gcs.coupling_figure(curve), curve.round(4), gcs.recycling_figure(histogram), verdict


def api_coupling(p: str = "0.5, 0.3, 0.15, 0.05", q: str = "", max_epsilon: float = 3.0, trials: int = 4000,
                 steps: int = 5000, seed: int = 0) -> dict:
    """Theorem 1 vs independent sampling vs Monte Carlo as q moves away from p, and GCSwR's histogram."""
    try:
        curve, histogram, p_value = explore(p, q, max_epsilon, trials, steps, seed)
    except Exception as error:
        raise user_error(error) from error
    return {"curve": curve.to_dict(orient="records"), "recycling": histogram.to_dict(orient="records"),
            "recycling_chi_square_p": p_value}


def build() -> tuple[list, list]:
    """The "Coupling explorer" tab; returns its inputs and outputs (the page load fills them once)."""
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
            seed = gr.Number(value=0, precision=0, minimum=0, label="seed")
        run = gr.Button("Explore", variant="primary", elem_id="run-coupling")
        plot = gr.Plot(label="agreement vs ε", elem_id="coupling-plot")
        table = gr.Dataframe(label="numbers", interactive=False)
        recycling = gr.Plot(label="recycling demo", elem_id="recycling-plot")
        note = gr.Markdown()
        inputs, outputs = [p_text, q_text, max_epsilon, trials, steps, seed], [plot, table, recycling, note]
        run.click(coupling_ui, inputs, outputs, api_visibility="private", concurrency_id="coupling",
                  concurrency_limit=4)
    return inputs, outputs
