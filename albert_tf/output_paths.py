"""An input is never an output: the checks every script makes on the files it will
write, before any work.

- `check_not_an_input`: no output path may resolve to one of the run's inputs (the same
  file by another name, a symbolic link, or a folder holding it): `--output_file=c.txt`
  beside `--input_file=c.txt`, or run_race.py's `--train_file` (an output, the records
  it writes) given the user's all.txt (an input of run_squad.py's flag of that name).
- `check_replaceable`: an output file that already exists is replaced only if it is what
  the script writes there: a TFRecord file whose first record holds the expected
  features (an earlier run's output). A folder, a text file or records of other
  features are someone else's, and the run stops with one line instead of replacing
  them.

Local paths are compared after resolving links (`os.path.realpath`); remote paths
(gs://...) by their normalised text. The first record is read without TensorFlow for
local files (create_pretraining_data starts no TensorFlow runtime).
"""

from __future__ import annotations

import os
import posixpath
import struct
from typing import Iterable, Mapping, Sequence

from albert_tf import fileio
from albert_tf.errors import UserError


def _is_remote(path: str) -> bool:
    return "://" in path


def resolved(path: str) -> str:
    """The path a name stands for: links resolved (local), or normalised (remote)."""
    path = os.fspath(path)
    if _is_remote(path):
        scheme, rest = path.split("://", 1)
        return f"{scheme}://{posixpath.normpath(rest)}"
    return os.path.realpath(path)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def check_not_an_input(
    outputs: Mapping[str, str | None], inputs: Mapping[str, Iterable[str] | str | None]
) -> None:
    """UserError naming both flags when an output file (`outputs`: flag -> path) is one
    of the input files (`inputs`: flag -> path or paths), or a folder holding one."""
    named = []
    for flag, paths in inputs.items():
        if not paths:
            continue
        for path in [paths] if isinstance(paths, str) else paths:
            if path:
                named.append((flag, path, resolved(path)))
    for out_flag, out in outputs.items():
        if not out:
            continue
        target = resolved(out)
        for in_flag, path, source in named:
            if _inside(source, target):
                same = "is" if source == target else "holds"
                raise UserError(
                    f"{out_flag}={out} {same} an input of this run ({in_flag}={path}): "
                    "expected an output path that is not one of the inputs (it would be "
                    "overwritten)"
                )


class GFiles:
    """How outputs are inspected by default: albert_tf/fileio.py (the OS for local paths,
    tf.io.gfile for others). Any object with the same four functions (create_pretraining_
    data's Beam filesystems) can stand in."""

    @staticmethod
    def glob(path: str) -> list[str]:
        return [path] if fileio.exists(path) else []

    isdir = staticmethod(fileio.isdir)
    size = staticmethod(fileio.size)
    open = staticmethod(fileio.open_binary)


def _first_record(path: str, size: int, files) -> bytes | None:
    """The data of the first TFRecord of `path`, or None when the file is not framed as
    TFRecords (length, its checksum, data, checksum)."""
    with files.open(path) as f:
        header = f.read(12)
        data = f.read(min(max(size - 12, 0), 1 << 20))
    if len(header) < 12:
        return None
    (length,) = struct.unpack("<Q", header[:8])
    if 12 + length + 4 > size or length > len(data):
        return None
    return data[:length]


def check_replaceable(flag: str, path: str, feature_names: Sequence[str], files=GFiles) -> None:
    """UserError unless `path` is absent, empty, or a TFRecord file whose first record has
    every one of `feature_names` (what the run writes there: an earlier run's output,
    which it may replace). `files`: how to reach the path (`GFiles`)."""
    if not path:
        return
    if files.isdir(path):
        raise UserError(
            f"--{flag}={path}: a folder; expected the path of the TFRecord file this run writes"
        )
    if path not in files.glob(path):
        return
    size = files.size(path)
    if size == 0:
        return
    record = _first_record(path, size, files)
    missing = [n for n in feature_names if record is None or n.encode() not in record]
    if missing:
        what = "not a TFRecord file" if record is None else f"records without {missing[0]!r}"
        raise UserError(
            f"--{flag}={path}: exists and is not this run's output ({what}); expected a new "
            "path, or records this script wrote (it replaces only those)"
        )


__all__ = ["GFiles", "resolved", "check_not_an_input", "check_replaceable"]
