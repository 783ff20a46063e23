"""Quickstart: how often do two *different* next-token distributions pick the same token?

Two paraphrased prompts give similar but not identical distributions p and q. Sampled
independently (IS) they agree with probability sum(p*q); with shared Gumbel noise
(GCS / GCSwR) at least as often in every case tried, and far more when p and q are close
(here 0.878 against 0.340; the paper's Theorem 1 gives the exact value), while each
draw is still exact. p and q are made-up numbers.

Needs gcs only (no model): ``pip install -e .`` in a checkout, or
``pip install "gcs @ git+URL"`` (gcs is not on PyPI).

    python examples/quickstart.py
"""

import torch

import gcs

words = ["Paris", "paris", "The", "It", "France's"]
p = torch.tensor([0.55, 0.05, 0.25, 0.10, 0.05])  # "What is the capital of France?"
q = torch.tensor([0.45, 0.10, 0.30, 0.10, 0.05])  # "Which city is France's capital?"

pairs = 20_000
logits = torch.stack([p.log(), q.log()]).repeat(pairs, 1)
seeds = torch.arange(pairs).repeat_interleave(2)  # rows 2j and 2j+1 share seed j

print(f"{'method':>7} {'theory':>7} {'simulated':>9}   marginal of the first prompt")
for method in gcs.METHODS:
    tokens = gcs.make_sampler(method, seed=seeds).sample(logits).view(pairs, 2)
    simulated = (tokens[:, 0] == tokens[:, 1]).float().mean().item()
    theory = gcs.agreement_probability(p, q, method=method)
    marginal = torch.bincount(tokens[:, 0], minlength=len(words)) / pairs
    shares = " ".join(f"{w}={m:.2f}" for w, m in zip(words, marginal.tolist(), strict=True))
    print(f"{gcs.METHOD_NAMES[method]:>7} {theory:>7.3f} {simulated:>9.3f}   {shares}")
print(f"target marginal:                    {' '.join(f'{w}={x:.2f}' for w, x in zip(words, p.tolist(), strict=True))}")
