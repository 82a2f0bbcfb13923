"""The one exception class for bad input from the user.

Anything a user can fix (a flag, a file, a config field, a checkpoint that does not
fit) is reported by raising `UserError` with a one-line message that names the flag,
file, line or field and says what was expected, for example

    raise UserError("--train_batch_size=-8: expected a positive integer")

The entry scripts print it as one `error: ...` line on stderr and exit with status 1
(albert_tf/cli.py); every other exception is a bug of ours and keeps its traceback.
Modules raise it directly instead of defining their own classes, so no caller has to
know which module's error to catch or thread an error class through its calls.
"""

from __future__ import annotations


class UserError(ValueError):
    """Bad input from the user; the message is one line naming what to fix."""


__all__ = ["UserError"]
