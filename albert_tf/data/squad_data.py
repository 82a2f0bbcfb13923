"""SQuAD v1.1 / v2.0 data: JSON examples -> windowed features -> TFRecords (§12.2-12.3).

SentencePiece only, as the original. The paragraph's pieces are mapped back to
characters of the raw paragraph by a banded longest-common-subsequence alignment
of the raw text with the pieces' concatenation ("tok_cat_text": pieces joined,
"▁" as a space), so predicted piece spans can be cut out of the raw text and
gold character offsets can be turned into piece positions. Long paragraphs are
split into overlapping windows of `[CLS] query [SEP] window [SEP]`; every piece
is "owned" (max context) by the window where it has the most context on both
sides. Examples whose alignment fails are dropped with a log line, as the
original's "MISMATCH DETECTED".

Feature TFRecord (names and int64 types as the original): unique_ids scalar;
input_ids, input_mask, segment_ids, p_mask [max_seq_length]; training adds
start_positions, end_positions, is_impossible scalars.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from typing import Iterable, Iterator, Sequence

from albert_tf import fileio
from albert_tf.data import tokenization
from albert_tf.data.example_serialization import example_bytes
from albert_tf.errors import UserError

_logger = logging.getLogger(__name__)

FIRST_UNIQUE_ID = 1000000000
# A window's max-context score: min(left, right context) + this x window length.
_LENGTH_BONUS = 0.01
# The alignment must cover this share of the raw paragraph's characters.
_MIN_ALIGNED_SHARE = 0.8


class SquadDataError(UserError):
    """Malformed SQuAD input, naming the file and the JSON path of the bad field."""


@dataclasses.dataclass
class SquadExample:
    """One question on one paragraph.

    start_position: the answer's first character in `paragraph_text` (training; -1 for
    an impossible question; None when predicting). orig_answer_text: "" when impossible.
    """

    qas_id: str
    question_text: str
    paragraph_text: str
    orig_answer_text: str | None = None
    start_position: int | None = None
    is_impossible: bool = False


@dataclasses.dataclass
class SquadFeature:
    """One window of one example.

    tokens: the pieces of input_ids (before padding). tok_start_to_orig_index /
    tok_end_to_orig_index: for each window piece, its first / last character in the raw
    paragraph. token_is_max_context: {position in tokens: bool} for the window pieces.
    paragraph_len: number of real tokens (the original's name). start_position /
    end_position: answer positions in tokens (training; 0 = [CLS] when the window holds
    no answer). example_index: None for training features, as the original.
    """

    unique_id: int
    example_index: int | None
    doc_span_index: int
    tok_start_to_orig_index: list[int]
    tok_end_to_orig_index: list[int]
    token_is_max_context: dict[int, bool]
    tokens: list[str]
    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    paragraph_len: int
    p_mask: list[int]
    start_position: int | None = None
    end_position: int | None = None
    is_impossible: bool = False


# ---------------------------------------------------------------------------------------
# Reading
# ---------------------------------------------------------------------------------------
def _get(obj, key, where, path, kind):
    if not isinstance(obj, dict):
        raise SquadDataError(f"{path}: {where} is not a JSON object")
    if key not in obj:
        raise SquadDataError(f"{path}: {where} has no {key!r} field")
    value = obj[key]
    if not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise SquadDataError(f"{path}: {where}.{key} is {type(value).__name__}, expected {names}")
    return value


def _load_document(path: str):
    import tensorflow as tf

    if not tf.io.gfile.exists(path):
        raise FileNotFoundError(f"SQuAD file {path} not found")
    if tf.io.gfile.isdir(path):  # TensorFlow's read error would be a traceback
        raise SquadDataError(f"{path}: a directory, expected a SQuAD JSON file")
    fileio.check_input_file(path, path)  # a FIFO would block the read below
    with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise SquadDataError(
            f"{path}: not UTF-8 (byte 0x{data[err.start]:02x} at offset {err.start}, line "
            f"{line}); expected a UTF-8 encoded SQuAD JSON file"
        ) from None
    try:
        # Not pre-scanned for depth as small JSON inputs are (fileio.parse_json): a SQuAD
        # file is large, and only its fixed fields are ever walked.
        return json.loads(text)
    except RecursionError:
        raise SquadDataError(
            f"{path}: JSON nested too deeply for Python's parser; expected a SQuAD JSON file"
        ) from None
    except json.JSONDecodeError as err:
        raise SquadDataError(
            f"{path}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}"
        ) from None


def _questions(document, path):
    """(JSON path of the question, context, question object) of every question."""
    for a, article in enumerate(_get(document, "data", "the top level", path, list)):
        for p, paragraph in enumerate(_get(article, "paragraphs", f"data[{a}]", path, list)):
            where = f"data[{a}].paragraphs[{p}]"
            context = _get(paragraph, "context", where, path, str)
            for q, qa in enumerate(_get(paragraph, "qas", where, path, list)):
                yield f"{where}.qas[{q}]", context, qa


def _impossible(qa, where, path) -> bool:
    """A question's `is_impossible` (a missing one is false): JSON true or false only, as
    the original's truth test would take the string "false" as true."""
    value = qa.get("is_impossible", False)
    if not isinstance(value, bool):
        raise SquadDataError(
            f"{path}: {where} (id {qa.get('id')}): is_impossible is {type(value).__name__}, "
            "expected bool (true or false)"
        )
    return value


def read_squad_examples(path: str, is_training: bool) -> list[SquadExample]:
    """Reads `data[].paragraphs[].{context, qas[].{id, question, answers, is_impossible}}`.

    Training needs exactly one answer per question unless `is_impossible` is true (a
    missing `is_impossible` is false); prediction keeps no answers. A training answer
    whose text differs from the context at `answer_start` is kept as the original keeps
    it (the target is the span of the text's length from `answer_start`); one warning
    gives their number and the first id. Questions to predict need distinct ids (the
    prediction files are keyed by id); training ignores ids.

    Raises:
      FileNotFoundError: the file does not exist.
      SquadDataError: a directory, bytes that are not UTF-8, invalid JSON (with line and
        column), a missing/mistyped field, named by its JSON path, e.g.
        `data[0].paragraphs[3].qas[1].answers`, or a repeated id (prediction).
    """
    examples = []
    mismatched = []
    first_of_id = {}  # prediction: id -> JSON path of its first question
    for qwhere, context, qa in _questions(_load_document(path), path):
        qas_id = _get(qa, "id", qwhere, path, (str, int))
        example = SquadExample(str(qas_id), _get(qa, "question", qwhere, path, str), context)
        impossible = _impossible(qa, qwhere, path)
        if not is_training:
            if example.qas_id in first_of_id:
                raise SquadDataError(
                    f"{path}: {qwhere} repeats the id {example.qas_id} of "
                    f"{first_of_id[example.qas_id]}; expected a distinct id per question "
                    "(predictions.json is keyed by id)"
                )
            first_of_id[example.qas_id] = qwhere
        if is_training:
            answers = _get(qa, "answers", qwhere, path, list)
            if impossible:
                example.start_position, example.orig_answer_text = -1, ""
            elif len(answers) != 1:
                raise SquadDataError(
                    f"{path}: {qwhere} (id {qas_id}) has {len(answers)} answers; "
                    "for training each question needs exactly 1 (or is_impossible)"
                )
            else:
                awhere = f"{qwhere}.answers[0]"
                text = example.orig_answer_text = _get(answers[0], "text", awhere, path, str)
                start = _get(answers[0], "answer_start", awhere, path, int)
                if not (0 <= start and start + len(text) <= len(context)) or not text:
                    raise SquadDataError(
                        f"{path}: {awhere}: answer_start={start} with a "
                        f"{len(text)}-character text does not lie in the context "
                        f"({len(context)} characters)"
                    )
                if context[start : start + len(text)] != text:
                    mismatched.append(example.qas_id)
                example.start_position = start
            example.is_impossible = impossible
        examples.append(example)
    if mismatched:
        _logger.warning(
            "%s: %d training answer(s) differ from the context at answer_start (first: id "
            "%s); kept as the original does: the answer is the context span from "
            "answer_start with the text's length",
            path,
            len(mismatched),
            mismatched[0],
        )
    return examples


def v2_question(path: str) -> str | None:
    """The first question of a SQuAD file that only v2.0 data has, as "id <id>: <why>",
    or None: `is_impossible: true`, or no answers in a file whose other questions have
    some (a v1.1 evaluation scores every question against its answers; a file without
    any answer is only predicted, as a v1.1 test set).

    Raises like `read_squad_examples` on a missing or malformed file.
    """
    questions = [
        (where, qa)
        for where, _, qa in _questions(_load_document(path), path)
        if isinstance(qa, dict)
    ]
    scored = any(qa.get("answers") for _, qa in questions)
    for where, qa in questions:
        if _impossible(qa, where, path):
            return f"id {qa.get('id')}: is_impossible true"
        if scored and not qa.get("answers"):
            return f"id {qa.get('id')}: no answers"
    return None


# ---------------------------------------------------------------------------------------
# Piece / character alignment
# ---------------------------------------------------------------------------------------
@dataclasses.dataclass
class Alignment:
    """Maps between the raw paragraph, tok_cat_text and the pieces.

    orig_to_chartok / chartok_to_orig: aligned character positions (None where the
    characters were not matched). chartok_to_tok: the piece of every tok_cat_text
    character. tok_start_to_orig / tok_end_to_orig: every piece's first / last raw
    character.
    """

    orig_to_chartok: list[int | None]
    chartok_to_orig: list[int | None]
    chartok_to_tok: list[int]
    tok_start_to_orig: list[int]
    tok_end_to_orig: list[int]


def _banded_lcs(raw_chars: Sequence[str], cat_text: str, max_dist: int):
    """The original's banded LCS: row i only computes columns i - max_dist .. i +
    max_dist - 1 (others read as 0). Returns (score of the last cell, back-pointers:
    dict (i, j) -> 0 up / 1 left / 2 diagonal match)."""
    n, m = len(raw_chars), len(cat_text)
    width = 2 * max_dist
    previous: list[float] = []  # row i - 1, indexed by j - (i - 1 - max_dist)
    back: dict[tuple[int, int], int] = {}
    row: list[float] = []
    for i in range(n):
        low = i - max_dist
        row = [0.0] * width

        def above(j):  # f[i - 1, j]; 0 outside the previous row's band
            k = j - (low - 1)
            return previous[k] if i > 0 and 0 <= k < width else 0.0

        for k in range(width):
            j = low + k
            if j < 0 or j >= m:
                continue
            value = 0.0
            if i > 0:
                back[(i, j)] = 0
                value = above(j)
            if j > 0 and k > 0 and row[k - 1] > value:
                back[(i, j)] = 1
                value = row[k - 1]
            diagonal = above(j - 1) if i > 0 and j > 0 else 0.0
            if raw_chars[i] == cat_text[j] and diagonal + 1 > value:
                back[(i, j)] = 2
                value = diagonal + 1
            row[k] = value
        previous = row
    last = (m - 1) - (n - 1 - max_dist)
    score = row[last] if n and 0 <= last < width else 0.0
    return score, back


def _convert_index(
    index: Sequence[int | None], pos: int, length: int | None = None, is_start: bool = True
) -> int:
    """index[pos], or for an unaligned position a neighbour-based guess (§12.3 step 4)."""
    if index[pos] is not None:
        return index[pos]
    n = len(index)
    rear = pos
    while rear < n - 1 and index[rear] is None:
        rear += 1
    front = pos
    while front > 0 and index[front] is None:
        front -= 1
    if index[front] is None and index[rear] is None:
        raise ValueError("no aligned position to convert from")
    if index[front] is None:
        if index[rear] >= 1:
            return 0 if is_start else index[rear] - 1
        return index[rear]
    if index[rear] is None:
        if length is not None and index[front] < length - 1:
            return index[front] + 1 if is_start else length - 1
        return index[front]
    if index[rear] > index[front] + 1:
        return index[front] + 1 if is_start else index[rear] - 1
    return index[rear] if is_start else index[front]


def align_pieces(
    paragraph_text: str, pieces: Sequence[str], do_lower_case: bool
) -> Alignment | None:
    """Aligns `pieces` (of the preprocessed paragraph) with the raw `paragraph_text`.

    Returns None when the alignment covers less than 80% of the raw characters (the
    original's "MISMATCH DETECTED": the example is dropped).
    """
    chartok_to_tok, tok_start_to_chartok, tok_end_to_chartok = [], [], []
    count = 0
    for i, piece in enumerate(pieces):
        text = piece.replace(tokenization.SPIECE_UNDERLINE, " ")
        chartok_to_tok.extend([i] * len(text))
        tok_start_to_chartok.append(count)
        count += len(text)
        tok_end_to_chartok.append(count - 1)
    cat_text = "".join(pieces).replace(tokenization.SPIECE_UNDERLINE, " ")
    n, m = len(paragraph_text), len(cat_text)
    if n == 0 or m == 0:
        return None
    # A raw character matches when it normalizes to exactly the cat character.
    raw_chars = [
        tokenization.preprocess_text(c, lower=do_lower_case, remove_space=False)
        for c in paragraph_text
    ]
    max_dist = abs(n - m) + 5
    for _ in range(2):
        score, back = _banded_lcs(raw_chars, cat_text, max_dist)
        if score > _MIN_ALIGNED_SHARE * n:
            break
        max_dist *= 2

    orig_to_chartok: list[int | None] = [None] * n
    chartok_to_orig: list[int | None] = [None] * m
    i, j = n - 1, m - 1
    while i >= 0 and j >= 0 and (i, j) in back:
        step = back[(i, j)]
        if step == 2:
            orig_to_chartok[i], chartok_to_orig[j] = j, i
            i, j = i - 1, j - 1
        elif step == 1:
            j -= 1
        else:
            i -= 1
    if all(v is None for v in orig_to_chartok) or score < _MIN_ALIGNED_SHARE * n:
        return None
    starts = [_convert_index(chartok_to_orig, c, n, is_start=True) for c in tok_start_to_chartok]
    ends = [_convert_index(chartok_to_orig, c, n, is_start=False) for c in tok_end_to_chartok]
    return Alignment(orig_to_chartok, chartok_to_orig, chartok_to_tok, starts, ends)


# ---------------------------------------------------------------------------------------
# Windows and features
# ---------------------------------------------------------------------------------------
def doc_spans(num_tokens: int, max_tokens: int, doc_stride: int) -> list[tuple[int, int]]:
    """Window (start, length) list: starts advance by min(length, doc_stride) until a
    window reaches the end."""
    spans, start = [], 0
    while start < num_tokens:
        length = min(num_tokens - start, max_tokens)
        spans.append((start, length))
        if start + length == num_tokens:
            break
        start += min(length, doc_stride)
    return spans


def max_context_span(spans: Sequence[tuple[int, int]], position: int) -> int | None:
    """Index of the window where `position` has the largest min(left, right) context
    (+0.01 x window length; first on ties)."""
    best, best_score = None, None
    for index, (start, length) in enumerate(spans):
        end = start + length - 1
        if not start <= position <= end:
            continue
        score = min(position - start, end - position) + _LENGTH_BONUS * length
        if best_score is None or score > best_score:
            best, best_score = index, score
    return best


def convert_examples_to_features(
    examples: Sequence[SquadExample],
    tokenizer,
    max_seq_length: int,
    doc_stride: int,
    max_query_length: int,
    is_training: bool,
) -> Iterator[SquadFeature]:
    """Yields the features of `examples` (unique ids from 1000000000, in order).

    `tokenizer`: a SentencePiece `tokenization.FullTokenizer` (its do_lower_case and
    digit_comma apply). Windows of training examples that do not hold the answer
    are kept with start = end = 0 and is_impossible (v1 as well, as the original).
    """
    sp = getattr(tokenizer, "sp_model", None)
    if sp is None:
        raise ValueError("SQuAD features need a SentencePiece tokenizer (--spm_model_file)")
    if max_seq_length <= max_query_length + 3:
        raise ValueError(
            f"max_seq_length={max_seq_length} must exceed max_query_length={max_query_length} + 3"
        )
    lower, digit_comma = tokenizer.do_lower_case, tokenizer.digit_comma
    cls_id, sep_id = sp.PieceToId("[CLS]"), sp.PieceToId("[SEP]")
    unique_id = FIRST_UNIQUE_ID
    # Questions on one paragraph come together: align each paragraph once.
    cached_text, pieces, alignment = None, [], None
    dropped = 0
    for example_index, example in enumerate(examples):
        query = tokenization.encode_ids(
            sp,
            tokenization.preprocess_text(example.question_text, lower=lower),
            digit_comma=digit_comma,
        )[:max_query_length]
        if example.paragraph_text != cached_text:
            cached_text = example.paragraph_text
            pieces = tokenization.encode_pieces(
                sp, tokenization.preprocess_text(cached_text, lower=lower), digit_comma=digit_comma
            )
            alignment = align_pieces(cached_text, pieces, lower)
        if alignment is None:
            dropped += 1
            _logger.info(
                "example %s: pieces do not align with the paragraph; dropped "
                "(the original's MISMATCH DETECTED)",
                example.qas_id,
            )
            continue

        answer = None
        if is_training and example.is_impossible:
            answer = (0, 0)
        elif is_training:
            end_char = example.start_position + len(example.orig_answer_text) - 1
            start_cat = _convert_index(
                alignment.orig_to_chartok, example.start_position, is_start=True
            )
            end_cat = _convert_index(alignment.orig_to_chartok, end_char, is_start=False)
            answer = (alignment.chartok_to_tok[start_cat], alignment.chartok_to_tok[end_cat])
            if answer[0] > answer[1]:  # the original asserts here
                dropped += 1
                _logger.info(
                    "example %s: the answer maps to pieces %d > %d; dropped",
                    example.qas_id,
                    *answer,
                )
                continue

        doc_ids = [sp.PieceToId(p) for p in pieces]
        spans = doc_spans(len(doc_ids), max_seq_length - len(query) - 3, doc_stride)
        for span_index, (start, length) in enumerate(spans):
            input_ids = [cls_id, *query, sep_id]
            segment_ids = [0] * len(input_ids)
            p_mask = [0] + [1] * (len(query) + 1)
            max_context = {}
            for k in range(start, start + length):
                max_context[len(input_ids)] = max_context_span(spans, k) == span_index
                input_ids.append(doc_ids[k])
            input_ids.append(sep_id)
            segment_ids += [1] * (length + 1)
            p_mask += [0] * length + [1]
            real = len(input_ids)
            pad = max_seq_length - real
            feature = SquadFeature(
                unique_id=unique_id,
                example_index=None if is_training else example_index,
                doc_span_index=span_index,
                tok_start_to_orig_index=alignment.tok_start_to_orig[start : start + length],
                tok_end_to_orig_index=alignment.tok_end_to_orig[start : start + length],
                token_is_max_context=max_context,
                tokens=[sp.IdToPiece(t) for t in input_ids],
                input_ids=input_ids + [0] * pad,
                input_mask=[1] * real + [0] * pad,
                segment_ids=segment_ids + [0] * pad,
                paragraph_len=real,
                p_mask=p_mask + [1] * pad,
            )
            if is_training:
                impossible = example.is_impossible
                positions = (0, 0)
                if not impossible:
                    if start <= answer[0] and answer[1] <= start + length - 1:
                        offset = len(query) + 2 - start
                        positions = (answer[0] + offset, answer[1] + offset)
                    else:
                        impossible = True
                feature.start_position, feature.end_position = positions
                feature.is_impossible = impossible
            yield feature
            unique_id += 1
    if dropped:
        _logger.warning(
            "%d of %d examples dropped (see the log lines above)", dropped, len(examples)
        )


# ---------------------------------------------------------------------------------------
# TFRecords
# ---------------------------------------------------------------------------------------
def feature_spec(seq_length: int, is_training: bool, with_p_mask: bool = True) -> dict:
    """tf.io.parse_single_example spec of the feature TFRecords."""
    import tensorflow as tf

    spec = {"unique_ids": tf.io.FixedLenFeature([], tf.int64)}
    for name in ("input_ids", "input_mask", "segment_ids") + (("p_mask",) if with_p_mask else ()):
        spec[name] = tf.io.FixedLenFeature([seq_length], tf.int64)
    if is_training:
        for name in ("start_positions", "end_positions", "is_impossible"):
            spec[name] = tf.io.FixedLenFeature([], tf.int64)
    return spec


def _to_tf_example(feature: SquadFeature, is_training: bool):
    import tensorflow as tf

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    fields = {
        "unique_ids": ints([feature.unique_id]),
        "input_ids": ints(feature.input_ids),
        "input_mask": ints(feature.input_mask),
        "segment_ids": ints(feature.segment_ids),
        "p_mask": ints(feature.p_mask),
    }
    if is_training:
        fields["start_positions"] = ints([feature.start_position])
        fields["end_positions"] = ints([feature.end_position])
        fields["is_impossible"] = ints([int(feature.is_impossible)])
    return tf.train.Example(features=tf.train.Features(feature=fields))


def write_features(
    features: Iterable[SquadFeature], output_file: str, is_training: bool
) -> list[SquadFeature]:
    """Writes features to a TFRecord file (temporary name, then renamed); returns them
    (prediction needs them again for post-processing)."""
    import tensorflow as tf

    written = []
    with fileio.atomic_path(output_file) as tmp, tf.io.TFRecordWriter(tmp) as writer:
        for feature in features:
            writer.write(example_bytes(_to_tf_example(feature, is_training)))
            written.append(feature)
    _logger.info("wrote %d features to %s", len(written), output_file)
    return written


def squad_dataset(
    path: str | Sequence[str],
    seq_length: int,
    batch_size: int,
    is_training: bool,
    labelled: bool | None = None,
    drop_remainder: bool = False,
    input_context=None,
    seed: int | None = None,
):
    """Batches of int32 feature dicts. Training: repeated and shuffled (buffer 100, as
    the original); otherwise file order, once, the last batch padded with zero rows
    (unique_id 0) unless drop_remainder. `labelled` (default: is_training): parse the
    training targets too."""
    import tensorflow as tf

    from albert_tf.data.classifier_data import pad_batch

    spec = feature_spec(seq_length, is_training if labelled is None else labelled)
    d = tf.data.TFRecordDataset(path)
    if input_context is not None and is_training:
        d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if is_training:
        d = d.repeat().shuffle(100, seed=seed)

    def decode(record):
        parsed = tf.io.parse_single_example(record, spec)
        return {k: tf.cast(v, tf.int32) for k, v in parsed.items()}

    d = d.map(decode, num_parallel_calls=tf.data.AUTOTUNE).batch(
        batch_size, drop_remainder=drop_remainder
    )
    if not is_training and not drop_remainder:  # a full last batch: rows of unique_id 0
        d = d.map(lambda batch: pad_batch(batch, batch_size))
    return d.prefetch(tf.data.AUTOTUNE)


__all__ = [
    "SquadExample",
    "SquadFeature",
    "SquadDataError",
    "Alignment",
    "read_squad_examples",
    "v2_question",
    "align_pieces",
    "doc_spans",
    "max_context_span",
    "convert_examples_to_features",
    "feature_spec",
    "write_features",
    "squad_dataset",
    "FIRST_UNIQUE_ID",
]
