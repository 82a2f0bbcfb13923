"""The CPU speed paths as a value, and the ones taken by what is traced now.

`SpeedPaths` says which CPU speed path is taken; the switch (albert_tf.cpu.speed_paths)
decides it once per traced encoder call and hands it down: to the encoder's kernels as an
argument (albert_tf.cpu.encoder), and through `take` to the elementwise functions and the
gradients that TensorFlow traces later (albert_tf.cpu.fused_elementwise), which read it
with `taken()`. Nothing here imports TensorFlow.
"""

from __future__ import annotations

import dataclasses


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
        (albert_tf.run.host_memory).
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

_taken = PLAIN


def taken() -> SpeedPaths:
    """The speed paths of the encoder call traced last (PLAIN before any): what the CPU
    code and its gradients traced now use."""
    return _taken


def take(paths: SpeedPaths) -> None:
    """Makes `paths` the ones `taken()` returns (the switch, at each traced encoder call)."""
    global _taken
    _taken = paths


__all__ = ["SpeedPaths", "PLAIN", "CPU_AUTO", "CPU_NATIVE", "taken", "take"]
