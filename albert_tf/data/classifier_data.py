"""GLUE data for sentence(-pair) classification: reading, features, caching, input pipeline.

This module reproduces the data side of the original release's ``classifier_utils.py`` /
``run_classifier.py`` (spec §11.2, §11.3):

* one processor per GLUE task with the original column indices, header skipping, GUID rules and
  label lists (plus the AX diagnostic set, which the original defines but never registers);
* ``convert_examples_to_features`` with the original truncation and ``[CLS] a [SEP] (b [SEP])``
  packing, and a TFRecord writer with the original feature names;
* a feature cache keyed by everything that changes the features, so a stale file is never reused
  (the original reused ``<task>_train.tf_record`` whatever the flags; quirk 28);
* a ``tf.data`` reader (100-record shuffle buffer as the original, optional full shuffle,
  eval/predict batches padded with ``is_real_example = 0`` rows, sharding by input context);
* ``tfds_examples`` to read the same examples from the TensorFlow Datasets ``glue/*`` builders.

No model code is imported here; TensorFlow and TFDS are imported only by the functions that need
them, so the processors can be used (and tested) without loading TensorFlow.
"""

from __future__ import annotations

import csv
import dataclasses
import hashlib
import io
import json
import logging
import os
from typing import Any, Iterable, Sequence

from albert_tf import fileio
from albert_tf.data.example_serialization import example_bytes
from albert_tf.fileio import atomic_path, atomic_write_text

_logger = logging.getLogger(__name__)

# Bump when the feature layout or the conversion rules change, so old caches are not reused.
FEATURE_FORMAT_VERSION = 1

SPLITS = ("train", "dev", "test")


# ---------------------------------------------------------------------------------------------
# Examples and features
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class InputExample:
    """One example of a sentence or sentence-pair task.

    Attributes:
      guid: Unique id. For test sets it is the id column of the TSV, which the GLUE submission
        file needs.
      text_a: First (or only) sequence, untokenized.
      text_b: Second sequence for pair tasks, else None.
      label: Label string (classification), float (STS-B), or a placeholder for test sets.
    """

    guid: str
    text_a: str
    text_b: str | None = None
    label: Any = None


class PaddingInputExample:
    """Marker for a fake example that pads a dataset to a multiple of the batch size.

    It converts to all-zero features with ``is_real_example = False``, as in the original. The
    tf.data reader pads batches itself, so this is only needed by callers that pad lists.
    """


@dataclasses.dataclass
class InputFeatures:
    """Model inputs for one example (lists of length max_seq_length)."""

    input_ids: list[int]
    input_mask: list[int]
    segment_ids: list[int]
    label_id: int | float
    is_real_example: bool = True
    guid: str | None = None


# ---------------------------------------------------------------------------------------------
# TSV reading
# ---------------------------------------------------------------------------------------------


def read_tsv(path: str) -> list[tuple[int, list[str]]]:
    """Reads a tab-separated file as the original does (tab delimiter, no quote character).

    Returns a list of ``(line_number, fields)`` with 1-based physical line numbers, so that errors
    can point at the offending line. Raises FileNotFoundError for a missing file and ValueError
    (naming file, line and column) for bytes that are not UTF-8.
    """
    if fileio.isdir(path):
        raise FileNotFoundError(f"{path}: a directory, expected a GLUE data file (.tsv)")
    if not fileio.isfile(path):
        raise FileNotFoundError(f"{path}: GLUE data file not found")
    raw = fileio.read_bytes(path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw.count(b"\n", 0, e.start) + 1
        column = e.start - (raw.rfind(b"\n", 0, e.start) + 1) + 1
        raise ValueError(
            f"{path}, line {line}, byte column {column}: invalid UTF-8 ({e.reason}); "
            "expected a UTF-8 encoded TSV file"
        ) from None
    # QUOTE_NONE: a '"' is an ordinary character (GLUE sentences contain unbalanced quotes), and
    # every record is exactly one physical line, so reader.line_num is the line of the record.
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
    rows = []
    for fields in reader:
        rows.append((reader.line_num, fields))
    return rows


def _field(path: str, line: int, row: list[str], index: int, what: str) -> str:
    """Returns row[index] (negative = from the end) or raises a ValueError naming the place."""
    if index >= len(row) or -index > len(row):
        needed = index + 1 if index >= 0 else -index
        raise ValueError(
            f"{path}, line {line}, column {index + 1 if index >= 0 else 'last'}: expected {what} "
            f"but the row has only {len(row)} tab-separated column(s) (needs at least {needed})"
        )
    return row[index]


# ---------------------------------------------------------------------------------------------
# Processors
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Columns:
    """Where the fields of one split's TSV rows are (0-based; negative = from the end).

    text_a / text_b: (column, name used in error messages); text_b None for one-sentence tasks.
    label: column of the label, or None for the test split's placeholder label.
    guid: column of the id, or None for "<split>-<row index>" (row 0 is the header, if any).
    processed_guid: the id goes through ``process_text`` like the texts (the original does so
      for some tasks and not for others).
    header: the first row is a header. min_columns: shorter rows are skipped and counted.
    """

    text_a: tuple[int, str]
    text_b: tuple[int, str] | None = None
    label: int | None = None
    guid: int | None = 0
    processed_guid: bool = True
    header: bool = True
    min_columns: int = 0


class DataProcessor:
    """A GLUE task: where its files and fields are (one ``Columns`` per split kind).

    Args:
      use_spm: SentencePiece mode. Then every text field, GUID and label goes through
        ``tokenization.preprocess_text(x, lower=do_lower_case)`` exactly like the original
        (the SentencePiece tokenizer itself does no preprocessing; quirk 19). In WordPiece mode
        the fields are kept as read (the tokenizer lower-cases itself).
      do_lower_case: Lower-case in SentencePiece mode.
    """

    #: Sub-folder of data_dir holding the TSV files.
    folder: str = ""
    #: File name per split; a split missing here is not available for the task.
    files: dict[str, str] = {"train": "train.tsv", "dev": "dev.tsv", "test": "test.tsv"}
    #: Label strings in index order ([None] for regression, as the original).
    labels: tuple = ("0", "1")
    is_regression: bool = False
    #: Fields of the train and dev files, and of the test file.
    columns: Columns
    test_columns: Columns
    #: Label of every test example (the test files have none).
    test_label: Any = "0"
    #: Rows skipped by the last read for having fewer than ``min_columns`` columns.
    last_skipped = 0

    def __init__(self, use_spm: bool = True, do_lower_case: bool = True):
        self.use_spm = use_spm
        self.do_lower_case = do_lower_case

    # -- public API ----------------------------------------------------------------------------

    def get_labels(self) -> list:
        """Label strings in index order ([None] for regression, as the original)."""
        return list(self.labels)

    def data_file(self, data_dir: str, split: str) -> str:
        """Path of the TSV file of ``split`` ("train", "dev" or "test")."""
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {list(SPLITS)}")
        if split not in self.files:
            raise ValueError(
                f"{type(self).__name__} has no {split!r} data (available: {sorted(self.files)})"
            )
        return os.path.join(data_dir, self.folder, self.files[split])

    def get_examples(self, data_dir: str, split: str) -> list[InputExample]:
        """Reads the examples of one split."""
        path = self.data_file(data_dir, split)
        return self._create_examples(path, read_tsv(path), split)

    def get_train_examples(self, data_dir: str) -> list[InputExample]:
        """Examples of the training set."""
        return self.get_examples(data_dir, "train")

    def get_dev_examples(self, data_dir: str) -> list[InputExample]:
        """Examples of the dev set."""
        return self.get_examples(data_dir, "dev")

    def get_test_examples(self, data_dir: str) -> list[InputExample]:
        """Examples of the test set (labels are placeholders)."""
        return self.get_examples(data_dir, "test")

    def process_text(self, text: str) -> str:
        """The original's per-field normalisation (see class docstring)."""
        if self.use_spm:
            from albert_tf.data import (
                tokenization,  # no TF import; loaded lazily like the tokenizer
            )

            return tokenization.preprocess_text(text, lower=self.do_lower_case)
        return text

    # -- reading -------------------------------------------------------------------------------

    def _create_examples(self, path, rows, split) -> list[InputExample]:
        c = self.test_columns if split == "test" else self.columns
        examples = []
        skipped = 0
        for i, (line, row) in enumerate(rows):
            if c.header and i == 0:
                continue
            if len(row) < c.min_columns:
                skipped += 1
                continue
            if c.guid is None:
                guid = f"{split}-{i}"
            else:
                guid = _field(path, line, row, c.guid, "the id")
                guid = self.process_text(guid) if c.processed_guid else guid
            text_a = self.process_text(_field(path, line, row, *c.text_a))
            text_b = self.process_text(_field(path, line, row, *c.text_b)) if c.text_b else None
            if c.label is None:
                label = self.test_label
            elif self.is_regression:
                label = self._score(path, line, row, c.label)
            else:
                label = self._label(path, line, row, c.label)
            examples.append(InputExample(guid, text_a, text_b, label))
        if skipped:
            _logger.warning(
                "%s: skipped %d row(s) with missing columns (as the original)", path, skipped
            )
        self.last_skipped = skipped
        return examples

    def _label(self, path: str, line: int, row: list[str], index: int) -> str:
        """Reads, normalises and validates a classification label."""
        raw = _field(path, line, row, index, "the label")
        label = self.process_text(raw)
        labels = self.get_labels()
        if label not in labels:
            column = index + 1 if index >= 0 else len(row) + index + 1
            raise ValueError(
                f"{path}, line {line}, column {column}: unknown label {raw!r}; "
                f"expected one of {labels}"
            )
        return label

    @staticmethod
    def _score(path: str, line: int, row: list[str], index: int) -> float:
        """Reads a regression target (a float)."""
        raw = _field(path, line, row, index, "the score")
        try:
            return float(raw)
        except ValueError:
            column = index + 1 if index >= 0 else len(row) + index + 1
            raise ValueError(
                f"{path}, line {line}, column {column}: expected a float similarity "
                f"score, got {raw!r}"
            ) from None


# The shape of MNLI, QNLI, RTE, WNLI and AX: header, id column 0, label in the last column.
_PAIR_COLUMNS = Columns(text_a=(1, "text_a"), text_b=(2, "text_b"), label=-1)
_NLI_LABELS = ("contradiction", "entailment", "neutral")


class MnliProcessor(DataProcessor):
    """MultiNLI, matched dev/test sets (columns 8, 9; gold label last)."""

    folder = "MNLI"
    files = {"train": "train.tsv", "dev": "dev_matched.tsv", "test": "test_matched.tsv"}
    labels = _NLI_LABELS
    columns = Columns(text_a=(8, "text_a"), text_b=(9, "text_b"), label=-1)
    test_columns = dataclasses.replace(columns, label=None)
    test_label = "contradiction"


class MisMnliProcessor(MnliProcessor):
    """MultiNLI, mismatched dev/test sets."""

    files = {"train": "train.tsv", "dev": "dev_mismatched.tsv", "test": "test_mismatched.tsv"}


class AxProcessor(DataProcessor):
    """GLUE diagnostic set (prediction only; MNLI labels). Registered here (quirk 30)."""

    folder = "diagnostic"
    files = {"test": "diagnostic.tsv"}
    labels = _NLI_LABELS
    columns = _PAIR_COLUMNS
    test_columns = dataclasses.replace(_PAIR_COLUMNS, label=None)
    test_label = "contradiction"


class QnliProcessor(DataProcessor):
    """QNLI (question, sentence)."""

    folder = "QNLI"
    labels = ("entailment", "not_entailment")
    columns = _PAIR_COLUMNS
    test_columns = dataclasses.replace(_PAIR_COLUMNS, label=None)
    test_label = "entailment"


class RteProcessor(QnliProcessor):
    """RTE (sentence1, sentence2)."""

    folder = "RTE"


class WnliProcessor(DataProcessor):
    """WNLI (sentence1, sentence2; labels 0/1)."""

    folder = "WNLI"
    columns = _PAIR_COLUMNS
    test_columns = dataclasses.replace(_PAIR_COLUMNS, label=None)


class MrpcProcessor(DataProcessor):
    """MRPC: label col 0, strings cols 3 and 4; GUID "<split>-<row>" except on test (id col)."""

    folder = "MRPC"
    columns = Columns(text_a=(3, "#1 String"), text_b=(4, "#2 String"), label=0, guid=None)
    # The original keeps the test id unprocessed.
    test_columns = Columns(text_a=(3, "#1 String"), text_b=(4, "#2 String"), processed_guid=False)


class ColaProcessor(DataProcessor):
    """CoLA: train/dev have no header (label col 1, sentence col 3); test has one (col 1)."""

    folder = "CoLA"
    # No header: the first line is "<split>-0".
    columns = Columns(text_a=(3, "the sentence"), label=1, guid=None, header=False)
    test_columns = Columns(text_a=(1, "the sentence"), processed_guid=False)


class Sst2Processor(DataProcessor):
    """SST-2: header; train/dev sentence col 0, label col 1; test id col 0, sentence col 1."""

    folder = "SST-2"
    columns = Columns(text_a=(0, "the sentence"), label=1, guid=None)
    test_columns = Columns(text_a=(1, "the sentence"))


class StsbProcessor(DataProcessor):
    """STS-B (regression): sentences cols 7, 8; score = float(last column); test label 0."""

    folder = "STS-B"
    labels = (None,)
    is_regression = True
    columns = Columns(text_a=(7, "sentence1"), text_b=(8, "sentence2"), label=-1)
    test_columns = dataclasses.replace(columns, label=None)
    test_label = 0.0


class QqpProcessor(DataProcessor):
    """QQP: train/dev question cols 3, 4 and label col 5; test cols 1, 2. GUID = id column.

    Train/dev rows with fewer than 6 columns are skipped, as the original does (the GLUE QQP
    files contain a few broken lines); the number skipped is logged.
    """

    folder = "QQP"
    # The original keeps the id unprocessed.
    columns = Columns(
        text_a=(3, "question1"),
        text_b=(4, "question2"),
        label=5,
        processed_guid=False,
        min_columns=6,
    )
    test_columns = Columns(text_a=(1, "question1"), text_b=(2, "question2"), processed_guid=False)


#: Task name (lower case, as the original's --task_name) -> processor class.
PROCESSORS: dict[str, type[DataProcessor]] = {
    "cola": ColaProcessor,
    "sst-2": Sst2Processor,
    "mrpc": MrpcProcessor,
    "sts-b": StsbProcessor,
    "qqp": QqpProcessor,
    "mnli": MnliProcessor,
    "mismnli": MisMnliProcessor,
    "qnli": QnliProcessor,
    "rte": RteProcessor,
    "wnli": WnliProcessor,
    "ax": AxProcessor,
}


def get_processor(
    task_name: str, use_spm: bool = True, do_lower_case: bool = True
) -> DataProcessor:
    """Returns the processor instance for ``task_name`` (case-insensitive)."""
    key = task_name.lower()
    if key not in PROCESSORS:
        raise ValueError(f"unknown GLUE task {task_name!r}; known tasks: {sorted(PROCESSORS)}")
    return PROCESSORS[key](use_spm=use_spm, do_lower_case=do_lower_case)


# ---------------------------------------------------------------------------------------------
# TensorFlow Datasets (--use_tfds)
# ---------------------------------------------------------------------------------------------

# task -> (tfds glue config, {split: tfds split}, text_a key, text_b key or None)
_TFDS_TASKS: dict[str, tuple[str, dict[str, str], str, str | None]] = {
    "cola": ("cola", {"train": "train", "dev": "validation", "test": "test"}, "sentence", None),
    "sst-2": ("sst2", {"train": "train", "dev": "validation", "test": "test"}, "sentence", None),
    "mrpc": (
        "mrpc",
        {"train": "train", "dev": "validation", "test": "test"},
        "sentence1",
        "sentence2",
    ),
    "sts-b": (
        "stsb",
        {"train": "train", "dev": "validation", "test": "test"},
        "sentence1",
        "sentence2",
    ),
    "qqp": (
        "qqp",
        {"train": "train", "dev": "validation", "test": "test"},
        "question1",
        "question2",
    ),
    "mnli": (
        "mnli",
        {"train": "train", "dev": "validation_matched", "test": "test_matched"},
        "premise",
        "hypothesis",
    ),
    "mismnli": (
        "mnli",
        {"train": "train", "dev": "validation_mismatched", "test": "test_mismatched"},
        "premise",
        "hypothesis",
    ),
    "qnli": (
        "qnli",
        {"train": "train", "dev": "validation", "test": "test"},
        "question",
        "sentence",
    ),
    "rte": (
        "rte",
        {"train": "train", "dev": "validation", "test": "test"},
        "sentence1",
        "sentence2",
    ),
    "wnli": (
        "wnli",
        {"train": "train", "dev": "validation", "test": "test"},
        "sentence1",
        "sentence2",
    ),
    "ax": ("ax", {"test": "test"}, "premise", "hypothesis"),
}


def tfds_name(task_name: str, split: str) -> tuple[str, str]:
    """Returns ``("glue/<config>", tfds_split)`` for a task and split ("train"/"dev"/"test")."""
    key = task_name.lower()
    if key not in _TFDS_TASKS:
        raise ValueError(f"unknown GLUE task {task_name!r}; known tasks: {sorted(_TFDS_TASKS)}")
    config, splits, _, _ = _TFDS_TASKS[key]
    if split not in splits:
        raise ValueError(
            f"task {task_name!r} has no {split!r} split in TFDS (available: {sorted(splits)})"
        )
    return f"glue/{config}", splits[split]


def _decode(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def tfds_examples(
    task_name: str,
    split: str,
    data_dir: str | None = None,
    use_spm: bool = True,
    do_lower_case: bool = True,
    download: bool = False,
) -> list[InputExample]:
    """Reads a GLUE split from TensorFlow Datasets into the same examples as the TSV processors.

    TFDS label indices are mapped to the original label strings: the 0/1 tasks (CoLA, SST-2,
    MRPC, QQP, WNLI) use ``str(index)`` (TFDS orders their classes as the GLUE files' 0/1), the
    NLI tasks use the class names. Test labels (-1 in TFDS) become the original placeholders.
    GUIDs follow the processors: ``"<split>-<row>"`` for CoLA/SST-2/MRPC train/dev (the row
    number counts the header line like the TSV processors, except for header-less CoLA),
    otherwise ``str(idx)``, the id column of the GLUE files.

    Args:
      task_name: A key of PROCESSORS.
      split: "train", "dev" or "test".
      data_dir: TFDS data directory (None: the TFDS default).
      use_spm, do_lower_case: As for the processors.
      download: Allow TFDS to download and prepare the data if it is not there.
    """
    import tensorflow_datasets as tfds

    key = task_name.lower()
    name, tfds_split = tfds_name(key, split)
    _, _, key_a, key_b = _TFDS_TASKS[key]
    processor = get_processor(key, use_spm=use_spm, do_lower_case=do_lower_case)
    labels = processor.get_labels()

    builder = tfds.builder(name, data_dir=data_dir)
    if download:
        builder.download_and_prepare()
    label_feature = builder.info.features["label"]
    class_names = getattr(label_feature, "names", None)

    examples = []
    for row in tfds.as_numpy(builder.as_dataset(split=tfds_split, shuffle_files=False)):
        idx = int(row["idx"])
        text_a = processor.process_text(_decode(row[key_a]))
        text_b = processor.process_text(_decode(row[key_b])) if key_b else None
        if key in ("cola", "sst-2", "mrpc") and split != "test":
            guid = f"{split}-{idx if key == 'cola' else idx + 1}"
        else:
            guid = str(idx)
        raw_label = row["label"]
        if processor.is_regression:
            label = 0.0 if split == "test" else float(raw_label)
        elif split == "test" or int(raw_label) < 0:
            label = labels[0]  # the original's placeholder (also "contradiction" for AX)
        elif labels == ["0", "1"]:
            label = str(int(raw_label))
        else:
            label = processor.process_text(class_names[int(raw_label)])
        if not processor.is_regression and label not in labels:
            raise ValueError(f"{name}:{tfds_split} idx {idx}: label {label!r} not in {labels}")
        examples.append(InputExample(guid, text_a, text_b, label))
    return examples


# ---------------------------------------------------------------------------------------------
# Features
# ---------------------------------------------------------------------------------------------


def _truncate_seq_pair(tokens_a: list, tokens_b: list, max_length: int) -> None:
    """Pops the last token of the longer sequence (b on ties) until the pair fits, in place."""
    while len(tokens_a) + len(tokens_b) > max_length:
        if len(tokens_a) > len(tokens_b):
            tokens_a.pop()
        else:
            tokens_b.pop()


def convert_single_example(
    example, label_map: dict | None, max_seq_length: int, tokenizer, is_regression: bool
) -> InputFeatures:
    """Converts one example (or a PaddingInputExample) into InputFeatures (spec §11.3)."""
    if isinstance(example, PaddingInputExample):
        zeros = [0] * max_seq_length
        return InputFeatures(
            list(zeros),
            list(zeros),
            list(zeros),
            0.0 if is_regression else 0,
            is_real_example=False,
        )

    tokens_a = list(tokenizer.tokenize(example.text_a))
    tokens_b = list(tokenizer.tokenize(example.text_b)) if example.text_b else None
    # As the original: an empty text_b (or one with no tokens) gives the single-sequence layout.
    if tokens_b:
        _truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)  # [CLS] a [SEP] b [SEP]
    else:
        tokens_a = tokens_a[: max_seq_length - 2]  # [CLS] a [SEP]

    tokens = ["[CLS]", *tokens_a, "[SEP]"]
    segment_ids = [0] * len(tokens)
    if tokens_b:
        tokens += [*tokens_b, "[SEP]"]
        segment_ids += [1] * (len(tokens_b) + 1)
    input_ids = list(tokenizer.convert_tokens_to_ids(tokens))
    input_mask = [1] * len(input_ids)
    pad = max_seq_length - len(input_ids)
    input_ids += [0] * pad
    input_mask += [0] * pad
    segment_ids += [0] * pad

    if is_regression:
        label_id = float(example.label)
    else:
        if example.label not in label_map:
            raise ValueError(
                f"example {example.guid!r}: unknown label {example.label!r}; "
                f"expected one of {list(label_map)}"
            )
        label_id = label_map[example.label]
    return InputFeatures(input_ids, input_mask, segment_ids, label_id, True, example.guid)


def convert_examples_to_features(
    examples: Iterable,
    label_list: Sequence,
    max_seq_length: int,
    tokenizer,
    is_regression: bool = False,
) -> list[InputFeatures]:
    """Converts examples to features with the original truncation and packing.

    Pair: while len(a) + len(b) > max_seq_length - 3, drop the last token of the longer one
    (b on ties). Single: keep the first max_seq_length - 2 tokens. Sequence
    ``[CLS] a [SEP] (b [SEP])``; segment ids 0 up to and including the first [SEP], 1 for b and
    its [SEP]; mask 1 for real tokens; ids, mask and segments padded with 0.
    """
    if max_seq_length < 3:
        raise ValueError(f"max_seq_length must be at least 3, got {max_seq_length}")
    label_map = None if is_regression else {label: i for i, label in enumerate(label_list)}
    features = []
    for index, example in enumerate(examples):
        feature = convert_single_example(
            example, label_map, max_seq_length, tokenizer, is_regression
        )
        if index < 3 and not isinstance(example, PaddingInputExample):
            _logger.debug(
                "example %s: input_ids=%s segment_ids=%s label=%s",
                example.guid,
                feature.input_ids,
                feature.segment_ids,
                feature.label_id,
            )
        features.append(feature)
    return features


def _to_tf_example(feature: InputFeatures, is_regression: bool):
    import tensorflow as tf

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    label = (
        tf.train.Feature(float_list=tf.train.FloatList(value=[float(feature.label_id)]))
        if is_regression
        else ints([int(feature.label_id)])
    )
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "input_ids": ints(feature.input_ids),
                "input_mask": ints(feature.input_mask),
                "segment_ids": ints(feature.segment_ids),
                "label_ids": label,
                "is_real_example": ints([int(feature.is_real_example)]),
            }
        )
    )


def file_based_convert_examples_to_features(
    examples: Iterable,
    label_list: Sequence,
    max_seq_length: int,
    tokenizer,
    output_file: str,
    is_regression: bool = False,
) -> int:
    """Writes the features of ``examples`` to a TFRecord file; returns the number written.

    Feature names as the original: input_ids, input_mask, segment_ids (int64 [S]), label_ids
    (int64 scalar, float for regression), is_real_example (int64 scalar). The file is written
    under a temporary name and renamed, so a crash never leaves a truncated file behind.
    """
    import tensorflow as tf

    label_map = None if is_regression else {label: i for i, label in enumerate(label_list)}
    if max_seq_length < 3:
        raise ValueError(f"max_seq_length must be at least 3, got {max_seq_length}")
    count = 0
    with atomic_path(output_file) as tmp, tf.io.TFRecordWriter(tmp) as writer:
        for example in examples:
            feature = convert_single_example(
                example, label_map, max_seq_length, tokenizer, is_regression
            )
            writer.write(example_bytes(_to_tf_example(feature, is_regression)))
            count += 1
            if count % 10000 == 0:
                _logger.info("%s: wrote %d examples", output_file, count)
    _logger.info("wrote %d examples to %s", count, output_file)
    return count


# ---------------------------------------------------------------------------------------------
# Feature cache (quirk 28: never reuse a stale cache)
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class CachedFeatures:
    """Result of cached_features."""

    path: str
    num_examples: int
    key: str
    cache_hit: bool


def _hash_file(hasher, path: str) -> None:
    hasher.update(fileio.read_bytes(path))


def feature_cache_key(
    task_name: str,
    split: str,
    *,
    max_seq_length: int,
    do_lower_case: bool,
    label_list: Sequence,
    data_files: Sequence[str] = (),
    spm_model_file: str | None = None,
    vocab_file: str | None = None,
    extra: dict | None = None,
    digit_comma: str = "python3",
) -> str:
    """Hash of everything that determines the features of one split.

    Covers the bytes of the data file(s) and of the SentencePiece model / vocabulary, the task,
    split, label list, max_seq_length, do_lower_case, the tokenizer's digit_comma mode
    (default: tokenization.DEFAULT_DIGIT_COMMA, written out to keep this module free of the
    tokenizer's imports), the feature format version and ``extra`` (e.g. the TFDS dataset name
    and version). Returns 16 hex digits.
    """
    h = hashlib.sha256()
    meta = {
        "format": FEATURE_FORMAT_VERSION,
        "task": task_name.lower(),
        "split": split,
        "max_seq_length": int(max_seq_length),
        "do_lower_case": bool(do_lower_case),
        "digit_comma": digit_comma,
        "labels": [None if x is None else str(x) for x in label_list],
        "spm": spm_model_file is not None,
        "extra": extra or {},
    }
    h.update(json.dumps(meta, sort_keys=True).encode("utf-8"))
    for tag, path in [("data", p) for p in data_files] + [
        ("spm", spm_model_file),
        ("vocab", vocab_file),
    ]:
        if path is None:
            continue
        h.update(f"\0{tag}\0".encode())
        _hash_file(h, path)
    return h.hexdigest()[:16]


def cached_features(
    task_name: str,
    split: str,
    data_dir: str | None,
    cache_dir: str,
    tokenizer,
    max_seq_length: int,
    *,
    do_lower_case: bool,
    spm_model_file: str | None = None,
    vocab_file: str | None = None,
    use_tfds: bool = False,
    tfds_data_dir: str | None = None,
    examples: Sequence | None = None,
) -> CachedFeatures:
    """Returns the TFRecord of one split's features, building it only when needed.

    The file is ``<cache_dir>/<task>_<split>_<key>.tf_record`` with ``key`` from
    feature_cache_key, so any change of data, SentencePiece model/vocabulary, do_lower_case,
    the tokenizer's digit_comma, max_seq_length, task or label list selects a different file and
    a stale cache is never read.
    A JSON sidecar (same name + ``.json``) records the example count and the key's inputs; both
    files are written atomically, and the cache counts as present only when both exist.

    Args:
      task_name, split: Task (key of PROCESSORS) and "train"/"dev"/"test".
      data_dir: GLUE directory (TSV mode).
      cache_dir: Where the TFRecords go.
      tokenizer: A FullTokenizer matching spm_model_file / vocab_file.
      max_seq_length: Sequence length.
      do_lower_case: As passed to the tokenizer/processors.
      spm_model_file, vocab_file: The tokenizer's files (at least one), hashed into the key.
      use_tfds, tfds_data_dir: Read the examples from TFDS instead of TSV files.
      examples: The split's examples when the caller has read them already (from the same
        source); read here otherwise.
    Raises:
      ValueError: the split holds no example (nothing is written then).
    """
    if spm_model_file is None and vocab_file is None:
        raise ValueError(
            "cached_features needs spm_model_file or vocab_file: the tokenizer's "
            "files are part of the cache key"
        )
    use_spm = spm_model_file is not None
    processor = get_processor(task_name, use_spm=use_spm, do_lower_case=do_lower_case)
    label_list = processor.get_labels()
    if use_tfds:
        import tensorflow_datasets as tfds

        name, tfds_split = tfds_name(task_name, split)
        builder = tfds.builder(name, data_dir=tfds_data_dir)
        data_files: list[str] = []
        extra = {
            "tfds": name,
            "tfds_split": tfds_split,
            "version": str(builder.info.version),
            "tfds_data_dir": builder.data_dir,
        }
        source = f"TFDS {name} split {tfds_split!r}"
        load = lambda: tfds_examples(task_name, split, tfds_data_dir, use_spm, do_lower_case)
    else:
        if data_dir is None:
            raise ValueError("cached_features needs data_dir unless use_tfds is set")
        data_files = [processor.data_file(data_dir, split)]
        source = data_files[0]
        extra = {}
        load = lambda: processor.get_examples(data_dir, split)

    key = feature_cache_key(
        task_name,
        split,
        max_seq_length=max_seq_length,
        do_lower_case=do_lower_case,
        label_list=label_list,
        data_files=data_files,
        spm_model_file=spm_model_file,
        vocab_file=vocab_file,
        extra=extra,
        digit_comma=tokenizer.digit_comma,
    )
    path = os.path.join(cache_dir, f"{task_name.lower()}_{split}_{key}.tf_record")
    meta_path = path + ".json"
    if fileio.isfile(path) and fileio.isfile(meta_path):
        meta = json.loads(fileio.read_text(meta_path))
        _logger.info("reusing cached features %s (%d examples)", path, meta["num_examples"])
        return CachedFeatures(path, int(meta["num_examples"]), key, True)

    examples = load() if examples is None else examples
    if not examples:
        raise ValueError(f"{source}: holds no example; expected at least one")
    count = file_based_convert_examples_to_features(
        examples, label_list, max_seq_length, tokenizer, path, processor.is_regression
    )
    meta = {
        "num_examples": count,
        "task": task_name.lower(),
        "split": split,
        "key": key,
        "max_seq_length": max_seq_length,
        "do_lower_case": do_lower_case,
        "digit_comma": tokenizer.digit_comma,
        "data_files": data_files,
        "spm_model_file": spm_model_file,
        "vocab_file": vocab_file,
        "extra": extra,
        "format": FEATURE_FORMAT_VERSION,
    }
    atomic_write_text(meta_path, json.dumps(meta, indent=2, sort_keys=True))
    return CachedFeatures(path, count, key, False)


# ---------------------------------------------------------------------------------------------
# tf.data reader
# ---------------------------------------------------------------------------------------------


def feature_spec(seq_length: int, is_regression: bool = False) -> dict:
    """tf.io.parse_single_example spec of the classifier (and RACE) TFRecords.

    input_ids, input_mask, segment_ids int64 [seq_length]; label_ids int64 [] (float32 for
    regression); is_real_example int64 []. RACE records: seq_length = 4 x max_seq_length
    (`race_data.record_length`).
    """
    import tensorflow as tf

    return {
        "input_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "input_mask": tf.io.FixedLenFeature([seq_length], tf.int64),
        "segment_ids": tf.io.FixedLenFeature([seq_length], tf.int64),
        "label_ids": tf.io.FixedLenFeature([], tf.float32 if is_regression else tf.int64),
        "is_real_example": tf.io.FixedLenFeature([], tf.int64),
    }


def classifier_dataset(
    path: str | Sequence[str],
    seq_length: int,
    batch_size: int,
    is_training: bool,
    is_regression: bool = False,
    input_context=None,
    shuffle_buffer: int = 100,
    full_shuffle: bool = False,
    drop_remainder: bool | None = None,
    seed: int | None = None,
):
    """A tf.data pipeline over classifier TFRecords.

    Elements are dicts with ``input_ids``, ``input_mask``, ``segment_ids`` (int32 [B, S]),
    ``label_ids`` (int32 [B], float32 for regression) and ``is_real_example`` (int32 [B]);
    int64 is cast to int32 as the original does.

    Training: records are repeated forever and shuffled with a ``shuffle_buffer``-record buffer
    (100 as the original, which leaves early batches close to file order; quirk 23) or, with
    ``full_shuffle``, with a buffer holding the whole (shard of the) file, reshuffled every
    epoch. Batches drop the remainder by default.

    Eval/predict: one pass in file order. Unless ``drop_remainder`` is set, the last batch is
    padded to ``batch_size`` rows of zeros with ``is_real_example = 0`` -- what the original's
    PaddingInputExample does for TPUs -- so every batch has a static size; filter or weight
    by ``is_real_example``.

    Args:
      path: TFRecord file(s).
      seq_length: max_seq_length the file was written with.
      batch_size: Global batch size; with ``input_context`` the per-replica size is derived
        from it (``input_context.get_per_replica_batch_size``).
      is_training: Training or eval/predict mode (see above).
      is_regression: label_ids is float (STS-B).
      input_context: A tf.distribute.InputContext; the records are sharded by
        ``input_pipeline_id`` out of ``num_input_pipelines``.
      shuffle_buffer: Training shuffle buffer (records).
      full_shuffle: Shuffle the whole file instead.
      drop_remainder: Default: True for training, False otherwise.
      seed: Shuffle seed (None: random).
    """
    import tensorflow as tf

    if drop_remainder is None:
        drop_remainder = is_training
    files = [path] if isinstance(path, str) else list(path)
    if input_context is not None:
        batch_size = input_context.get_per_replica_batch_size(batch_size)
    name_to_features = feature_spec(seq_length, is_regression)

    def decode(record):
        example = tf.io.parse_single_example(record, name_to_features)
        return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in example.items()}

    d = tf.data.TFRecordDataset(files)
    if input_context is not None and input_context.num_input_pipelines > 1:
        d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
    if is_training:
        if full_shuffle:
            # Buffer = the number of records of this shard: a uniform shuffle of every epoch.
            n = int(d.reduce(tf.constant(0, tf.int64), lambda c, _: c + 1).numpy())
            d = d.shuffle(max(n, 1), seed=seed, reshuffle_each_iteration=True).repeat()
        else:
            # As the original: repeat, then a small buffer.
            d = d.repeat().shuffle(shuffle_buffer, seed=seed)
    d = d.map(decode, num_parallel_calls=tf.data.AUTOTUNE)
    d = d.batch(batch_size, drop_remainder=drop_remainder)
    if not is_training and not drop_remainder:
        d = d.map(lambda batch: pad_batch(batch, batch_size))
    return d.prefetch(tf.data.AUTOTUNE)


def pad_batch(batch: dict, batch_size: int) -> dict:
    """Pads every tensor of a (possibly short) batch with zero rows up to batch_size."""
    import tensorflow as tf

    out = {}
    for name, t in batch.items():
        missing = batch_size - tf.shape(t)[0]
        paddings = [[0, missing]] + [[0, 0]] * (t.shape.rank - 1)
        padded = tf.pad(t, paddings)
        padded.set_shape([batch_size] + t.shape.as_list()[1:])
        out[name] = padded
    return out


__all__ = [
    "InputExample",
    "InputFeatures",
    "PaddingInputExample",
    "Columns",
    "DataProcessor",
    "PROCESSORS",
    "get_processor",
    "read_tsv",
    "tfds_name",
    "tfds_examples",
    "convert_single_example",
    "convert_examples_to_features",
    "file_based_convert_examples_to_features",
    "feature_cache_key",
    "cached_features",
    "CachedFeatures",
    "feature_spec",
    "classifier_dataset",
    "pad_batch",
    "ColaProcessor",
    "Sst2Processor",
    "MrpcProcessor",
    "StsbProcessor",
    "QqpProcessor",
    "MnliProcessor",
    "MisMnliProcessor",
    "QnliProcessor",
    "RteProcessor",
    "WnliProcessor",
    "AxProcessor",
]
