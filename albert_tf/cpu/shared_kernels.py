"""The weights of the encoder's blocks in a forward pass, and the gradients of
shared kernels as one matrix product over all their uses.

`EncoderKernels` holds the encoder's speed paths (albert_tf.cpu.speed_paths) for
one pass: each block's weights cast once for all layers, fused inference QKV,
last-layer row selection, and the summed gradients below.

ALBERT applies the same kernels at every layer. Plain autodiff gives each
kernel one weight-sized gradient per application and then sums them, so up to
L weight-sized tensors are alive at once (ALBERT-xxlarge: 0.8 GB per layer)
and the sum costs L - 1 passes over weight-sized memory. Here the products with
shared kernels are recorded during the forward pass, and in the backward pass
each kernel's gradient is computed once,

    dW = sum_l x_l^T dy_l = [x_1; ...; x_L]^T [dy_1; ...; dy_L],

from the stacked inputs x_l [rows, in] and output gradients dy_l [rows, out]
(activation-sized), or, where the activations are larger than the kernel (big
batches of small models), as the sum of the L products in backward order
(`fused_elementwise.sum_terms`: in bfloat16 with the native kernels one pass
that adds in float32, else a running sum that frees each term as soon as it is
added). Same gradient as autodiff up to float summation order.
"""

from __future__ import annotations

from typing import Callable, Hashable, Mapping, Sequence

import tensorflow as tf

from albert_tf.cpu import fused_elementwise
from albert_tf.cpu.block import BlockWeights, fused_qkv_weights
from albert_tf.cpu.paths import SpeedPaths
from albert_tf.model.layers import DENSE_SUBLAYERS

_QKV = ("query", "key", "value")
# matmul(a, key) -> a @ kernels[key]; a is [rows, in].
Matmul = Callable[[tf.Tensor, Hashable], tf.Tensor]


def _stacking_is_cheaper(inputs, kernel) -> bool:
    """Whether stacking the L uses moves fewer bytes than L - 1 weight-sized adds.

    Stacking copies L * rows * (in + out) values (read and write); the running
    sum reads two and writes one weight-sized tensor per add. Large kernels and
    few rows (ALBERT-xxlarge, small batch) stack; ALBERT-base at batch 16 sums.
    Unknown row counts stack (the choice with the bounded memory).
    """
    rows = [a.shape[0] for a in inputs]
    n_in, n_out = kernel.shape
    if any(r is None for r in rows) or n_in is None or n_out is None:
        return True
    stack_bytes = 2 * sum(rows) * (n_in + n_out)
    sum_bytes = 3 * (len(rows) - 1) * n_in * n_out
    return stack_bytes < sum_bytes


def run_with_summed_kernel_gradients(
    body: Callable[[tf.Tensor, Mapping[Hashable, tf.Tensor], Matmul], Sequence[tf.Tensor]],
    x: tf.Tensor,
    kernels: Mapping[Hashable, tf.Tensor],
    tensors: Mapping[Hashable, tf.Tensor],
    method: str = "auto",
) -> list[tf.Tensor]:
    """Runs `body` with recorded kernel products and a summed kernel gradient.

    Args:
      body: `body(x, tensors, matmul) -> list of outputs`. Every product with a
        kernel must go through `matmul(a, key)`; `tensors` are the other
        differentiable inputs (biases...), by key; variables `body` reads
        (layer-norm scales...) get their gradients by autodiff.
      x: the differentiable input of the stack.
      kernels: 2-D kernels [in, out] by key (any dtype; products keep it).
      tensors: other tensors `body` needs, by key.
      method: "stack", "sum" or "auto" (by `_stacking_is_cheaper`, per kernel).

    Returns:
      The list of `body`'s outputs.
    """
    if method not in ("auto", "stack", "sum"):
        raise ValueError(f"method must be 'auto', 'stack' or 'sum', got {method!r}")
    kernel_keys = list(kernels)
    tensor_keys = list(tensors)
    n_kernels = len(kernel_keys)

    @tf.custom_gradient
    def stack(x, *flat):
        kernel_values = dict(zip(kernel_keys, flat[:n_kernels]))
        tensor_values = dict(zip(tensor_keys, flat[n_kernels:]))
        uses = {key: [] for key in kernel_keys}  # key -> [(input, output)]

        def matmul(a, key):
            y = tf.matmul(a, kernel_values[key])
            tape.watch(y)
            uses[key].append((a, y))
            return y

        with tf.GradientTape() as tape:
            tape.watch([x] + list(tensor_values.values()))
            outputs = list(body(x, tensor_values, matmul))

        def grad(*output_grads, variables=None):
            # Outputs nothing used (every layer's but the last, often) come with zeros.
            pairs = [
                (o, g)
                for o, g in zip(outputs, output_grads)
                if g is not None and not fused_elementwise.known_zeros(g)
            ]
            products = [y for key in kernel_keys for _, y in uses[key]]
            sources = [x] + list(tensor_values.values()) + products + list(variables or [])
            grads = tape.gradient(
                [o for o, _ in pairs],
                sources,
                output_gradients=[g for _, g in pairs],
                unconnected_gradients=tf.UnconnectedGradients.ZERO,
            )
            dx = grads[0]
            d_tensors = grads[1 : 1 + len(tensor_keys)]
            d_products = iter(grads[1 + len(tensor_keys) : 1 + len(tensor_keys) + len(products)])
            d_variables = grads[1 + len(tensor_keys) + len(products) :]
            d_kernels = []
            previous = []
            for key in kernel_keys:
                inputs = [a for a, _ in uses[key]]
                dys = [next(d_products) for _ in uses[key]]
                if not inputs:
                    d_kernels.append(tf.zeros_like(kernel_values[key]))
                elif method == "stack" or (
                    method == "auto" and _stacking_is_cheaper(inputs, kernel_values[key])
                ):
                    # One kernel at a time, so only one kernel's stacked inputs and
                    # gradients are alive.
                    with tf.control_dependencies(previous):
                        stacked = tf.concat(inputs, 0), tf.concat(dys, 0)
                    d_kernels.append(tf.matmul(*stacked, transpose_a=True))
                    previous = [d_kernels[-1]]
                else:
                    # From the last use back, as the backward pass reaches each layer.
                    terms = [
                        tf.matmul(a, dy, transpose_a=True)
                        for a, dy in reversed(list(zip(inputs, dys)))
                    ]
                    d_kernels.append(fused_elementwise.sum_terms(terms))
            input_grads = [dx] + d_kernels + list(d_tensors)
            if variables is None:
                return input_grads
            return input_grads, list(d_variables)

        return outputs, grad

    return stack(x, *[kernels[k] for k in kernel_keys], *[tensors[k] for k in tensor_keys])


# The dense sublayers (besides "qkv") that inference runs as our products
# (albert_tf.cpu.native_kernels).
NATIVE_PRODUCTS = ("intermediate", "attention_output", "ffn_output")


def _side_by_side(variables, dtype, axis):
    """The variables cast to `dtype`, concatenated along `axis` when there are several."""
    parts = [tf.cast(v, dtype) for v in variables]
    return parts[0] if len(parts) == 1 else tf.concat(parts, axis=axis)


class EncoderKernels:
    """The weights of the encoder's blocks for one forward pass, and how the stack of
    block applications runs: the encoder's speed paths, chosen once per pass.

      * Each block's kernels and biases are cast to the compute dtype once, not
        at every layer that applies it (mixed_bfloat16); a sublayer shared
        between blocks once, for all of them.
      * `paths.fused_inference_qkv`, inference: Q, K and V as one kernel [H, 3H]
        (`BlockWeights.fused_qkv`) in every application that computes all rows;
        otherwise separate (the last application at selected rows takes queries of
        those rows only, `last_names`; in training the fused product's split and
        its gradient's concat cost more than two extra oneDNN calls).
      * `paths.last_layer_row_selection`, given output rows: the last block
        computes only those rows; otherwise it computes all S and they are
        gathered from its output.
      * `paths.summed_kernel_gradients`, training a model whose kernels are
        applied at more than one layer: the stack runs under
        `run_with_summed_kernel_gradients`.

    Args:
      blocks: every block of the model once, the owners of shared sublayers
        first (group 0's blocks lend theirs).
      paths: the speed paths the switch chose (albert_tf.cpu.speed_paths).
      training: whether the pass trains.
      output_rows: int32 [B, P] or None, the rows the stack's last output keeps.
      shares_weights: whether some kernel is applied at more than one layer.
    """

    def __init__(
        self, blocks, paths: SpeedPaths, training: bool, output_rows, shares_weights: bool
    ):
        self.output_rows = output_rows
        self.select_rows = output_rows is not None and paths.last_layer_row_selection
        fused_qkv = paths.fused_inference_qkv and not training
        self.summed_gradients = training and paths.summed_kernel_gradients and shares_weights
        # key -> tensor; a key is (owning block's name, product name, "kernel" or "bias").
        self.tensors = {}
        self.names = {}  # block -> {product name: its tensors' key less the kind}
        self.last_names = {}  # the same for the last application (selected rows: no "qkv")
        owners = {}  # id(sublayer) -> name of the first block that has it
        for block in blocks:
            dense = {name: getattr(block, name) for name in DENSE_SUBLAYERS}
            for sublayer in dense.values():
                owners.setdefault(id(sublayer), block.name)
            # product name -> the sublayers whose kernels, side by side, it multiplies by
            products = {name: [sublayer] for name, sublayer in dense.items()}
            separate_qkv = {name: products[name] for name in _QKV}
            if fused_qkv:
                products = {"qkv": [products.pop(name)[0] for name in _QKV], **products}
            self.names[block] = self.last_names[block] = {
                name: (owners[id(sublayers[0])], name) for name, sublayers in products.items()
            }
            if fused_qkv and self.select_rows:  # the last application takes Q, K, V apart
                products = {**products, **separate_qkv}
                self.last_names[block] = {
                    name: (owners[id(products[name][0])], name)
                    for name in [*_QKV, *(n for n in self.names[block] if n != "qkv")]
                }
            for name, sublayers in products.items():
                prefix = (owners[id(sublayers[0])], name)
                if prefix + ("kernel",) in self.tensors:  # a shared sublayer, cast by its owner
                    continue
                dtype = block.compute_dtype
                kernel = _side_by_side([s.kernel for s in sublayers], dtype, axis=1)
                bias = _side_by_side([s.bias for s in sublayers], dtype, axis=0)
                # Inference's products take ours where they run
                # (BlockWeights.packed): each kernel packed once here.
                packed = None
                heads_of_16 = block.hidden_size // block.num_attention_heads % 16 == 0
                if not training and (name in NATIVE_PRODUCTS or name == "qkv" and heads_of_16):
                    packed = fused_elementwise.packed_kernel(kernel)
                if packed is not None:
                    self.tensors[prefix + ("packed",)] = packed
                    self.tensors[prefix + ("plain kernel",)] = kernel
                if name == "qkv":
                    kernel, bias = fused_qkv_weights(kernel, bias, block.num_attention_heads)
                self.tensors[prefix + ("kernel",)] = kernel
                self.tensors[prefix + ("bias",)] = bias

    def run(self, layers, x):
        """Runs `layers(x, weights, last_weights, last_rows)`, which applies the blocks
        to x [B, S, H] with `weights[block]` (its `BlockWeights`), the last application
        with `last_weights[block]` at `last_rows` [B, P] (None: all rows), and returns
        every application's output. Returns that list, its last entry [B, P, H] at
        `output_rows` when given."""
        last_rows = self.output_rows if self.select_rows else None
        if self.summed_gradients:
            kernels = {k: t for k, t in self.tensors.items() if k[-1] == "kernel"}
            others = {k: t for k, t in self.tensors.items() if k[-1] != "kernel"}
            outputs = run_with_summed_kernel_gradients(
                lambda x, tensors, matmul: layers(
                    x,
                    self._weights(tensors, matmul, self.names),
                    self._weights(tensors, matmul, self.last_names),
                    last_rows,
                ),
                x,
                kernels,
                others,
            )
        else:
            tensors = self.tensors

            def matmul(a, key):
                return tf.matmul(a, tensors[key])

            outputs = layers(
                x,
                self._weights(tensors, matmul, self.names),
                self._weights(tensors, matmul, self.last_names),
                last_rows,
            )
        if self.output_rows is not None and last_rows is None:
            outputs[-1] = tf.gather(outputs[-1], self.output_rows, batch_dims=1)
        return outputs

    def _weights(self, tensors, matmul, names_of):
        """block -> its BlockWeights for the products `names_of[block]` (`names` or
        `last_names`): kernels by key through `matmul(a, key)`, biases from `tensors`."""
        return {
            block: BlockWeights(
                {name: key + ("kernel",) for name, key in names.items()},
                {name: tensors[key + ("bias",)] for name, key in names.items()},
                matmul,
                {
                    name: (tensors[key + ("plain kernel",)], tensors[key + ("packed",)])
                    for name, key in names.items()
                    if key + ("packed",) in tensors
                },
            )
            for block, names in names_of.items()
        }
