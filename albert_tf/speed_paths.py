"""Which speed paths the model and the scripts take, decided in one place.

Each path below was chosen by measurements on CPUs (bench/results/): it makes the
CPU graph faster or smaller and gives the plain computation's numbers to float
rounding. None was measured on a GPU or TPU, and some cannot run there (oneDNN's
layer-norm kernel exists only in CPU builds), so with an accelerator present the
model is the original's computation: standard TensorFlow ops, plain autodiff, the
fusing left to the accelerator's compiler.

`choose()` makes the decision from the devices TensorFlow sees; `forced(paths)`
replaces it (tests force the accelerator decision on a CPU-only machine). The
model reads the decision where it traces a call (albert_tf.modeling), the
elementwise kernels where they are traced (albert_tf.fused_elementwise), and
`--host_allocator=auto` when it picks the allocator (albert_tf.host_memory).

Not decided here: TensorFlow's oneDNN CPU kernels (albert_tf.cli.prefer_onednn),
which must be switched on before TensorFlow loads and so before any device is
known; they change nothing on a GPU or TPU.
"""

from __future__ import annotations

import contextlib
import dataclasses


@dataclasses.dataclass(frozen=True)
class SpeedPaths:
    """The speed paths, each True where it is taken.

    Attributes:
      fused_elementwise: the encoder's elementwise math as XLA-fused loops (GELU
        and its gradient, the layer-norm gradient), the hand-written GELU and
        layer-norm gradients that use them, and oneDNN's layer-norm kernel in
        inference graphs (albert_tf.fused_elementwise). False: the plain op chains
        and autodiff.
      summed_kernel_gradients: training a model whose blocks are applied at
        several layers computes each kernel's gradient as one product over its
        uses (albert_tf.shared_kernels). False: autodiff's sum of L products.
      fused_inference_qkv: full-length inference multiplies by the query, key
        and value kernels side by side [H, 3H] (one product, one transpose to
        heads). False: three products.
      last_layer_row_selection: given output rows (the masked positions, or
        only [CLS] for a classifier), the last block computes just those rows.
        False: it computes all S rows and the requested ones are gathered.
      system_allocator_for_large_models: `--host_allocator=auto` takes malloc
        instead of TensorFlow's CPU pool for models of 100M parameters or more
        (albert_tf.host_memory). False: "auto" keeps TensorFlow's allocator.
      native_cpu_kernels: with `fused_elementwise`, bfloat16 graphs run the FFN's
        bias + GELU and its gradient, the layer norms after a dense sublayer and
        their gradients, and the query/key/value biases with the split into heads
        and its gradient as C++ kernels built on this machine
        (albert_tf.native_kernels), where it has a C++ compiler; float32 graphs the
        layer norms after a dense sublayer (with its bias) and their gradients, and in
        training the same GELU, heads and softmax-gradient kernels and the sums of the
        shared kernels' gradients. False: the XLA loops, transposes, TensorFlow's ops and
        oneDNN's layer norm.
      native_products: with `native_cpu_kernels`, inference runs its dense products as
        products of our own that finish their float32 accumulators themselves
        (query/key/value with biases, written as heads; FFN with bias and GELU; the
        output products with bias, residual and layer norm), each kernel packed once
        per pass (albert_tf.native_kernels): in bfloat16 on CPUs with AVX512_BF16 (on
        their AMX tiles where they have them), in float32 on CPUs with AVX-512 or AVX2
        and FMA. False: oneDNN's products and the kernels after them.
      native_attention: with `native_cpu_kernels`, inference runs each layer's attention
        (scores, softmax, the product with the values, the context written as rows) as
        one kernel of ours on the same CPUs as `native_products`, for heads of a multiple
        of 32. False: oneDNN's two batched products, the softmax and a transpose.
    """

    fused_elementwise: bool
    summed_kernel_gradients: bool
    fused_inference_qkv: bool
    last_layer_row_selection: bool
    system_allocator_for_large_models: bool
    native_cpu_kernels: bool
    native_products: bool
    native_attention: bool


CPU_ONLY = SpeedPaths(
    fused_elementwise=True,
    summed_kernel_gradients=True,
    fused_inference_qkv=True,
    last_layer_row_selection=True,
    system_allocator_for_large_models=True,
    native_cpu_kernels=True,
    native_products=True,
    native_attention=True,
)
WITH_ACCELERATOR = SpeedPaths(
    fused_elementwise=False,
    summed_kernel_gradients=False,
    fused_inference_qkv=False,
    last_layer_row_selection=False,
    system_allocator_for_large_models=False,
    native_cpu_kernels=False,
    native_products=False,
    native_attention=False,
)

_forced: SpeedPaths | None = None


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


def choose() -> SpeedPaths:
    """The speed paths for this process: `CPU_ONLY` without a GPU or TPU,
    `WITH_ACCELERATOR` with one; whatever `forced` set instead, while it is in effect."""
    if _forced is not None:
        return _forced
    return WITH_ACCELERATOR if accelerator_present() else CPU_ONLY


@contextlib.contextmanager
def forced(paths: SpeedPaths):
    """Within this block (process-wide), `choose()` returns `paths`, whatever the devices.

    For tests: `forced(WITH_ACCELERATOR)` builds and traces models as on a GPU or
    TPU. Graphs traced inside keep their choice after the block ends.
    """
    global _forced
    if not isinstance(paths, SpeedPaths):
        raise TypeError(f"forced() expects a SpeedPaths, got {type(paths).__name__}")
    previous, _forced = _forced, paths
    try:
        yield paths
    finally:
        _forced = previous
