"""Where the encoder's stack of blocks may be run by other code than the plain model's.

albert_tf.model.modeling runs its blocks one after the other (`AlbertModel.run_blocks`)
unless a runner installed here returns the outputs itself. albert_tf.cpu.speed_paths
installs the one runner (the CPU speed paths, albert_tf.cpu) when the package is
imported; the model's modules import neither.
"""

from __future__ import annotations

from typing import Callable

# runner(model, x, attention_adder, training, output_rows) -> list of block outputs, or
# None for the plain stack.
_runner: Callable | None = None


def install(runner: Callable | None) -> None:
    """Makes `runner` run the encoder's stack (None: the plain stack always)."""
    global _runner
    _runner = runner


def run(model, x, attention_adder, training, output_rows):
    """The installed runner's outputs, or None (no runner, or it chose the plain stack)."""
    return None if _runner is None else _runner(model, x, attention_adder, training, output_rows)
