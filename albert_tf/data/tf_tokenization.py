"""In-graph SentencePiece tokenization (tensorflow-text) that matches `albert_tf.data.tokenization`.

`InGraphTokenizer(spm_model_file, do_lower_case)` maps raw strings to ids inside a TensorFlow graph,
so an exported SavedModel can serve raw text. For every string `s` it yields the same ids as

    tok = FullTokenizer(spm_model_file=..., do_lower_case=...)
    tok.convert_tokens_to_ids(tok.tokenize(preprocess_text(s, lower=do_lower_case)))

The Python semantics are reproduced exactly by building the character classes and the lower-case
table from Python's own `str`/`unicodedata` functions when the tokenizer is constructed:
whitespace (`str.isspace`), combining characters (`unicodedata.combining`), digits
(`str.isdigit`), lower-casing (`str.lower`, including the Greek final-sigma rule). NFKD comes from
ICU (`tensorflow_text.normalize_utf8`). The model proto is held by the tensorflow-text op as a
graph constant, so the tokenizer is tracked and saved with a SavedModel.

Exact Viterbi ties. tensorflow-text's `SentencepieceTokenizer` bundles SentencePiece 0.1.96, whose
unigram Viterbi adds a piece score to a path score in double precision and compares that with the
stored float32 best, while the Python package (0.2.x) adds and compares in float32; both keep the
first candidate on equality. When two segmentations round to the same float32 score (e.g. "0"+"000"
vs "000"+"0" for "0000" in the demo model) the two pick different ones. So segmentation runs in
two stages (`_encode_pieces`):

1. the 0.1.96 op normalizes (its normalizer is the same as 0.2.x's); its pieces, joined, are the
   normalized text, and its unknown pieces give the surfaces of unknown runs;
2. `tensorflow_text.FastSentencepieceTokenizer` runs the Viterbi on that text with a rewritten
   model: identity normalizer, user-defined pieces scored with 0.2.x's length bonus, unused pieces
   dropped. Its Viterbi does the same float32 additions in the same order with the same strict
   comparison as 0.2.x. It charges the unknown penalty per byte rather than per character, so
   every character without a single-character piece is first replaced by one ASCII byte that no
   piece contains; that is exact when every character of every piece has its own piece (checked
   when the tokenizer is built; `exact_ties` says whether the two-stage path is used, and a
   warning names the reason when it is not).

Remaining limit: the Python package (0.2.3 here; 0.2.0 did not) re-centres path scores once their
magnitude exceeds 1e5 (about 10,000 pieces in one string); past that point near-ties may still
resolve differently. Sampling (`encode_pieces(sample=True)`) has no in-graph equivalent.
"""

from __future__ import annotations

import functools
import os
import unicodedata
import warnings

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text
from sentencepiece import sentencepiece_model_pb2

from albert_tf import fileio
from albert_tf.data import tokenization

_UNDERLINE = tokenization.SPIECE_UNDERLINE
_UNDERLINE_BYTES = len(_UNDERLINE.encode("utf-8"))
_SIGMA, _FINAL_SIGMA = "\u03a3", "\u03c2"


def _code_points():
    for cp in range(0x110000):
        if not 0xD800 <= cp < 0xE000:  # surrogates cannot occur in UTF-8 text
            yield cp


def _regex_class(code_points, negate: bool = False) -> str:
    """RE2 character class for a sorted list of code points, compressed into ranges."""
    ranges = []
    for cp in code_points:
        if ranges and cp == ranges[-1][1] + 1:
            ranges[-1][1] = cp
        else:
            ranges.append([cp, cp])
    body = "".join(f"\\x{{{a:x}}}" if a == b else f"\\x{{{a:x}}}-\\x{{{b:x}}}" for a, b in ranges)
    return f"[{'^' if negate else ''}{body}]"


@functools.lru_cache(maxsize=None)
def _python_text_tables() -> dict:
    """Character classes and lower-case table derived from this Python's Unicode database."""
    ws, comb, digit, cased, ignorable, low_k, low_v = [], [], [], [], [], [], []
    for cp in _code_points():
        c = chr(cp)
        if c.isspace():
            ws.append(cp)
        if unicodedata.combining(c):
            comb.append(cp)
        if c.isdigit():
            digit.append(cp)
        low = c.lower()
        if low != c and len(low) == 1:
            # Only U+0130 lower-cases to two characters; NFKD has decomposed it by then.
            low_k.append(cp)
            low_v.append(ord(low))
        # str.lower turns a capital sigma into final sigma after a "cased" letter (optionally
        # followed by "case-ignorable" ones) when no cased letter follows. Probe Python for both
        # properties instead of re-deriving them.
        if (c + _SIGMA).lower()[-1] == _FINAL_SIGMA:
            cased.append(cp)
        elif ("A" + c + _SIGMA).lower()[-1] == _FINAL_SIGMA:
            ignorable.append(cp)
    cased_cls, ignorable_cls = _regex_class(cased), _regex_class(ignorable)
    neither_cls = _regex_class(sorted(cased + ignorable), negate=True)
    return {
        "whitespace": _regex_class(ws),
        "combining": _regex_class(comb),
        "digit_comma_piece": f"(?s).*{_regex_class(digit)},",
        # Group 1: cased (+ignorable) context before Σ; groups 2-3: no cased letter after it.
        "final_sigma": f"({cased_cls}{ignorable_cls}*){_SIGMA}({ignorable_cls}*)({neither_cls}|$)",
        "lower_keys": low_k,
        "lower_values": low_v,
    }


def _sorted_member(table: tf.Tensor, values: tf.Tensor) -> tf.Tensor:
    """Elementwise `values in table` for a sorted, non-empty int32 `table`."""
    idx = tf.minimum(tf.searchsorted(table, values), tf.size(table) - 1)
    return tf.equal(tf.gather(table, idx), values)


def _exact_viterbi_model(proto: bytes):
    """Rewrites a SentencePiece model for the float32 Viterbi of `FastSentencepieceTokenizer`.

    Returns (rewritten proto bytes, sorted code points that have a single-character piece,
    placeholder code point) or, when the rewrite cannot reproduce the Python package exactly,
    a string with the reason.
    """
    model = sentencepiece_model_pb2.ModelProto()
    model.ParseFromString(proto)
    Piece = sentencepiece_model_pb2.ModelProto.SentencePiece
    if model.trainer_spec.model_type != sentencepiece_model_pb2.TrainerSpec.UNIGRAM:
        return "not a unigram model"
    if model.trainer_spec.byte_fallback:
        return "byte fallback is enabled"
    normal = [p.score for p in model.pieces if p.type == Piece.NORMAL]
    # The fast op's unknown penalty is min(0, scores) - 10; SentencePiece uses min(normal) - 10.
    if not normal or min(normal) > 0:
        return "no normal piece with a score <= 0"
    unk_ids = [i for i, p in enumerate(model.pieces) if p.type == Piece.UNKNOWN]
    if len(unk_ids) != 1:
        return "the model does not have exactly one unknown piece"
    matched = [p.piece for p in model.pieces if p.type in (Piece.NORMAL, Piece.USER_DEFINED)]
    single = {p for p in matched if len(p) == 1}
    orphans = sorted({c for p in matched for c in p} - single)
    if orphans:
        # Such a character is unknown on its own but matchable inside a piece, so the per-byte
        # unknown penalty of the fast op cannot be made per-character by substitution.
        return f"pieces contain characters without their own piece: {orphans[:5]!r}"
    placeholder = next((cp for cp in range(1, 128) if chr(cp) not in single), None)
    if placeholder is None:
        return "every ASCII character is a piece"
    for p in model.pieces:
        if p.type == Piece.USER_DEFINED:
            # SentencePiece 0.2.x scores a user-defined match as float(0.1 * (bytes - 1)).
            p.score = float(np.float32(0.1 * (len(p.piece.encode("utf-8")) - 1)))
        elif p.type == Piece.UNUSED:
            p.type = Piece.CONTROL  # never matched in either; the fast converter rejects UNUSED
    model.trainer_spec.unk_id = unk_ids[0]
    spec = model.normalizer_spec
    spec.name = "identity"
    spec.precompiled_charsmap = b""
    spec.add_dummy_prefix = False
    spec.remove_extra_whitespaces = False
    spec.escape_whitespaces = False
    return model.SerializeToString(), sorted(ord(c) for c in single), placeholder


class InGraphTokenizer(tf.Module):
    """Raw strings -> SentencePiece ids in-graph, identical to `FullTokenizer` + `preprocess_text`.

    Args:
      spm_model_file: str. SentencePiece model (e.g. `30k-clean.model`).
      do_lower_case: bool. Lower-case in `preprocess` (the original's `do_lower_case`).
      digit_comma: str. "python3" (default) or "intended": the digit-comma rule of
        `albert_tf.data.tokenization.encode_pieces`.

    Attributes (Python ints): pad_id, unk_id, cls_id, sep_id, mask_id, vocab_size.
    exact_ties: bool, True when float32 ties resolve as in the Python package (see module doc).

    Call: `tokenizer(strings)` with `strings` tf.string [B] returns tf.RaggedTensor int32 [B, (T)].
    """

    def __init__(
        self,
        spm_model_file: str,
        do_lower_case: bool = True,
        digit_comma: str = tokenization.DEFAULT_DIGIT_COMMA,
        name: str | None = None,
    ):
        super().__init__(name=name)
        path = os.fspath(spm_model_file)
        # Validates the file and the special pieces with clear errors, before any graph work.
        py_tok = tokenization.FullTokenizer(
            spm_model_file=path, do_lower_case=do_lower_case, digit_comma=digit_comma
        )
        special = py_tok.special_ids()
        self.pad_id, self.unk_id = special["pad"], special["unk"]
        self.cls_id, self.sep_id, self.mask_id = special["cls"], special["sep"], special["mask"]
        self.vocab_size = py_tok.vocab_size
        self.do_lower_case = bool(do_lower_case)
        self.digit_comma = py_tok.digit_comma
        proto = fileio.read_bytes(path)
        self._sp = tf_text.SentencepieceTokenizer(model=proto, out_type=tf.string)
        exact = _exact_viterbi_model(proto)
        self.exact_ties = not isinstance(exact, str)
        self._fast = None
        if self.exact_ties:
            fast_proto, known, placeholder = exact
            self._fast = tf_text.FastSentencepieceTokenizer(model=fast_proto)
            self._known_cps = tf.constant(known, tf.int32)
            self._placeholder = placeholder
            self._vocab = tf.constant(
                [py_tok.sp_model.IdToPiece(i) for i in range(self.vocab_size)]
            )
        else:
            warnings.warn(
                f"InGraphTokenizer({path!r}): {exact}; using tensorflow-text's "
                "SentencePiece Viterbi, whose ids can differ from FullTokenizer where "
                "two segmentations tie in float32.",
                stacklevel=2,
            )
        tables = _python_text_tables()
        self._ws_re = tables["whitespace"] + "+"
        self._combining_re = tables["combining"]
        self._digit_comma_re = tables["digit_comma_piece"]
        self._final_sigma_re = tables["final_sigma"]
        self._lower_keys = tf.constant(tables["lower_keys"], tf.int32)
        self._lower_values = tf.constant(tables["lower_values"], tf.int32)

    # -- preprocess_text ------------------------------------------------------------------------

    def _lower(self, strings: tf.Tensor) -> tf.Tensor:
        strings = tf.strings.regex_replace(
            strings, self._final_sigma_re, "\\1" + _FINAL_SIGMA + "\\2\\3"
        )
        cps = tf.strings.unicode_decode(strings, "UTF-8", errors="replace")
        flat = cps.flat_values
        idx = tf.searchsorted(self._lower_keys, flat)
        idx = tf.minimum(idx, tf.size(self._lower_keys) - 1)
        found = tf.equal(tf.gather(self._lower_keys, idx), flat)
        lowered = tf.where(found, tf.gather(self._lower_values, idx), flat)
        return tf.strings.unicode_encode(cps.with_flat_values(lowered), "UTF-8")

    def preprocess(self, strings: tf.Tensor) -> tf.Tensor:
        """`preprocess_text(s, remove_space=True, lower=do_lower_case)` on tf.string [B] -> [B]."""
        s = tf.strings.regex_replace(strings, self._ws_re, " ")
        s = tf.strings.regex_replace(s, "^ | $", "")
        s = tf_text.normalize_utf8(s, "NFKD")
        s = tf.strings.regex_replace(s, self._combining_re, "")
        if self.do_lower_case:
            s = self._lower(s)
        return s

    # -- encode_pieces --------------------------------------------------------------------------

    def _encode_pieces(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """`sp_model.EncodeAsPieces` on tf.string [N] -> ragged tf.string [N, (T)], int64 splits."""
        pieces = self._sp.tokenize(strings)
        if self._fast is None:
            return pieces
        # Stage 1 (module doc): the 0.1.96 pieces joined are the normalized text.
        normalized = tf.strings.reduce_join(pieces, axis=1)
        cps = tf.strings.unicode_decode(normalized, "UTF-8")
        flat = cps.flat_values
        # One byte per unknown character, so the fast op charges the unknown penalty once.
        marked = tf.where(_sorted_member(self._known_cps, flat), flat, self._placeholder)
        ids = self._fast.tokenize(tf.strings.unicode_encode(cps.with_flat_values(marked), "UTF-8"))
        ids = ids.with_row_splits_dtype(tf.int64)
        flat_ids = ids.flat_values
        # Unknown runs are the same in both stages (every character of a piece is a piece), so
        # the k-th unknown piece of stage 1 carries the surface of the k-th one of stage 2.
        old = pieces.flat_values
        first = tf.strings.unicode_decode(tf.strings.substr(old, 0, 1, unit="UTF8_CHAR"), "UTF-8")
        unknown = tf.logical_not(_sorted_member(self._known_cps, first.flat_values))
        surfaces = tf.boolean_mask(old, unknown)
        is_unk = tf.equal(flat_ids, self.unk_id)
        n_unk = tf.size(surfaces)
        check = tf.debugging.assert_equal(
            tf.reduce_sum(tf.cast(is_unk, tf.int32)),
            n_unk,
            message="unknown runs differ between the two stages",
        )
        with tf.control_dependencies([check]):
            rank = tf.math.cumsum(tf.cast(is_unk, tf.int32), exclusive=True)
        unk_text = tf.gather(tf.concat([surfaces, [""]], 0), tf.where(is_unk, rank, n_unk))
        return ids.with_flat_values(tf.where(is_unk, unk_text, tf.gather(self._vocab, flat_ids)))

    def _split_digit_comma(self, pieces: tf.Tensor) -> tf.RaggedTensor:
        """Digit-comma rule on flat pieces tf.string [N]; returns ragged [N, (k)] replacements."""
        fires = tf.strings.regex_full_match(pieces, self._digit_comma_re)
        # Re-encode "<piece minus comma, without ▁>"; rows where the rule does not fire get "".
        stripped = tf.strings.regex_replace(
            tf.strings.regex_replace(pieces, ",$", ""), _UNDERLINE, ""
        )
        sub = self._encode_pieces(tf.where(fires, stripped, ""))
        vals = sub.flat_values
        rows = sub.value_rowids()
        if self.digit_comma == "intended":
            # Drop a leading "▁" that the re-encoding added to a piece that had none.
            had_none = tf.logical_not(
                tf.equal(tf.strings.substr(pieces, 0, _UNDERLINE_BYTES), _UNDERLINE)
            )
            first = tf.equal(
                tf.range(tf.size(vals, out_type=tf.int64)), tf.gather(sub.row_starts(), rows)
            )
            strip = (
                first
                & tf.gather(had_none, rows)
                & tf.equal(tf.strings.substr(vals, 0, _UNDERLINE_BYTES), _UNDERLINE)
            )
            vals = tf.where(strip, tf.strings.regex_replace(vals, "^" + _UNDERLINE, ""), vals)
            keep = tf.not_equal(vals, "")
            sub = tf.RaggedTensor.from_value_rowids(
                tf.boolean_mask(vals, keep),
                tf.boolean_mask(rows, keep),
                nrows=tf.size(pieces, out_type=tf.int64),
            )

        def only_where(mask, values):  # ragged [N, (0 or 1)] holding values[i] where mask[i]
            return tf.RaggedTensor.from_row_lengths(
                tf.boolean_mask(values, mask), tf.cast(mask, tf.int64)
            )

        comma = tf.fill(tf.shape(pieces), ",")
        return tf.concat(
            [sub, only_where(fires, comma), only_where(tf.logical_not(fires), pieces)], axis=1
        )

    def tokenize(self, preprocessed: tf.Tensor) -> tf.RaggedTensor:
        """`encode_pieces` on already preprocessed tf.string [B] -> ragged tf.string [B, (T)]."""
        pieces = self._encode_pieces(preprocessed)
        replaced = self._split_digit_comma(pieces.flat_values)
        return pieces.with_flat_values(replaced).merge_dims(1, 2)

    def __call__(self, strings: tf.Tensor) -> tf.RaggedTensor:
        """Raw tf.string [B] -> ragged int32 ids [B, (T)] (no special tokens)."""
        strings = tf.convert_to_tensor(strings, tf.string)
        pieces = self.tokenize(self.preprocess(strings))
        return tf.cast(self._sp.string_to_id(pieces), tf.int32)

    def classifier_features(
        self, text_a: tf.Tensor, text_b: tf.Tensor | None = None, max_seq_length: int = 512
    ) -> dict[str, tf.Tensor]:
        """Raw strings -> `pack_inputs` features (input_ids/input_mask/segment_ids int32 [B, S])."""
        ids_b = None if text_b is None else self(text_b)
        return pack_inputs(self(text_a), ids_b, max_seq_length, self.cls_id, self.sep_id)


def _truncated_lengths(len_a: tf.Tensor, len_b: tf.Tensor, budget: int):
    """Closed form of the original's loop "pop the last token of the longer side (b on ties)
    while len_a + len_b > budget" (docs/original.md §11.3). int64 [B] each."""
    over = len_a + len_b > budget
    half_up = (budget + 1) // 2  # a keeps the extra token: ties pop from b
    new_a = tf.minimum(len_a, tf.maximum(tf.cast(half_up, len_a.dtype), budget - len_b))
    new_a = tf.where(over, new_a, len_a)
    new_b = tf.where(over, budget - new_a, len_b)
    return new_a, new_b


def _first_n(ids: tf.RaggedTensor, n: tf.Tensor) -> tf.RaggedTensor:
    """Keeps the first n[i] items of row i of a ragged [B, (T)] tensor."""
    pos = tf.ragged.range(ids.row_lengths())
    return tf.ragged.boolean_mask(ids, pos < tf.expand_dims(n, 1))


def pack_inputs(
    ids_a: tf.RaggedTensor,
    ids_b: tf.RaggedTensor | None,
    max_seq_length: int,
    cls_id: int,
    sep_id: int,
) -> dict[str, tf.Tensor]:
    """Builds "[CLS] a [SEP] (b [SEP])" features with the original's truncation (§11.3).

    Pairs: while len(a) + len(b) > max_seq_length - 3, the last token of the longer one is dropped
    (b on ties). Single: the first max_seq_length - 2 tokens are kept. Padding uses 0.

    Args:
      ids_a: int ragged [B, (Ta)]. ids_b: int ragged [B, (Tb)] or None.
      max_seq_length: int S. cls_id, sep_id: int.

    Returns:
      dict of int32 [B, S]: input_ids, input_mask, segment_ids.
    """
    ids_a = tf.cast(ids_a, tf.int32)
    batch = ids_a.nrows()
    cls = tf.fill([batch, 1], cls_id)
    sep = tf.fill([batch, 1], sep_id)
    if ids_b is None:
        if max_seq_length < 2:
            raise ValueError(
                f"max_seq_length must be >= 2 for single sequences, got {max_seq_length}"
            )
        a = _first_n(ids_a, tf.minimum(ids_a.row_lengths(), max_seq_length - 2))
        parts, segs = [cls, a, sep], [0, 0, 0]
    else:
        if max_seq_length < 3:
            raise ValueError(f"max_seq_length must be >= 3 for pairs, got {max_seq_length}")
        ids_b = tf.cast(ids_b, tf.int32)
        len_a, len_b = _truncated_lengths(
            ids_a.row_lengths(), ids_b.row_lengths(), max_seq_length - 3
        )
        parts = [cls, _first_n(ids_a, len_a), sep, _first_n(ids_b, len_b), sep]
        segs = [0, 0, 0, 1, 1]
    parts = [p if isinstance(p, tf.RaggedTensor) else tf.RaggedTensor.from_tensor(p) for p in parts]
    ids = tf.concat(parts, axis=1)
    segment = tf.concat([tf.ones_like(p) * s for p, s in zip(parts, segs)], axis=1)
    shape = [None, max_seq_length]
    return {
        "input_ids": ids.to_tensor(0, shape=shape),
        "input_mask": tf.ones_like(ids).to_tensor(0, shape=shape),
        "segment_ids": segment.to_tensor(0, shape=shape),
    }
