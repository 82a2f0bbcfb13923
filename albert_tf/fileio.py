"""Atomic text output shared by every module that writes result files.

A reader (or a crash) never sees half a file: text goes to a temporary name
in the same folder and is renamed into place. Paths with a scheme
(`gs://...`) go through tf.io.gfile; local paths need no TensorFlow.
"""

from __future__ import annotations

import contextlib
import os
import tempfile


def _is_remote(path: str) -> bool:
    return "://" in path


@contextlib.contextmanager
def atomic_path(path):
    """Yields a temporary name in `path`'s folder (created if needed) to write to; on
    success it is renamed to `path`, on an exception removed. Remote paths use
    `path + ".tmp"` through tf.io.gfile."""
    path = os.fspath(path)
    if _is_remote(path):
        import tensorflow as tf

        tmp = f"{path}.tmp"
        try:
            yield tmp
            tf.io.gfile.rename(tmp, path, overwrite=True)
        except BaseException:
            if tf.io.gfile.exists(tmp):
                tf.io.gfile.remove(tmp)
            raise
        return
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp",
                               dir=directory)
    os.close(fd)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def atomic_write_text(path, text: str) -> None:
    """Writes `text` (UTF-8, "\n" newlines) to `path` atomically, creating its folder."""
    with atomic_path(path) as tmp:
        if _is_remote(tmp):
            import tensorflow as tf

            with tf.io.gfile.GFile(tmp, "w") as f:
                f.write(text)
        else:
            with open(tmp, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)


def read_text(path) -> str:
    """The file's text, or "" when it does not exist."""
    path = os.fspath(path)
    if _is_remote(path):
        import tensorflow as tf

        if not tf.io.gfile.exists(path):
            return ""
        with tf.io.gfile.GFile(path) as f:
            return f.read()
    if not os.path.exists(path):
        return ""
    with open(path, encoding="utf-8") as f:
        return f.read()


def append_eval_results(path, metrics: dict, global_step: int) -> None:
    """Appends a "key = value" block, global_step first, like the original's eval_results.txt."""
    lines = [f"global_step = {global_step}"] + [f"{k} = {metrics[k]}" for k in sorted(metrics)]
    atomic_write_text(path, read_text(path) + "\n".join(lines) + "\n")
