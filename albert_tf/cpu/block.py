"""The encoder's block on the CPU speed paths: the same computation as
albert_tf.model.layers.AlbertTransformerBlock, with its pieces replaced where the switch
(albert_tf.cpu.speed_paths) takes a faster one on this CPU.

`apply_block(block, ...)` runs a block (its variables, sublayers and dropout layers)
with a `BlockWeights` prepared for the pass by albert_tf.cpu.shared_kernels: XLA-fused
elementwise work and hand-written gradients (albert_tf.cpu.fused_elementwise), oneDNN's
layer norm in inference, the query/key/value products side by side, only selected rows
in the last block, and where the switch is "native" the C++ kernels and products
(albert_tf.cpu.native_kernels). Tests compare it with the plain block
(tests/cpu/test_block.py).
"""

from __future__ import annotations

import math

import tensorflow as tf

from albert_tf.cpu import fused_elementwise
from albert_tf.model.layers import gelu_tanh, get_activation


@tf.custom_gradient
def gelu_tanh_trainable(x):
    """`gelu_tanh` for graphs that differentiate: forward and gradient are each
    one XLA-fused loop (albert_tf/cpu/fused_elementwise.py), and only x is kept for
    the gradient (autodiff of the op chain keeps ~6 [B*S, F] intermediates and
    emits ~15 elementwise ops)."""

    def grad(dy):
        return fused_elementwise.gelu_tanh_backward(dy, x)

    # The gradient is `grad`; without stop_gradient a recording tape would make
    # TensorFlow run the compiled loop's "forward" variant, which also writes
    # out every intermediate for autodiff (about 5x slower in the profiler).
    return fused_elementwise.gelu_tanh(tf.stop_gradient(x)), grad


def apply_activation(name, y, training=False):
    """`get_activation(name)(y)`, with the hand-written GELU gradient when training
    on the fused-elementwise speed path (albert_tf.cpu.speed_paths)."""
    act = get_activation(name)
    if act is None:
        return y
    if act is gelu_tanh and training and fused_elementwise.enabled():
        return gelu_tanh_trainable(y)
    return act(y)


def bias_and_activation(y, bias, activation=None, training=False):
    """activation(y + bias) for a dense layer's product y [..., N]; bias [N] or None,
    `activation` a config name or function (see `get_activation`).

    float32 (and any dtype off the fused-elementwise speed path): `tf.nn.bias_add`
    (not `+`), the pattern Grappler's remapper fuses with the MatMul into oneDNN's
    `_FusedMatMul` (with the GELU too in inference graphs). bfloat16 on that path:
    one XLA loop in float32 after the plain MatMul (`fused_elementwise.bias_add`,
    `bias_gelu_tanh`; oneDNN's fused bfloat16 product does not use AMX), with
    hand-written gradients when training. float32 training with a GELU, where the
    native kernels run (`fused_elementwise.native_kernels_for`): the bias and GELU as
    one native pass after the plain MatMul, and their gradient as one with the bias's
    sum (in place of the GELU's loop and a `BiasAddGrad`).
    """
    if bias is None:
        return apply_activation(activation, y, training)
    gelu = get_activation(activation) is gelu_tanh
    native_gelu = training and gelu and fused_elementwise.native_kernels_for(y.dtype)
    if not (float32_loops_for(y.dtype) or native_gelu):
        return apply_activation(activation, tf.nn.bias_add(y, bias), training)
    if gelu:
        if training:
            return _bias_gelu_tanh_trainable(y, bias)
        return fused_elementwise.bias_gelu_tanh(y, bias)
    z = _bias_add_trainable(y, bias) if training else fused_elementwise.bias_add(y, bias)
    return apply_activation(activation, z, training)


def float32_loops_for(dtype):
    """Whether the elementwise work after products in `dtype` (biases, GELU, the
    attention softmax) runs as float32 XLA loops: bfloat16 on the fused-elementwise
    path (see `bias_and_activation`)."""
    return dtype == tf.bfloat16 and fused_elementwise.enabled()


def attention_probs(scores, adder, scale, training=False):
    """softmax(scores * scale + adder) over the last axis: scores [B, N, P, S] (a
    bfloat16 or float32 product), adder [B, 1, 1, S] float32, scale a Python float ->
    probabilities in the scores' dtype, computed in float32: in oneDNN graphs fused
    into the product and oneDNN's softmax (`fused_elementwise.product_attention_softmax`),
    elsewhere by one XLA loop; when training, with a hand-written gradient (one native
    pass or loop, `fused_elementwise.attention_softmax_backward`)."""
    scale_tensor = tf.constant(scale, tf.float32)
    if not training:
        probs = fused_elementwise.product_attention_softmax(scores, adder, scale)
        if probs is None:
            probs = fused_elementwise.attention_softmax(scores, adder, scale_tensor)
        return probs

    @tf.custom_gradient
    def trainable(scores, adder):
        probs = fused_elementwise.product_attention_softmax(scores, adder, scale)
        if probs is None:  # stop_gradient: see gelu_tanh_trainable.
            probs = fused_elementwise.attention_softmax(
                tf.stop_gradient(scores), adder, scale_tensor
            )

        def grad(dprobs):
            return fused_elementwise.attention_softmax_backward(dprobs, probs, scale), None

        return probs, grad

    return trainable(scores, adder)


def bias_gradient(dz):
    """The gradient of a bias [N] added to every row of dz [..., N]: dz summed over its
    leading axes in float32 -> [N], in dz's dtype.

    bfloat16 on CPUs with AVX-512: a product of a row of ones with dz, which oneDNN
    accumulates in float32 and rounds once (TensorFlow's bfloat16 BiasAddGrad loses
    precision as it sums, 7% of the largest sum off over 2048 rows of normal values, and
    takes 1.9x as long; bench machine, [2048, 3072]). Elsewhere oneDNN has no such
    bfloat16 product (on an AVX2-only CPU it was 0.21 off at 37 rows), so dz is summed
    as float32 (`fused_elementwise.leading_sum`)."""
    if dz.dtype != tf.bfloat16:
        return tf.raw_ops.BiasAddGrad(out_backprop=dz)
    if "avx512bw" not in fused_elementwise.cpu_flags():
        return tf.cast(fused_elementwise.leading_sum(dz), dz.dtype)
    rows = tf.reshape(dz, [-1, tf.shape(dz)[-1]])
    return tf.matmul(tf.ones([1, tf.shape(rows)[0]], dz.dtype), rows)[0]


@tf.custom_gradient
def _bias_add_trainable(y, bias):
    """`fused_elementwise.bias_add` with the gradient of `tf.nn.bias_add`."""

    def grad(dz):
        return dz, bias_gradient(dz)

    # stop_gradient: see gelu_tanh_trainable.
    return fused_elementwise.bias_add(tf.stop_gradient(y), tf.stop_gradient(bias)), grad


@tf.custom_gradient
def _bias_gelu_tanh_trainable(y, bias):
    """`fused_elementwise.bias_gelu_tanh` with its gradient as one loop (plus the
    bias's sum); only y and the bias are kept for it."""

    def grad(dz):
        dy, dbias = fused_elementwise.bias_gelu_tanh_backward(dz, y, bias)
        return dy, bias_gradient(dy) if dbias is None else dbias

    return fused_elementwise.bias_gelu_tanh(tf.stop_gradient(y), tf.stop_gradient(bias)), grad


def _layer_norm_trainable(x, residual, gamma, beta, epsilon, bias=None, copies=1):
    """LN(x + bias + residual) (residual and bias may be None) with the closed-form
    gradient of `fused_elementwise.layer_norm_backward` (autodiff through the moments
    emits ~25 elementwise ops and reductions per layer norm); only xhat and rstd are
    kept for it. The residual's gradient is dx itself, x's is dx in x's dtype, the
    bias's the sum of dx over all leading axes in the bias's dtype. Where the native
    kernels take it, the output carries its bfloat16 copy for the next products
    (`fused_elementwise.cast`), as `copies` distinct outputs (one per product that
    reads it, `fused_elementwise.casts`), and their gradients join dy in the
    gradient's pass."""
    extras = [t for t in (residual, bias) if t is not None]
    native = fused_elementwise.native_layer_norm_usable(tf.convert_to_tensor(x), residual, bias)

    @tf.custom_gradient
    def layer_norm(x, gamma, beta, *extras):
        # stop_gradient: see gelu_tanh_trainable (`residual_sum` is a compiled loop).
        x, extras = tf.stop_gradient(x), [tf.stop_gradient(t) for t in extras]
        out, xhat, rstd = fused_elementwise.layer_norm_forward(
            x,
            residual if residual is None else extras[0],
            gamma,
            beta,
            epsilon,
            bias if bias is None else extras[-1],
        )
        # The copy is an output of its own: an attribute does not cross custom_gradient.
        copy = fused_elementwise.bfloat16_copy(out)

        def grad(dy, *dy_copies):
            dx, dgamma, dbeta, *dx_sum = fused_elementwise.layer_norm_backward(
                dy,
                xhat,
                rstd,
                gamma,
                native=native,
                dy_bfloat16=[
                    g for g in dy_copies if g is not None and not fused_elementwise.known_zeros(g)
                ],
                dx_sum=bias is not None,
                input_dtype=x.dtype,
            )
            d_extras = [dx] if residual is not None else []
            if bias is not None:
                d_extras.append(tf.cast(dx_sum[0], bias.dtype))
            return (fused_elementwise.cast(dx, x.dtype), dgamma, dbeta, *d_extras)

        # The same tensor as several outputs: each output's gradient comes on its own.
        return (out, grad) if copy is None else ((out, *[copy] * copies), grad)

    outputs = layer_norm(x, gamma, beta, *extras)
    if isinstance(outputs, tf.Tensor):
        return outputs
    return fused_elementwise.with_bfloat16_copy(*outputs)


def fused_qkv_weights(kernel, bias, num_heads):
    """The query, key and value kernels side by side, kernel [H, 3H] and bias [3H], in
    the layout a block's fused product (`BlockWeights.fused_qkv`) multiplies by.

    Unchanged, one [rows, H] . [H, 3H] product transposed to heads afterwards, except
    where `float32_loops_for(kernel.dtype)`: head-major kernel [3, 1, N, H, D] and bias
    [3, 1, N, 1, D], for one broadcast batch product of x [1, B, 1, S, H] that oneDNN
    writes straight in head layout [3, B, N, S, D] (the transpose of a [B*S, 3H]
    product was a pass of its own; for float32 it stays, to keep its numbers)."""
    if not float32_loops_for(kernel.dtype):
        return kernel, bias
    width = kernel.shape[0]
    d = width // num_heads
    kernel = tf.transpose(tf.reshape(kernel, [width, 3, num_heads, d]), [1, 2, 0, 3])
    return kernel[:, tf.newaxis], tf.reshape(bias, [3, 1, num_heads, 1, d])


class BlockWeights:
    """One block's kernels and biases for one forward pass, and the products with them.

    `linear(a, name, training)` is a [rows, in] . kernel + bias of the dense sublayer `name`
    ("query", "key", "value", "attention_output", "intermediate", "ffn_output"; or
    "qkv", the query, key and value kernels side by side [H, 3H] with their biases
    [3H] or their head-major layout (`fused_qkv_weights`), which replaces the three
    when `fused_qkv`). Every weight is a tensor in the
    block's compute dtype; gradients flow back through the casts to the variables.

    Args:
      kernels: sublayer name -> what `matmul` multiplies by (a kernel tensor, or the
        key of one, see albert_tf.cpu.shared_kernels.EncoderKernels).
      biases: sublayer name -> bias tensor.
      matmul: `matmul(a, kernel) -> a . kernel`; default `tf.matmul`.
      packed: sublayer name -> (its kernel [in, out] as a plain tensor, the same packed
        for our product, `fused_elementwise.packed_kernel`): inference applies
        such a sublayer with a GELU as one `fused_elementwise.dense_bias_gelu`, "qkv" as
        one `fused_elementwise.dense_heads`, and the output sublayers with their layer
        norms as one `fused_elementwise.dense_layer_norm` (`layer_norm`).
    """

    def __init__(self, kernels, biases, matmul=tf.matmul, packed=None):
        self.kernels = kernels
        self.biases = biases
        self.matmul = matmul
        self.packed = packed or {}

    @property
    def fused_qkv(self):
        return "qkv" in self.kernels

    def product(self, a, name):
        """a . kernel of the dense sublayer `name`, without its bias."""
        return self.matmul(a, self.kernels[name])

    def linear(self, a, name, training, activation=None):
        """activation(a . kernel + bias) of the dense sublayer `name` (`bias_and_activation`,
        or one product of ours where `packed` has the sublayer and inference applies a GELU)."""
        if name in self.packed and not training and get_activation(activation) is gelu_tanh:
            kernel, packed = self.packed[name]
            return fused_elementwise.dense_bias_gelu(a, kernel, packed, self.biases[name])
        return bias_and_activation(self.product(a, name), self.biases[name], activation, training)


def layer_norm(norm, x, training=False, residual=None, bias=None, copies=1, product_of=None):
    """LN(x + bias + residual) -> float32, x's shape, with the variables of `norm` (an
    albert_tf.model.layers.LayerNorm); `residual` (float32, x's shape) and `bias` ([H], a
    dense layer's that produced x) are optional. On the fused-elementwise path, training
    graphs take the closed-form gradient and inference graphs run one oneDNN kernel
    where TensorFlow has one. `copies`: how many products will read the output in
    bfloat16 (`_layer_norm_trainable`). `product_of`: (kernel, packed) of our product
    (inference only): LN(x . kernel + bias + residual) in one pass, x [rows, in]
    (`fused_elementwise.dense_layer_norm`)."""
    gamma = tf.convert_to_tensor(norm.gamma)
    beta = tf.convert_to_tensor(norm.beta)
    if product_of is not None:
        kernel, packed = product_of
        return fused_elementwise.dense_layer_norm(
            x, kernel, packed, bias, residual, gamma, beta, norm.epsilon
        )
    if training and fused_elementwise.enabled():
        return _layer_norm_trainable(x, residual, gamma, beta, norm.epsilon, bias, copies)
    return fused_elementwise.layer_norm(x, residual, gamma, beta, norm.epsilon, bias)


def apply_block(block, x, attention_adder, w, training=False, query_positions=None):
    """`block` (an albert_tf.model.layers.AlbertTransformerBlock) applied to x [B, S, H]
    float32 with attention_adder [B, 1, 1, S] -> [B, S, H] float32, its weights `w` (the
    block's `BlockWeights` for the pass).

    `query_positions` int32 [B, P]: only these rows go on (attention queries,
    residuals, FFN; keys and values still come from all S) -> [B, P, H], each row equal
    to the full output's (float rounding aside).
    """
    batch = tf.shape(x)[0]
    if query_positions is None:
        x_rows, length = x, tf.shape(x)[1]
    else:
        x_rows, length = (
            tf.gather(x, query_positions, batch_dims=1),
            tf.shape(query_positions)[1],
        )
    h1 = _attention_sublayer(block, x, x_rows, attention_adder, w, training)
    out = _ffn_sublayer(block, h1, w, training)
    return fused_elementwise.reshape(out, [batch, length, block.hidden_size])


def _attention_sublayer(block, x, x_rows, attention_adder, w, training):
    """Self-attention of the rows x_rows [B, P, H] over all of x [B, S, H],
    dropout, plus x_rows, layer norm -> h1 [B*P, H] float32."""
    x_flat = fused_elementwise.reshape(x, [-1, block.hidden_size])
    rows_flat = x_flat if x_rows is x else tf.reshape(x_rows, [-1, block.hidden_size])
    q, k, v = _query_key_value(block, x, x_flat, rows_flat, w, training)
    # The original scales the product (not q) by 1/sqrt(D).
    scale = 1.0 / math.sqrt(block.head_size)
    dtype = block.compute_dtype
    if not training and fused_elementwise.attention_usable(q):  # one kernel of ours
        context = fused_elementwise.attention(q, k, v, attention_adder, scale)
        return _output_sublayer(block, context, "attention_output", rows_flat, w, training)
    scores = tf.matmul(q, k, transpose_b=True)  # [B, N, P, S]
    dropout = training and block.attention_probs_dropout_prob > 0
    # Training takes the native softmax gradient where the kernels run.
    native = training and fused_elementwise.native_kernels_for(dtype)
    if (float32_loops_for(dtype) or native) and not dropout:
        probs = attention_probs(scores, attention_adder, scale, training)
    else:
        scores = tf.cast(scores, tf.float32) * scale
        scores = scores + attention_adder
        probs = tf.nn.softmax(scores, axis=-1)
        if block.attention_probs_dropout_prob > 0:
            probs = block.attention_dropout(probs, training=training)
    context = tf.matmul(tf.cast(probs, dtype), v)  # [B, N, P, D]
    context = tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, block.hidden_size])
    return _output_sublayer(block, context, "attention_output", rows_flat, w, training)


def _query_key_value(block, x, x_flat, rows_flat, w, training):
    """Queries of rows_flat [B*P, H], keys and values of x_flat [B*S, H]
    (x [B, S, H] itself gives the sizes) -> q [B, N, P, D], k and v
    [B, N, S, D], in the compute dtype."""
    dtype = block.compute_dtype
    batch, seq = tf.shape(x)[0], tf.shape(x)[1]
    n, d = block.num_attention_heads, block.head_size

    def heads(t):  # [B*length, H] -> [B, N, length, D]
        return tf.transpose(tf.reshape(t, [batch, -1, n, d]), [0, 2, 1, 3])

    # One bfloat16 input per product (`fused_elementwise.casts`).
    query_in, key_in, value_in = fused_elementwise.casts(x_flat, dtype, 3)
    if w.fused_qkv:  # full-length passes: the encoder fuses only there
        # The product in head layout [3, B, N, S, D]; slices of its leading
        # axis are views, so no split pass is needed. It reads x once.
        x_in = query_in
        if "qkv" in w.packed:  # our product writes the heads, bias included
            kernel, packed = w.packed["qkv"]
            x_rows = tf.reshape(x_in, [batch, seq, n * d])
            bias = tf.reshape(w.biases["qkv"], [-1])  # head-major order = [3H] order
            qkv = fused_elementwise.dense_heads(x_rows, kernel, packed, bias, 3, n)
        elif float32_loops_for(dtype):  # head-major kernel, see fused_qkv_weights
            qkv = w.linear(tf.reshape(x_in, [1, batch, 1, seq, n * d]), "qkv", training)
            # The loop's output has no shape for Grappler, whose fusion of the
            # attention (`attention_probs`) needs q and k of known rank.
            qkv = tf.ensure_shape(qkv, [3, None, n, None, d])
        else:  # one transpose of the whole product
            qkv = w.linear(x_in, "qkv", training)
            qkv = tf.transpose(tf.reshape(qkv, [batch, seq, 3, n, d]), [2, 0, 3, 1, 4])
        return qkv[0], qkv[1], qkv[2]

    def biased_heads(a, name):  # a [B*length, H] -> (a . kernel + bias) as heads
        y, bias = w.product(a, name), w.biases[name]
        joined = fused_elementwise.bias_add_heads(y, bias, n, batch)
        if joined is not None:
            return joined
        return heads(bias_and_activation(y, bias, training=training))

    k, v = biased_heads(key_in, "key"), biased_heads(value_in, "value")
    if rows_flat is not x_flat:
        query_in = tf.cast(rows_flat, dtype)
    return biased_heads(query_in, "query"), k, v


def _ffn_sublayer(block, h1, w, training):
    """Feed-forward of h1 [B*P, H] (dense to F with `hidden_act`, dense back
    to H), dropout, plus h1, layer norm -> [B*P, H] float32."""
    h1_in = fused_elementwise.cast(h1, block.compute_dtype)
    inter = w.linear(h1_in, "intermediate", training, block.hidden_act)
    # The output feeds the next block's query, key and value products.
    return _output_sublayer(block, inter, "ffn_output", h1, w, training, copies=3)


def _output_sublayer(block, a, name, residual, w, training, copies=1):
    """layer_norm(dropout(a . kernel + bias) + residual) of the dense sublayer `name`
    ("attention_output" or "ffn_output", whose layer norm follows), a [rows, in],
    residual [rows, H] float32 -> [rows, H] float32, read by `copies` products
    (`layer_norm`). Where the bias would take a float32 loop of its own
    (`float32_loops_for`) or the layer norm is a native kernel, and no dropout comes
    between, the layer norm's input pass adds it with the residual instead (and its
    gradient pass sums the bias's)."""
    norm = block.attention_layer_norm if name == "attention_output" else block.ffn_layer_norm
    dropout = training and block.hidden_dropout_prob > 0
    dtype = block.compute_dtype
    if name in w.packed and not training:  # our product, layer norm included
        return layer_norm(
            norm, a, residual=residual, bias=w.biases[name], product_of=w.packed[name]
        )
    bias_in_layer_norm = float32_loops_for(dtype) or fused_elementwise.native_kernels_for(dtype)
    if bias_in_layer_norm and not dropout:
        product = w.product(a, name)
        return layer_norm(
            norm, product, training, residual=residual, bias=w.biases[name], copies=copies
        )
    y = w.linear(a, name, training)
    if dropout:
        y = block.hidden_dropout(y, training=training)
    return layer_norm(norm, y, training, residual=residual)
