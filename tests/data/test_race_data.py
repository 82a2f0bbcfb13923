"""RACE data: reading the folders, choices, the 4-sequence records."""

import json
import os
import shutil

import numpy as np
import pytest

from albert_tf.data import race_data, tokenization
from albert_tf.data.race_data import RaceDataError, RaceExample, read_race_examples

from classifier_fixtures import DEMO_SPM
from record_fixtures import assert_records_sorted_by_feature_name
from tokenizer_fixtures import IDS_A, TEXT_A

DEMO = os.path.join(os.path.dirname(DEMO_SPM))


@pytest.fixture(scope="module")
def tokenizer():
    return tokenization.FullTokenizer(spm_model_file=DEMO_SPM, do_lower_case=True)


def _lines(split, level):
    with open(os.path.join(DEMO, "RACE", split, level, "all.txt")) as f:
        return [json.loads(line) for line in f if line.strip()]


def test_reads_levels_and_builds_choices():
    examples = read_race_examples(DEMO, "dev")
    records = _lines("dev", "middle") + _lines("dev", "high")
    assert len(examples) == sum(len(r["answers"]) for r in records)
    first, pre = records[0], tokenization.preprocess_text
    for i, example in enumerate(examples[: len(first["answers"])]):
        question = pre(first["questions"][i], lower=True)
        options = [pre(o, lower=True) for o in first["options"][i]]
        want = [question.replace("_", o) if "_" in question else f"{question} {o}" for o in options]
        assert example.endings == want
        assert example.label == "ABCD".index(first["answers"][i])
        assert example.context == pre(first["article"], lower=True)
    assert any("_" in q for r in records for q in r["questions"])  # blanks are exercised
    middle = read_race_examples(DEMO, "dev", middle_only=True)
    high = read_race_examples(DEMO, "dev", high_only=True)
    assert len(middle) + len(high) == len(examples) and middle == examples[: len(middle)]


def test_reading_errors_name_file_and_line(tmp_path):
    with pytest.raises(FileNotFoundError, match="RACE/dev/middle"):
        read_race_examples(str(tmp_path), "dev")
    folder = tmp_path / "RACE" / "dev" / "middle"
    folder.mkdir(parents=True)
    (tmp_path / "RACE" / "dev" / "high").mkdir()
    good = {
        "id": "a",
        "article": "x",
        "questions": ["q?"],
        "options": [["1", "2", "3", "4"]],
        "answers": ["B"],
    }
    (folder / "all.txt").write_text(json.dumps(good) + "\n{broken\n")
    with pytest.raises(RaceDataError, match=r"middle/all.txt:2: invalid JSON"):
        read_race_examples(str(tmp_path), "dev")
    bad = dict(good, options=[["1", "2", "3"]])
    (folder / "all.txt").write_text(json.dumps(bad) + "\n")
    with pytest.raises(RaceDataError, match=r"all.txt:1: question 0 needs 4 options"):
        read_race_examples(str(tmp_path), "dev")
    (folder / "all.txt").write_text(
        json.dumps({k: v for k, v in good.items() if k != "article"}) + "\n"
    )
    with pytest.raises(RaceDataError, match=r"all.txt:1: no 'article' field"):
        read_race_examples(str(tmp_path), "dev")


def test_choice_sequences_truncate_as_the_original(tokenizer):
    context = " ".join(["the cat sat on the mat"] * 10)
    endings = ["who sat on the mat the cat", "x", "a big red house " * 5, "dog"]
    example = RaceExample("e", context, endings, 2)
    seq, qa = 24, 6
    feature = race_data.convert_example(example, tokenizer, seq, qa)
    ctx = tokenizer.tokenize(context)
    ids = np.array(feature["input_ids"]).reshape(4, seq)
    seg = np.array(feature["segment_ids"]).reshape(4, seq)
    mask = np.array(feature["input_mask"]).reshape(4, seq)
    for j, ending in enumerate(endings):
        choice = tokenizer.tokenize(ending)[-qa:]  # the last max_qa_length pieces
        kept = ctx[: seq - 3 - len(choice)]  # the article loses its end
        tokens = ["[CLS]"] + kept + ["[SEP]"] + choice + ["[SEP]"]
        n = len(tokens)
        assert n == seq  # the long article fills every sequence
        np.testing.assert_array_equal(ids[j, :n], tokenizer.convert_tokens_to_ids(tokens))
        np.testing.assert_array_equal(seg[j, :n], [0] * (len(kept) + 2) + [1] * (len(choice) + 1))
        assert mask[j].sum() == n
    assert feature["label_ids"] == 2 and feature["is_real_example"] == 1
    short = race_data.convert_example(
        RaceExample("s", "hi", ["a", "b", "c", "d"], 0), tokenizer, seq, qa
    )
    row = np.array(short["input_mask"]).reshape(4, seq)[0]
    assert 0 < row.sum() < seq and not row[row.sum() :].any()  # zero padding
    with pytest.raises(ValueError, match="must exceed max_qa_length"):
        race_data.write_features([], tokenizer, 9, 6, "unused")


def test_default_features_equal_the_originals_python3_ids(tmp_path, tokenizer):
    """Digit-comma pieces: the original's ids under Python 3 with data/demo/spm.model, which
    keep the "▁" (13) that re-encoding "0", "5", "6", "34" adds (e.g. "50", "▁", "0", ",")."""
    folder = tmp_path / "RACE" / "dev" / "middle"
    folder.mkdir(parents=True)
    (folder / "all.txt").write_text(
        json.dumps(
            {
                "id": "m1",
                "article": TEXT_A,
                "questions": ["Prices rose 4,5,6, then _."],
                "options": [["fell", "rose", "x1234,", "7,"]],
                "answers": ["C"],
            }
        )
        + "\n"
    )
    [example] = read_race_examples(str(tmp_path), "dev", middle_only=True)
    article = IDS_A
    stem = [756, 284, 19, 308, 128, 14, 139, 14, 134, 14, 15, 28]  # "prices rose 4,5,6, then"
    choices = [[13, 277, 517, 9], [308, 9], [13, 270, 1057, 863, 14, 9], [193, 14, 9]]
    feature = race_data.convert_example(example, tokenizer, 48, 64)
    rows = [[2, *article, 3, *stem, *c, 3] for c in choices]
    assert feature["input_ids"] == [i for r in rows for i in r + [0] * (48 - len(r))]
    assert feature["label_ids"] == 2
    out = str(tmp_path / "dev.tf_record")
    assert race_data.write_features([example], tokenizer, 48, 16, out) == 1
    assert_records_sorted_by_feature_name(out)


def test_all_txt_is_read_alone_else_the_numbered_files(tmp_path):
    """A level folder holding all.txt next to the numbered files it was made from gave every
    question twice; like the original, only all.txt is read then."""
    folder = tmp_path / "RACE" / "dev" / "middle"
    folder.mkdir(parents=True)
    records = [
        {
            "id": f"m{k}",
            "article": f"article {k}",
            "questions": [f"q{k}?"],
            "options": [["a", "b", "c", "d"]],
            "answers": ["A"],
        }
        for k in range(3)
    ]
    for k, record in enumerate(records):
        (folder / f"{k + 1}.txt").write_text(json.dumps(record) + "\n")
    numbered = read_race_examples(str(tmp_path), "dev", middle_only=True)
    assert [e.example_id for e in numbered] == ["m0", "m1", "m2"]
    (folder / "all.txt").write_text("".join(json.dumps(r) + "\n" for r in records[::-1]))
    from_all = read_race_examples(str(tmp_path), "dev", middle_only=True)
    assert [e.example_id for e in from_all] == ["m2", "m1", "m0"]


GOOD = {
    "id": "a",
    "article": "x",
    "questions": ["q?"],
    "options": [["1", "2", "3", "4"]],
    "answers": ["B"],
}


@pytest.mark.parametrize(
    "line, expect",
    [
        ("[1, 2, 3]", "all.txt:2: expected a JSON object with 'article', .* found an array"),
        ('"text"', "all.txt:2: expected a JSON object .* found a string"),
        ("7", "all.txt:2: expected a JSON object .* found a number"),
        ("null", "all.txt:2: expected a JSON object .* found null"),
        (
            json.dumps(dict(GOOD, options=["ABCD"])),
            r"all.txt:2: 'options'\[0\] is str, expected a list of 4 strings",
        ),
        (
            json.dumps(dict(GOOD, options=[["1", 2, "3", "4"]])),
            r"all.txt:2: 'options'\[0\]\[1\] is int, expected str",
        ),
        (
            json.dumps(dict(GOOD, answers=[1])),
            r"all.txt:2: 'answers'\[0\] is int, expected a letter",
        ),
        (
            json.dumps(dict(GOOD, questions=[3])),
            r"all.txt:2: 'questions'\[0\] is int, expected str",
        ),
    ],
    ids=[
        "array",
        "string",
        "number",
        "null",
        "options_str",
        "option_int",
        "answer_int",
        "question_int",
    ],
)
@pytest.mark.parametrize("use_spm", [True, False])
def test_lines_of_other_shapes_name_line_and_field(tmp_path, line, expect, use_spm):
    folder = tmp_path / "RACE" / "dev" / "middle"
    folder.mkdir(parents=True)
    (folder / "all.txt").write_text(json.dumps(GOOD) + "\n" + line + "\n")
    with pytest.raises(RaceDataError, match=expect):
        read_race_examples(str(tmp_path), "dev", middle_only=True, use_spm=use_spm)


def test_bytes_that_are_not_utf8_name_the_line(tmp_path):
    folder = tmp_path / "RACE" / "dev" / "middle"
    folder.mkdir(parents=True)
    text = json.dumps(dict(GOOD, article="caf\u00e9")) + "\n"
    bad = json.dumps(dict(GOOD, article="a @")).encode().replace(b"@", b"\xff")
    (folder / "all.txt").write_bytes(text.encode() + b"\n" + bad + b"\n")
    with pytest.raises(
        RaceDataError,
        match=r"middle/all.txt:3: invalid UTF-8 byte b'\\xff' \(byte column 27\); "
        "expected UTF-8 text",
    ):
        read_race_examples(str(tmp_path), "dev", middle_only=True)


def test_a_directory_or_file_in_the_wrong_place_is_an_error(tmp_path):
    """all.txt (or a numbered file) that is a directory was skipped silently, dropping a
    level; a level that is a file was reported as missing."""
    for level in ("middle", "high"):
        folder = tmp_path / "RACE" / "train" / level
        folder.mkdir(parents=True)
        (folder / "1.txt").write_text(json.dumps(GOOD) + "\n")
    (tmp_path / "RACE" / "train" / "high" / "all.txt").mkdir()
    with pytest.raises(
        RaceDataError, match=r"train/high/all.txt: a directory where a file was expected"
    ):
        read_race_examples(str(tmp_path), "train")
    (tmp_path / "RACE" / "train" / "high" / "all.txt").rmdir()
    (tmp_path / "RACE" / "train" / "middle" / "2.txt").mkdir()
    with pytest.raises(RaceDataError, match=r"middle/2.txt: a directory where a file was"):
        read_race_examples(str(tmp_path), "train")
    assert len(read_race_examples(str(tmp_path), "train", high_only=True)) == 1
    shutil.rmtree(tmp_path / "RACE" / "train" / "middle")
    (tmp_path / "RACE" / "train" / "middle").write_text("x\n")
    with pytest.raises(RaceDataError, match=r"train/middle: a file where a folder was expected"):
        read_race_examples(str(tmp_path), "train")
