"""albert_tf/interrupts.py: signals and a full disk as one line."""

from __future__ import annotations

import errno
import signal

import pytest

from albert_tf import interrupts
from albert_tf.errors import RunInterrupted


def test_sigterm_raises_run_interrupted_and_the_handlers_come_back():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(RunInterrupted) as stop:
        with interrupts.raise_on_signals():
            signal.raise_signal(signal.SIGTERM)  # the handler runs before this returns
    assert stop.value.signum == signal.SIGTERM
    assert str(stop.value).startswith("interrupted by SIGTERM; no partial output was left")
    assert signal.getsignal(signal.SIGTERM) == before


class _TfError(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.message = message


def test_a_full_disk_is_named_by_its_file():
    line = interrupts.full_disk_message(OSError(errno.ENOSPC, "No space left on device", "/o/x"))
    assert line.startswith("no room to write /o/x (No space left on device): free space")
    saved = _TfError(
        "{{function_node __wrapped__SaveV2_dtypes_2_device_/job:localhost/replica:0/task:0/"
        "device:CPU:0}} /o/ckpt-2_temp/part-00000-of-00001.data-00000-of-00001.tempstate1; "
        "No space left on device [Op:SaveV2]"
    )
    assert interrupts.full_disk_message(saved).startswith(
        "no room to write /o/ckpt-2 (No space left on device)"
    )
    assert interrupts.full_disk_message(_TfError("gs://b/o/x.tfrecord; Disk quota exceeded"))
    assert interrupts.full_disk_message(ValueError("shapes differ")) is None
    assert interrupts.full_disk_message(OSError(errno.EACCES, "Permission denied", "/o")) is None
