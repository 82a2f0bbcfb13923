"""RACE data (§13): JSON-lines folders -> 4-choice examples -> TFRecords.

`<data_dir>/RACE/{train,dev,test}/{middle,high}/all.txt`, one JSON object per line with
`id`, `article`, `questions`, `options` (4 per question) and `answers` (letters). The
original reads only `all.txt`, which users concatenate from the numbered files of the
RACE release; a level folder without `all.txt` is read from those `*.txt` files instead. Every
text goes through preprocess_text (SentencePiece mode). Choice j of a question is the
question with every "_" replaced by option j, or "question option" when there is no
blank. Each choice becomes `[CLS] article [SEP] choice [SEP]` (the choice keeps its last
max_qa_length pieces, the article is cut at the end to fit); the 4 sequences are stored
one after the other, so the records have the GLUE names (input_ids, input_mask,
segment_ids [4 x max_seq_length], label_ids, is_real_example) and GLUE's reader reads
them with seq_length = 4 x max_seq_length.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Iterable

from albert_tf import fileio
from albert_tf.data import tokenization
from albert_tf.data.example_serialization import example_bytes
from albert_tf.errors import UserError

_logger = logging.getLogger(__name__)

NUM_CHOICES = 4
LEVELS = ("middle", "high")
# The one file per level folder the original reads (the numbered files concatenated).
ALL_FILE = "all.txt"


class RaceDataError(UserError):
    """Malformed RACE input, naming the file, line and field."""


@dataclasses.dataclass
class RaceExample:
    """One question: the article, the 4 choice texts (question + option) and the label."""

    example_id: str
    context: str
    endings: list[str]
    label: int


def _field(record, key, kind, where):
    if key not in record:
        raise RaceDataError(f"{where}: no {key!r} field")
    if not isinstance(record[key], kind):
        raise RaceDataError(
            f"{where}: {key!r} is {type(record[key]).__name__}, expected {kind.__name__}"
        )
    return record[key]


# What json.loads gives for each JSON value that is not an object, as JSON names it.
_JSON_KINDS = {list: "an array", str: "a string", int: "a number", float: "a number"}
_JSON_KINDS.update({bool: "true/false", type(None): "null"})


def _json_lines(path):
    """(where, record) for every non-blank line of `path`: "<path>:<line>" and its JSON
    object. Raises RaceDataError naming the line for bytes that are not UTF-8, invalid JSON
    or a JSON value that is not an object."""
    import tensorflow as tf

    if tf.io.gfile.isdir(path):
        raise RaceDataError(
            f"{path}: a directory where a file was expected (RACE level folders hold "
            "all.txt or numbered *.txt files of JSON lines)"
        )
    fileio.check_input_file(path, path)  # a FIFO would block the read below
    try:
        with tf.io.gfile.GFile(path, "rb") as f:
            for line_no, raw in enumerate(f, 1):
                where = f"{path}:{line_no}"
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as err:
                    raise RaceDataError(
                        f"{where}: invalid UTF-8 byte {raw[err.start : err.start + 1]!r} "
                        f"(byte column {err.start + 1}); expected UTF-8 text"
                    ) from None
                if not line.strip():
                    continue
                try:
                    # Only the record's fixed fields are walked: no depth pre-scan (as
                    # squad_data), the parser's own limit is caught.
                    record = json.loads(line)
                except RecursionError:
                    raise RaceDataError(f"{where}: JSON nested too deeply") from None
                except json.JSONDecodeError as err:
                    raise RaceDataError(f"{where}: invalid JSON: {err.msg}") from None
                if not isinstance(record, dict):
                    kind = _JSON_KINDS.get(type(record), type(record).__name__)
                    raise RaceDataError(
                        f"{where}: expected a JSON object with 'article', 'questions', "
                        f"'options' and 'answers', found {kind}"
                    )
                yield where, record
    except tf.errors.OpError as err:
        raise RaceDataError(f"{path}: cannot read: {err.message}") from None


def _item(values, i, name, kind, what, where):
    """values[i], checked to be a `kind`; `name` is how the message names `values`."""
    value = values[i]
    if not isinstance(value, kind):
        raise RaceDataError(f"{where}: {name}[{i}] is {type(value).__name__}, expected {what}")
    return value


def read_race_examples(
    data_dir: str,
    split: str,
    do_lower_case: bool = True,
    high_only: bool = False,
    middle_only: bool = False,
    use_spm: bool = True,
) -> list[RaceExample]:
    """Examples of `<data_dir>/RACE/<split>/{middle,high}/`: its `all.txt` when the folder
    has one (as the original, which reads nothing else: the numbered files next to it hold
    the same questions), else its `*.txt` files in name order."""
    import tensorflow as tf

    def process(text):
        return tokenization.preprocess_text(text, lower=do_lower_case) if use_spm else text

    examples = []
    for level in LEVELS:
        if (level == "middle" and high_only) or (level == "high" and middle_only):
            continue
        folder = os.path.join(data_dir, "RACE", split, level)
        if tf.io.gfile.exists(folder) and not tf.io.gfile.isdir(folder):
            raise RaceDataError(
                f"{folder}: a file where a folder was expected "
                "(<data_dir>/RACE/{train,dev,test}/{middle,high}/all.txt)"
            )
        if not tf.io.gfile.isdir(folder):
            raise FileNotFoundError(
                f"RACE folder {folder} not found (expected "
                "<data_dir>/RACE/{train,dev,test}/{middle,high}/all.txt)"
            )
        names = sorted(n for n in tf.io.gfile.listdir(folder) if n.endswith(".txt"))
        if ALL_FILE in names:
            names = [ALL_FILE]
        for name in names:
            for where, record in _json_lines(os.path.join(folder, name)):
                answers = _field(record, "answers", list, where)
                options = _field(record, "options", list, where)
                questions = _field(record, "questions", list, where)
                context = process(_field(record, "article", str, where))
                if not len(answers) == len(options) == len(questions):
                    raise RaceDataError(
                        f"{where}: {len(questions)} questions, "
                        f"{len(options)} option lists, {len(answers)} "
                        "answers (expected the same number)"
                    )
                for i in range(len(questions)):
                    question = _item(questions, i, "'questions'", str, "str", where)
                    choices = _item(
                        options, i, "'options'", list, f"a list of {NUM_CHOICES} strings", where
                    )
                    answer = _item(answers, i, "'answers'", str, "a letter A-D", where)
                    if len(choices) != NUM_CHOICES or answer not in ("A", "B", "C", "D"):
                        raise RaceDataError(
                            f"{where}: question {i} needs 4 options and an "
                            f"answer A-D, got {len(choices)} and {answer!r}"
                        )
                    question = process(question)
                    endings = []
                    for j in range(NUM_CHOICES):
                        option = process(_item(choices, j, f"'options'[{i}]", str, "str", where))
                        endings.append(
                            question.replace("_", option)
                            if "_" in question
                            else " ".join([question, option])
                        )
                    examples.append(
                        RaceExample(
                            str(record.get("id", "")), context, endings, ord(answer) - ord("A")
                        )
                    )
    return examples


def convert_example(
    example: RaceExample, tokenizer, max_seq_length: int, max_qa_length: int
) -> dict:
    """{input_ids, input_mask, segment_ids: 4 x max_seq_length ints (choices one after the
    other), label_ids, is_real_example}."""
    context = tokenizer.tokenize(example.context)
    out = {"input_ids": [], "input_mask": [], "segment_ids": []}
    for ending in example.endings:
        choice = tokenizer.tokenize(ending)[-max_qa_length:]
        kept = context[: max(0, max_seq_length - 3 - len(choice))]
        tokens = ["[CLS]", *kept, "[SEP]", *choice, "[SEP]"]
        pad = max_seq_length - len(tokens)
        out["input_ids"] += tokenizer.convert_tokens_to_ids(tokens) + [0] * pad
        out["input_mask"] += [1] * len(tokens) + [0] * pad
        out["segment_ids"] += [0] * (len(kept) + 2) + [1] * (len(choice) + 1) + [0] * pad
    out.update(label_ids=example.label, is_real_example=1)
    return out


def write_features(
    examples: Iterable[RaceExample],
    tokenizer,
    max_seq_length: int,
    max_qa_length: int,
    output_file: str,
) -> int:
    """Writes the examples' records (temporary name, then renamed); returns the count."""
    import tensorflow as tf

    if max_seq_length <= max_qa_length + 3:
        raise ValueError(
            f"max_seq_length={max_seq_length} must exceed max_qa_length={max_qa_length} + 3"
        )

    def ints(values):
        return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))

    count = 0
    with fileio.atomic_path(output_file) as tmp, tf.io.TFRecordWriter(tmp) as writer:
        for example in examples:
            feature = convert_example(example, tokenizer, max_seq_length, max_qa_length)
            fields = {
                name: ints(value if isinstance(value, list) else [value])
                for name, value in feature.items()
            }
            writer.write(
                example_bytes(tf.train.Example(features=tf.train.Features(feature=fields)))
            )
            count += 1
    _logger.info("wrote %d examples to %s", count, output_file)
    return count


def record_length(max_seq_length: int) -> int:
    """Length of the stored id/mask/segment rows: the 4 choices one after the other."""
    return NUM_CHOICES * max_seq_length


__all__ = [
    "RaceExample",
    "RaceDataError",
    "read_race_examples",
    "convert_example",
    "write_features",
    "record_length",
    "NUM_CHOICES",
]
