"""albert_tf/run/run_record.py: the input flags compared when a run resumes."""

from __future__ import annotations

import json
import os

import pytest

from albert_tf.errors import UserError
from albert_tf.run import run_record
from albert_tf.run.output_folder import RECORD_NAME


def test_recorded_values_are_compared_at_resume(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    values = {"input_file": "a.tfrecord,b-*.tfrecord", "train_batch_size": 8, "data_dir": None}
    run_record.write(str(tmp_path), values)
    recorded = json.loads((tmp_path / RECORD_NAME).read_text())
    assert recorded["input_file"] == f"{tmp_path}/a.tfrecord,{tmp_path}/b-*.tfrecord"
    # The same values (a relative path given as an absolute one too) resume.
    run_record.check_resume(str(tmp_path), values)
    run_record.check_resume(str(tmp_path), {**values, "input_file": recorded["input_file"]})
    with pytest.raises(UserError) as err:
        run_record.check_resume(str(tmp_path), {**values, "train_batch_size": 16})
    assert str(err.value) == (
        f"--train_batch_size=16: the checkpoints in --output_dir={tmp_path} were trained with "
        "--train_batch_size=8 (recorded in run_record.json); expected the same value to "
        "resume, or another --output_dir (or remove its checkpoints) to start afresh"
    )
    with pytest.raises(UserError, match="--input_file=gs://b/c: .* with --input_file="):
        run_record.check_resume(str(tmp_path), {"input_file": "gs://b/c"})


def test_a_folder_without_a_record_resumes_and_a_new_flag_is_not_compared(tmp_path):
    run_record.check_resume(str(tmp_path), {"train_batch_size": 8})
    run_record.write(str(tmp_path), {"train_batch_size": 8})
    run_record.check_resume(str(tmp_path), {"train_batch_size": 8, "max_seq_length": 64})
    assert os.listdir(tmp_path) == [RECORD_NAME]


def test_a_damaged_record_is_one_line(tmp_path):
    (tmp_path / RECORD_NAME).write_text("{")
    with pytest.raises(UserError, match="run_record.json: not JSON"):
        run_record.check_resume(str(tmp_path), {"train_batch_size": 8})
