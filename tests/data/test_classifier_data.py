"""Tests of albert_tf.data.classifier_data: GLUE processors, features, cache, tf.data reader."""

import logging
import os

import numpy as np
import pytest

from albert_tf.data import classifier_data as cd

from record_fixtures import assert_records_sorted_by_feature_name
from repo_paths import REPO_ROOT
from tokenizer_fixtures import IDS_A, IDS_B, INTENDED_IDS_A, INTENDED_IDS_B, TEXT_A, TEXT_B

# ----------------------------------------------------------------------------------------------
# Helpers
# ----------------------------------------------------------------------------------------------


def write_tsv(root, folder, name, rows):
    """Writes rows (lists of fields) as a TSV file data_dir/folder/name; returns its path."""
    d = os.path.join(root, folder)
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, name)
    with open(path, "w", encoding="utf-8", newline="") as f:
        for row in rows:
            f.write("\t".join(row) + "\n")
    return path


class WordTokenizer:
    """Whitespace tokenizer; token "wN" has id N, [CLS] 2, [SEP] 3 (the 30k-clean layout)."""

    def tokenize(self, text):
        return text.split()

    def convert_tokens_to_ids(self, tokens):
        special = {"[CLS]": 2, "[SEP]": 3}
        return [special[t] if t in special else int(t[1:]) for t in tokens]


@pytest.fixture(scope="module")
def spm_model(tmp_path_factory):
    """A tiny SentencePiece model with the ALBERT special ids (pad 0, unk 1, [CLS] 2 ...)."""
    import sentencepiece as spm

    d = tmp_path_factory.mktemp("spm")
    corpus = d / "corpus.txt"
    words = [
        "the",
        "cat",
        "sat",
        "on",
        "mat",
        "dog",
        "ran",
        "fast",
        "slow",
        "hello",
        "world",
        "a",
        "b",
        "c",
        "quick",
        "brown",
        "fox",
        "jumps",
    ]
    rng = np.random.RandomState(0)
    corpus.write_text(
        "\n".join(" ".join(rng.choice(words, 8)) for _ in range(300)), encoding="utf-8"
    )
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(d / "m"),
        vocab_size=40,
        pad_id=0,
        unk_id=1,
        eos_id=-1,
        bos_id=-1,
        control_symbols=["[CLS]", "[SEP]", "[MASK]"],
        model_type="unigram",
        minloglevel=2,
    )
    return str(d / "m.model")


# ----------------------------------------------------------------------------------------------
# Processors
# ----------------------------------------------------------------------------------------------


def test_registry_and_unknown_task():
    assert set(cd.PROCESSORS) == {
        "cola",
        "sst-2",
        "mrpc",
        "sts-b",
        "qqp",
        "mnli",
        "mismnli",
        "qnli",
        "rte",
        "wnli",
        "ax",
    }
    assert isinstance(cd.get_processor("MRPC"), cd.MrpcProcessor)
    with pytest.raises(ValueError, match=r"unknown GLUE task 'foo'.*known tasks:.*'cola'"):
        cd.get_processor("foo")
    assert cd.get_processor("sts-b").is_regression
    assert not cd.get_processor("cola").is_regression
    assert cd.get_processor("sts-b").get_labels() == [None]
    assert cd.get_processor("mnli").get_labels() == ["contradiction", "entailment", "neutral"]


def test_cola(tmp_path):
    d = str(tmp_path)
    write_tsv(
        d,
        "CoLA",
        "train.tsv",
        [
            ["gj04", "1", "", "Our friends won't buy this."],
            ["gj04", "0", "*", "They drank the pub."],
        ],
    )
    write_tsv(d, "CoLA", "test.tsv", [["index", "sentence"], ["0", "Bill whistled."]])
    p = cd.get_processor("cola", use_spm=False)
    train = p.get_train_examples(d)
    # No header in train: the first line is example "train-0".
    assert train == [
        cd.InputExample("train-0", "Our friends won't buy this.", None, "1"),
        cd.InputExample("train-1", "They drank the pub.", None, "0"),
    ]
    assert p.get_test_examples(d) == [cd.InputExample("0", "Bill whistled.", None, "0")]


def test_sst2_and_quotes_are_plain_characters(tmp_path):
    d = str(tmp_path)
    write_tsv(
        d,
        "SST-2",
        "dev.tsv",
        [
            ["sentence", "label"],
            ["it 's a \"charming", "1"],
            ["and often affecting journey . ", "0"],
        ],
    )
    write_tsv(d, "SST-2", "test.tsv", [["index", "sentence"], ["7", "uneasy mishmash"]])
    p = cd.get_processor("sst-2", use_spm=False)
    dev = p.get_dev_examples(d)
    # QUOTE_NONE: the unbalanced quote does not swallow the next line.
    assert dev == [
        cd.InputExample("dev-1", "it 's a \"charming", None, "1"),
        cd.InputExample("dev-2", "and often affecting journey . ", None, "0"),
    ]
    assert p.get_test_examples(d) == [cd.InputExample("7", "uneasy mishmash", None, "0")]


def test_mrpc(tmp_path):
    d = str(tmp_path)
    header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
    write_tsv(d, "MRPC", "train.tsv", [header, ["1", "702876", "702977", "He said.", "She did."]])
    write_tsv(
        d,
        "MRPC",
        "test.tsv",
        [
            ["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            ["0", "1089874", "1089925", "A b.", "C d."],
        ],
    )
    p = cd.get_processor("mrpc", use_spm=False)
    assert p.get_train_examples(d) == [cd.InputExample("train-1", "He said.", "She did.", "1")]
    assert p.get_test_examples(d) == [cd.InputExample("0", "A b.", "C d.", "0")]


def test_stsb_regression_and_bad_float(tmp_path):
    d = str(tmp_path)
    header = [
        "index",
        "genre",
        "filename",
        "year",
        "old_index",
        "source1",
        "source2",
        "sentence1",
        "sentence2",
        "score",
    ]
    write_tsv(
        d,
        "STS-B",
        "train.tsv",
        [
            header,
            [
                "0",
                "main-captions",
                "MSRvid",
                "2012test",
                "0001",
                "none",
                "none",
                "A plane.",
                "A jet.",
                "5.000",
            ],
        ],
    )
    write_tsv(d, "STS-B", "test.tsv", [header[:-1], ["3", "g", "f", "y", "o", "s", "s", "x", "y"]])
    write_tsv(
        d,
        "STS-B",
        "dev.tsv",
        [
            header,
            ["0", "g", "f", "y", "o", "s", "s", "x", "y", "5"],
            ["1", "g", "f", "y", "o", "s", "s", "x", "y", "n/a"],
        ],
    )
    p = cd.get_processor("sts-b", use_spm=False)
    assert p.get_train_examples(d) == [cd.InputExample("0", "A plane.", "A jet.", 5.0)]
    assert p.get_test_examples(d) == [cd.InputExample("3", "x", "y", 0.0)]
    path = os.path.join(d, "STS-B", "dev.tsv")
    with pytest.raises(ValueError) as e:
        p.get_dev_examples(d)
    msg = str(e.value)
    assert path in msg and "line 3" in msg and "column 10" in msg and "'n/a'" in msg


def test_qqp_skips_short_train_rows_and_logs(tmp_path, caplog):
    d = str(tmp_path)
    header = ["id", "qid1", "qid2", "question1", "question2", "is_duplicate"]
    write_tsv(
        d,
        "QQP",
        "train.tsv",
        [
            header,
            ["1", "3", "4", "How?", "Why?", "0"],
            ["2", "5", "6", "broken line"],
            ["3", "7"],
            ["4", "8", "9", "Who?", "When?", "1"],
        ],
    )
    write_tsv(d, "QQP", "test.tsv", [["id", "question1", "question2"], ["0", "q1", "q2"]])
    p = cd.get_processor("qqp", use_spm=False)
    with caplog.at_level(logging.WARNING):
        train = p.get_train_examples(d)
    assert train == [
        cd.InputExample("1", "How?", "Why?", "0"),
        cd.InputExample("4", "Who?", "When?", "1"),
    ]
    assert p.last_skipped == 2
    assert "skipped 2 row(s)" in caplog.text
    assert p.get_test_examples(d) == [cd.InputExample("0", "q1", "q2", "0")]


def _mnli_row(index, a, b, label, ncols):
    row = [str(index)] + ["x"] * (ncols - 1)
    row[8], row[9], row[-1] = a, b, label
    return row


def test_mnli_and_mismnli(tmp_path):
    d = str(tmp_path)
    header = [f"h{i}" for i in range(12)]
    write_tsv(d, "MNLI", "train.tsv", [header, _mnli_row(0, "P.", "H.", "neutral", 12)])
    write_tsv(
        d,
        "MNLI",
        "dev_matched.tsv",
        [header + ["x"] * 4, _mnli_row(9, "P2.", "H2.", "entailment", 16)],
    )
    write_tsv(
        d,
        "MNLI",
        "dev_mismatched.tsv",
        [header + ["x"] * 4, _mnli_row(11, "P3.", "H3.", "contradiction", 16)],
    )
    write_tsv(d, "MNLI", "test_matched.tsv", [header[:10], _mnli_row(5, "P4.", "H4.", "H4.", 10)])
    write_tsv(d, "MNLI", "test_mismatched.tsv", [header[:10], _mnli_row(6, "P5", "H5", "H5", 10)])
    m = cd.get_processor("mnli", use_spm=False)
    mm = cd.get_processor("mismnli", use_spm=False)
    assert m.get_train_examples(d) == [cd.InputExample("0", "P.", "H.", "neutral")]
    assert mm.get_train_examples(d) == m.get_train_examples(d)
    assert m.get_dev_examples(d) == [cd.InputExample("9", "P2.", "H2.", "entailment")]
    assert mm.get_dev_examples(d) == [cd.InputExample("11", "P3.", "H3.", "contradiction")]
    assert m.get_test_examples(d) == [cd.InputExample("5", "P4.", "H4.", "contradiction")]
    assert mm.get_test_examples(d) == [cd.InputExample("6", "P5", "H5", "contradiction")]


@pytest.mark.parametrize(
    "task,folder,labels,test_label",
    [
        ("qnli", "QNLI", ["entailment", "not_entailment"], "entailment"),
        ("rte", "RTE", ["entailment", "not_entailment"], "entailment"),
        ("wnli", "WNLI", ["0", "1"], "0"),
    ],
)
def test_two_sentence_tasks(tmp_path, task, folder, labels, test_label):
    d = str(tmp_path)
    write_tsv(
        d,
        folder,
        "train.tsv",
        [["index", "s1", "s2", "label"], ["0", "First.", "Second.", labels[1]]],
    )
    write_tsv(d, folder, "test.tsv", [["index", "s1", "s2"], ["4", "T1.", "T2."]])
    p = cd.get_processor(task, use_spm=False)
    assert p.get_labels() == labels
    assert p.get_train_examples(d) == [cd.InputExample("0", "First.", "Second.", labels[1])]
    assert p.get_test_examples(d) == [cd.InputExample("4", "T1.", "T2.", test_label)]


def test_ax_is_registered_for_prediction(tmp_path):
    d = str(tmp_path)
    write_tsv(
        d,
        "diagnostic",
        "diagnostic.tsv",
        [["index", "sentence1", "sentence2"], ["0", "The cat sat.", "The cat did not sit."]],
    )
    p = cd.get_processor("ax", use_spm=False)
    assert p.get_test_examples(d) == [
        cd.InputExample("0", "The cat sat.", "The cat did not sit.", "contradiction")
    ]
    with pytest.raises(ValueError, match="no 'train' data"):
        p.get_train_examples(d)


def test_spm_mode_preprocesses_every_field(tmp_path):
    d = str(tmp_path)
    write_tsv(
        d,
        "RTE",
        "dev.tsv",
        [
            ["index", "s1", "s2", "label"],
            [" ID7 ", "  Café   AU lait ", "Naïve\u00a0Test", "Entailment"],
        ],
    )
    lower = cd.get_processor("rte", use_spm=True, do_lower_case=True).get_dev_examples(d)
    # Whitespace collapsed, accents removed (NFKD), lower-cased; the label too.
    assert lower == [cd.InputExample("id7", "cafe au lait", "naive test", "entailment")]
    # Without lower-casing the label "Entailment" is not a known label: clear error.
    with pytest.raises(ValueError, match=r"line 2, column 4: unknown label 'Entailment'"):
        cd.get_processor("rte", use_spm=True, do_lower_case=False).get_dev_examples(d)
    # WordPiece mode keeps fields as read.
    wp = cd.get_processor("rte", use_spm=False)
    with pytest.raises(ValueError, match="unknown label"):
        wp.get_dev_examples(d)


def test_malformed_rows_name_file_line_column(tmp_path):
    d = str(tmp_path)
    path = write_tsv(
        d,
        "MRPC",
        "dev.tsv",
        [
            ["Quality", "#1 ID", "#2 ID", "#1 String", "#2"],
            ["1", "1", "2", "a", "b"],
            ["0", "1", "2", "only a"],
        ],
    )
    with pytest.raises(ValueError) as e:
        cd.get_processor("mrpc", use_spm=False).get_dev_examples(d)
    msg = str(e.value)
    assert msg.startswith(f"{path}, line 3, column 5:")
    assert "only 4" in msg
    write_tsv(d, "MRPC", "train.tsv", [["h"] * 5, ["2", "1", "2", "a", "b"]])
    with pytest.raises(ValueError, match=r"train.tsv, line 2, column 1: unknown label '2'"):
        cd.get_processor("mrpc", use_spm=False).get_train_examples(d)
    # Undecodable bytes: line and column of the bad byte.
    bad = os.path.join(d, "SST-2")
    os.makedirs(bad)
    with open(os.path.join(bad, "train.tsv"), "wb") as f:
        f.write(b"sentence\tlabel\nok\t1\nab\xff\t0\n")
    with pytest.raises(ValueError, match=r"train.tsv, line 3, byte column 3: invalid UTF-8"):
        cd.get_processor("sst-2", use_spm=False).get_train_examples(d)
    with pytest.raises(FileNotFoundError, match="QNLI"):
        cd.get_processor("qnli").get_dev_examples(d)
    os.makedirs(os.path.join(d, "CoLA", "train.tsv"))
    with pytest.raises(FileNotFoundError, match=r"train.tsv: a directory, expected a GLUE data"):
        cd.get_processor("cola").get_train_examples(d)


# ----------------------------------------------------------------------------------------------
# Features
# ----------------------------------------------------------------------------------------------


def test_pair_truncation_and_packing_by_hand():
    tok = WordTokenizer()
    ex = cd.InputExample("g", "w11 w12 w13 w14 w15", "w21 w22 w23", "1")
    (f,) = cd.convert_examples_to_features([ex], ["0", "1"], 8, tok, False)
    # Budget 8 - 3 = 5: a 5>3 pop a; 4>3 pop a; 3 == 3 tie pops b -> a = 3 tokens, b = 2.
    assert f.input_ids == [2, 11, 12, 13, 3, 21, 22, 3]
    assert f.segment_ids == [0, 0, 0, 0, 0, 1, 1, 1]
    assert f.input_mask == [1] * 8
    assert f.label_id == 1 and f.is_real_example and f.guid == "g"

    ex = cd.InputExample("g", "w11", "w21 w22", "0")
    (f,) = cd.convert_examples_to_features([ex], ["0", "1"], 8, tok, False)
    assert f.input_ids == [2, 11, 3, 21, 22, 3, 0, 0]
    assert f.segment_ids == [0, 0, 0, 1, 1, 1, 0, 0]
    assert f.input_mask == [1, 1, 1, 1, 1, 1, 0, 0]
    assert f.label_id == 0


def test_single_truncation_empty_b_and_regression():
    tok = WordTokenizer()
    ex = cd.InputExample("g", "w5 w6 w7 w8 w9", None, "b")
    (f,) = cd.convert_examples_to_features([ex], ["a", "b", "c"], 5, tok, False)
    assert f.input_ids == [2, 5, 6, 7, 3]  # first max_seq_length - 2 tokens kept
    assert f.segment_ids == [0] * 5 and f.label_id == 1
    # An empty text_b gives the single-sequence layout, as in the original.
    (f,) = cd.convert_examples_to_features(
        [cd.InputExample("g", "w5", "", 2.5)], [None], 5, tok, True
    )
    assert f.input_ids == [2, 5, 3, 0, 0] and f.label_id == 2.5
    (f,) = cd.convert_examples_to_features([cd.PaddingInputExample()], ["0"], 4, tok, False)
    assert f.input_ids == [0] * 4 and f.input_mask == [0] * 4 and not f.is_real_example
    with pytest.raises(ValueError, match=r"unknown label 'z'"):
        cd.convert_examples_to_features(
            [cd.InputExample("g", "w5", None, "z")], ["0"], 5, tok, False
        )


def test_features_with_sentencepiece(spm_model):
    from albert_tf.data import tokenization

    tok = tokenization.FullTokenizer(spm_model_file=spm_model)
    ex = cd.InputExample("g", "the cat sat", "a dog", "1")
    (f,) = cd.convert_examples_to_features([ex], ["0", "1"], 32, tok, False)
    a = tok.convert_tokens_to_ids(tok.tokenize("the cat sat"))
    b = tok.convert_tokens_to_ids(tok.tokenize("a dog"))
    expected = [2] + a + [3] + b + [3]
    assert len(expected) < 32
    assert f.input_ids[: len(expected)] == expected
    assert f.input_ids[len(expected) :] == [0] * (32 - len(expected))
    assert f.segment_ids[: len(expected)] == [0] * (len(a) + 2) + [1] * (len(b) + 1)


# ----------------------------------------------------------------------------------------------
# TFRecords and tf.data
# ----------------------------------------------------------------------------------------------


def _examples(n, regression=False):
    return [
        cd.InputExample(
            str(i), f"w{10 + i} w{20 + i}", None, float(i) / 2 if regression else str(i % 2)
        )
        for i in range(n)
    ]


def test_tfrecord_round_trip_and_eval_padding(tmp_path):
    path = str(tmp_path / "out" / "eval.tf_record")
    n = cd.file_based_convert_examples_to_features(
        _examples(5), ["0", "1"], 6, WordTokenizer(), path, False
    )
    assert n == 5 and os.path.isfile(path)
    assert [p for p in os.listdir(tmp_path / "out") if p.endswith(".tmp")] == []
    assert_records_sorted_by_feature_name(path)
    batches = list(cd.classifier_dataset(path, 6, 2, is_training=False).as_numpy_iterator())
    assert len(batches) == 3
    for b in batches:
        assert b["input_ids"].shape == (2, 6) and b["input_ids"].dtype == np.int32
    np.testing.assert_array_equal(
        batches[0]["input_ids"], [[2, 10, 20, 3, 0, 0], [2, 11, 21, 3, 0, 0]]
    )
    np.testing.assert_array_equal(batches[0]["input_mask"], [[1, 1, 1, 1, 0, 0]] * 2)
    np.testing.assert_array_equal(batches[1]["label_ids"], [0, 1])
    # The last batch is padded with an all-zero example marked not real.
    np.testing.assert_array_equal(batches[2]["is_real_example"], [1, 0])
    np.testing.assert_array_equal(batches[2]["input_ids"][1], np.zeros(6))
    np.testing.assert_array_equal(batches[2]["input_ids"][0], [2, 14, 24, 3, 0, 0])
    # Static batch dimension (fixed-size batches, as TPUs need).
    spec = cd.classifier_dataset(path, 6, 2, is_training=False).element_spec
    assert spec["input_ids"].shape.as_list() == [2, 6]
    # drop_remainder instead of padding.
    dropped = list(cd.classifier_dataset(path, 6, 2, False, drop_remainder=True))
    assert len(dropped) == 2


def test_regression_labels_are_float(tmp_path):
    path = str(tmp_path / "stsb.tf_record")
    cd.file_based_convert_examples_to_features(
        _examples(3, True), [None], 5, WordTokenizer(), path, True
    )
    (b,) = list(cd.classifier_dataset(path, 5, 4, False, is_regression=True).as_numpy_iterator())
    assert b["label_ids"].dtype == np.float32
    np.testing.assert_allclose(b["label_ids"], [0.0, 0.5, 1.0, 0.0])
    np.testing.assert_array_equal(b["is_real_example"], [1, 1, 1, 0])


def test_training_order_repeat_and_full_shuffle(tmp_path):
    path = str(tmp_path / "train.tf_record")
    cd.file_based_convert_examples_to_features(
        _examples(6), ["0", "1"], 4, WordTokenizer(), path, False
    )
    # Buffer of 1: file order, repeated forever, full batches.
    ds = cd.classifier_dataset(path, 4, 4, is_training=True, shuffle_buffer=1)
    firsts = [int(x) for b in ds.take(3) for x in b["input_ids"][:, 1]]
    assert firsts == [10, 11, 12, 13, 14, 15, 10, 11, 12, 13, 14, 15]
    # Full shuffle: each epoch of 6 is a permutation of all records.
    ds = cd.classifier_dataset(path, 4, 3, is_training=True, full_shuffle=True, seed=1)
    firsts = [int(x) for b in ds.take(4) for x in b["input_ids"][:, 1]]
    assert sorted(firsts[:6]) == list(range(10, 16))
    assert sorted(firsts[6:]) == list(range(10, 16))


def test_sharding_by_input_context(tmp_path):
    import tensorflow as tf

    path = str(tmp_path / "eval.tf_record")
    cd.file_based_convert_examples_to_features(
        _examples(5), ["0", "1"], 4, WordTokenizer(), path, False
    )
    ctx = tf.distribute.InputContext(
        num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=2
    )
    # Global batch 4 -> 2 per replica; pipeline 1 sees records 1 and 3.
    (b,) = list(cd.classifier_dataset(path, 4, 4, False, input_context=ctx).as_numpy_iterator())
    np.testing.assert_array_equal(b["input_ids"][:, 1], [11, 13])
    ctx0 = tf.distribute.InputContext(2, 0, 2)
    batches = list(cd.classifier_dataset(path, 4, 4, False, input_context=ctx0))
    ids = [int(x) for b in batches for x in b["input_ids"][:, 1]]
    real = [int(x) for b in batches for x in b["is_real_example"]]
    assert ids == [10, 12, 14, 0] and real == [1, 1, 1, 0]


# ----------------------------------------------------------------------------------------------
# Feature cache
# ----------------------------------------------------------------------------------------------


def test_cache_key_and_reuse(tmp_path, spm_model):
    from albert_tf.data import tokenization

    data = str(tmp_path / "glue")
    cache = str(tmp_path / "cache")
    rows = [
        ["index", "s1", "s2", "label"],
        ["0", "the cat", "a dog", "entailment"],
        ["1", "hello world", "quick fox", "not_entailment"],
    ]
    write_tsv(data, "RTE", "train.tsv", rows)
    write_tsv(data, "QNLI", "train.tsv", rows)
    tok = tokenization.FullTokenizer(spm_model_file=spm_model)

    def build(task="rte", seq=16, lower=True, model=spm_model):
        return cd.cached_features(
            task, "train", data, cache, tok, seq, do_lower_case=lower, spm_model_file=model
        )

    first = build()
    assert not first.cache_hit and first.num_examples == 2
    assert os.path.basename(first.path) == f"rte_train_{first.key}.tf_record"
    mtime = os.stat(first.path).st_mtime_ns
    again = build()
    assert again.cache_hit and again.path == first.path and again.num_examples == 2
    assert os.stat(first.path).st_mtime_ns == mtime

    keys = {first.key}
    for variant in [dict(seq=32), dict(lower=False), dict(task="qnli")]:
        r = build(**variant)
        assert not r.cache_hit and r.key not in keys
        keys.add(r.key)
    # Another SentencePiece model (same name, different bytes) -> new key.
    other = tmp_path / "other.model"
    other.write_bytes(open(spm_model, "rb").read() + b"\0")
    assert (
        cd.feature_cache_key(
            "rte",
            "train",
            max_seq_length=16,
            do_lower_case=True,
            label_list=["entailment", "not_entailment"],
            data_files=[os.path.join(data, "RTE", "train.tsv")],
            spm_model_file=str(other),
        )
        not in keys
    )
    # Changed data bytes -> new key, and the new file holds the new data.
    write_tsv(data, "RTE", "train.tsv", rows + [["2", "a b", "c", "entailment"]])
    changed = build()
    assert not changed.cache_hit and changed.key not in keys and changed.num_examples == 3
    with pytest.raises(ValueError, match="spm_model_file or vocab_file"):
        cd.cached_features("rte", "train", data, cache, tok, 16, do_lower_case=True)


def test_empty_split_is_an_error_and_writes_no_cache(tmp_path, spm_model):
    from albert_tf.data import tokenization

    data, cache = str(tmp_path / "glue"), tmp_path / "cache"
    write_tsv(data, "RTE", "dev.tsv", [["index", "s1", "s2", "label"]])
    tok = tokenization.FullTokenizer(spm_model_file=spm_model)
    path = os.path.join(data, "RTE", "dev.tsv")
    with pytest.raises(ValueError, match=f"^{path}: holds no example; expected at least one$"):
        cd.cached_features(
            "rte", "dev", data, str(cache), tok, 16, do_lower_case=True, spm_model_file=spm_model
        )
    assert not cache.exists()
    # Examples the caller read already are used as given (no second read of the file).
    given = [cd.InputExample("dev-1", "the cat", "a dog", "entailment")]
    built = cd.cached_features(
        "rte",
        "dev",
        data,
        str(cache),
        tok,
        16,
        do_lower_case=True,
        spm_model_file=spm_model,
        examples=given,
    )
    assert built.num_examples == 1 and sorted(os.listdir(cache)) == sorted(
        [os.path.basename(built.path), os.path.basename(built.path) + ".json"]
    )


# ----------------------------------------------------------------------------------------------
# TFDS
# ----------------------------------------------------------------------------------------------


def test_tfds_examples_with_mock_data(tmp_path, spm_model):
    import tensorflow as tf
    import tensorflow_datasets as tfds

    from albert_tf.data import tokenization

    def as_dataset(builder, split=None, **kwargs):
        cfg = builder.builder_config.name
        if cfg == "mnli":
            return tf.data.Dataset.from_tensor_slices(
                {
                    "premise": [b"A  Man.", b"B."],
                    "hypothesis": [b"Sleeps.", b"Eats."],
                    "label": np.array([2, 0] if split != "test_mismatched" else [-1, -1], np.int64),
                    "idx": np.array([4, 9], np.int32),
                }
            )
        if cfg == "mrpc":
            return tf.data.Dataset.from_tensor_slices(
                {
                    "sentence1": [b"x"],
                    "sentence2": [b"y"],
                    "label": np.array([1], np.int64),
                    "idx": np.array([0], np.int32),
                }
            )
        if cfg == "stsb":
            return tf.data.Dataset.from_tensor_slices(
                {
                    "sentence1": [b"x"],
                    "sentence2": [b"y"],
                    "label": np.array([3.25], np.float32),
                    "idx": np.array([6], np.int32),
                }
            )
        raise AssertionError(cfg)

    with tfds.testing.mock_data(as_dataset_fn=as_dataset):
        mnli = cd.tfds_examples("mnli", "dev", use_spm=True, do_lower_case=True)
        # TFDS class 2 is "contradiction", 0 "entailment": mapped to the original strings.
        assert mnli == [
            cd.InputExample("4", "a man.", "sleeps.", "contradiction"),
            cd.InputExample("9", "b.", "eats.", "entailment"),
        ]
        test = cd.tfds_examples("mismnli", "test", use_spm=False)
        assert [e.label for e in test] == ["contradiction"] * 2
        assert cd.tfds_examples("mrpc", "train", use_spm=False) == [
            cd.InputExample("train-1", "x", "y", "1")
        ]
        assert cd.tfds_examples("sts-b", "dev", use_spm=False) == [
            cd.InputExample("6", "x", "y", 3.25)
        ]
        tok = tokenization.FullTokenizer(spm_model_file=spm_model)
        cached = cd.cached_features(
            "mnli",
            "dev",
            None,
            str(tmp_path),
            tok,
            16,
            do_lower_case=True,
            spm_model_file=spm_model,
            use_tfds=True,
        )
        assert cached.num_examples == 2 and not cached.cache_hit
        again = cd.cached_features(
            "mnli",
            "dev",
            None,
            str(tmp_path),
            tok,
            16,
            do_lower_case=True,
            spm_model_file=spm_model,
            use_tfds=True,
        )
        assert again.cache_hit and again.path == cached.path
        (b,) = list(cd.classifier_dataset(cached.path, 16, 2, False).as_numpy_iterator())
        np.testing.assert_array_equal(b["label_ids"], [0, 1])  # contradiction, entailment
    assert cd.tfds_name("mismnli", "dev") == ("glue/mnli", "validation_mismatched")
    assert cd.tfds_name("ax", "test") == ("glue/ax", "test")
    with pytest.raises(ValueError, match="no 'train' split"):
        cd.tfds_name("ax", "train")


# ----------------------------------------------------------------------------------------------
# Digit-comma pieces
# ----------------------------------------------------------------------------------------------


def test_default_features_equal_the_originals_python3_ids(tmp_path):
    from albert_tf.data.tokenization import FullTokenizer

    demo_spm = os.path.join(REPO_ROOT, "data", "demo", "spm.model")
    write_tsv(
        str(tmp_path),
        "MRPC",
        "train.tsv",
        [
            ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
            [
                "1",
                "1",
                "2",
                TEXT_A,
                TEXT_B,
            ],
        ],
    )
    processor = cd.get_processor("mrpc")
    examples = processor.get_train_examples(str(tmp_path))
    want = [2, *IDS_A, 3, *IDS_B, 3] + [0] * 5
    tokenizer = FullTokenizer(spm_model_file=demo_spm)
    [feature] = cd.convert_examples_to_features(examples, processor.get_labels(), 48, tokenizer)
    assert feature.input_ids == want
    intended = FullTokenizer(spm_model_file=demo_spm, digit_comma="intended")
    [other] = cd.convert_examples_to_features(examples, processor.get_labels(), 48, intended)
    assert other.input_ids == [2, *INTENDED_IDS_A, 3, *INTENDED_IDS_B, 3] + [0] * 6
