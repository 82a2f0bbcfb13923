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
batches (`InstanceBatch`): only the RNG-ordered decisions run per instance in Python; slicing
and masking are vectorized over the batch (serialization: `example_serialization`).

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
        """From an `albert_tf.data.tokenization.FullTokenizer`."""
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


def concat_ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
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
        """The original's `rng.shuffle(all_documents)`: the draws of shuffling a list that long."""
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
        dst = concat_ranges(np.stack([start + 1, start + la + 2], 1).ravel(), lens)
        src = concat_ranges(np.stack([a0, b0], 1).ravel(), lens)
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
