"""Atomic result files."""

import os

import pytest

from albert_tf import fileio
from albert_tf.fileio import append_eval_results, atomic_write_text, read_text


def test_atomic_write_creates_folder_and_leaves_no_temporaries(tmp_path):
    path = tmp_path / "sub" / "out.txt"
    atomic_write_text(path, "a\n")
    atomic_write_text(path, "b\n")
    assert path.read_text() == "b\n"
    assert os.listdir(tmp_path / "sub") == ["out.txt"]


def test_failed_write_keeps_old_content(tmp_path):
    path = tmp_path / "out.txt"
    atomic_write_text(path, "old")
    with pytest.raises(TypeError):
        atomic_write_text(path, None)  # not text: fails while writing
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["out.txt"]


def test_eval_results_blocks(tmp_path):
    path = tmp_path / "eval_results.txt"
    assert read_text(path) == ""
    append_eval_results(path, {"b": 2.0, "a": 1}, 10)
    append_eval_results(path, {"a": 3}, 20)
    assert path.read_text() == "global_step = 10\na = 1\nb = 2.0\nglobal_step = 20\na = 3\n"


def test_atomic_path_renames_on_success_and_cleans_up_on_error(tmp_path):
    target = tmp_path / "sub" / "records.bin"
    with fileio.atomic_path(target) as tmp:
        assert os.path.dirname(tmp) == str(tmp_path / "sub") and tmp != str(target)
        with open(tmp, "wb") as f:
            f.write(b"one")
        assert not target.exists()  # nothing visible before the block ends
    assert target.read_bytes() == b"one"
    with pytest.raises(RuntimeError):
        with fileio.atomic_path(target) as tmp:
            with open(tmp, "wb") as f:
                f.write(b"two, half written")
            raise RuntimeError("crash")
    assert target.read_bytes() == b"one"
    assert os.listdir(tmp_path / "sub") == ["records.bin"]
