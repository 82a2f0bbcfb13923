"""The one switch between the plain model and the CPU speed paths.

The model is albert_tf.model.layers and albert_tf.model.modeling: the original's
computation in standard TensorFlow ops. On CPUs some passes run faster as other code
(albert_tf.cpu): that code replaces the encoder's stack of blocks from outside, through
the model's one hook (albert_tf.model.encoder_runner), which `use` fills. The switch has
three settings:

  * "auto" (the scripts' default): on a CPU-only machine the CPU speed paths that need
    nothing but TensorFlow (XLA-fused elementwise work, oneDNN's layer norm in inference,
    summed shared-kernel gradients, fused inference QKV, last-layer row selection, the
    allocator choice for large models); with a GPU or TPU the plain model. Nothing is
    compiled.
  * "plain": the plain model everywhere (standard ops, autodiff).
  * "native": "auto" plus the C++ kernels of albert_tf/cpu/native/ on a CPU-only
    machine, built on this machine at their first use (15-50 s, once; the library is
    cached, and so is a failed build, see albert_tf.cpu.native_kernels).

Scripts take it as `--speed_paths` (`SpeedPathOptions`) and set it when their run starts;
in Python the plain model runs until `albert_tf.speed_paths.use("auto")` (or "native")
is called, before the model is traced.

Each traced encoder call decides once what runs (`choose`) and hands that down
(albert_tf.cpu.paths). The speed paths run only when the model's blocks are exactly the
plain code they were checked against (albert_tf.cpu.encoder.plain_code_changes): an
edited or subclassed block runs as written, and the log says why. The first traced call
logs what was chosen and why.

Each path was chosen by measurements on CPUs (docs/benchmarks.md); each gives the plain
model's numbers to float rounding (tests/cpu/). None was measured on a GPU or
TPU, and some cannot run there (oneDNN's layer norm exists only in CPU builds).

Not decided here: TensorFlow's oneDNN CPU kernels (albert_tf.cli.prefer_onednn), which
must be switched on before TensorFlow loads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging

from albert_tf.cpu.paths import CPU_AUTO, CPU_NATIVE, PLAIN, SpeedPaths, take, taken
from albert_tf.model import encoder_runner
from albert_tf.options import Options, option

MODES = ("auto", "plain", "native")
_logger = logging.getLogger(__name__)


@dataclasses.dataclass(kw_only=True)
class SpeedPathOptions(Options):
    """Options of the scripts that build the model: the speed-path switch, which their
    run sets with `use` before anything is traced."""

    speed_paths: str = option(
        "auto",
        "auto: on a CPU-only machine the CPU speed paths that need no compiler (XLA-fused "
        "elementwise work, oneDNN layer norm, summed shared-kernel gradients), with a GPU "
        "or TPU the plain model; plain: the plain model everywhere; native: auto plus C++ "
        "kernels built on this machine at first use (15-50 s, once). See "
        "albert_tf/cpu/speed_paths.py.",
        choices=MODES,
    )


_mode = "plain"
_forced: SpeedPaths | None = None
_logged: set = set()


def use(mode: str) -> None:
    """Sets the switch for this process: "auto", "plain" or "native" (see the module
    docstring). Graphs traced before keep their choice."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"speed paths must be one of {', '.join(MODES)}; got {mode!r}")
    _mode = mode
    encoder_runner.install(_run_encoder)


def mode() -> str:
    """The switch's setting ("plain" until `use` is called)."""
    return _mode


def accelerator_present() -> bool:
    """Whether TensorFlow computes on a GPU or TPU: one is visible to this process, or
    the current distribution strategy is a TPUStrategy (a Cloud TPU reached over the
    network shows no local device).

    Lists physical devices only, which starts no runtime: it may be called before
    devices are configured (logical CPUs, memory growth) or the allocator is chosen.
    """
    import tensorflow as tf

    if tf.config.list_physical_devices("GPU") or tf.config.list_physical_devices("TPU"):
        return True
    tpu_strategies = tuple(
        c
        for c in (
            getattr(tf.distribute, "TPUStrategy", None),
            getattr(tf.distribute.experimental, "TPUStrategy", None),
        )
        if c is not None
    )
    return isinstance(tf.distribute.get_strategy(), tpu_strategies)


def _float16_policy() -> bool:
    """Whether Keras computes in float16 (`--dtype=mixed_float16`, meant for GPUs)."""
    import keras  # only when a decision is made: importing this module stays light

    return keras.mixed_precision.global_policy().compute_dtype == "float16"


def _decide() -> tuple[SpeedPaths, str]:
    """(the paths, why) for the switch's setting and the devices, or what `forced` set."""
    if _forced is not None:
        return _forced, "forced"
    if _mode == "plain":
        return PLAIN, "plain"
    if accelerator_present():
        return PLAIN, f"{_mode} with a GPU or TPU: the plain model"
    if _float16_policy():
        return (
            PLAIN,
            f"{_mode} under mixed_float16: the plain model (CPU paths: float32, bfloat16)",
        )
    if _mode == "native":
        return CPU_NATIVE, "native on CPU: the CPU speed paths and the C++ kernels"
    return CPU_AUTO, "auto on CPU: the CPU speed paths without the C++ kernels"


def choose() -> SpeedPaths:
    """The speed paths for what is traced now (see `use` and `forced`)."""
    return _decide()[0]


def describe() -> str:
    """One line: the switch, what it chose here and why."""
    paths, why = _decide()
    taken = ", ".join(paths.names()) or "none"
    return f"speed paths: {why} (taken: {taken})"


@contextlib.contextmanager
def forced(paths: SpeedPaths):
    """Within this block (process-wide), `choose()` returns `paths`, whatever the switch
    and the devices, and the encoder's hook is installed. For tests and benches:
    `forced(PLAIN)` traces the plain model, `forced(CPU_NATIVE)` the C++ kernels on any
    device. Graphs traced inside keep their choice after the block ends."""
    global _forced
    if not isinstance(paths, SpeedPaths):
        raise TypeError(f"forced() expects a SpeedPaths, got {type(paths).__name__}")
    previous, _forced = _forced, paths
    previously_taken = taken()
    encoder_runner.install(_run_encoder)
    take(paths)
    try:
        yield paths
    finally:
        _forced = previous
        take(previously_taken)


def _log_once(level, message: str) -> None:
    if message not in _logged:
        _logged.add(message)
        _logger.log(level, "%s", message)


def _run_encoder(model, x, adder, training, output_rows):
    """albert_tf.model.modeling's encoder stack on the CPU speed paths where the switch
    takes them and the model is the plain code they replace; None: the plain stack runs."""
    paths, why = _decide()
    if paths == PLAIN:
        _log_once(logging.INFO, describe())
        take(PLAIN)
        return None
    try:
        encoder = importlib.import_module("albert_tf.cpu.encoder")
    except ImportError as err:  # a TensorFlow release that moved a private module
        _log_once(
            logging.WARNING,
            f"albert_tf's CPU speed paths cannot be imported ({err}); running the plain model",
        )
        return None
    changes = encoder.plain_code_changes(model)
    if changes:
        _log_once(
            logging.WARNING,
            f"speed paths: {why}, but {changes}: running the plain model, as written",
        )
        return None
    _log_once(logging.INFO, describe())
    take(paths)
    return encoder.run_encoder(model, paths, x, adder, training, output_rows)


__all__ = [
    "MODES",
    "SpeedPathOptions",
    "SpeedPaths",
    "PLAIN",
    "CPU_AUTO",
    "CPU_NATIVE",
    "use",
    "mode",
    "accelerator_present",
    "choose",
    "describe",
    "forced",
]
