"""Plotly figures of the dashboard and the CLI reports (plotly is imported only here).

- ``consistency_figure``: consistency vs temperature per method (the paper's Fig. 2);
- ``style_figure``: p_repeat per style dimension and method (Table 2);
- ``similarity_heatmap``: one method's pairwise similarities between responses;
- ``paired_figure``: per-seed differences from IS with the mean and its 95 % interval;
- ``race_figure``: one step of ``gcs.trace`` (``race_scale``: one scale for several rows' races);
- ``coupling_figure`` / ``recycling_figure``: the coupling explorer (Theorem 1, Theorem 2).
"""

from __future__ import annotations

import html

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from gcs.checks import METHOD_NAMES
from gcs.experiments.sweeps import consistency_by_temperature, ensembling_label
from gcs.scoring.metrics import METRIC_NAMES, parse_metric

# One colour per concept in every figure of the library, the app and the lesson: each method; the exact law; noise
# kept without recycling; a race's winner and other runners (outlined mid grey, never washed out by a projector); a
# winner's fresh clock. The exact law and fresh clocks are also hatched (HATCHES): a protanope sees GCSwR's red as dark.
METHOD_COLORS = {"is": "#7f7f7f", "gcs": "#1f77b4", "gcswr": "#d62728"}
CONCEPT_COLORS = {"exact": "#222222", "reuse": "#56b4e9", "winner": "#ff7f0e", "runner": "#b0b0b0", "outline": "#333",
                  "fresh": "#009e73"}
HATCHES = {"exact": dict(shape="/", bgcolor="white", solidity=0.4), "fresh": dict(shape="x", fillmode="overlay")}


def consistency_figure(frame: pd.DataFrame, *, metric: str | None = None, title: str | None = None):
    """Consistency against temperature, one line per method (and ensembling): the paper's Fig. 2.

    Error bars are the standard error clustered by seed (one seed's groups share noise).

    Args:
        frame: a ``gcs.sweep`` frame.
        metric: the metric to plot (None: the first).
        title: the figure's title (None: one naming the metric).

    Returns:
        A plotly ``Figure``.

    Examples:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"group": [0, 0, 1, 1] * 2, "method": ["is", "gcswr"] * 4, "seed": [0] * 4 + [1] * 4,
        ...                       "temperature": 1.0, "ensemble": 0, "metric": "e5",
        ...                       "consistency": [0.80, 0.85, 0.82, 0.86, 0.81, 0.87, 0.79, 0.84]})
        >>> len(consistency_figure(frame).data)  # one line per method
        2
    """
    metric = metric if metric is not None else frame["metric"].iloc[0]
    summary = consistency_by_temperature(frame[frame["metric"] == metric])
    figure = go.Figure()
    for (method, ensemble), part in summary.groupby(["method", "ensemble"], sort=False):
        name = METHOD_NAMES[method] + (f" +{ensembling_label(ensemble)}" if ensemble else "")
        figure.add_trace(go.Scatter(
            x=part["temperature"], y=part["mean"], name=name, mode="lines+markers",
            error_y=dict(type="data", array=part["stderr"].fillna(0), visible=True),
            line=dict(color=METHOD_COLORS.get(method), dash="dash" if ensemble else "solid")))
    kind, model_name = parse_metric(metric)
    label = METRIC_NAMES[kind] + (f" ({model_name})" if model_name else "")
    figure.update_layout(title=title or f"Consistency vs temperature ({label})", xaxis_title="temperature",
                         yaxis_title=f"mean pairwise {label} (± std.err clustered by seed)",
                         template="plotly_white", legend_title="sampler")
    return figure


def style_figure(consistency: pd.DataFrame, *, title: str = "Stylistic consistency (p_repeat)"):
    """p_repeat per style dimension, one bar per method, error bars = std.err over seeds.

    Args:
        consistency: a ``gcs.style_consistency`` frame.
        title: the figure's title.

    Returns:
        A plotly ``Figure``.

    Examples:
        >>> import pandas as pd
        >>> consistency = pd.DataFrame({"dimension": ["has_code_block"], "method": ["is"], "p_repeat": [0.5],
        ...                             "stderr": [0.5], "seeds": [2]})
        >>> len(style_figure(consistency).data)
        1
    """
    figure = go.Figure()
    for method, part in consistency.groupby("method", sort=False):
        figure.add_trace(go.Bar(x=part["dimension"], y=part["p_repeat"], name=METHOD_NAMES[method],
                                marker_color=METHOD_COLORS.get(method),
                                error_y=dict(type="data", array=part["stderr"].fillna(0))))
    figure.update_layout(title=title, xaxis_title="style dimension", yaxis_title="p_repeat", yaxis_range=[0, 1],
                         barmode="group", template="plotly_white")
    return figure


def similarity_heatmap(matrix: np.ndarray, labels: list[str], *, title: str = "", zmin: float = 0.0):
    """Pairwise similarity of one method's responses: rows and columns are paraphrases 1..n, their text on hover.

    Args:
        matrix: the similarity matrix [n, n] (``gcs.similarity``).
        labels: the n responses, shown on hover.
        title: the figure's title.
        zmin: the colour scale's lower end.

    Returns:
        A plotly ``Figure``.

    Examples:
        >>> import numpy as np
        >>> similarity_heatmap(np.array([[1.0, 0.5], [0.5, 1.0]]), ["an answer", "another"]).data[0].type
        'heatmap'
    """
    n = len(labels)
    numbers = [str(i + 1) for i in range(n)]
    hover = [[f"{i + 1}: {labels[i]}<br>{j + 1}: {labels[j]}" for j in range(n)] for i in range(n)]
    figure = go.Figure(go.Heatmap(z=np.round(matrix, 3), x=numbers, y=numbers, zmin=zmin, zmax=1, colorscale="Blues",
                                  text=np.round(matrix, 2), texttemplate="%{text}", customdata=hover,
                                  hovertemplate="%{customdata}<br>similarity %{z}<extra></extra>"))
    figure.update_layout(title=title, template="plotly_white", height=360, margin=dict(l=40, r=10, t=50, b=40),
                         yaxis_autorange="reversed", xaxis_title="paraphrase", yaxis_title="paraphrase",
                         xaxis_type="category", yaxis_type="category")
    return figure


def paired_figure(per_seed: pd.DataFrame, summary: pd.DataFrame, *, metric: str = "e5", baseline: str = "is"):
    """Per seed, each method's consistency minus the baseline's (dots), and the mean with its 95 % interval.

    Differences are in points (score × 100); tied seeds are spread sideways, and the legend counts the seeds above,
    at and below 0. Where the seeds are too few for the exact test's interval the mean is an open diamond, so labelled.

    Args:
        per_seed: a ``CompareReport``'s ``per_seed``.
        summary: the same report's ``summary``.
        metric: the metric to plot.
        baseline: the method the others are compared with.

    Returns:
        A plotly ``Figure``.

    Examples:
        >>> import pandas as pd
        >>> frame = pd.DataFrame({"prompt_index": [0, 1] * 4, "prompt": ["p", "q"] * 4, "ensemble": 0,
        ...                       "seed": [0, 0, 0, 0, 1, 1, 1, 1], "method": ["is", "is", "gcswr", "gcswr"] * 2,
        ...                       "response": ["a b", "a c", "a b", "a b", "x y", "z y", "x y", "x y"]})
        >>> from gcs.experiments.comparison import compare_report
        >>> report = compare_report(frame, metrics=["jaccard"], tokenizer=str.split)
        >>> type(paired_figure(report.per_seed, report.summary, metric="jaccard")).__name__
        'Figure'
    """
    figure, base = go.Figure(), per_seed[per_seed["method"] == baseline].set_index("seed")[metric]
    methods = [m for m in METHOD_NAMES if m != baseline and m in set(per_seed["method"])]
    for method in methods:
        paired = (per_seed[per_seed["method"] == method].set_index("seed")[metric] - base).dropna()
        label, ups, downs = f"{METHOD_NAMES[method]} − {METHOD_NAMES[baseline]}", (paired > 0).sum(), (paired < 0).sum()
        figure.add_trace(go.Box(  # a box drawn invisible: only its points, jittered sideways so that ties stay apart
            x=[label] * len(paired), y=100 * paired.to_numpy(), boxpoints="all", jitter=0.9, pointpos=0,
            hoveron="points", fillcolor="rgba(0,0,0,0)", line_color="rgba(0,0,0,0)", customdata=paired.index.to_numpy(),
            name=f"{label}, one dot per seed: above 0 in {ups}, tied in {len(paired) - ups - downs}, below in {downs}",
            marker=dict(color=METHOD_COLORS[method], opacity=0.55, size=9),
            hovertemplate="seed %{customdata}: %{y:+.1f} points<extra></extra>"))
        row = summary[(summary["method"] == method) & (summary["metric"] == metric)].iloc[0]
        if len(paired) > 1:
            interval = row["low"] == row["low"]  # NaN where the seeds are too few for the exact test's interval
            name = f"{label}, mean " + ("and simultaneous 95 % interval" if interval else "(too few seeds for one)")
            outline = dict(width=1, color="black") if interval else dict(width=2, color=METHOD_COLORS[method])
            bars = dict(type="data", symmetric=False, array=[100 * (row["high"] - row["diff"])],
                        arrayminus=[100 * (row["diff"] - row["low"])], thickness=2, width=12) if interval else None
            figure.add_trace(go.Scatter(x=[label], y=[100 * row["diff"]], mode="markers", name=name, error_y=bars,
                                        marker=dict(color=METHOD_COLORS[method], line=outline, size=14,
                                                    symbol="diamond" if interval else "diamond-open"),
                                        hovertemplate="mean %{y:+.1f} points<extra></extra>"))
            if not interval:  # said on the plot, not only on hover: a bare mean reads as an effect
                figure.add_annotation(x=label, y=100 * row["diff"], yshift=26, showarrow=False,
                                      text="too few seeds<br>for an interval", font=dict(size=11, color="#555"))
    figure.add_hline(y=0, line=dict(color="#555", dash="dot"))
    score, who = METRIC_NAMES[parse_metric(metric)[0]], METHOD_NAMES[methods[0]] if len(methods) == 1 else "each method"
    figure.update_layout(title=f"{score[0].upper()}{score[1:]}, seed by seed: {who} minus {METHOD_NAMES[baseline]}",
                         yaxis_title="difference in points (score × 100)", template="plotly_white", height=440,
                         showlegend=True, legend=dict(orientation="h", x=0, y=-0.12, yanchor="top"),
                         margin=dict(l=50, r=10, t=50, b=40))
    return figure


def race_scale(steps) -> dict:
    """One scale for several rows' races, so that side-by-side panels compare at a glance.

    Args:
        steps: ``TraceStep`` objects (one position's races, say).

    Returns:
        ``race_figure``'s ``probability_max`` (the largest probability) and ``arrival_range`` (the range of finite
        arrival times) over all their candidates: ``race_figure(step, **race_scale(steps))``.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> steps = gcs.trace(["2+2?", "What is 2 plus 2?"], seed=1, max_new_tokens=2).steps[0]
        >>> sorted(race_scale(steps))
        ['arrival_range', 'probability_max']
    """
    candidates = [c for step in steps for c in step.candidates]
    arrivals = [c.arrival for c in candidates if c.arrival is not None and 0 < c.arrival < np.inf]
    return {"probability_max": max((c.probability for c in candidates), default=1.0),
            "arrival_range": (min(arrivals), max(arrivals)) if arrivals else None}


SUPERSCRIPTS = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


def power_ticks(low: float, high: float) -> tuple[list[float], list[str]]:
    """Tick values and labels for a log axis from ``low`` to ``high``: powers of ten only, written plainly.

    >>> power_ticks(0.3, 250)
    ([0.1, 1.0, 10.0, 100.0, 1000.0], ['0.1', '1', '10', '100', '1000'])
    """
    first, last = int(np.floor(np.log10(low))), int(np.ceil(np.log10(high)))
    values = [10.0**k for k in range(first, last + 1)]
    labels = [f"{10.0**k:g}" if -3 <= k <= 4 else f"10{str(k).translate(SUPERSCRIPTS)}" for k in range(first, last + 1)]
    return values, labels


def race_figure(step, *, title: str = "", probability_max: float | None = None,
                arrival_range: tuple[float, float] | None = None):
    """One row's step of a ``gcs.trace``: each candidate's probability p and, in a race, its arrival time E/p.

    The winner (the first arrival, or IS's inverse-CDF pick) is orange and labelled "winner"; the hover shows each
    candidate's clock E, its Gumbel form g = -log E and, with GCSwR, the clock after the race. The arrival axis is
    logarithmic with a tick at each power of ten. Token text is shown as text (escaped).

    Args:
        step: a ``TraceStep``.
        title: the figure's title.
        probability_max: fixes the probability axis (``race_scale``).
        arrival_range: fixes the arrival axis (``race_scale``).

    Returns:
        A plotly ``Figure``.

    Examples:
        On the embedded model:

        >>> import gcs
        >>> steps = gcs.trace(["2+2?", "What is 2 plus 2?"], seed=1, max_new_tokens=2).steps[0]
        >>> type(race_figure(steps[0], **race_scale(steps))).__name__
        'Figure'
    """
    from plotly.subplots import make_subplots

    candidates = step.candidates
    names = [f"{i + 1}. {html.escape(repr(c.text), quote=False)}" for i, c in enumerate(candidates)]
    colors = [CONCEPT_COLORS["winner"] if c.token_id == step.winner else CONCEPT_COLORS["runner"] for c in candidates]
    marks = ["winner" if c.token_id == step.winner else "" for c in candidates]  # not by colour alone
    hover = [f"p = {c.probability:.4f}" + ("" if c.noise is None else
                                           f"<br>clock E = {c.noise:.4g} (g = −log E = {c.gumbel:+.3f})"
                                           f"<br>arrival E/p = {c.arrival:.4g}")
             + ("" if c.noise_after is None else f"<br>clock after the race: E = {c.noise_after:.4g}")
             for c in candidates]
    race = step.uniform is None
    figure = make_subplots(rows=1, cols=2 if race else 1, shared_yaxes=True, horizontal_spacing=0.04,
                           subplot_titles=("probability p", "arrival E/p (log scale): first arrival wins") if race
                           else ("probability p",))
    figure.add_trace(go.Bar(y=names, x=[c.probability for c in candidates], orientation="h",
                            marker=dict(color=colors, line=dict(color=CONCEPT_COLORS["outline"], width=1)),
                            hovertext=hover, hoverinfo="text", text=None if race else marks, textposition="auto"),
                     row=1, col=1)
    top = probability_max if probability_max is not None else max(c.probability for c in candidates)
    figure.update_xaxes(range=[0, 1.05 * top], row=1, col=1)
    if race:
        arrivals = [c.arrival if np.isfinite(c.arrival) else None for c in candidates]
        figure.add_trace(go.Bar(y=names, x=arrivals, orientation="h", marker_color=colors, hovertext=hover,
                                hoverinfo="text", text=marks, textposition="auto"), row=1, col=2)
        low, high = arrival_range or race_scale([step])["arrival_range"] or (0.1, 10.0)
        values, labels = power_ticks(low, high)
        figure.update_xaxes(type="log", range=[np.log10(values[0]), np.log10(values[-1])], tickvals=values,
                            ticktext=labels, row=1, col=2)
    figure.update_yaxes(autorange="reversed")
    return figure.update_layout(title=title, template="plotly_white", height=70 + 24 * len(candidates),
                                showlegend=False, margin=dict(l=10, r=10, t=60, b=30))


RECYCLING_NAMES = {"target": "target p", "gcswr": "GCSwR (recycled noise)", "reuse": "same noise, no recycling"}
COUPLING_WORDS = {"shared": "shared noise", "estimate": "Monte Carlo", "agreement": "P(same category)", "q": "your q"}


def coupling_figure(curve: pd.DataFrame, *, title: str = "Agreement of two draws as q moves away from p",
                    blended: bool = False, words: dict[str, str] | None = None):
    """Theorem 1 and independent sampling (lines) with Monte Carlo estimates (points, ± 2 std.err).

    Args:
        curve: a ``gcs.coupling_curve`` frame.
        title: the figure's title.
        blended: the curve blends p into a given q (``coupling_curve(p, q)``), so the axis is the blend weight
            ``w = ε / max ε`` (0 = p, 1 = q) rather than ε.
        words: replacements for some of ``COUPLING_WORDS`` (the app's), e.g. ``{"estimate": "simulated"}``.

    Returns:
        A plotly ``Figure``.

    Examples:
        >>> from gcs.sampling.coupling import coupling_curve
        >>> len(coupling_figure(coupling_curve([0.6, 0.3, 0.1], epsilons=[0.0, 1.0], trials=100)).data)
        4
    """
    if blended:
        largest = curve["epsilon"].max()
        curve = curve.assign(epsilon=curve["epsilon"] / largest if largest > 0 else 1.0)
    words = {**COUPLING_WORDS, **(words or {})}
    figure = go.Figure()
    for kind, exact, name, symbol in (("shared", "theorem1", f"{words['shared']}: Theorem 1", "circle"),
                                      ("independent", "independent", "independent: Σ p·q", "square")):
        color = METHOD_COLORS["gcs" if kind == "shared" else "is"]
        figure.add_trace(go.Scatter(x=curve["epsilon"], y=curve[exact], name=name, mode="lines", line_color=color))
        figure.add_trace(go.Scatter(x=curve["epsilon"], y=curve[f"monte_carlo_{kind}"], mode="markers",
                                    name=f"{name.split(':')[0]}: {words['estimate']} (± 2 std.err)",
                                    marker=dict(color=color, symbol=symbol),
                                    error_y=dict(type="data", array=2 * curve[f"stderr_{kind}"])))
    x_title = (f"blend weight w: q_w = (1 − w)·p + w·q (0 = p, 1 = {words['q']})" if blended
               else "ε: q = softmax(log p + ε·z) for a fixed random direction z")
    return figure.update_layout(title=title, xaxis_title=x_title, yaxis_title=words["agreement"],
                                yaxis_range=[0, 1.02], template="plotly_white")


def recycling_figure(histogram: pd.DataFrame, *, title: str = "GCSwR over many steps vs the target distribution",
                     names: dict[str, str] | None = None):
    """Target probabilities next to GCSwR's token frequencies (and, for contrast, naive noise reuse).

    Args:
        histogram: the frame of ``gcs.recycling_histogram``.
        title: the figure's title.
        names: legend names for some of the columns ``target``, ``gcswr``, ``reuse`` (``RECYCLING_NAMES``).

    Returns:
        A plotly ``Figure``; the target's bars are hatched, apart from GCSwR's red by texture as well as colour.

    Examples:
        >>> from gcs.sampling.coupling import recycling_histogram
        >>> histogram, p_value = recycling_histogram([0.6, 0.3, 0.1], steps=100)
        >>> [bars.name for bars in recycling_figure(histogram, names={"target": "exact"}).data]
        ['exact', 'GCSwR (recycled noise)', 'same noise, no recycling']
    """
    names = {**RECYCLING_NAMES, **(names or {})}
    colors = {"target": CONCEPT_COLORS["exact"], "gcswr": METHOD_COLORS["gcswr"], "reuse": CONCEPT_COLORS["reuse"]}
    figure = go.Figure([go.Bar(x=[str(t) for t in histogram["token"]], y=histogram[column], name=names[column],
                               marker=dict(color=color, line=dict(color=color, width=1),
                                           pattern=HATCHES["exact"] if column == "target" else None))
                        for column, color in colors.items()])
    return figure.update_layout(title=title, xaxis_title="token", yaxis_title="frequency", barmode="group",
                                template="plotly_white")
