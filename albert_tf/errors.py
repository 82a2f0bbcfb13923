"""The exceptions the entry scripts report without a traceback: bad input from the user
(`UserError`) and a run stopped by a signal (`TrainingInterrupted` in the training loop,
`RunInterrupted` anywhere else).

Anything a user can fix (a flag, a file, a config field, a checkpoint that does not
fit) is reported by raising `UserError` with a one-line message that names the flag,
file, line or field and says what was expected, for example

    raise UserError("--train_batch_size=-8: expected a positive integer")

The entry scripts print it as one `<script>: error: ...` line on stderr and exit with status 1
(albert_tf/cli.py); every other exception is a bug of ours and keeps its traceback.
Modules raise it directly instead of defining their own classes, so no caller has to
know which module's error to catch or thread an error class through its calls.
"""

from __future__ import annotations

import signal


class UserError(ValueError):
    """Bad input from the user; the message is one line naming what to fix."""


class RunInterrupted(BaseException):
    """SIGINT or SIGTERM stopped a run outside the training loop (evaluation, prediction,
    export, a data build, a wait for workers); raised in the main thread by the handler
    of `albert_tf.interrupts.raise_on_signals`. A BaseException, as KeyboardInterrupt,
    so that no `except Exception` swallows it; every temporary file is removed on the way
    out (fileio.atomic_path) and the scripts exit with 128 + the signal number."""

    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(
            f"interrupted by {signal.Signals(signum).name}; no partial output was left: "
            "run the same command again to redo what was cut short"
        )


class TrainingInterrupted(Exception):
    """SIGINT or SIGTERM stopped training after a checkpoint at `step` was written
    (albert_tf/run/training.py); the scripts exit with 128 + the signal number."""

    def __init__(self, signum: int, step: int, checkpoint: str):
        self.signum, self.step, self.checkpoint = signum, step, checkpoint
        super().__init__(
            f"interrupted by {signal.Signals(signum).name} at step {step}: "
            f"wrote {checkpoint}; run the same command again to continue"
        )


__all__ = ["UserError", "RunInterrupted", "TrainingInterrupted"]
