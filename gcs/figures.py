"""Plotly figures of the dashboard and the CLI reports (plotly is imported only here).

- ``consistency_figure``: consistency vs temperature per method (the paper's Fig. 2);
- ``style_figure``: p_repeat per style dimension and method (Table 2);
- ``similarity_heatmap``: one method's pairwise similarities between responses;
- ``coupling_figure`` / ``recycling_figure``: the coupling explorer (Theorem 1, Theorem 2).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from .experiments import consistency_by_temperature
from .samplers import METHOD_NAMES
from .scoring import METRIC_NAMES, parse_metric

METHOD_COLORS = {"is": "#7f7f7f", "gcs": "#1f77b4", "gcswr": "#d62728"}


def consistency_figure(frame: pd.DataFrame, metric: str | None = None, title: str | None = None):
    """Plotly figure: consistency vs temperature, one line per method (and ensembling), error bars =
    standard error clustered by seed (one seed's groups share noise; the paper's Fig. 2)."""
    metric = metric if metric is not None else frame["metric"].iloc[0]
    summary = consistency_by_temperature(frame[frame["metric"] == metric])
    figure = go.Figure()
    for (method, ensemble), part in summary.groupby(["method", "ensemble"], sort=False):
        name = METHOD_NAMES[method] + (" + ensembling" if ensemble else "")
        figure.add_trace(
            go.Scatter(
                x=part["temperature"], y=part["mean"], name=name, mode="lines+markers",
                error_y=dict(type="data", array=part["stderr"].fillna(0), visible=True),
                line=dict(color=METHOD_COLORS.get(method), dash="dash" if ensemble else "solid"),
            )
        )
    kind, name = parse_metric(metric)
    label = METRIC_NAMES[kind] + (f" ({name})" if name else "")
    figure.update_layout(
        title=title or f"Consistency vs temperature ({label})",
        xaxis_title="temperature", yaxis_title=f"mean pairwise {label} (± std.err clustered by seed)",
        template="plotly_white", legend_title="sampler",
    )
    return figure


def style_figure(consistency: pd.DataFrame, title: str = "Stylistic consistency (p_repeat)"):
    """Plotly bar chart: p_repeat per dimension, one bar per method, error bars = std.err over seeds."""
    figure = go.Figure()
    for method, part in consistency.groupby("method", sort=False):
        figure.add_trace(
            go.Bar(x=part["dimension"], y=part["p_repeat"], name=METHOD_NAMES[method], marker_color=METHOD_COLORS.get(method),
                   error_y=dict(type="data", array=part["stderr"].fillna(0)))
        )
    figure.update_layout(title=title, yaxis_title="p_repeat", yaxis_range=[0, 1], barmode="group", template="plotly_white")
    return figure


def similarity_heatmap(matrix: np.ndarray, labels: list[str], title: str = "", zmin: float = 0.0):
    """Pairwise similarity of one method's responses (rows/columns = paraphrases)."""
    short = [label if len(label) <= 28 else label[:27] + "…" for label in labels]
    figure = go.Figure(
        go.Heatmap(z=np.round(matrix, 3), x=short, y=short, zmin=zmin, zmax=1, colorscale="Blues",
                   text=np.round(matrix, 2), texttemplate="%{text}", hovertemplate="%{y} / %{x}: %{z}<extra></extra>")
    )
    figure.update_layout(title=title, template="plotly_white", height=320, margin=dict(l=10, r=10, t=40, b=10),
                         yaxis_autorange="reversed")
    return figure


def coupling_figure(curve: pd.DataFrame, title: str = "Agreement of two draws as q moves away from p"):
    """Theorem 1 and independent sampling (lines) with Monte Carlo estimates (points, ± 2 std.err)."""
    figure = go.Figure()
    figure.add_trace(go.Scatter(x=curve["epsilon"], y=curve["theorem1"], name="shared noise: Theorem 1",
                                mode="lines", line=dict(color=METHOD_COLORS["gcs"])))
    figure.add_trace(go.Scatter(x=curve["epsilon"], y=curve["monte_carlo_shared"], name="shared noise: Monte Carlo",
                                mode="markers", marker=dict(color=METHOD_COLORS["gcs"]),
                                error_y=dict(type="data", array=2 * curve["stderr_shared"])))
    figure.add_trace(go.Scatter(x=curve["epsilon"], y=curve["independent"], name="independent: Σ p·q",
                                mode="lines", line=dict(color=METHOD_COLORS["is"])))
    figure.add_trace(go.Scatter(x=curve["epsilon"], y=curve["monte_carlo_independent"], name="independent: Monte Carlo",
                                mode="markers", marker=dict(color=METHOD_COLORS["is"], symbol="square"),
                                error_y=dict(type="data", array=2 * curve["stderr_independent"])))
    figure.update_layout(title=title, xaxis_title="ε (how far q is from p)", yaxis_title="P(same category)",
                         yaxis_range=[0, 1.02], template="plotly_white")
    return figure


def recycling_figure(histogram: pd.DataFrame, title: str = "GCSwR over many steps vs the target distribution"):
    """Target probabilities next to GCSwR's token frequencies (and, for contrast, naive noise reuse)."""
    figure = go.Figure()
    labels = [str(t) for t in histogram["token"]]
    figure.add_trace(go.Bar(x=labels, y=histogram["target"], name="target p", marker_color="#2ca02c"))
    figure.add_trace(go.Bar(x=labels, y=histogram["gcswr"], name="GCSwR (recycled noise)",
                            marker_color=METHOD_COLORS["gcswr"]))
    figure.add_trace(go.Bar(x=labels, y=histogram["reuse"], name="same noise, no recycling",
                            marker_color="#bcbd22", opacity=0.6))
    figure.update_layout(title=title, xaxis_title="token", yaxis_title="frequency", barmode="group",
                         template="plotly_white")
    return figure
