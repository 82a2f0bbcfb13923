"""ALBERT pretraining instances: documents -> SOP/NSP pairs -> n-gram masks -> TFRecord bytes.

This is the algorithm of the original `create_pretraining_data.py` (spec §8), re-expressed on
integer token ids and flat numpy buffers so that no per-token Python objects are created. The
*Python* RNG (`random.Random`) is consumed in exactly the original's order for everything it
drove (document order, target lengths, a_end, swaps, random documents, truncation sides,
candidate shuffles, 80/10/10 decisions, random replacement ids, instance order). The only
documented change of randomness is the n-gram length draw, which the original took from NumPy's
*unseeded* global RNG (§15 item 14, "fix"): here it comes from a seeded `numpy.random.Generator`
passed in by the caller, so the output is fully reproducible from the seed.

No TensorFlow import: this module runs in lightweight worker processes. Examples are serialized
to `tf.train.Example` wire format by hand (`serialize_example`), byte-compatible with what
`tf.train.Example.SerializeToString()` parses to.

Data layout of a "corpus unit" (`Corpus`):
  tokens      int32 [T]     all token ids of all segments, concatenated
  seg_offsets int64 [S + 1] segment s = tokens[seg_offsets[s]:seg_offsets[s + 1]]
  doc_offsets int64 [D + 1] document d = segments doc_offsets[d] .. doc_offsets[d + 1] - 1
Consecutive segments of one document are contiguous in `tokens`, so every A/B side of an
instance is a single slice.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import struct
from typing import Iterator, Sequence

import numpy as np

logger = logging.getLogger(__name__)

# ASCII punctuation without the apostrophe and without "<", "=", ">" (spec §8.5). The original
# also listed the UTF-8 *bytes* of "€" and "£", which never equal a str piece in Python 3 (§15
# item 17, mirrored: those characters make a piece a start piece through the last rule instead).
_SP_PUNCT = frozenset('!"#$%&()*+,-./:;?@[\\]^_`{|}~')
_ASCII_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyz")
_SP_WORD_CHARS = _ASCII_LETTERS | _SP_PUNCT


def is_start_piece_sp(piece: str) -> bool:
    """SentencePiece start-piece rule of the original (spec §8.5), quirks included."""
    if piece.startswith("\u2581") or piece.startswith("<") or piece in _SP_PUNCT:
        return True
    # Any character outside ASCII letters + the punctuation set (digits, apostrophe, "=", ">",
    # non-ASCII letters) makes the piece a start piece: "foreign" pieces are whole words.
    return not all(c.lower() in _SP_WORD_CHARS for c in piece)


def is_start_piece_wordpiece(piece: str) -> bool:
    """WordPiece rule: continuation pieces start with "##"."""
    return not piece.startswith("##")


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
    """Parameters of instance creation and masking (names follow the original flags)."""

    max_seq_length: int = 512
    short_seq_prob: float = 0.1
    masked_lm_prob: float = 0.15
    max_predictions_per_seq: int = 20
    ngram: int = 3
    favor_shorter_ngram: bool = True
    do_whole_word_mask: bool = True
    random_next_sentence: bool = False
    # False: write tokens + token_boundary only (for dynamic masking); masking draws are skipped.
    do_masking: bool = True

    def validate(self) -> None:
        """Raises ValueError naming the offending field."""
        if self.max_seq_length < 5:
            raise ValueError(
                f"max_seq_length={self.max_seq_length}: must be >= 5 to hold [CLS] A [SEP] B [SEP] "
                "with at least one token per segment"
            )
        if self.max_predictions_per_seq < 1:
            raise ValueError(
                f"max_predictions_per_seq={self.max_predictions_per_seq}: must be >= 1"
            )
        if not 0.0 <= self.masked_lm_prob <= 1.0:
            raise ValueError(f"masked_lm_prob={self.masked_lm_prob}: must be in [0, 1]")
        if not 0.0 <= self.short_seq_prob <= 1.0:
            raise ValueError(f"short_seq_prob={self.short_seq_prob}: must be in [0, 1]")
        if self.ngram < 1:
            raise ValueError(f"ngram={self.ngram}: must be >= 1")

    def ngram_probs(self) -> np.ndarray:
        """p(n) for n = 1..ngram: ∝ 1/n, reversed if not favor_shorter_ngram. float64 [ngram]."""
        p = 1.0 / np.arange(1, self.ngram + 1)
        p /= p.sum()
        return p if self.favor_shorter_ngram else p[::-1].copy()


@dataclasses.dataclass(frozen=True)
class Vocab:
    """What instance creation needs to know about the vocabulary, as arrays over ids.

    is_start:   uint8 [V]  1 where the piece starts a word (spec §8.5)
    random_ids: int64 [V]  ids in the order of `tokenizer.vocab` (the original drew
                `vocab_words[randint(0, len - 1)]`, so index -> id goes through this table)
    """

    is_start: np.ndarray
    random_ids: np.ndarray
    cls_id: int
    sep_id: int
    mask_id: int

    @property
    def size(self) -> int:
        return int(self.random_ids.shape[0])

    @classmethod
    def from_pieces(
        cls, pieces: Sequence[str], spm_mode: bool, random_ids: Sequence[int] | None = None
    ) -> "Vocab":
        """Builds the tables from the id-ordered piece list."""
        rule = is_start_piece_sp if spm_mode else is_start_piece_wordpiece
        is_start = np.fromiter((rule(p) for p in pieces), dtype=np.uint8, count=len(pieces))
        index = {p: i for i, p in enumerate(pieces)}
        missing = [t for t in ("[CLS]", "[SEP]", "[MASK]") if t not in index]
        if missing:
            raise ValueError(f"vocabulary lacks the special tokens {missing}")
        ids = np.arange(len(pieces)) if random_ids is None else np.asarray(random_ids)
        return cls(
            is_start=is_start,
            random_ids=ids.astype(np.int64),
            cls_id=index["[CLS]"],
            sep_id=index["[SEP]"],
            mask_id=index["[MASK]"],
        )

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "Vocab":
        """From an `albert_tf.tokenization.FullTokenizer`."""
        size = len(tokenizer.vocab)
        inv = tokenizer.inv_vocab
        pieces = [inv[i] for i in range(size)]
        return cls.from_pieces(
            pieces, bool(tokenizer.spm_mode), random_ids=list(tokenizer.vocab.values())
        )


@dataclasses.dataclass
class Corpus:
    """Tokenized documents of one unit of work; see the module docstring for the layout."""

    tokens: np.ndarray
    seg_offsets: np.ndarray
    doc_offsets: np.ndarray

    @property
    def num_documents(self) -> int:
        return int(self.doc_offsets.shape[0] - 1)

    @classmethod
    def from_documents(cls, documents: Sequence[Sequence[Sequence[int]]]) -> "Corpus":
        """From nested lists: documents -> segments -> ids. Empty segments/documents dropped."""
        segs = []
        doc_offsets = [0]
        for doc in documents:
            kept = [s for s in doc if len(s)]
            if kept:
                segs.extend(kept)
                doc_offsets.append(len(segs))
        seg_len = np.array([len(s) for s in segs], dtype=np.int64)
        seg_offsets = np.zeros(len(segs) + 1, dtype=np.int64)
        np.cumsum(seg_len, out=seg_offsets[1:])
        tokens = (
            np.concatenate([np.asarray(s, dtype=np.int32) for s in segs])
            if segs
            else np.zeros(0, np.int32)
        )
        return cls(tokens, seg_offsets, np.asarray(doc_offsets, dtype=np.int64))


@dataclasses.dataclass
class Instance:
    """One example before padding.

    input_ids, segment_ids, token_boundary: int32 [n], n <= max_seq_length
    masked_lm_positions, masked_lm_ids: int32 [m], m <= max_predictions_per_seq (sorted positions)
    next_sentence_label: 0 = original order, 1 = swapped or random-document B
    """

    input_ids: np.ndarray
    segment_ids: np.ndarray
    token_boundary: np.ndarray
    masked_lm_positions: np.ndarray
    masked_lm_ids: np.ndarray
    next_sentence_label: int


def shuffle_like_random(x: list, rng: random.Random) -> None:
    """In-place shuffle with exactly the draws and result of `rng.shuffle(x)` (CPython 3.11+
    `Random.shuffle` -> `_randbelow_with_getrandbits`), minus two Python calls per element: the
    candidate shuffles are the builder's hottest loop."""
    getrandbits = rng.getrandbits
    for i in range(len(x) - 1, 0, -1):
        n = i + 1
        k = n.bit_length()
        r = getrandbits(k)
        while r >= n:
            r = getrandbits(k)
        x[i], x[r] = x[r], x[i]


class _NgramSampler:
    """Draws n-gram lengths from a seeded numpy Generator, buffered (np `choice` is ~10 µs/call)."""

    def __init__(self, np_rng: np.random.Generator, probs: np.ndarray, block: int = 4096):
        self._rng = np_rng
        self._cdf = np.cumsum(probs)
        self._cdf[-1] = 1.0
        self._block = block
        self._buf: list[int] = []
        self._pos = 0

    def draw(self) -> int:
        if self._pos >= len(self._buf):
            u = self._rng.random(self._block)
            self._buf = (np.searchsorted(self._cdf, u, side="right") + 1).tolist()
            self._pos = 0
        n = self._buf[self._pos]
        self._pos += 1
        return n


class InstanceBuilder:
    """Creates instances from a `Corpus` with the original's algorithm (spec §8.3-8.4).

    rng:    random.Random; consumed in the original's order.
    np_rng: numpy Generator for the n-gram lengths (seeded: §15 item 14 fix).
    """

    def __init__(
        self, config: MaskingConfig, vocab: Vocab, rng: random.Random, np_rng: np.random.Generator
    ):
        config.validate()
        self.config = config
        self.vocab = vocab
        self.rng = rng
        self._ngram = _NgramSampler(np_rng, config.ngram_probs())

    # --- corpus level -------------------------------------------------------------------------

    def document_order(self, corpus: Corpus) -> list[int]:
        """The original's `rng.shuffle(all_documents)`: same draws as shuffling a list of that size."""
        order = list(range(corpus.num_documents))
        self.rng.shuffle(order)
        return order

    def iter_pass(self, corpus: Corpus, order: Sequence[int]) -> Iterator[Instance]:
        """One dupe pass: instances of every document in `order` (not shuffled)."""
        seg_len = np.diff(corpus.seg_offsets).tolist()
        doc_off = corpus.doc_offsets.tolist()
        seg_off = corpus.seg_offsets.tolist()
        for k in range(len(order)):
            yield from self._from_document(corpus, order, k, seg_len, doc_off, seg_off)

    def create_instances(self, corpus: Corpus, dupe_factor: int) -> list[Instance]:
        """The original's `create_training_instances` for one unit: doc shuffle, passes, shuffle."""
        order = self.document_order(corpus)
        instances: list[Instance] = []
        for _ in range(dupe_factor):
            instances.extend(self.iter_pass(corpus, order))
        self.rng.shuffle(instances)
        return instances

    # --- document level (spec §8.3) -----------------------------------------------------------

    def _from_document(self, corpus, order, k, seg_len, doc_off, seg_off):
        rng = self.rng
        cfg = self.config
        doc = order[k]
        first, last = doc_off[doc], doc_off[doc + 1]  # segment index range of this document
        num_segs = last - first
        max_num_tokens = cfg.max_seq_length - 3
        target = max_num_tokens
        if rng.random() < cfg.short_seq_prob:
            target = rng.randint(2, max_num_tokens)

        chunk_start = None  # first segment (global index) of current chunk
        chunk_n = 0
        cur_len = 0
        i = 0
        while i < num_segs:
            s = first + i
            if chunk_n == 0:
                chunk_start = s
            chunk_n += 1
            cur_len += seg_len[s]
            if i == num_segs - 1 or cur_len >= target:
                a_end = 1
                if chunk_n >= 2:
                    a_end = rng.randint(1, chunk_n - 1)
                a0 = seg_off[chunk_start]
                a1 = seg_off[chunk_start + a_end]
                if chunk_n == 1 or (cfg.random_next_sentence and rng.random() < 0.5):
                    label = 1
                    target_b = target - (a1 - a0)
                    rand_k = 0
                    for _ in range(10):
                        rand_k = rng.randint(0, len(order) - 1)
                        if rand_k != k:
                            break
                    rdoc = order[rand_k]
                    rfirst, rlast = doc_off[rdoc], doc_off[rdoc + 1]
                    rstart = rng.randint(0, rlast - rfirst - 1)
                    b0 = seg_off[rfirst + rstart]
                    b1 = b0
                    for j in range(rfirst + rstart, rlast):
                        b1 = seg_off[j + 1]
                        if b1 - b0 >= target_b:
                            break
                    # Unused chunk segments go back to the walk.
                    i -= chunk_n - a_end
                elif not cfg.random_next_sentence and rng.random() < 0.5:
                    label = 1
                    b0, b1 = a1, seg_off[chunk_start + chunk_n]
                    a0, a1, b0, b1 = b0, b1, a0, a1  # swap A and B
                else:
                    label = 0
                    b0, b1 = a1, seg_off[chunk_start + chunk_n]
                a0, a1, b0, b1 = self._truncate(a0, a1, b0, b1, max_num_tokens)
                yield self._make_instance(corpus.tokens, a0, a1, b0, b1, label)
                chunk_n = 0
                cur_len = 0
            i += 1

    def _truncate(self, a0, a1, b0, b1, max_num_tokens):
        """Original truncate_seq_pair on offsets: one rng.random() per removed token."""
        rng = self.rng
        while (a1 - a0) + (b1 - b0) > max_num_tokens:
            if (a1 - a0) > (b1 - b0):
                if rng.random() < 0.5:
                    a0 += 1
                else:
                    a1 -= 1
            else:
                if rng.random() < 0.5:
                    b0 += 1
                else:
                    b1 -= 1
        if a1 - a0 < 1 or b1 - b0 < 1:
            raise AssertionError("empty segment after truncation")  # cannot happen for valid input
        return a0, a1, b0, b1

    # --- instance level (spec §8.4) -----------------------------------------------------------

    def _make_instance(self, tokens, a0, a1, b0, b1, label) -> Instance:
        v = self.vocab
        la, lb = a1 - a0, b1 - b0
        n = la + lb + 3
        ids = np.empty(n, dtype=np.int32)
        ids[0] = v.cls_id
        ids[1 : la + 1] = tokens[a0:a1]
        ids[la + 1] = v.sep_id
        ids[la + 2 : n - 1] = tokens[b0:b1]
        ids[n - 1] = v.sep_id
        segment_ids = np.zeros(n, dtype=np.int32)
        segment_ids[la + 2 :] = 1
        boundary = v.is_start[ids].astype(np.int32)
        boundary[0] = boundary[la + 1] = boundary[n - 1] = 1
        if not self.config.do_masking:
            empty = np.zeros(0, np.int32)
            return Instance(ids, segment_ids, boundary, empty, empty, label)
        positions, labels = self._mask(ids, boundary, la)
        return Instance(ids, segment_ids, boundary, positions, labels, label)

    def _mask(self, ids: np.ndarray, boundary: np.ndarray, la: int):
        """N-gram masking in place on `ids`. Returns (positions, labels), sorted by position."""
        cfg = self.config
        rng = self.rng
        n = ids.shape[0]
        if cfg.masked_lm_prob == 0:
            return np.zeros(0, np.int32), np.zeros(0, np.int32)
        # Non-special positions in order; [CLS]/[SEP] never are candidates, and whole-word grouping
        # ignores the middle [SEP] (a continuation at the start of B joins A's last word, §15 #16).
        nsp = np.concatenate([np.arange(1, la + 1), np.arange(la + 2, n - 1)])
        if cfg.do_whole_word_mask:
            new_word = boundary[nsp].astype(bool)
            new_word[0] = True  # the first candidate always opens a word
            word_starts = np.flatnonzero(new_word).tolist()
        else:
            word_starts = list(range(nsp.shape[0]))
        num_words = len(word_starts)
        word_starts.append(nsp.shape[0])
        nsp_list = nsp.tolist()

        num_to_predict = min(
            cfg.max_predictions_per_seq, max(1, int(round(n * cfg.masked_lm_prob)))
        )
        max_n = cfg.ngram
        order = list(range(num_words))
        shuffle_like_random(order, rng)  # the original's rng.shuffle(ngram_indexes)

        covered = set()
        picked: list[int] = []
        orig = ids.tolist()
        for j in order:
            if len(picked) >= num_to_predict:
                break
            g = self._ngram.draw()
            # The (g)-gram starting at word j; clipped at the end of the sequence (§15 item 16).
            size = word_starts[min(j + g, num_words)] - word_starts[j]
            g -= 1
            while len(picked) + size > num_to_predict:
                if g == 0:
                    break
                size = word_starts[min(j + g, num_words)] - word_starts[j]
                g -= 1
            if len(picked) + size > num_to_predict:
                continue
            start = word_starts[j]
            span = nsp_list[start : start + size]
            if any(p in covered for p in span):
                continue
            for p in span:
                covered.add(p)
                if rng.random() < 0.8:
                    ids[p] = self.vocab.mask_id
                elif rng.random() < 0.5:
                    pass  # keep the original token
                else:
                    ids[p] = self.vocab.random_ids[rng.randint(0, self.vocab.size - 1)]
                picked.append(p)

        # The original shuffles the candidate list again (for permutation targets, unused here);
        # the draws are consumed all the same.
        shuffle_like_random(order, rng)
        picked.sort()
        positions = np.asarray(picked, dtype=np.int32)
        labels = np.asarray([orig[p] for p in picked], dtype=np.int32)
        return positions, labels


# ---------------------------------------------------------------------------------------------
# Serialization: tf.train.Example wire format without protobuf objects.
# ---------------------------------------------------------------------------------------------

FEATURE_NAMES_MASKED = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "token_boundary",
    "masked_lm_positions",
    "masked_lm_ids",
    "masked_lm_weights",
    "next_sentence_labels",
)
FEATURE_NAMES_UNMASKED = (
    "input_ids",
    "input_mask",
    "segment_ids",
    "token_boundary",
    "next_sentence_labels",
)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b = value & 0x7F
        value >>= 7
        if value:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_varints(values: np.ndarray) -> bytes:
    """Protobuf varints of a non-negative integer array, vectorized. -> bytes."""
    v = np.asarray(values, dtype=np.int64)
    if v.size == 0:
        return b""
    if v.min() < 0:
        raise ValueError("negative values cannot be written as compact varints here")
    v = v.astype(np.uint64)
    groups = max(1, (int(v.max()).bit_length() + 6) // 7)
    shifts = np.arange(groups, dtype=np.uint64) * np.uint64(7)
    parts = ((v[:, None] >> shifts[None, :]) & np.uint64(0x7F)).astype(np.uint8)
    nbytes = np.ones(v.shape[0], dtype=np.int64)
    for g in range(1, groups):
        nbytes += v >= np.uint64(1 << (7 * g))
    col = np.arange(groups)[None, :]
    parts[col < (nbytes[:, None] - 1)] |= 0x80  # continuation bits
    return parts[col < nbytes[:, None]].tobytes()


def _ld(field: int, payload: bytes) -> bytes:
    """Length-delimited protobuf field."""
    return _varint((field << 3) | 2) + _varint(len(payload)) + payload


_KEY_CACHE: dict[str, bytes] = {}


def _feature_entry(name: str, feature: bytes) -> bytes:
    key = _KEY_CACHE.get(name)
    if key is None:
        key = _KEY_CACHE[name] = _ld(1, name.encode("utf-8"))
    return _ld(1, key + _ld(2, feature))  # Features.feature map entry


def _int64_feature(values: np.ndarray, pad: int) -> bytes:
    payload = encode_varints(values) + b"\x00" * pad  # zero pads are one 0x00 byte each
    return _ld(3, _ld(1, payload))  # Feature.int64_list -> Int64List.value (packed)


def _float_feature(values: np.ndarray) -> bytes:
    payload = np.asarray(values, dtype="<f4").tobytes()
    return _ld(2, _ld(1, payload))  # Feature.float_list -> FloatList.value (packed)


class ExampleSerializer:
    """Fast `tf.train.Example` bytes for fixed (max_seq_length, max_predictions_per_seq).

    Headers of the fixed-size features are precomputed; varints of ids come from a lookup table
    (values < 2**21, i.e. at most 3 bytes), so one instance costs a handful of numpy calls.
    """

    _LUT_BITS = 21

    def __init__(self, max_seq_length: int, max_predictions_per_seq: int, with_masks: bool = True):
        self.S, self.P, self.with_masks = max_seq_length, max_predictions_per_seq, with_masks
        vals = np.arange(1 << self._LUT_BITS, dtype=np.int64)
        self._lut_len = (1 + (vals >= 1 << 7) + (vals >= 1 << 14)).astype(np.int64)
        lut = np.stack([vals & 0x7F, (vals >> 7) & 0x7F, (vals >> 14) & 0x7F], 1).astype(np.uint8)
        lut[:, 0] |= (self._lut_len > 1).astype(np.uint8) << 7
        lut[:, 1] |= (self._lut_len > 2).astype(np.uint8) << 7
        self._lut = lut
        self._col = np.arange(3)[None, :]
        S, P = max_seq_length, max_predictions_per_seq
        # Prefix of a fixed-payload-length int64 feature: everything before the packed payload.
        self._fixed_int_prefix = {
            name: self._prefix(name, 3, S)
            for name in ("input_mask", "segment_ids", "token_boundary")
        }
        self._weights_prefix = self._prefix("masked_lm_weights", 2, 4 * P)
        self._label_prefix = self._prefix("next_sentence_labels", 3, 1)

    @staticmethod
    def _prefix(name: str, kind_field: int, payload_len: int) -> bytes:
        """Bytes of map entry + Feature + list headers for a payload of `payload_len` bytes."""
        lst = _varint((1 << 3) | 2) + _varint(payload_len)  # XList.value (packed)
        feat = _varint((kind_field << 3) | 2) + _varint(len(lst) + payload_len)
        key = _ld(1, name.encode("utf-8"))
        entry_len = (
            len(key)
            + 1
            + len(_varint(len(feat) + len(lst) + payload_len))
            + len(feat)
            + len(lst)
            + payload_len
        )
        return (
            _varint((1 << 3) | 2)
            + _varint(entry_len)
            + key
            + _varint((2 << 3) | 2)
            + _varint(len(feat) + len(lst) + payload_len)
            + feat
            + lst
        )

    def _varints(self, v: np.ndarray) -> bytes:
        if v.size and int(v.max()) >= (1 << self._LUT_BITS):
            return encode_varints(v)
        return self._lut[v][self._col < self._lut_len[v][:, None]].tobytes()

    def __call__(self, inst: "Instance") -> bytes:
        S, P = self.S, self.P
        n = inst.input_ids.shape[0]
        if n > S:
            raise ValueError(f"instance of length {n} exceeds max_seq_length={S}")
        if inst.input_ids.size and int(inst.input_ids.min()) < 0:
            raise ValueError("negative token id")
        pad = S - n
        zpad = b"\x00" * pad
        fp = self._fixed_int_prefix
        parts = [
            _feature_entry("input_ids", _ld(3, _ld(1, self._varints(inst.input_ids) + zpad))),
            fp["input_mask"],
            b"\x01" * n,
            zpad,
            fp["segment_ids"],
            inst.segment_ids.astype(np.uint8).tobytes(),
            zpad,
            fp["token_boundary"],
            inst.token_boundary.astype(np.uint8).tobytes(),
            zpad,
        ]
        if self.with_masks:
            m = inst.masked_lm_positions.shape[0]
            if m > P:
                raise ValueError(f"{m} predictions exceed max_predictions_per_seq={P}")
            mpad = b"\x00" * (P - m)
            parts += [
                _feature_entry(
                    "masked_lm_positions",
                    _ld(3, _ld(1, self._varints(inst.masked_lm_positions) + mpad)),
                ),
                _feature_entry(
                    "masked_lm_ids", _ld(3, _ld(1, self._varints(inst.masked_lm_ids) + mpad))
                ),
                self._weights_prefix,
                _ONE_F32 * m,
                b"\x00\x00\x00\x00" * (P - m),
            ]
        parts += [self._label_prefix, bytes((inst.next_sentence_label,))]
        body = b"".join(parts)
        return _varint((1 << 3) | 2) + _varint(len(body)) + body  # Example.features


_ONE_F32 = np.float32(1.0).astype("<f4").tobytes()
_SERIALIZERS: dict = {}


def serialize_example(
    inst: Instance, max_seq_length: int, max_predictions_per_seq: int, with_masks: bool = True
) -> bytes:
    """tf.train.Example bytes of a padded instance with the original's features (spec §8.7).

    input_ids/input_mask/segment_ids/token_boundary: int64 [max_seq_length], zero-padded.
    masked_lm_positions/masked_lm_ids: int64 [max_predictions_per_seq], masked_lm_weights: float
    (1.0 real / 0.0 pad) -- omitted when `with_masks` is False. next_sentence_labels: int64 [1].
    """
    key = (max_seq_length, max_predictions_per_seq, with_masks)
    ser = _SERIALIZERS.get(key)
    if ser is None:
        ser = _SERIALIZERS[key] = ExampleSerializer(*key)
    return ser(inst)


# Simple length-prefixed record stream used between worker processes and the writer.
_LEN = struct.Struct("<I")


def write_record_stream(fileobj, records: Sequence[bytes]) -> None:
    for r in records:
        fileobj.write(_LEN.pack(len(r)))
        fileobj.write(r)


def read_record_stream(fileobj) -> Iterator[bytes]:
    while True:
        head = fileobj.read(4)
        if not head:
            return
        (size,) = _LEN.unpack(head)
        yield fileobj.read(size)
