"""The flags that shape a training run's input, recorded with the run and compared when
it resumes.

A resumed run restores the input position of its checkpoint: with another --input_file
it would go on reading the old files' order from that position without a word, with
another --train_batch_size or --max_seq_length it would fail deep inside TensorFlow
(after new feature files were written). So a training run writes the values of the
flags its task names (`driver.Task.input_shape`: input files, batch size, sequence
length, masking) to `<output_dir>/run_record.json`, and a run that resumes from that
folder's checkpoints first compares its own values with them: a difference is one line
naming the flag, both values and how to start afresh, before anything is written.

A folder without the file (an older albert_tf, or the original's) is resumed as before
and gets the file. Paths are compared as absolute paths (local) or as given (gs://).
"""

from __future__ import annotations

import os

from albert_tf.errors import UserError
from albert_tf.run.output_folder import RECORD_NAME, OutputFolder


def _normalised(flag: str, value):
    """Local paths of *_file / *_dir flags made absolute (comma-separated lists too)."""
    if not isinstance(value, str) or not flag.endswith(("_file", "_dir")) or not value:
        return value
    parts = [p.strip() for p in value.split(",")]
    return ",".join(p if "://" in p or not p else os.path.abspath(p) for p in parts)


def normalised(values: dict) -> dict:
    return {flag: _normalised(flag, value) for flag, value in values.items()}


def read(output_dir: str) -> dict | None:
    """The recorded values, or None when the folder has no record."""
    return OutputFolder(output_dir).read_record()


def check_resume(output_dir: str, values: dict) -> None:
    """UserError naming the first flag whose value differs from the one recorded in
    `output_dir` (a flag the record lacks is not compared)."""
    recorded = read(output_dir)
    if not recorded:
        return
    for flag, value in normalised(values).items():
        if flag in recorded and recorded[flag] != value:
            raise UserError(
                f"--{flag}={value}: the checkpoints in --output_dir={output_dir} were "
                f"trained with --{flag}={recorded[flag]} (recorded in {RECORD_NAME}); "
                f"expected the same value to resume, or another --output_dir (or remove "
                "its checkpoints) to start afresh"
            )


def write(output_dir: str, values: dict) -> None:
    """Records `values` for later resumes (chief only; atomic)."""
    if values:
        OutputFolder(output_dir).write_record(normalised(values))


__all__ = ["read", "check_resume", "write", "normalised"]
