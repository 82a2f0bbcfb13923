"""What every entry script shares: oneDNN before TensorFlow loads, flags generated from the
script's options dataclass (albert_tf/options.py), and the main body (flags -> options ->
run -> report) with one way of reporting bad input.

    from albert_tf import cli
    cli.prefer_onednn()                      # before TensorFlow loads
    from albert_tf import classifier         # noqa: E402
    cli.define_flags(classifier.ClassifierOptions)

    if __name__ == "__main__":
        cli.main(classifier.ClassifierOptions, classifier.run, report)

Bad input (a flag absl cannot parse, `UserError`, a file that does not exist) ends a
script with exactly one line on stderr and exit status 1:

    <script>: error: <what, naming the flag, file or field>: <what was expected>

`execute` is that whole body for any argv; it returns the exit status instead of leaving
the process, so tests (and notebooks) run a script's command line in process.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

from albert_tf import interrupts, options
from albert_tf.errors import RunInterrupted, TrainingInterrupted, UserError

HELP_FLAGS = ("--help", "-h", "-?", "--helpshort", "--helpfull")


def prefer_onednn() -> None:
    """Turns on TensorFlow's oneDNN CPU kernels unless TF_ENABLE_ONEDNN_OPTS is set.

    TensorFlow enables them by itself only on AVX-512 CPUs; on AVX2-only CPUs they
    took ALBERT-base float32 inference from 4.77 to 6.43 sequences/s on our AVX2 machine
    (docs/benchmarks.md, "AVX2 only") and carry our layer-norm
    kernel. Takes effect only before TensorFlow is imported, so every entry script
    calls it before importing the library's TensorFlow modules.
    """
    os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


def define_flags(options_cls) -> None:
    """The script's flags: one per field of its options dataclass."""
    options.define_flags(options_cls)


def error_line(script: str, err: BaseException) -> str:
    """`<script>: error: <message>`: the one line a user error is reported with. A message
    of several lines (a list of mismatches) is joined with "; "; a file the system did
    not find is named with the system's reason."""
    if isinstance(err, OSError) and err.filename is not None:
        message = f"{err.filename}: {err.strerror}"
    else:
        message = "; ".join(line.strip() for line in str(err).splitlines() if line.strip())
    return f"{script}: error: {message or type(err).__name__}"


def execute(options_cls, run, argv, report=None, flag_values=None, description=None) -> int:
    """Runs a script's command line: parses `argv` into the options, calls `run(options)`
    and passes its result to `report`. Returns the exit status: 0; 1 after one `error_line` on
    stderr for bad input (flags, UserError, a missing file); 128 + the signal number
    (130, 143) after one line when SIGINT/SIGTERM stopped the run (training writes its
    checkpoint first; anything else stops at once, its temporaries removed:
    albert_tf/interrupts.py); 1 after one line for a full disk. Any other exception is a
    bug of ours and keeps its traceback.

    flag_values: the absl FlagValues holding the flags of `options_cls` (the scripts'
      global FLAGS); by default a private one is made, so any number of command lines
      can run in one process. description: printed above the flags by --help.
    """
    from absl import flags

    script = os.path.basename(argv[0])
    values = flag_values
    if values is None:
        values = flags.FlagValues()
        options.define_flags(options_cls, values, module_name=argv[0])
    if any(arg in HELP_FLAGS for arg in argv[1:]):
        text = values.module_help(argv[0])
        sys.stdout.write(f"{description.strip()}\n\n{text}\n" if description else f"{text}\n")
        return 0
    try:
        try:
            rest = values(list(argv))
        except flags.Error as err:
            raise UserError(str(err)) from None
        if len(rest) > 1:
            raise UserError(
                f"unexpected arguments {' '.join(rest[1:])!r}: expected only --flag=value"
            )
        parsed = options.from_flags(options_cls, values)
        with interrupts.raise_on_signals():
            result = run(parsed)
    except (UserError, FileNotFoundError) as err:
        sys.stderr.write(error_line(script, err) + "\n")
        return 1
    except (TrainingInterrupted, RunInterrupted) as stop:
        sys.stderr.write(f"{script}: {stop}\n")
        return 128 + stop.signum
    except Exception as err:
        full = interrupts.full_disk_message(err)
        if full is None:
            raise  # a bug of ours: its traceback
        sys.stderr.write(f"{script}: error: {full}\n")
        return 1
    if report is not None:
        report(result)
    return 0


def main(options_cls, run, report=None) -> None:
    """The body of an entry script whose flags `define_flags` put on absl's global FLAGS:
    logs at INFO through absl's handler, then `execute` with sys.argv, and exits with
    its status."""
    from absl import flags
    from absl import logging as absl_logging

    absl_logging.use_absl_handler()
    logging.getLogger().setLevel(logging.INFO)
    main_module = sys.modules.get("__main__")
    status = execute(
        options_cls,
        run,
        sys.argv,
        report,
        flag_values=flags.FLAGS,
        description=getattr(main_module, "__doc__", None),
    )
    exit_now_if_stuck(status)
    sys.exit(status)


STUCK_THREAD_PREFIX = "albert_tf-wait"  # threads left blocked in TensorFlow by a timed-out wait


def exit_now_if_stuck(status: int) -> None:
    """Leaves the process at once (after flushing) when a wait that timed out or was
    interrupted left a thread blocked inside TensorFlow (albert_tf.run.distribute): the
    interpreter's normal exit would wait for TensorFlow's cluster threads forever."""
    if any(t.name.startswith(STUCK_THREAD_PREFIX) and t.is_alive() for t in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(status)


__all__ = [
    "prefer_onednn",
    "define_flags",
    "error_line",
    "execute",
    "main",
    "exit_now_if_stuck",
    "HELP_FLAGS",
    "STUCK_THREAD_PREFIX",
]
