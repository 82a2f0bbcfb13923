"""ALBERT pretraining instances: documents -> SOP/NSP pairs -> n-gram masks -> TFRecord bytes.

This is the algorithm of the original `create_pretraining_data.py` (spec §8), re-expressed on
integer token ids and flat numpy buffers so that no per-token Python objects are created. The
*Python* RNG (`random.Random`) is consumed in exactly the original's order for everything it
drove (document order, target lengths, a_end, swaps, random documents, truncation sides,
candidate shuffles, 80/10/10 decisions, random replacement ids, instance order). The only
documented change of randomness is the n-gram length draw, which the original took from NumPy's
*unseeded* global RNG (§15 item 14, "fix"): here it comes from a seeded `numpy.random.Generator`
passed in by the caller, so the output is fully reproducible from the seed.

No TensorFlow import: this module runs in lightweight worker processes. Instances are built in
batches (`InstanceBatch`): only the RNG-ordered decisions run per instance in Python; slicing,
masking and serialization to `tf.train.Example` wire format (`serialize_batch`, optionally with
TFRecord framing and CRC-32C) are vectorized over the batch. The bytes equal what
`tf.train.Example.SerializeToString()` and `tf.io.TFRecordWriter` write for the same features.

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


@dataclasses.dataclass
class InstanceBatch:
    """Consecutive instances in flat arrays (K instances, N tokens, M predictions).

    input_ids:            int32 [N]     masked ids; instance k = input_ids[offsets[k]:offsets[k+1]]
    token_boundary:       uint8 [N]
    offsets:              int64 [K + 1]
    a_len:                int64 [K]     length of segment A (segment_ids are 1 from a_len + 2 on)
    next_sentence_labels: uint8 [K]
    mask_offsets:         int64 [K + 1] predictions of instance k = [mask_offsets[k], ..[k + 1])
    masked_lm_positions:  int32 [M]     positions within the instance, sorted per instance
    masked_lm_ids:        int32 [M]     original ids at those positions
    """

    input_ids: np.ndarray
    token_boundary: np.ndarray
    offsets: np.ndarray
    a_len: np.ndarray
    next_sentence_labels: np.ndarray
    mask_offsets: np.ndarray
    masked_lm_positions: np.ndarray
    masked_lm_ids: np.ndarray

    def __len__(self) -> int:
        return int(self.offsets.shape[0] - 1)

    def instances(self) -> list[Instance]:
        """Per-instance views (for tests and small outputs)."""
        out = []
        off, moff = self.offsets.tolist(), self.mask_offsets.tolist()
        for k, (la, label) in enumerate(zip(self.a_len.tolist(), self.next_sentence_labels)):
            n = off[k + 1] - off[k]
            seg = np.zeros(n, np.int32)
            seg[la + 2 :] = 1
            out.append(
                Instance(
                    self.input_ids[off[k] : off[k + 1]],
                    seg,
                    self.token_boundary[off[k] : off[k + 1]].astype(np.int32),
                    self.masked_lm_positions[moff[k] : moff[k + 1]],
                    self.masked_lm_ids[moff[k] : moff[k + 1]],
                    int(label),
                )
            )
        return out

    @classmethod
    def from_instances(cls, insts: Sequence[Instance]) -> "InstanceBatch":
        """Inverse of `instances()`. Segment ids must be 0 for [CLS] A [SEP] and 1 for B [SEP]."""
        a_len = []
        for i in insts:
            seg = np.asarray(i.segment_ids)
            la = int((seg == 0).sum()) - 2
            if not np.array_equal(seg, np.arange(seg.shape[0]) >= la + 2):
                raise ValueError("segment_ids must be 0 for [CLS] A [SEP], then 1 for B [SEP]")
            a_len.append(la)

        def cat(arrays, dtype):
            return np.concatenate([np.asarray(x, dtype) for x in arrays] or [np.zeros(0, dtype)])

        return cls(
            input_ids=cat([i.input_ids for i in insts], np.int32),
            token_boundary=cat([i.token_boundary for i in insts], np.uint8),
            offsets=np.concatenate(
                [[0], np.cumsum([len(i.input_ids) for i in insts], dtype=np.int64)]
            ),
            a_len=np.asarray(a_len, np.int64),
            next_sentence_labels=np.asarray([i.next_sentence_label for i in insts], np.uint8),
            mask_offsets=np.concatenate(
                [[0], np.cumsum([len(i.masked_lm_ids) for i in insts], dtype=np.int64)]
            ),
            masked_lm_positions=cat([i.masked_lm_positions for i in insts], np.int32),
            masked_lm_ids=cat([i.masked_lm_ids for i in insts], np.int32),
        )


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenation of the ranges [starts[k], starts[k] + lens[k]). int64 [lens.sum()]."""
    total = int(lens.sum())
    excl = np.cumsum(lens) - lens
    return np.repeat(starts - excl, lens) + np.arange(total)


def shuffle_like_random(x: list, rng: random.Random) -> None:
    """In-place shuffle with exactly the draws and result of `rng.shuffle(x)` (CPython 3.11+
    `Random.shuffle` -> `_randbelow_with_getrandbits`), without its per-element Python calls:
    the candidate shuffles are the builder's hottest loop. The bit count k of `randbelow(i + 1)`
    is constant over i in [2**(k-1) - 1, 2**k - 2], so it is hoisted out of the inner loop."""
    getrandbits = rng.getrandbits
    hi = len(x) - 1
    k = len(x).bit_length()
    while hi > 0:
        lo = max(1, (1 << (k - 1)) - 1)
        for i in range(hi, lo - 1, -1):
            r = getrandbits(k)
            while r > i:
                r = getrandbits(k)
            x[i], x[r] = x[r], x[i]
        hi = lo - 1
        k -= 1


def skip_shuffle(n: int, rng: random.Random) -> None:
    """Consumes the draws of shuffling a list of length `n` (the result would be unused)."""
    getrandbits = rng.getrandbits
    hi = n - 1
    k = n.bit_length()
    while hi > 0:
        lo = max(1, (1 << (k - 1)) - 1)
        for i in range(hi, lo - 1, -1):
            while getrandbits(k) > i:
                pass
        hi = lo - 1
        k -= 1


class _NgramSampler:
    """Draws n-gram lengths from a seeded numpy Generator, in blocks (np `choice` is ~10 µs/call).

    The stream of lengths does not depend on the block size; `draw` and iteration share it.
    """

    def __init__(self, np_rng: np.random.Generator, probs: np.ndarray, block: int = 4096):
        self._rng = np_rng
        self._cdf = np.cumsum(probs)
        self._cdf[-1] = 1.0
        self._block = block
        self._it = self._stream()

    def _stream(self) -> Iterator[int]:
        while True:
            u = self._rng.random(self._block)
            yield from (np.searchsorted(self._cdf, u, side="right") + 1).tolist()

    def __iter__(self) -> Iterator[int]:
        return self._it

    def draw(self) -> int:
        return next(self._it)


class InstanceBuilder:
    """Creates instances from a `Corpus` with the original's algorithm (spec §8.3-8.4).

    rng:    random.Random; consumed in the original's order.
    np_rng: numpy Generator for the n-gram lengths (seeded: §15 item 14 fix).

    The per-instance work that depends on the random stream (segment walk, truncation, candidate
    shuffles, n-gram picks, 80/10/10) is plain Python on ints; everything else (copying the
    token slices, boundaries, applying masks) is done in numpy for a batch of instances at once.
    """

    def __init__(
        self, config: MaskingConfig, vocab: Vocab, rng: random.Random, np_rng: np.random.Generator
    ):
        config.validate()
        self.config = config
        self.vocab = vocab
        self.rng = rng
        self._ngram = _NgramSampler(np_rng, config.ngram_probs())

    def document_order(self, corpus: Corpus) -> list[int]:
        """The original's `rng.shuffle(all_documents)`: same draws as shuffling a list of that size."""
        order = list(range(corpus.num_documents))
        shuffle_like_random(order, self.rng)
        return order

    def create_instances(self, corpus: Corpus, dupe_factor: int) -> list[Instance]:
        """The original's `create_training_instances` for one unit: doc shuffle, passes, shuffle."""
        order = self.document_order(corpus)
        instances = [
            inst
            for batch in self.iter_batches(corpus, order, dupe_factor)
            for inst in batch.instances()
        ]
        shuffle_like_random(instances, self.rng)
        return instances

    def iter_batches(
        self, corpus: Corpus, order: Sequence[int], passes: int = 1, batch_size: int = 2048
    ) -> Iterator[InstanceBatch]:
        """`passes` dupe passes over the documents in `order`: all instances in creation order
        (not shuffled), cut into batches of about `batch_size` instances (whole documents)."""
        cfg, v = self.config, self.vocab
        tokens = corpus.tokens
        rng = self.rng
        rand = rng.random
        getrandbits = rng.getrandbits
        gnext = iter(self._ngram).__next__
        seg_off = corpus.seg_offsets.tolist()
        doc_off = corpus.doc_offsets.tolist()
        num_docs = len(order)
        max_num_tokens = cfg.max_seq_length - 3
        short_prob = cfg.short_seq_prob
        nsp = cfg.random_next_sentence
        do_mask = cfg.do_masking and cfg.masked_lm_prob > 0
        wwm = cfg.do_whole_word_mask
        # The original's num_to_predict for every sequence length.
        num_to_predict = [
            min(cfg.max_predictions_per_seq, max(1, int(round(n * cfg.masked_lm_prob))))
            for n in range(cfg.max_seq_length + 1)
        ]
        mask_id = v.mask_id
        random_ids = v.random_ids.tolist()
        vsize = len(random_ids)
        vbits = vsize.bit_length()
        # The word starts of a side of an instance are a slice of the corpus' start positions
        # (sp), found from the number of start pieces before each position (cs).
        is_start = v.is_start[tokens]
        idx_t = np.int32 if tokens.shape[0] < 2**31 - 1 else np.int64
        cs = memoryview(np.concatenate([[0], np.cumsum(is_start, dtype=idx_t)]).astype(idx_t))
        sp = np.flatnonzero(is_start).astype(idx_t)

        def randbelow(n):  # random.Random._randbelow_with_getrandbits
            k = n.bit_length()
            r = getrandbits(k)
            while r >= n:
                r = getrandbits(k)
            return r

        # Per instance: INST gets (a0, la, b0, lb, label), MCNT the number of predictions; per
        # prediction: MCAND its candidate index (0..la+lb-1), MREP its replacement id (-1: keep).
        INST, MCNT, MCAND, MREP = [], [], [], []
        inst, mcand, mrep = INST.extend, MCAND.extend, MREP.append

        def mask(a0, la, b0, lb):
            """One instance's n-gram masking; appends its picks to MCNT/MCAND/MREP."""
            ntp = num_to_predict[la + lb + 3]
            if wwm:
                # Candidate index of the first piece of every word, then the end. Candidates are
                # A then B (the middle [SEP] is skipped, so a continuation piece at the start of B
                # extends A's last word, §15 item 16); the first candidate always opens a word.
                starts = [0]
                starts += (sp[cs[a0 + 1] : cs[a0 + la]] - a0).tolist()
                starts += (sp[cs[b0] : cs[b0 + lb]] + (la - b0)).tolist()
                nw = len(starts)
                starts.append(la + lb)
            else:
                nw = la + lb
                starts = range(nw + 1)
            order = list(range(nw))
            shuffle_like_random(order, rng)  # the original's rng.shuffle(ngram_indexes)
            covered = bytearray(nw)  # by word: spans are whole words
            picked = 0
            for j in order:
                if picked >= ntp:
                    break
                g = gnext()
                # The g-gram starting at word j, clipped at the end; shorter if it is too long.
                c0 = starts[j]
                while True:
                    j1 = j + g if j + g < nw else nw
                    c1 = starts[j1]
                    g -= 1
                    if picked + c1 - c0 <= ntp or g == 0:
                        break
                if picked + c1 - c0 > ntp or covered.find(1, j, j1) >= 0:
                    continue
                covered[j:j1] = b"\x01" * (j1 - j)
                mcand(range(c0, c1))
                for _ in range(c1 - c0):
                    if rand() < 0.8:
                        mrep(mask_id)
                    elif rand() < 0.5:
                        mrep(-1)  # keep the original token
                    else:
                        r = getrandbits(vbits)
                        while r >= vsize:
                            r = getrandbits(vbits)
                        mrep(random_ids[r])
                picked += c1 - c0
            # The original shuffles the candidates again (for permutation targets, unused here);
            # the draws are consumed all the same.
            skip_shuffle(nw, rng)
            MCNT.append(picked)

        for _ in range(passes):
            for k in range(num_docs):
                doc = order[k]
                first, last = doc_off[doc], doc_off[doc + 1]  # segment range of this document
                num_segs = last - first
                target = max_num_tokens
                if rand() < short_prob:
                    target = 2 + randbelow(max_num_tokens - 1)
                chunk_start = 0  # first segment (global index) of the current chunk
                chunk_n = 0
                i = 0
                while i < num_segs:
                    s = first + i
                    if chunk_n == 0:
                        chunk_start = s
                    chunk_n += 1
                    if i == num_segs - 1 or seg_off[s + 1] - seg_off[chunk_start] >= target:
                        a_end = 1 + randbelow(chunk_n - 1) if chunk_n >= 2 else 1
                        a0 = seg_off[chunk_start]
                        a1 = seg_off[chunk_start + a_end]
                        if chunk_n == 1 or (nsp and rand() < 0.5):
                            label = 1
                            target_b = target - (a1 - a0)
                            rand_k = 0
                            for _ in range(10):
                                rand_k = randbelow(num_docs)
                                if rand_k != k:
                                    break
                            rdoc = order[rand_k]
                            rfirst, rlast = doc_off[rdoc], doc_off[rdoc + 1]
                            j = rfirst + randbelow(rlast - rfirst)
                            b0 = b1 = seg_off[j]
                            while j < rlast:
                                b1 = seg_off[j + 1]
                                if b1 - b0 >= target_b:
                                    break
                                j += 1
                            i -= chunk_n - a_end  # unused chunk segments go back to the walk
                        elif not nsp and rand() < 0.5:
                            label = 1
                            a0, a1, b0, b1 = a1, seg_off[chunk_start + chunk_n], a0, a1  # swap
                        else:
                            label = 0
                            b0, b1 = a1, seg_off[chunk_start + chunk_n]
                        # The original's truncate_seq_pair: one draw per removed token.
                        while (a1 - a0) + (b1 - b0) > max_num_tokens:
                            if (a1 - a0) > (b1 - b0):
                                if rand() < 0.5:
                                    a0 += 1
                                else:
                                    a1 -= 1
                            elif rand() < 0.5:
                                b0 += 1
                            else:
                                b1 -= 1
                        inst((a0, a1 - a0, b0, b1 - b0, label))
                        if do_mask:
                            mask(a0, a1 - a0, b0, b1 - b0)
                        chunk_n = 0
                    i += 1
                if len(INST) >= 5 * batch_size:
                    yield self._assemble(tokens, is_start, INST, MCNT, MCAND, MREP)
                    for lst in (INST, MCNT, MCAND, MREP):
                        lst.clear()
        if INST:
            yield self._assemble(tokens, is_start, INST, MCNT, MCAND, MREP)

    def _assemble(self, tokens, is_start, INST, MCNT, MCAND, MREP) -> InstanceBatch:
        """Instances as [CLS] tokens[a0:a0+la] [SEP] tokens[b0:b0+lb] [SEP] with masks applied."""
        v = self.vocab
        a0, la, b0, lb, label = np.asarray(INST, np.int64).reshape(-1, 5).T
        if la.min() < 1 or lb.min() < 1:
            raise AssertionError("empty segment after truncation")  # cannot happen
        K = la.shape[0]
        n = la + lb + 3
        offsets = np.zeros(K + 1, np.int64)
        np.cumsum(n, out=offsets[1:])
        start = offsets[:-1]
        # A and B slices interleaved per instance, in output order.
        lens = np.stack([la, lb], 1).ravel()
        dst = _ranges(np.stack([start + 1, start + la + 2], 1).ravel(), lens)
        src = _ranges(np.stack([a0, b0], 1).ravel(), lens)
        ids = np.empty(int(offsets[-1]), np.int32)
        boundary = np.ones(ids.shape[0], np.uint8)  # specials are boundaries
        ids[dst] = tokens[src]
        boundary[dst] = is_start[src]
        ids[start] = v.cls_id
        ids[start + la + 1] = v.sep_id
        ids[offsets[1:] - 1] = v.sep_id
        cnt = np.asarray(MCNT, np.int64) if MCNT else np.zeros(K, np.int64)
        mask_offsets = np.zeros(K + 1, np.int64)
        np.cumsum(cnt, out=mask_offsets[1:])
        # Candidate c is position c + 1 in A and c + 2 in B (after the middle [SEP]).
        cand = np.asarray(MCAND, np.int64)
        pos = cand + 1 + (cand >= np.repeat(la, cnt))
        rep = np.asarray(MREP, np.int64)
        # Each instance's predictions sorted by position (global positions keep instances apart).
        srt = np.argsort(pos + np.repeat(start, cnt), kind="stable")
        pos, rep = pos[srt], rep[srt]
        at = pos + np.repeat(start, cnt)
        labels = ids[at]
        sel = rep >= 0
        ids[at[sel]] = rep[sel]
        return InstanceBatch(
            input_ids=ids,
            token_boundary=boundary,
            offsets=offsets,
            a_len=la,
            next_sentence_labels=label.astype(np.uint8),
            mask_offsets=mask_offsets,
            masked_lm_positions=pos.astype(np.int32),
            masked_lm_ids=labels,
        )


# ---------------------------------------------------------------------------------------------
# Serialization: tf.train.Example wire format (and TFRecord framing) without protobuf objects,
# for a whole batch at once.
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


def _vlen(x: np.ndarray) -> np.ndarray:
    """Byte count of the varints of non-negative ints. int64 [N]."""
    x = np.asarray(x)
    n = np.ones(x.shape, np.int64)
    if x.size:
        for g in range(1, (int(x.max()).bit_length() + 6) // 7):
            n += x >= (1 << (7 * g))
    return n


def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varints of non-negative ints [N], concatenated.

    -> (bytes uint8 [B], byte count per value int64 [N])."""
    v = np.asarray(values)
    if v.dtype.kind not in "iu":
        v = v.astype(np.int64)
    if v.size and v.min() < 0:
        raise ValueError("negative values cannot be written as varints here")
    nbytes = _vlen(v)
    width = int(nbytes.max(initial=1))
    at = np.cumsum(nbytes) - nbytes
    out = np.empty(int(nbytes.sum()) + width, np.uint8)
    # Every value writes all G byte slots, highest first: a slot past a value's last byte is
    # overwritten later by a lower slot of a following value (or lies in the cut-off tail).
    for g in range(width - 1, -1, -1):
        b = (v >> (7 * g)).astype(np.uint8) & np.uint8(0x7F)
        b |= (nbytes > g + 1).view(np.uint8) << np.uint8(7)  # continuation bit
        out[at + g] = b
    out = out[: out.shape[0] - width]
    return out, nbytes


def _fixed_prefix(name: str, kind_field: int, payload_len: int) -> bytes:
    """Map entry + Feature + list headers of a feature whose packed payload has a fixed length."""
    lst = _varint((1 << 3) | 2) + _varint(payload_len)  # XList.value (packed)
    feat = _varint((kind_field << 3) | 2) + _varint(len(lst) + payload_len)
    key = _varint((1 << 3) | 2) + _varint(len(name)) + name.encode("utf-8")
    inner = len(feat) + len(lst) + payload_len
    entry = key + _varint((2 << 3) | 2) + _varint(inner)
    return _varint((1 << 3) | 2) + _varint(len(entry) + inner) + entry + feat + lst


class _Crc32c:
    """CRC-32C (Castagnoli, as in TFRecord framing) of many records at once, in numpy.

    The CRC is affine in the message bits: crc(M) = zeros[len(M)] ^ XOR_i T[e_i][M[i]], where
    e_i is the number of bytes after byte i and T[e][b] is the CRC (init 0, no final xor) of b
    followed by e zero bytes. Zero bytes -- most of a padded example -- contribute nothing, and
    runs of a constant byte cost O(1) through prefix XORs of a column of T.
    """

    _POLY = 0x82F63B78
    MAX_CONST = 64  # longest constant piece (feature headers)

    def __init__(self):
        t = np.arange(256, dtype=np.uint32)
        for _ in range(8):
            t = np.where(t & 1, (t >> 1) ^ np.uint32(self._POLY), t >> 1).astype(np.uint32)
        self.byte_table = t
        self.rows = 0
        self._consts: dict = {}
        self.grow(1024)

    def grow(self, rows: int) -> None:
        """Makes the tables cover messages of at least `rows` bytes."""
        if rows <= self.rows:
            return
        rows = max(rows, 2 * self.rows)
        t = self.byte_table
        tab = np.empty((rows + self.MAX_CONST + 4, 256), np.uint32)
        tab[0] = t
        for e in range(1, 4):  # one zero byte: c -> t[c & 0xFF] ^ (c >> 8)
            tab[e] = t[tab[e - 1] & 0xFF] ^ (tab[e - 1] >> 8)
        # Doubling: n more zero bytes map c to XOR_j T[n - 1 - j][byte j of c] (linearity).
        n = 4
        while n < tab.shape[0]:
            src = tab[: min(n, tab.shape[0] - n)]
            out = tab[n - 1][src & 0xFF]
            for j in range(1, 4):
                out ^= tab[n - 1 - j][(src >> (8 * j)) & 0xFF]
            tab[n : n + src.shape[0]] = out
            n += src.shape[0]
        self.table = tab
        self.flat = tab.ravel()
        # CRC of L zero bytes: the register 0xFFFFFFFF shifted by L zero bytes, inverted.
        zeros = np.empty(rows + 1, np.uint32)
        c = 0xFFFFFFFF
        for n in range(4):
            zeros[n] = c ^ 0xFFFFFFFF
            c = int(t[c & 0xFF]) ^ (c >> 8)
        zeros[4:] = ~(
            tab[3:rows, 0xFF]
            ^ tab[2 : rows - 1, 0xFF]
            ^ tab[1 : rows - 2, 0xFF]
            ^ tab[: rows - 3, 0xFF]
        )
        self.zeros = zeros
        # ones[x] = XOR of T[y][1] for y < x: a run of 0x01 bytes whose last byte has e bytes
        # after it and length l contributes ones[e + l] ^ ones[e].
        self.ones = np.concatenate([[0], np.bitwise_xor.accumulate(tab[:, 1])]).astype(np.uint32)
        # A float32 1.0 (00 00 80 3f) whose last byte is at e contributes f[e]; floats4[e] =
        # XOR of f[e + 4i], i >= 0, so m floats ending at e contribute floats4[e] ^ floats4[e+4m].
        f = np.zeros(rows + 8 * 4, np.uint32)
        f[: rows + 3] = tab[: rows + 3, 0x3F] ^ tab[1 : rows + 4, 0x80]
        for r in range(4):
            f[r::4] = np.bitwise_xor.accumulate(f[r::4][::-1])[::-1]
        self.floats4 = f
        self.rows = rows
        self._consts = {}

    def const(self, data: bytes) -> np.ndarray:
        """c[e]: contribution of `data` whose last byte has e bytes after it. uint32 [rows]."""
        c = self._consts.get(data)
        if c is None:
            if len(data) > self.MAX_CONST:
                raise ValueError(f"constant piece of {len(data)} bytes")
            c = np.zeros(self.rows, np.uint32)
            for j, b in enumerate(data):
                if b:
                    s = len(data) - 1 - j
                    c ^= self.table[s : s + self.rows, b]
            self._consts[data] = c
        return c

    def scattered(self, e: np.ndarray, values: np.ndarray, lens: np.ndarray) -> np.ndarray:
        """XOR of T[e][value] per segment: values/e flat [sum(lens)], lens [K] -> uint32 [K]."""
        contrib = self.flat[(e << 8) | values]
        acc = np.zeros(contrib.shape[0] + 1, np.uint32)
        np.bitwise_xor.accumulate(contrib, out=acc[1:])
        ends = np.cumsum(lens)
        return acc[ends] ^ acc[ends - lens]

    @staticmethod
    def mask(crc: np.ndarray) -> np.ndarray:
        """TFRecord's masked CRC."""
        crc = crc.astype(np.uint32)
        return ((crc >> 15) | (crc << 17)) + np.uint32(0xA282EAD8)


_CRC: list = []


def _crc() -> _Crc32c:
    if not _CRC:
        _CRC.append(_Crc32c())
    return _CRC[0]


class _RecordLayout:
    """Builds K records of varying length in one zero-initialized uint8 buffer.

    Pieces are appended in record order; each is zeros, a constant, a run of one byte value, or
    per-record content from a flat source. `finish` places them and computes the CRC-32C of every
    record when `tfrecord` (then the buffer holds TFRecord-framed records).
    """

    def __init__(self, num: int, tfrecord: bool):
        self.K = num
        self.tfrecord = tfrecord
        self.pieces: list = []  # (kind, lens int64 [K], payload)

    def _add(self, kind, lens, payload=None):
        self.pieces.append((kind, np.broadcast_to(np.asarray(lens, np.int64), (self.K,)), payload))

    def zeros(self, lens):
        self._add("zeros", lens)

    def const(self, data: bytes):
        self._add("const", len(data), data)

    def ones(self, lens):
        self._add("ones", lens)

    def floats_one(self, count):
        """`count` float32 1.0 values."""
        self._add("floats", 4 * np.asarray(count, np.int64))

    def content(self, flat: np.ndarray, lens):
        """Record k gets the next lens[k] bytes of `flat` (uint8, in record order)."""
        self._add("content", lens, flat)

    def finish(self) -> tuple[np.ndarray, np.ndarray]:
        """-> (buffer uint8 [total], record offsets int64 [K + 1])."""
        K = self.K
        head = 12 if self.tfrecord else 0  # uint64 length + masked CRC of the length
        tail = 4 if self.tfrecord else 0  # masked CRC of the data
        rel = np.zeros(K, np.int64)  # start of the next piece within the data
        starts = []
        for _, lens, _ in self.pieces:
            starts.append(rel.copy())
            rel += lens
        data_len = rel
        offsets = np.zeros(K + 1, np.int64)
        np.cumsum(data_len + head + tail, out=offsets[1:])
        base = offsets[:-1] + head  # absolute start of each record's data
        buf = np.zeros(int(offsets[-1]), np.uint8)
        crc = _crc() if self.tfrecord else None
        if crc is not None:
            crc.grow(int(data_len.max(initial=0)) + 1)
            acc = crc.zeros[data_len].copy()
        for (kind, lens, payload), rstart in zip(self.pieces, starts):
            start = base + rstart
            after = data_len - rstart - lens  # bytes after the piece's last byte
            if kind == "zeros":
                continue
            if kind == "const":
                n = len(payload)
                buf[start[:, None] + np.arange(n)] = np.frombuffer(payload, np.uint8)
                if crc is not None:
                    acc ^= crc.const(payload)[after]
            elif kind == "ones":
                buf[_ranges(start, lens)] = 1
                if crc is not None:
                    acc ^= crc.ones[after + lens] ^ crc.ones[after]
            elif kind == "floats":
                count = lens // 4
                at = np.repeat(start, count) + 4 * _ranges(np.zeros(K, np.int64), count)
                buf[at + 2] = 0x80  # float32 1.0 = 00 00 80 3f (little-endian)
                buf[at + 3] = 0x3F
                if crc is not None:
                    acc ^= crc.floats4[after] ^ crc.floats4[after + lens]
            else:
                excl = np.cumsum(lens) - lens
                step = np.arange(int(lens.sum()), dtype=np.int32)
                buf[np.repeat(start - excl, lens) + step] = payload
                if crc is not None:
                    # Table row of each byte: bytes after it in its record.
                    e = (
                        np.repeat((base + data_len - 1 - start + excl).astype(np.int32), lens)
                        - step
                    )
                    acc ^= crc.scattered(e, payload, lens)
        if crc is not None:
            hdr = data_len.astype("<u8").view(np.uint8).reshape(K, 8)
            lcrc = crc.zeros[8] ^ np.bitwise_xor.reduce(crc.table[7 - np.arange(8), hdr], axis=1)
            buf[offsets[:-1, None] + np.arange(8)] = hdr
            buf[offsets[:-1, None] + 8 + np.arange(4)] = (
                crc.mask(lcrc).astype("<u4").view(np.uint8).reshape(K, 4)
            )
            buf[(base + data_len)[:, None] + np.arange(4)] = (
                crc.mask(acc).astype("<u4").view(np.uint8).reshape(K, 4)
            )
        return buf, offsets


def _segment_sums(values: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """Sums of values[offsets[k]:offsets[k + 1]]. int64 [K]."""
    c = np.zeros(values.shape[0] + 1, np.int64)
    np.cumsum(values, out=c[1:])
    return c[offsets[1:]] - c[offsets[:-1]]


def _header(num: int, parts: Sequence) -> tuple[np.ndarray, np.ndarray]:
    """Per-record byte strings from constant bytes and varint fields (int arrays [num]).

    -> (bytes of all records concatenated uint8, length per record int64 [num])."""
    pieces = [
        (
            (np.tile(np.frombuffer(p, np.uint8), num), np.full(num, len(p), np.int64))
            if isinstance(p, bytes)
            else _varints(p)
        )
        for p in parts
    ]
    lens = np.stack([n for _, n in pieces], 1)  # [num, parts]
    total = lens.sum(1)
    at = (np.cumsum(total) - total)[:, None] + np.cumsum(lens, 1) - lens
    out = np.empty(int(total.sum()), np.uint8)
    for j, (flat, n) in enumerate(pieces):
        out[_ranges(at[:, j], n)] = flat
    return out, total


def _variable_entry(name: str, payload_len: np.ndarray):
    """Header of a feature map entry whose packed int64 payload has `payload_len` bytes.

    -> (header bytes flat, header lengths [K], total entry lengths [K])."""
    list_len = 1 + _vlen(payload_len) + payload_len  # Int64List
    feat_len = 1 + _vlen(list_len) + list_len  # Feature
    key = b"\x0a" + _varint(len(name)) + name.encode("utf-8")
    entry_len = len(key) + 1 + _vlen(feat_len) + feat_len  # Features.feature map entry
    flat, lens = _header(
        payload_len.shape[0],
        [b"\x0a", entry_len, key + b"\x12", feat_len, b"\x1a", list_len, b"\x0a", payload_len],
    )
    return flat, lens, 1 + _vlen(entry_len) + entry_len


def serialize_batch(
    batch: InstanceBatch,
    max_seq_length: int,
    max_predictions_per_seq: int,
    with_masks: bool = True,
    tfrecord: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """tf.train.Example bytes of every instance of `batch`, padded, with the original's features
    (spec §8.7); with `tfrecord`, each framed as a TFRecord (length, CRC-32C) ready to append
    to a .tfrecord file.

    input_ids/input_mask/segment_ids/token_boundary: int64 [max_seq_length], zero-padded.
    masked_lm_positions/masked_lm_ids: int64 [max_predictions_per_seq], masked_lm_weights: float
    (1.0 real / 0.0 pad) -- omitted when `with_masks` is False. next_sentence_labels: int64 [1].
    Returns (bytes uint8 [total], record offsets int64 [K + 1]).
    """
    S, P = max_seq_length, max_predictions_per_seq
    K = len(batch)
    n = np.diff(batch.offsets)
    if K and n.max() > S:
        raise ValueError(f"instance of length {int(n.max())} exceeds max_seq_length={S}")
    pad = S - n
    ids_bytes, ids_vlen = _varints(batch.input_ids)
    ids_payload = _segment_sums(ids_vlen, batch.offsets) + pad
    ids_head, ids_head_len, ids_entry = _variable_entry("input_ids", ids_payload)
    fixed = {
        name: _fixed_prefix(name, 3, S) for name in ("input_mask", "segment_ids", "token_boundary")
    }
    label_prefix = _fixed_prefix("next_sentence_labels", 3, 1)
    body = ids_entry + sum(len(p) + S for p in fixed.values()) + len(label_prefix) + 1
    if with_masks:
        m = np.diff(batch.mask_offsets)
        if K and m.max() > P:
            raise ValueError(f"{int(m.max())} predictions exceed max_predictions_per_seq={P}")
        masked = []
        for name, values in (
            ("masked_lm_positions", batch.masked_lm_positions),
            ("masked_lm_ids", batch.masked_lm_ids),
        ):
            flat, vlen = _varints(values)
            payload = _segment_sums(vlen, batch.mask_offsets)
            head, head_len, entry = _variable_entry(name, payload + P - m)
            masked.append((head, head_len, flat, payload))
            body = body + entry
        weights_prefix = _fixed_prefix("masked_lm_weights", 2, 4 * P)
        body = body + len(weights_prefix) + 4 * P
    top, top_len = _header(K, [b"\x0a", body])  # Example.features

    out = _RecordLayout(K, tfrecord)
    out.content(top, top_len)
    out.content(ids_head, ids_head_len)
    out.content(ids_bytes, ids_payload - pad)
    out.zeros(pad)
    out.const(fixed["input_mask"])
    out.ones(n)
    out.zeros(pad)
    out.const(fixed["segment_ids"])
    out.zeros(batch.a_len + 2)
    out.ones(n - batch.a_len - 2)
    out.zeros(pad)
    out.const(fixed["token_boundary"])
    out.content(batch.token_boundary, n)
    out.zeros(pad)
    if with_masks:
        for head, head_len, flat, payload in masked:
            out.content(head, head_len)
            out.content(flat, payload)
            out.zeros(P - m)
        out.const(weights_prefix)
        out.floats_one(m)
        out.zeros(4 * (P - m))
    out.const(label_prefix)
    out.content(np.asarray(batch.next_sentence_labels, np.uint8), 1)
    return out.finish()


def serialize_example(
    inst: Instance, max_seq_length: int, max_predictions_per_seq: int, with_masks: bool = True
) -> bytes:
    """tf.train.Example bytes of one padded instance; see `serialize_batch`."""
    batch = InstanceBatch.from_instances([inst])
    return serialize_batch(batch, max_seq_length, max_predictions_per_seq, with_masks)[0].tobytes()
