"""What every entry script shares: oneDNN before TensorFlow loads, flags generated from the
script's options dataclass (albert_tf/options.py), and the main body (flags -> options ->
run -> report; a user error -> one line and exit status 1).

    from albert_tf import cli
    cli.prefer_onednn()                      # before TensorFlow loads
    from albert_tf import classifier         # noqa: E402
    cli.define_flags(classifier.ClassifierOptions)

    if __name__ == "__main__":
        cli.main(classifier.ClassifierOptions, classifier.run, report)
"""

from __future__ import annotations

import logging
import os
import sys

from absl import app

from albert_tf import options
from albert_tf.errors import UserError


def prefer_onednn() -> None:
    """Turns on TensorFlow's oneDNN CPU kernels unless TF_ENABLE_ONEDNN_OPTS is set.

    TensorFlow enables them by itself only on AVX-512 CPUs; on AVX2-only CPUs they
    make ALBERT-base about 40% faster (docs/benchmarks.md) and carry our layer-norm
    kernel. Takes effect only before TensorFlow is imported, so every entry script
    calls it before importing the library's TensorFlow modules.
    """
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def define_flags(options_cls) -> None:
    """The script's flags: one per field of its options dataclass."""
    options.define_flags(options_cls)


def main(options_cls, run, report=None) -> None:
    """Parses the flags, runs `run(options)` and passes its result to `report`. Bad input
    (UserError, or a file that does not exist) ends the script with `<script>: error:
    <message>` on stderr and exit status 1; a stop on SIGINT/SIGTERM, after the trainer
    wrote its checkpoint, with one line and status 128 + the signal number (130, 143);
    anything else is a bug and keeps its traceback."""
    from albert_tf.training import TrainingInterrupted

    script = os.path.basename(sys.argv[0])

    def _main(argv):
        if len(argv) > 1:
            raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
        logging.getLogger().setLevel(logging.INFO)
        try:
            result = run(options.from_flags(options_cls))
        except (UserError, FileNotFoundError) as err:
            sys.exit(f"{script}: error: {err}")
        except TrainingInterrupted as stop:
            sys.stderr.write(f"{script}: {stop}\n")
            sys.exit(128 + stop.signum)
        if report is not None:
            report(result)

    app.run(_main)
