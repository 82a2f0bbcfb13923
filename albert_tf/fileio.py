"""Atomic text output shared by every module that writes result files.

A reader (or a crash) never sees half a file: text goes to a temporary name
in the same folder and is renamed into place. Paths with a scheme
(`gs://...`) go through tf.io.gfile; local paths need no TensorFlow.

A process killed with SIGKILL cannot remove its temporaries, so their names
carry the host and process id (`owner_tag`), and the next writer of the same
file removes those whose process no longer runs (`remove_stale`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import socket
import tempfile

from albert_tf.errors import UserError

_logger = logging.getLogger(__name__)


def owner_tag() -> str:
    """The tag "<host>-<pid>" of this process, for the names of its temporary files."""
    host = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
    return f"{host}-{os.getpid()}"


def _pid_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


def remove_stale(directory: str, name_pattern: str) -> list[str]:
    """Removes the leftovers of killed processes of this host from `directory`.

    Args:
      directory: a local folder (a missing one holds nothing).
      name_pattern: regex that a whole entry name must match, with the placeholder
        `{owner}` where the name holds `owner_tag()`; it becomes this host's name
        and a captured process id.
    Returns the removed paths: entries (files or folders) whose process is not
    running. Our own and running processes' entries are kept, as are those of
    other hosts (a shared folder), whose processes cannot be checked from here.
    """
    host = owner_tag().rsplit("-", 1)[0]
    regex = re.compile(name_pattern.replace("{owner}", re.escape(host) + r"-(?P<pid>\d+)"))
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        match = regex.fullmatch(name)
        if not match:
            continue
        pid = int(match.group("pid"))
        if pid == os.getpid() or _pid_running(pid):
            continue
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
        removed.append(path)
    if removed:
        _logger.info(
            "removed %d temporary file(s) of killed runs: %s", len(removed), ", ".join(removed)
        )
    return removed


def _is_remote(path: str) -> bool:
    return "://" in path


def check_writable_folder(flag: str, value: str, folder: str | None = None) -> None:
    """Refuses (UserError naming --`flag`=`value`) a local folder (`folder`, default
    `value`) that this process could not create or write in: a file there or in place of
    a folder above it, or a nearest existing folder that refuses a file (read-only file
    system, permissions). Creates nothing that stays: the probe file is removed at once,
    and a missing folder is left for the run to create once all its inputs proved
    usable. Remote paths (gs://...) are left to the run."""
    folder = value if folder is None else folder
    if _is_remote(folder):
        return
    existing = os.path.abspath(folder)
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        found = "" if existing == os.path.abspath(value) else f" ({existing})"
        raise UserError(f"--{flag}={value}: expected a folder, found a file{found}")
    try:  # os.access says yes to root even on a read-only file system: try for real
        fd, probe = tempfile.mkstemp(prefix=".write_check_", dir=existing)
    except OSError as err:
        raise UserError(f"--{flag}={value}: cannot write in {existing}: {err.strerror}") from None
    os.close(fd)
    os.remove(probe)


def _umask() -> int:
    """This process's umask, read without changing it where Linux shows it (setting it
    to read it back would race with other threads creating files)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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
    prefix = f".{os.path.basename(path)}."
    remove_stale(directory, re.escape(prefix) + r"{owner}-\w+\.tmp")
    fd, tmp = tempfile.mkstemp(prefix=f"{prefix}{owner_tag()}-", suffix=".tmp", dir=directory)
    # mkstemp makes the file private (0600); the result gets the mode any new file of
    # this process gets (0644 under the usual umask), so others can read the results.
    os.fchmod(fd, 0o666 & ~_umask())
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
