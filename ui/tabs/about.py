"""The About tab's text: what the demo shows and how to read it."""

ABOUT = """
### What you are looking at

A language model answers two rewordings of one question differently — partly because of *what*
was asked, partly by pure **sampling luck**. Gumbel Consistency Sampling removes the luck that
the rewordings need not have:

- **IS — independent sampling** (the usual way): every response draws its own randomness.
- **GCS — Gumbel consistency sampling**: each token is picked by the Gumbel-max trick,
  `argmax(log p + g)`, and the responses to all rewordings share the Gumbel noise `g` of each position.
- **GCSwR — GCS with recycling** (Algorithm 1): after each token the noise is *recycled* instead of
  redrawn, so the same preferences carry across positions even when responses drift out of step.
- **Ensembling** (section 5): the model also writes rewordings of each prompt, and every token is
  drawn from the geometric mean of the next-token distributions over them.

Every single response is still an **exact sample from the model** (Theorems 1–2): only the *joint*
distribution of the responses changes. Same quality, more agreement.

### How to read the plots

- **Side by side**: every method answers your paraphrases under several seeds. The verdict and the
  paired plot compare each shared-noise method with IS seed by seed (the same paraphrases, the same
  seed): dots are seeds, the diamond is the mean difference with its 95 % interval, and an interval
  that crosses 0 is *within noise*; an open diamond has no interval (too few seeds for any claim). One
  seed is an anecdote. The seed browser shows one seed at a time:
  one column per method, `[n]` is the response to paraphrase n, coloured stretches repeat response [1]
  word for word (aligned spans), and the heatmap shows pairwise E5 similarity.
- **Inside the sampler**: each token is a race. Every candidate holds Exp(1) noise E (the Gumbel value
  is g = −log E) and arrives at E/p; the first arrival wins. IS draws each paraphrase's token with its
  own independent uniform; GCS races both paraphrases with the same noise vector; GCSwR keeps each
  loser's leftover clock (E − T·p) and redraws only the winner's noise, so the same preferences carry on.
- **Hindsight**: the noise that produced a response is drawn from its posterior, then the other
  wordings are answered with it: what the model would have said with the same luck.
- **Consistency vs temperature**: mean consistency over groups × seeds with standard-error bars
  (the paper's Fig. 2), clustered by seed: responses with one seed share their noise across groups, so
  the seeds, not the cells, are the independent runs. At temperature 0 (greedy) all methods coincide.
- **A/B**: two arms (a system prompt, a template, sampling settings or a model) answer the same prompts
  with the same noise per seed, so a difference between their answers is the change's, not luck's. The
  effects table gives B − A per score with its 95 % interval and the same estimate from an independent-
  sampling control (wider: what shared luck saves, in seeds); the pairs table shows each prompt's two
  answers and the token where they part.
- **Coupling explorer**: for two distributions p and q, the chance that one draw from each picks the
  same category — with shared noise (Theorem 1, exact line; Monte Carlo points) versus independent
  draws (Σ p·q). Below, GCSwR draws thousands of tokens from one distribution while recycling its
  noise: the histogram matches the target.

Paper: *Waste Not, Want Not: Recycled Gumbel Noise Improves Consistency in Natural Language
Generation* (de Mijolla, Saddiq & Moore). Library, CLI and tests: the `gcs` package in this repository.
"""
