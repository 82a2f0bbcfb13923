"""The one switch between the plain model and the CPU speed paths.

The model is albert_tf.layers and albert_tf.modeling: the original's computation in
standard TensorFlow ops. On CPUs some passes run faster as other code (albert_tf.cpu):
that code replaces the encoder's stack of blocks from outside, and this module decides,
once per traced call, whether it does and with what. The switch has three settings:

  * "auto" (the default): on a CPU-only machine the CPU speed paths that need nothing but
    TensorFlow (XLA-fused elementwise work, oneDNN's layer norm in inference, summed
    shared-kernel gradients, fused inference QKV, last-layer row selection, the
    allocator choice for large models); with a GPU or TPU the plain model. Nothing is
    compiled.
  * "plain": the plain model everywhere (standard ops, autodiff).
  * "native": "auto" plus the C++ kernels of albert_tf/cpu/native/ on a CPU-only
    machine, built on this machine at their first use (15-50 s, once; the library is
    cached, and so is a failed build, see albert_tf.cpu.native_kernels).

Scripts take it as `--speed_paths` (albert_tf.options.SpeedPathOptions); library users
call `albert_tf.speed_paths.use("native")` (or "plain") before they trace the model.
The first traced encoder call logs what was chosen and why.

Each path was chosen by measurements on CPUs (docs/benchmarks.md); each gives the plain
model's numbers to float rounding (tests/test_cpu_*.py). None was measured on a GPU or
TPU, and some cannot run there (oneDNN's layer norm exists only in CPU builds).

Not decided here: TensorFlow's oneDNN CPU kernels (albert_tf.cli.prefer_onednn), which
must be switched on before TensorFlow loads.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import logging

from albert_tf import encoder_runner

MODES = ("auto", "plain", "native")
_logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class SpeedPaths:
    """The speed paths, each True where it is taken (all False: the plain model).

    Attributes:
      fused_elementwise: the encoder's elementwise math as XLA-fused loops (GELU and its
        gradient, the layer-norm gradient, bfloat16 biases and softmax in float32), the
        hand-written gradients that use them, and oneDNN's layer-norm kernel in
        inference graphs (albert_tf.cpu.fused_elementwise).
      summed_kernel_gradients: training a model whose blocks are applied at several
        layers computes each kernel's gradient as one product over its uses
        (albert_tf.cpu.shared_kernels). False: autodiff's sum of L products.
      fused_inference_qkv: full-length inference multiplies by the query, key and value
        kernels side by side [H, 3H] (one product, one transpose to heads).
      last_layer_row_selection: given output rows (the masked positions, or only [CLS]
        for a classifier), the last block computes just those rows. False: all S rows,
        the requested ones gathered afterwards.
      system_allocator_for_large_models: `--host_allocator=auto` takes malloc instead of
        TensorFlow's CPU pool for models of 100M parameters or more
        (albert_tf.host_memory).
      native_cpu_kernels: with `fused_elementwise`, the C++ kernels
        (albert_tf.cpu.native_kernels) for the FFN's bias + GELU, the layer norms after
        a dense sublayer, the query/key/value biases with the split into heads, the
        softmax gradient and the sums of shared kernels' gradients.
      native_products: with `native_cpu_kernels`, inference's dense products as our own
        C++ products that finish their float32 accumulators themselves (bfloat16 on CPUs
        with AVX512_BF16, float32 on CPUs with AVX-512 or AVX2 and FMA).
      native_attention: with `native_cpu_kernels`, inference's attention of each layer
        as one C++ kernel (same CPUs as `native_products`, heads of a multiple of 32).
    """

    fused_elementwise: bool
    summed_kernel_gradients: bool
    fused_inference_qkv: bool
    last_layer_row_selection: bool
    system_allocator_for_large_models: bool
    native_cpu_kernels: bool
    native_products: bool
    native_attention: bool

    def names(self) -> list[str]:
        """The names of the paths taken."""
        return [f.name for f in dataclasses.fields(self) if getattr(self, f.name)]


PLAIN = SpeedPaths(*[False] * len(dataclasses.fields(SpeedPaths)))
CPU_AUTO = dataclasses.replace(
    PLAIN,
    fused_elementwise=True,
    summed_kernel_gradients=True,
    fused_inference_qkv=True,
    last_layer_row_selection=True,
    system_allocator_for_large_models=True,
)
CPU_NATIVE = dataclasses.replace(
    CPU_AUTO, native_cpu_kernels=True, native_products=True, native_attention=True
)

_mode = "auto"
_forced: SpeedPaths | None = None
_logged: set = set()


def use(mode: str) -> None:
    """Sets the switch for this process: "auto", "plain" or "native" (see the module
    docstring). Graphs traced before keep their choice."""
    global _mode
    if mode not in MODES:
        raise ValueError(f"speed paths must be one of {', '.join(MODES)}; got {mode!r}")
    _mode = mode


def mode() -> str:
    """The switch's setting."""
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


def _decide() -> tuple[SpeedPaths, str]:
    """(the paths, why) for the switch's setting and the devices, or what `forced` set."""
    if _forced is not None:
        return _forced, "forced"
    if _mode == "plain":
        return PLAIN, "plain"
    if accelerator_present():
        return PLAIN, f"{_mode} with a GPU or TPU: the plain model"
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
    and the devices. For tests and benches: `forced(PLAIN)` traces the plain model,
    `forced(CPU_NATIVE)` the C++ kernels on any device. Graphs traced inside keep their
    choice after the block ends."""
    global _forced
    if not isinstance(paths, SpeedPaths):
        raise TypeError(f"forced() expects a SpeedPaths, got {type(paths).__name__}")
    previous, _forced = _forced, paths
    try:
        yield paths
    finally:
        _forced = previous


def _cpu_package():
    """albert_tf.cpu, or None after one warning where it cannot be imported (a TensorFlow
    release that moved a private module, albert_tf.cpu.tf_internals)."""
    try:
        cpu = importlib.import_module("albert_tf.cpu")
    except ImportError as e:
        if "import" not in _logged:
            _logged.add("import")
            _logger.warning(
                "albert_tf's CPU speed paths cannot be imported (%s); running the plain model",
                e,
            )
        return None
    return cpu


def _run_encoder(model, x, adder, training, output_rows):
    """albert_tf.modeling's encoder stack on the CPU speed paths where the switch takes
    them; None: the plain stack runs."""
    line = describe()
    if line not in _logged:
        _logged.add(line)
        _logger.info("%s", line)
    paths = choose()
    if paths == PLAIN:
        return None
    cpu = _cpu_package()
    if cpu is None:
        return None
    return cpu.run_encoder(model, paths, x, adder, training, output_rows)


encoder_runner.install(_run_encoder)
