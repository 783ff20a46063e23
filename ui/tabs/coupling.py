"""Coupling explorer: Theorem 1 against Monte Carlo as q moves from p, and GCSwR's recycling histogram."""

from __future__ import annotations

import gradio as gr
import pandas as pd

import gcs
from gcs.runtime.background import releasing_openmp
from ui.shared.limits import LIMITS, check, parse_numbers
from ui.shared.messages import caption, click_working, failed, user_error
from ui.shared.tab import Tab


def explore(p_text, q_text, max_epsilon, trials, steps, seed):
    """The curve, the recycling histogram and its chi-square p-value, for the demo's inputs."""
    p = parse_numbers(p_text, "p")
    q = parse_numbers(q_text, "q") if str(q_text or "").strip() else None
    max_epsilon, trials, steps, seed = (check("max ε", max_epsilon), check("trials", trials), check("steps", steps),
                                        check("coupling seed", seed))
    curve = gcs.coupling_curve(p, q, epsilons=[max_epsilon * i / 10 for i in range(11)], trials=trials, seed=seed)
    histogram, p_value = gcs.recycling_histogram(p, steps=steps, seed=seed)
    return curve, histogram, p_value


OUTPUTS = ("plot", "plot-caption", "table", "recycling", "note", "status")


def curve_caption(p_text, q_text, max_epsilon, seed) -> str:
    """What the viewer should see in the agreement plot, for these inputs."""
    shared = ("Blue (shared noise, Theorem 1) sits above grey (independent draws) everywhere: sharing the noise "
              "never makes agreement less likely. Dots are Monte Carlo runs of the library's samplers (± 2 s.e.).")
    if str(q_text or "").strip():
        return shared + " Moving right blends p into your q; at w = 1 the lines give the agreement for your q itself."
    p = gcs.sampling.coupling.check_distribution(parse_numbers(p_text, "p"))
    far = gcs.perturb(p, epsilon=float(max_epsilon), seed=int(seed))
    top = int(far.argmax())
    return (shared + f" As ε grows, q piles onto one category (here category {top}), so independent "
            f"agreement Σ p·q tends to that category's p = {float(p[top]):.2f}, and shared noise agrees when both "
            f"pick it.")


CURVE_HEADERS = {"epsilon": "ε", "theorem1": "shared noise: Theorem 1",
                 "monte_carlo_shared": "Monte Carlo (shared noise)", "stderr_shared": "± s.e. (shared)",
                 "independent": "independent: Σ p·q", "monte_carlo_independent": "Monte Carlo (independent)",
                 "stderr_independent": "± s.e. (independent)"}


def curve_table(curve, blended: bool):
    """The curve's numbers under readable headers, its first column as the plot's axis (ε, or the blend weight w)."""
    table = curve.round(4).rename(columns=CURVE_HEADERS)[list(CURVE_HEADERS.values())]
    if blended:
        largest = curve["epsilon"].max()
        table = table.rename(columns={"ε": "blend weight w"}).assign(
            **{"blend weight w": (curve["epsilon"] / largest if largest > 0 else 1.0).round(4)})
    return table


def coupling_ui(p_text, q_text, max_epsilon, trials, steps, seed):
    try:
        curve, histogram, p_value = explore(p_text, q_text, max_epsilon, trials, steps, seed)
        blended = bool(str(q_text or "").strip())
        verdict = (f"GCSwR drew {int(steps):,} tokens from one fixed distribution, recycling its noise after every "
                   f"draw. Chi-square against the target: **p = {p_value:.3f}** (a p-value far below 0.001 would "
                   f"mean the draws are not exact). Reusing the noise *without* recycling picks one token forever.")
        done = (f"Done: {len(curve)} points × {int(trials):,} Monte Carlo trials; recycling demo {int(steps):,} "
                f"steps, chi-square p = {p_value:.3f}.")
        return (gcs.coupling_figure(curve, blended=blended),
                f"<small>{curve_caption(p_text, q_text, max_epsilon, seed)}</small>", curve_table(curve, blended),
                gcs.recycling_figure(histogram), verdict, done)
    except Exception as error:
        return failed(error, len(OUTPUTS))


def coupling(p: str = "0.5, 0.3, 0.15, 0.05", q: str = "", max_epsilon: float = 3.0, trials: int = 4000,
             steps: int = 5000, seed: int = 0) -> dict:
    """Theorem 1 made visible: the probability that Gumbel-max draws from p and q agree (the bound, independent
    sampling and a Monte Carlo of shared noise) as q moves away from p, and a chi-square check that GCSwR's recycled
    noise still samples p exactly. Needs no model: answers in about a second.

    Args:
        p: a probability vector, comma-separated, 2 to 64 entries (it is normalised).
        q: a second vector of the same length (the curve then blends p into q, weight w from 0 to 1), or empty to perturb p by growing amounts up to max_epsilon.
        max_epsilon: the largest perturbation (0 to 10) when q is empty.
        trials: Monte Carlo trials per point, 100 to 20,000.
        steps: GCSwR recycling steps for the histogram, 100 to 20,000.
        seed: the Monte Carlo seed, 0 to 2^31.
    Returns:
        {"curve": one record per point with the agreement under Theorem 1, independent sampling and the Monte Carlo, "recycling": the histogram of GCSwR's draws against p, "recycling_chi_square_p": the chi-square p-value of that histogram}.
    """  # noqa: E501 (gradio's API and MCP docs read each argument, and each line of Returns, from one line)
    try:
        curve, histogram, p_value = explore(p, q, max_epsilon, trials, steps, seed)
    except Exception as error:
        raise user_error(error) from error
    return {"curve": curve.to_dict(orient="records"), "recycling": histogram.to_dict(orient="records"),
            "recycling_chi_square_p": p_value}


def build() -> Tab:
    """The "Coupling explorer" tab: its inputs by query-parameter name; on load, the page fills its plots once."""
    with gr.Tab("Coupling explorer", id="coupling"):
        gr.Markdown("Two categorical distributions p and q — think of two paraphrases' next-token distributions. "
                    "How often do one draw from each agree?")
        with gr.Row():
            p_text = gr.Textbox(value="0.5, 0.3, 0.15, 0.05", label="p (weights; normalised for you)")
            q_text = gr.Textbox(value="", label="q (blank: q = p perturbed by ε along a random direction; "
                                                "given: blend from p to q)")
        with gr.Row():
            max_epsilon = gr.Slider(0.5, 10, value=3, step=0.5, label="largest ε",
                                    info="how far the perturbed q goes (only when q is blank)")
            trials = gr.Slider(500, 20_000, value=4000, step=500, label="Monte Carlo trials per point")
            steps = gr.Slider(500, 20_000, value=5000, step=500, label="recycling demo: steps")
            seed = gr.Number(value=0, precision=0, maximum=LIMITS["coupling seed"].high, label="seed",
                           elem_id="coupling-seed")
        run = gr.Button("Explore", variant="primary", elem_id="run-coupling")
        status = gr.Markdown(elem_id="coupling-status")
        plot = gr.Plot(label="agreement of one draw from p and one from q", elem_id="coupling-plot")
        plot_caption = gr.Markdown(elem_classes="caption")
        table = gr.Dataframe(value=pd.DataFrame(columns=list(CURVE_HEADERS.values())), label="numbers",
                             interactive=False, elem_id="coupling-table")
        recycling = gr.Plot(label="recycling demo", elem_id="recycling-plot")
        caption("Hatched: the target p. Red: how often GCSwR picked each token over many steps with recycled noise; "
                "it matches the hatched bars (every step is an exact draw). Blue: keeping the noise without recycling "
                "repeats one token forever.")
        note = gr.Markdown()
        q_text.change(lambda q: gr.update(interactive=not str(q or "").strip()), q_text, max_epsilon,
                      api_visibility="private", concurrency_id="browse", concurrency_limit=4)
        inputs = [p_text, q_text, max_epsilon, trials, steps, seed]
        outputs = [plot, plot_caption, table, recycling, note, status]
        click_working(run, status, coupling_ui, inputs, outputs, concurrency_id="coupling", concurrency_limit=4)
    links = {"p": p_text, "q_dist": q_text, "max_epsilon": max_epsilon, "trials": trials, "steps": steps,
             "seed": seed}

    def fill_on_load(load, selected: gr.State) -> None:
        load.then(releasing_openmp(coupling_ui), inputs, outputs, api_visibility="private", concurrency_id="coupling",
                  concurrency_limit=4)

    return Tab(links, on_load=fill_on_load)
