"""Gradients of shared kernels as one matrix product over all their uses.

ALBERT applies the same kernels at every layer. Plain autodiff gives each
kernel one weight-sized gradient per application and then sums them, so up to
L weight-sized tensors are alive at once (ALBERT-xxlarge: 0.8 GB per layer)
and the sum costs L - 1 passes over weight-sized memory. Here the products with
shared kernels are recorded during the forward pass, and in the backward pass
each kernel's gradient is computed once,

    dW = sum_l x_l^T dy_l = [x_1; ...; x_L]^T [dy_1; ...; dy_L],

from the stacked inputs x_l [rows, in] and output gradients dy_l [rows, out]
(activation-sized), or, where the activations are larger than the kernel (big
batches of small models), as a running sum in backward order that frees each
term as soon as it is added. Same gradient as autodiff up to float summation
order.
"""

from __future__ import annotations

from typing import Callable, Hashable, Mapping, Sequence

import tensorflow as tf

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
        x: tf.Tensor, kernels: Mapping[Hashable, tf.Tensor],
        tensors: Mapping[Hashable, tf.Tensor], method: str = "auto") -> list[tf.Tensor]:
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
            pairs = [(o, g) for o, g in zip(outputs, output_grads) if g is not None]
            products = [y for key in kernel_keys for _, y in uses[key]]
            sources = [x] + list(tensor_values.values()) + products + list(variables or [])
            grads = tape.gradient([o for o, _ in pairs], sources,
                                  output_gradients=[g for _, g in pairs],
                                  unconnected_gradients=tf.UnconnectedGradients.ZERO)
            dx = grads[0]
            d_tensors = grads[1:1 + len(tensor_keys)]
            d_products = iter(grads[1 + len(tensor_keys):1 + len(tensor_keys) + len(products)])
            d_variables = grads[1 + len(tensor_keys) + len(products):]
            d_kernels = []
            previous = []
            for key in kernel_keys:
                inputs = [a for a, _ in uses[key]]
                dys = [next(d_products) for _ in uses[key]]
                if not inputs:
                    d_kernels.append(tf.zeros_like(kernel_values[key]))
                elif method == "stack" or (
                        method == "auto" and _stacking_is_cheaper(inputs, kernel_values[key])):
                    # One kernel at a time, so only one kernel's stacked inputs and
                    # gradients are alive.
                    with tf.control_dependencies(previous):
                        stacked = tf.concat(inputs, 0), tf.concat(dys, 0)
                    d_kernels.append(tf.matmul(*stacked, transpose_a=True))
                    previous = [d_kernels[-1]]
                else:
                    # Running sum from the last use back: each term is added as soon
                    # as the backward pass reaches its layer.
                    total = None
                    for a, dy in reversed(list(zip(inputs, dys))):
                        term = tf.matmul(a, dy, transpose_a=True)
                        total = term if total is None else total + term
                    d_kernels.append(total)
            input_grads = [dx] + d_kernels + list(d_tensors)
            if variables is None:
                return input_grads
            return input_grads, list(d_variables)

        return outputs, grad

    return stack(x, *[kernels[k] for k in kernel_keys], *[tensors[k] for k in tensor_keys])
