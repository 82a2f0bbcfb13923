"""Gradients of shared kernels as one matrix product over all their uses.

ALBERT applies the same kernels at every layer. Plain autodiff gives each
kernel one weight-sized gradient per application and then sums them, so up to
L weight-sized tensors are alive at once (ALBERT-xxlarge: 0.8 GB per layer)
and the sum costs L - 1 passes over weight-sized memory. Here the products with
shared kernels are recorded during the forward pass, and in the backward pass
each kernel's gradient is computed once,

    dW = sum_l x_l^T dy_l = [x_1; ...; x_L]^T [dy_1; ...; dy_L],

from the stacked inputs x_l [rows, in] and output gradients dy_l [rows, out]
(activation-sized). Same gradient as autodiff up to float summation order.
"""

from __future__ import annotations

from typing import Callable, Hashable, Mapping, Sequence

import tensorflow as tf

# matmul(a, key) -> a @ kernels[key]; a is [rows, in].
Matmul = Callable[[tf.Tensor, Hashable], tf.Tensor]


def run_with_summed_kernel_gradients(
        body: Callable[[tf.Tensor, Mapping[Hashable, tf.Tensor], Matmul], Sequence[tf.Tensor]],
        x: tf.Tensor, kernels: Mapping[Hashable, tf.Tensor],
        tensors: Mapping[Hashable, tf.Tensor]) -> list[tf.Tensor]:
    """Runs `body` with recorded kernel products and a summed kernel gradient.

    Args:
      body: `body(x, tensors, matmul) -> list of outputs`. Every product with a
        kernel must go through `matmul(a, key)`; `tensors` are the other
        differentiable inputs (biases...), by key; variables `body` reads
        (layer-norm scales...) get their gradients by autodiff.
      x: the differentiable input of the stack.
      kernels: 2-D kernels [in, out] by key (any dtype; products keep it).
      tensors: other tensors `body` needs, by key.

    Returns:
      The list of `body`'s outputs.
    """
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
                    continue
                # One product with inner dimension L * rows instead of L products
                # and an L-term sum of weight-sized tensors. One kernel at a time,
                # so only one kernel's stacked inputs and gradients are alive.
                with tf.control_dependencies(previous):
                    stacked = tf.concat(inputs, 0), tf.concat(dys, 0)
                d_kernels.append(tf.matmul(*stacked, transpose_a=True))
                previous = [d_kernels[-1]]
            input_grads = [dx] + d_kernels + list(d_tensors)
            if variables is None:
                return input_grads
            return input_grads, list(d_variables)

        return outputs, grad

    return stack(x, *[kernels[k] for k in kernel_keys], *[tensors[k] for k in tensor_keys])
