"""Counter-based noise: every random number is a pure function of integer keys.

The samplers never hold a random generator or a pre-drawn table. A Gumbel value
is ``gumbel(seed, token, draw)``: the ``draw``-th value for vocabulary entry
``token`` under ``seed``. Two rows that share a seed therefore see the same
noise (the coupling of GCS), the length of a response is unbounded, and nothing
depends on the batch a row sits in.

The hash is splitmix64 (Steele, Lea & Flood 2014), evaluated in int64 tensor ops
that wrap modulo 2**64, so the *bits* are identical on CPU and CUDA:

>>> splitmix64(torch.tensor([0])).item() == to_signed(0xE220A8397B1DCDAF)
True

What "device-independent" means, precisely: the noise *bits* are the same on every device,
so GCS (fresh noise per position) picks the same tokens from the same logits except at float
near-ties. GCSwR recycles residuals computed in float arithmetic, and the recycling amplifies
rounding: on another arithmetic path (CUDA, another kernel, float64) the same seed gives the
same first tokens, but the streams may part after a few dozen tokens (an independent float64
re-implementation fed identical noise and logits matched 88 of 200 sequences over 60 steps).
Every path samples exactly from the model; token identity across paths is not promised.

Keys are chained one integer at a time: ``mix(mix(mix(seed ^ domain) + a) + b)``.
Uniforms take the top 52 bits, ``u = (m + 0.5) / 2**52`` in (0, 1), exact in
float64. Exponential noise ``E = -log(u)`` (float64, then float32) covers
[1.1e-16, 36.7]; the Gumbel value is ``g = -log(E)``. Only the final
``log`` may differ by an ulp between devices; the uniform bits never do.

>>> g = gumbel(torch.tensor([7]), torch.arange(3), torch.tensor([0]))
>>> g.shape, g.dtype
(torch.Size([1, 3]), torch.float32)
"""

from __future__ import annotations

import hashlib

import torch

from gcs.checks import MAX_SEED  # one definition: noise keys are masked to it

MASK64 = (1 << 64) - 1
GOLDEN_GAMMA = 0x9E3779B97F4A7C15
_MIX1 = 0xBF58476D1CE4E5B9
_MIX2 = 0x94D049BB133111EB

# Domain tags keep the streams of different methods apart, so that "is" and
# "gcs" with the same seed do not secretly share noise.
DOMAIN_GUMBEL = 0x47554D42454C  # "GUMBEL"
DOMAIN_INDEPENDENT = 0x494E444550  # "INDEP"
DOMAIN_CONTEXT = 0x435458  # "CTX": method "ctx", whose draw index is a context word (``context_draws``)

# "ctx" pads the context of an answer's first steps with this: no token id is negative, so a padded window never
# equals a window of generated tokens (the prompt never enters it).
CONTEXT_PAD = -1

UNIFORM_BITS = 52


def stream_id(data: bytes) -> int:
    """A stable 63-bit id of ``data`` (BLAKE2b): the default IS stream of a row, from its prompt's text
    (``gcs.engines.batch.prompt_stream``) or, in the vLLM plugin, its prompt's token ids
    (``gcs.vllm.requests.token_stream``).

    >>> stream_id(b"What is DNA?") == stream_id(b"What is DNA?") != stream_id(b"What is RNA?")
    True
    """
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little") >> 1


def to_signed(value: int) -> int:
    """Map an unsigned 64-bit integer to the int64 with the same bits.

    >>> to_signed(2**64 - 1)
    -1
    """
    value &= MASK64
    return value - (1 << 64) if value >= 1 << 63 else value


def _shift_right_logical(x: torch.Tensor, bits: int) -> torch.Tensor:
    # torch shifts int64 arithmetically (sign-extending); the mask clears the copied sign bits.
    return (x >> bits).bitwise_and_((1 << (64 - bits)) - 1)


def splitmix64(x: torch.Tensor) -> torch.Tensor:
    """One splitmix64 output for each int64 state in ``x`` (bits as unsigned, wrapping).

    >>> hex(splitmix64(torch.tensor([1])).item() & MASK64)
    '0x910a2dec89025cc1'
    """
    x = x + to_signed(GOLDEN_GAMMA)  # a fresh tensor: the in-place steps below never touch the input
    for shift, multiplier in ((30, _MIX1), (27, _MIX2)):
        x ^= _shift_right_logical(x, shift)
        x *= to_signed(multiplier)
    x ^= _shift_right_logical(x, 31)
    return x


def hash_keys(*keys: torch.Tensor | int) -> torch.Tensor:
    """Hash a tuple of integer keys (broadcast together) into int64 words.

    >>> hash_keys(torch.tensor([1, 2]), 5).shape
    torch.Size([2])
    """
    first, *rest = keys
    state = splitmix64(torch.as_tensor(first, dtype=torch.int64))
    for key in rest:
        state = splitmix64(state + torch.as_tensor(key, dtype=torch.int64, device=state.device))
    return state


def derive_seeds(seed: int, labels: torch.Tensor | int) -> torch.Tensor:
    """Sub-seeds in [0, 2**63 - 1], one per label, hashed from ``seed``: never ``seed + i`` (which can
    overflow, and makes seed s's second sub-seed equal seed s+1's first).

    >>> a = derive_seeds(2**63 - 1, torch.arange(3))
    >>> bool(((a >= 0) & (a <= 2**63 - 1)).all()), len(set(a.tolist())), derive_seed(5, 0) == int(derive_seeds(5, 0))
    (True, 3, True)
    """
    return hash_keys(torch.as_tensor(seed, dtype=torch.int64), torch.as_tensor(labels, dtype=torch.int64)) & MAX_SEED


def derive_seed(seed: int, label: int) -> int:
    """One sub-seed of ``seed`` (see ``derive_seeds``)."""
    return int(derive_seeds(seed, label))


def uniform_bits(words: torch.Tensor) -> torch.Tensor:
    """The top ``UNIFORM_BITS`` bits of each hashed word, as int64 in [0, 2**52)."""
    return _shift_right_logical(words, 64 - UNIFORM_BITS)


def uniform(words: torch.Tensor) -> torch.Tensor:
    """Float64 uniforms strictly inside (0, 1) from hashed words.

    >>> u = uniform(hash_keys(torch.arange(4)))
    >>> bool(((u > 0) & (u < 1)).all())
    True
    """
    return (uniform_bits(words).double() + 0.5) * 2.0**-UNIFORM_BITS


def exponential(words: torch.Tensor) -> torch.Tensor:
    """Float32 Exp(1) noise from hashed words: ``E = -log(u)``; ``-log(E)`` is Gumbel(0, 1)."""
    return uniform(words).log_().neg_().float()


def row_keys(seeds: torch.Tensor, domain: int) -> torch.Tensor:
    """Per-row base keys: the seed hashed together with a domain tag."""
    return hash_keys(seeds ^ domain)


def exponential_noise(keys: torch.Tensor, draws: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """Exp(1) noise for (row key, draw index, token id), broadcast together.

    Full vocabulary: keys[:, None], draws[:, None], token_ids[None, :] -> [rows, vocab]
    (``vocabulary_noise`` computes the same faster). One token per row (the redraw
    after a pick): all three [rows] -> [rows].
    """
    return exponential(splitmix64(splitmix64(keys + draws) + token_ids))


# Table entries hashed per tile on CPU: the ~20 integer passes of the hash then stay in
# a core's L2 cache instead of streaming [rows, vocab] int64 temporaries through memory.
TILE_ENTRIES = 1 << 17


def vocabulary_noise(keys: torch.Tensor, draws: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Exp(1) noise [rows, vocab_size] for every token at one draw index per row.

    Bit for bit ``exponential_noise(keys[:, None], draws[:, None], arange(vocab_size)[None, :])``.
    On CPU it is computed in column tiles of about ``TILE_ENTRIES`` entries, 2-3x faster
    for 12 rows of Llama 3's 128,256 tokens; other devices take one call.

    >>> keys, draws = row_keys(torch.tensor([1, 2]), DOMAIN_GUMBEL), torch.tensor([0, 5])
    >>> full = exponential_noise(keys[:, None], draws[:, None], torch.arange(1000)[None, :])
    >>> torch.equal(vocabulary_noise(keys, draws, 1000), full)
    True
    """
    draw_keys = splitmix64(keys + draws)[:, None]
    token_ids = torch.arange(vocab_size, device=keys.device)[None, :]
    if keys.device.type != "cpu":
        return exponential(splitmix64(draw_keys + token_ids))
    # float32 always: another thread may hold a different default dtype (vLLM loads its model under bf16)
    noise = torch.empty(len(keys), vocab_size, dtype=torch.float32, device=keys.device)
    columns = max(1, TILE_ENTRIES // max(1, len(keys)))
    for start in range(0, vocab_size, columns):
        tile = slice(start, start + columns)
        noise[:, tile] = exponential(splitmix64(draw_keys + token_ids[:, tile]))
    return noise


def gumbel(seeds: torch.Tensor, token_ids: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise: the value GCS adds to ``log p`` for each token.

    Equal seeds give equal noise; the draw index selects a fresh, independent vector.

    Args:
        seeds: one seed per row, an integer tensor [rows].
        token_ids: the tokens to draw noise for, an integer tensor [tokens].
        draws: one draw index per row, an integer tensor [rows].

    Returns:
        The noise, a float tensor [rows, tokens].

    Examples:
        >>> a = gumbel(torch.tensor([3, 3, 4]), torch.arange(5), torch.tensor([0, 0, 0]))
        >>> bool((a[0] == a[1]).all()), bool((a[0] == a[2]).any())
        (True, False)
    """
    keys = row_keys(seeds, DOMAIN_GUMBEL)
    return exponential_noise(keys[:, None], draws[:, None], token_ids[None, :]).log_().neg_()


def context_words(windows: torch.Tensor) -> torch.Tensor:
    """One int64 word per row [rows] hashed from its window [rows, k] of the last k generated tokens (oldest first).

    >>> w = context_words(torch.tensor([[CONTEXT_PAD, 5], [CONTEXT_PAD, 5], [5, CONTEXT_PAD]]))
    >>> bool(w[0] == w[1]), bool(w[0] == w[2])
    (True, False)
    """
    return hash_keys(DOMAIN_CONTEXT, *windows.unbind(dim=1))


def context_draws(words: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
    """The draw index of method "ctx": the context word and how many earlier steps of the answer had that context.

    Within one answer no (word, count) pair repeats, so no step reuses another's noise; two answers at the same
    context with the same count draw the same vector.

    >>> words = context_words(torch.tensor([[1, 2], [1, 2]]))
    >>> d = context_draws(words, torch.tensor([0, 1]))
    >>> bool(d[0] == d[1]), bool(d[0] == context_draws(words[:1], torch.tensor([0]))[0])
    (False, True)
    """
    return hash_keys(words, counts)


def context_keys(answers: torch.Tensor, context: int) -> torch.Tensor:
    """The draw index of "ctx" at each step of ``answers`` [rows, n] (token ids) with a window of ``context``
    tokens: the key the step's vector was hashed from (the posterior given an answer is known at these keys).

    >>> keys = context_keys(torch.tensor([[5, 5, 5], [7, 5, 5]]), context=1)
    >>> bool(keys[0, 1] != keys[0, 2])  # the window [5] met a second time: another key
    True
    >>> bool(keys[0, 1] == keys[1, 2])  # two answers meeting [5] for the first time: one key
    True
    """
    rows, n = answers.shape
    pad = torch.full((rows, context), CONTEXT_PAD, dtype=torch.int64, device=answers.device)
    windows = torch.cat([pad, answers.long()], dim=1).unfold(1, context, 1)[:, :n]  # the window before each step
    words = context_words(windows.reshape(-1, context)).reshape(rows, n)
    counts = torch.tril(words[:, :, None] == words[:, None, :], diagonal=-1).sum(dim=-1)  # earlier steps alike
    return context_draws(words, counts)


class HashedNoise:
    """A Gumbel sampler's noise source: Exp(1) values hashed from each row's seed (the default).

    A noise source gives one batch of rows its noise in race form (``E``; Gumbel ``g = -log E``):

    - ``vector(draws)`` [rows, vocab]: every token's ``draws[row]``-th value (GCS: the noise of
      the position ``draws``; GCSwR: its initial state, draw 0);
    - ``token(rows, tokens, draws)`` [len(rows)]: one value per listed row (GCSwR's new noise for a
      token it picked or was forced to emit).

    Samplers call ``start(seeds, vocab)`` when they begin responses. ``gcs.hindsight``'s posterior
    sources override some values and fall back to these for the rest; ``hashed`` tells a sampler
    that its fused kernel may hash the values itself.

    >>> source = HashedNoise().start(torch.tensor([3, 3]), vocab=5)
    >>> v = source.vector(torch.tensor([0, 0]))
    >>> token = source.token(torch.tensor([1]), torch.tensor([4]), torch.tensor([0]))
    >>> v.shape, torch.equal(v[0], v[1]), bool(token == v[1, 4])
    (torch.Size([2, 5]), True, True)

    ``domain`` keeps methods apart: "ctx" hashes under ``DOMAIN_CONTEXT``, so it shares no noise with "gcs".
    """

    hashed = True
    domain = DOMAIN_GUMBEL  # the class default: the posterior sources of gcs.hindsight keep it

    def __init__(self, domain: int = DOMAIN_GUMBEL):
        self.domain = domain

    def start(self, seeds: torch.Tensor, vocab: int) -> HashedNoise:
        self.keys, self.vocab = row_keys(seeds, self.domain), vocab
        return self

    def vector(self, draws: torch.Tensor) -> torch.Tensor:
        # rows that share a seed share their noise: hash each distinct (seed, draw) once
        pairs, rows = torch.unique(torch.stack([self.keys, draws], dim=1), dim=0, return_inverse=True)
        if len(pairs) == len(rows):
            return vocabulary_noise(self.keys, draws, self.vocab)
        return vocabulary_noise(pairs[:, 0], pairs[:, 1], self.vocab)[rows]

    def token(self, rows: torch.Tensor, tokens: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
        return exponential_noise(self.keys[rows], draws, tokens)
