"""One writer per output folder: a lock file `<output_dir>/.albert_tf.lock`.

Two runs on the same --output_dir would interleave their checkpoints (model.ckpt-2..6
from one, 8..12 from the other) and both report success. So a run that writes in an
output folder first creates the lock file, holding the host, process id and start time
of its process, and removes it when it ends (also on an error or a signal):

- a lock of a running process refuses the run with one line naming that process;
- a lock of a process of this host that no longer runs (killed with SIGKILL, a crash)
  is stale: the run takes it over, with a log line;
- a lock of another host cannot be checked from here: the run refuses and says which
  file to remove if that run is gone.

Local folders: the file is created with O_CREAT|O_EXCL, so of two runs starting at
the same moment exactly one gets it. Remote folders (gs://, and any file system
without exclusive creation): the lock is written, then read back after a moment; if
another run wrote it meanwhile, the later writer sees the other's content and stops.
Two runs started within that moment could both proceed (object stores have no atomic
create-if-absent through tf.io.gfile); runs started one after the other are always
caught. Only the chief worker takes the lock (the others write into the chief's
checkpoints through it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import time

import tensorflow as tf

from albert_tf import fileio
from albert_tf.errors import UserError
from albert_tf.run.output_folder import OutputFolder

_logger = logging.getLogger(__name__)
_REMOTE_SETTLE_S = 1.0


def lock_path(output_dir: str) -> str:
    return OutputFolder(output_dir).lock_path


def _owner() -> dict:
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def _read(path: str) -> dict | None:
    try:
        text = fileio.read_text(path)
    except (OSError, tf.errors.OpError):
        return None
    try:
        holder = json.loads(text)
    except ValueError:
        return {}  # being written, or damaged: held by someone unknown
    return holder if isinstance(holder, dict) else {}


def _stale(holder: dict) -> bool:
    """Whether the holder is a process of this host that no longer runs."""
    pid = holder.get("pid")
    if holder.get("host") != socket.gethostname() or not isinstance(pid, int):
        return False
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's process: running
        return False
    return False


def _refuse(output_dir: str, holder: dict, flag: str = "--output_dir") -> UserError:
    path = lock_path(output_dir)
    who = (
        f"process {holder.get('pid')} on {holder.get('host')}, started {holder.get('started')}"
        if holder
        else "a run that left an unreadable lock"
    )
    return UserError(
        f"{flag}={output_dir}: another run writes in it ({who}; {path}); expected "
        f"one run per output folder: wait for it, use another {flag}, or remove "
        f"{path} if that run is gone"
    )


def _create_local(path: str, text: str) -> bool:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return True


def check_free(output_dir: str, flag: str = "--output_dir") -> None:
    """UserError (naming `flag`) when a running process holds the lock of `output_dir`
    (checked before any work; `acquire` takes the lock once the folder exists)."""
    path = lock_path(output_dir)
    if tf.io.gfile.exists(path):
        holder = _read(path)
        if holder is not None and not _stale(holder):
            raise _refuse(output_dir, holder, flag)


def acquire(output_dir: str) -> dict:
    """Takes the lock of `output_dir` (which must exist); returns what it holds.
    UserError when another run holds it."""
    path = lock_path(output_dir)
    owner = _owner()
    text = json.dumps(owner) + "\n"
    if "://" not in path:
        for _ in range(3):
            if _create_local(path, text):
                return owner
            holder = _read(path)
            if holder is None:  # removed meanwhile: try again
                continue
            if not _stale(holder):
                raise _refuse(output_dir, holder)
            _logger.warning("taking over the stale lock %s of a process gone: %s", path, holder)
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)  # a local path: O_EXCL creation needs the OS
        raise _refuse(output_dir, _read(path) or {})
    holder = _read(path) if tf.io.gfile.exists(path) else None
    if holder is not None and not _stale(holder):
        raise _refuse(output_dir, holder)
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(text)
    time.sleep(_REMOTE_SETTLE_S)
    holder = _read(path)
    if holder != owner:
        raise _refuse(output_dir, holder or {})
    return owner


def release(output_dir: str, owner: dict) -> None:
    """Removes the lock if it is still `owner`'s."""
    path = lock_path(output_dir)
    with contextlib.suppress(OSError, tf.errors.OpError):
        if _read(path) == owner:
            tf.io.gfile.remove(path)


@contextlib.contextmanager
def hold(output_dir: str, enabled: bool = True):
    """The lock of `output_dir` for the duration of the block (nothing when not
    `enabled`: a non-chief worker)."""
    if not enabled:
        yield
        return
    owner = acquire(output_dir)
    try:
        yield
    finally:
        release(output_dir, owner)


__all__ = ["lock_path", "check_free", "acquire", "release", "hold"]
