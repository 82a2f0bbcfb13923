"""SIGINT and SIGTERM outside the training loop, and the failures of the machine a run
cannot fix itself (a full disk), each turned into one line.

`raise_on_signals()` is active for the whole of every script's run (albert_tf/cli.py):
SIGINT or SIGTERM raise `RunInterrupted` in the main thread, so evaluation, prediction,
export, a data build or a wait for other workers stop at once, their temporaries are
removed on the way out (albert_tf/fileio.py) and the script exits with 128 + the signal
number after one line. The training loop installs its own handlers while it runs
(albert_tf/run/training.py: finish the steps, write a checkpoint, stop) and restores these.

`hold_for_test(point)` is a test hook: it lets a signal test stop a run at a named
point and signal it there, instead of guessing how long the run takes to get there.

`full_disk_message(err)` recognises a write that failed for lack of room (ENOSPC, a quota,
the file-size limit; TensorFlow's errors saying so) and names the file.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import signal
import threading
import time

from albert_tf.errors import RunInterrupted

SIGNALS = (signal.SIGINT, signal.SIGTERM)


def _raise(signum, frame):
    raise RunInterrupted(signum)


def install() -> None:
    """(Re)installs the handlers that raise RunInterrupted (main thread only). Waits that
    call into TensorFlow's cluster set-up call it again: TensorFlow's preemption notifier
    takes SIGTERM for itself."""
    if threading.current_thread() is threading.main_thread():
        for s in SIGNALS:
            signal.signal(s, _raise)


@contextlib.contextmanager
def raise_on_signals():
    """While active, SIGINT and SIGTERM raise RunInterrupted in the main thread (outside
    the main thread nothing is installed). The previous handlers come back afterwards."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in SIGNALS}
    install()
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler if handler is not None else signal.SIG_DFL)


# The test hook's environment variable: "<point>:<folder>" (tests/test_faults.py).
TEST_HOLD_ENV = "ALBERT_TF_TEST_HOLD"


def hold_for_test(point: str, until=lambda: False) -> None:
    """Does nothing unless the environment variable ALBERT_TF_TEST_HOLD is
    "<point>:<folder>" for this `point`, as only the tests set it. Then this process
    writes <folder>/<point>.held (the test now knows the run is at that point) and waits
    there until <folder>/<point>.release exists or `until()` is true, so a signal the test
    sends meanwhile arrives at exactly that point. Points: "evaluation_batch" (after the
    first batch of an evaluation or prediction, albert_tf/run/eval_outputs.py),
    "data_unit" (a data build's worker process, before its first unit, albert_tf/data/
    create_pretraining_data.py), "training_step_<N>" (the training loop after step N,
    before that step's save; until a signal was received, albert_tf/run/training.py),
    "output_written" (an export complete beside its destination, before the swap,
    albert_tf/run/output_writer.py)."""
    held, _, folder = os.environ.get(TEST_HOLD_ENV, "").partition(":")
    if held != point or not folder:
        return
    # The test's machine-local folder: os, not tf.io.gfile.
    with open(os.path.join(folder, f"{point}.held"), "w") as f:
        f.write(str(os.getpid()))
    release = os.path.join(folder, f"{point}.release")
    while not os.path.exists(release) and not until():
        time.sleep(0.02)  # a signal handler runs (and may raise) during the sleep


_NO_ROOM = re.compile(r"no space left on device|disk quota exceeded|file too large", re.I)
_PATH = re.compile(r"((?:[a-z]+://)?/[^\s'\",;]+)")
_NO_ROOM_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def full_disk_message(err: BaseException) -> str | None:
    """One line for a write the storage refused for lack of room (ENOSPC, a quota, the
    file-size limit), naming the file where the error does; None for any other error.
    TensorFlow reports these as ResourceExhaustedError or OutOfRangeError with the
    system's reason in the message; a checkpoint's file is named by its prefix."""
    if isinstance(err, OSError) and err.errno in _NO_ROOM_ERRNOS:
        where, reason = err.filename or "a file", err.strerror
    else:
        message = getattr(err, "message", None) or str(err)
        found = _NO_ROOM.search(message or "")
        if not found:
            return None
        message = re.sub(r"\{\{.*?\}\}", "", message)
        path = _PATH.search(message)
        where = re.sub(r"_temp/part-.*$", "", path.group(1)) if path else "a file"
        reason = found.group(0)
    return (
        f"no room to write {where} ({reason}): free space, raise the limit or choose "
        "another output folder, and run the same command again; no half-written file is kept"
    )


__all__ = ["SIGNALS", "install", "raise_on_signals", "full_disk_message"]
