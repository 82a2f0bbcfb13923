"""albert_tf/output_paths.py: an input is never an output."""

from __future__ import annotations

import os

import pytest
import tensorflow as tf

from albert_tf import output_paths
from albert_tf.errors import UserError


def _records(path, names):
    with tf.io.TFRecordWriter(str(path)) as writer:
        feature = tf.train.Feature(int64_list=tf.train.Int64List(value=[1, 2]))
        example = tf.train.Example(
            features=tf.train.Features(feature=dict.fromkeys(names, feature))
        )
        writer.write(example.SerializeToString())


def test_an_output_that_is_an_input_by_any_name_is_refused(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("text\n")
    os.symlink(corpus, tmp_path / "link.txt")
    for out in (str(corpus), str(tmp_path / "link.txt"), f"{tmp_path}/./c.txt"):
        with pytest.raises(UserError, match=f"--output_file={out} is an input of this run"):
            output_paths.check_not_an_input({"--output_file": out}, {"--input_file": [str(corpus)]})
    with pytest.raises(UserError, match=f"--export_path={tmp_path} holds an input"):
        output_paths.check_not_an_input({"--export_path": str(tmp_path)}, {"--dir": str(corpus)})
    output_paths.check_not_an_input(
        {"--output_file": str(tmp_path / "new")}, {"--i": [str(corpus)]}
    )
    with pytest.raises(UserError, match="is an input"):
        output_paths.check_not_an_input({"--o": "gs://b/x/../c.txt"}, {"--i": ["gs://b/c.txt"]})


def test_only_missing_empty_or_our_own_records_are_replaced(tmp_path):
    names = ("input_ids", "label_ids")
    output_paths.check_replaceable("f", str(tmp_path / "absent"), names)
    (tmp_path / "empty").write_bytes(b"")
    output_paths.check_replaceable("f", str(tmp_path / "empty"), names)
    _records(tmp_path / "ours", names)
    output_paths.check_replaceable("f", str(tmp_path / "ours"), names)
    _records(tmp_path / "other", ("token_ids",))
    with pytest.raises(UserError, match="not this run's output \\(records without 'input_ids'\\)"):
        output_paths.check_replaceable("f", str(tmp_path / "other"), names)
    (tmp_path / "text").write_text('{"article": "x"}\n' * 100)
    with pytest.raises(
        UserError, match="--f=.*text: exists and is not .*\\(not a TFRecord file\\)"
    ):
        output_paths.check_replaceable("f", str(tmp_path / "text"), names)
    with pytest.raises(UserError, match="a folder; expected the path of the TFRecord file"):
        output_paths.check_replaceable("f", str(tmp_path), names)
