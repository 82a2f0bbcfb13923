"""Runs one of our entry points under an original module name (see albert/__init__.py)."""

from __future__ import annotations

import importlib
import os
import runpy
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# original module name -> (our entry: a script in the repository root or a module with
# main(argv) -> exit status, flags put before the command line's own)
ENTRIES = {
    "run_pretraining": ("run_pretraining.py", ()),
    "run_classifier": ("run_classifier.py", ()),
    "run_squad_v1": ("run_squad.py", ()),
    "run_squad_v2": ("run_squad.py", ("--version_2_with_negative",)),
    "run_race": ("run_race.py", ()),
    "create_pretraining_data": ("albert_tf.data.create_pretraining_data", ()),
    "export_checkpoints": ("albert_tf.export.command", ("--export_format=checkpoint",)),
    "export_to_tfhub": ("albert_tf.export.command", ("--export_format=saved_model",)),
}


def command_line(name: str, argv: list[str]) -> tuple[str, list[str]]:
    """(our entry, the argv it runs with) for `python -m albert.<name>` run as `argv`."""
    entry, preset = ENTRIES[name]
    return entry, [argv[0], *preset, *argv[1:]]


def run(name: str) -> None:
    """The body of `albert/<name>.py` run as __main__: our entry with this process's
    command line; exits with its status."""
    entry, argv = command_line(name, sys.argv)
    if not entry.endswith(".py"):
        sys.exit(importlib.import_module(entry).main(argv))
    path = os.path.join(REPO, entry)
    if not os.path.isfile(path):
        sys.stderr.write(
            f"{name}.py: error: {entry} is not beside the albert package (run from a "
            "checkout of the repository, or install it with pip install -e .)\n"
        )
        sys.exit(1)
    sys.argv = argv
    runpy.run_path(path, run_name="__main__")
