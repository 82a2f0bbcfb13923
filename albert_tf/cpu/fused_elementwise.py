"""The encoder's elementwise math, with its memory-bound parts fused by XLA.

On CPU the encoder runs fastest as a plain TensorFlow graph, where oneDNN does
the matrix products (XLA's own CPU products are slower, bench/results/model.md).
But in such a graph every elementwise op is a separate pass over memory: the
GELU gradient alone is about ten passes over a [B*S, F] tensor. Functions made
with `_xla_or_plain` are a `tf.function(jit_compile=True)` each: called from a
plain graph one becomes a single XLA cluster (one loop over its inputs), and
inside an XLA graph (`jit_compile=True`, TPU) it is simply inlined.

What is fused, and what is not (measured on the bench machine):
  * The inference layer norm runs as oneDNN's own layer-norm kernel where
    TensorFlow has it (see `_onednn_layer_norm_usable`).
  * GELU of the training graphs, forward and gradient: one loop each (the
    inference graphs keep oneDNN's MatMul + BiasAdd + GELU fusion instead).
  * The layer-norm gradient: its row means are matrix-vector products (one
    read on all cores) and the rest one loop. XLA's CPU reductions run on one
    core, so the training layer-norm forward, mostly reductions, stays plain
    TensorFlow.
  * bfloat16 (mixed_bfloat16): the same loops, computed in float32 inside the
    cluster (bfloat16 in, bfloat16 out, one rounding at the end). XLA's CPU
    loops in bfloat16 itself convert around every op and are slower than
    TensorFlow's kernels; the float32 loop is 5x faster than TensorFlow's
    bfloat16 op chain (as profiled when the loops were written).
  * bfloat16 dense layers: the bias (and GELU) after a plain MatMul, as one
    loop (`bias_add`, `bias_gelu_tanh`). For bfloat16, Grappler's fused
    MatMul + BiasAdd (+ GELU) becomes a oneDNN inner product without AMX
    (`x64:gemm:jit`), 1.2-2x slower than the plain MatMul's AMX kernel
    (`brg_matmul`); the loop is also what keeps Grappler from fusing the two.
    Where a layer norm follows (attention and FFN outputs), the bias is added
    in the loop that sums the layer norm's input instead (`residual_sum`).
  * bfloat16 attention: scale, mask and softmax of the scores, and its
    gradient, one loop each (`attention_softmax`; float32 keeps the op chain
    and oneDNN's softmax kernel). In oneDNN graphs the scale and mask go into
    the scores' product instead (inference and the training forward pass), as
    post-ops of oneDNN's AMX matmul, followed by oneDNN's softmax
    (`product_attention_softmax`).

  * bfloat16, where this machine has a C++ compiler: the FFN's bias + GELU (and its
    gradient) and each dense sublayer's bias + residual + layer norm (in inference
    with the bfloat16 copy the next product reads, see `cast`; in training with the
    moments its gradient needs), the layer-norm gradient (with dx's bfloat16 copy),
    the query/key/value biases with the heads, the attention softmax's gradient and
    the sums of bfloat16 terms (`sum_terms`) are C++ kernels instead
    (albert_tf.cpu.native_kernels; speed path `native_cpu_kernels`). float32 training
    takes the same kernels (no bfloat16 copies); float32 inference its layer norms,
    and the heads where Q, K and V are apart (the GELU stays in oneDNN's fused product
    or ours).

Results equal the plain ops to float32 rounding (XLA's tanh differs in the
last bits). Whether these kernels are used is the speed-path decision
(`SpeedPaths.fused_elementwise`, albert_tf.cpu.speed_paths: yes on CPU-only machines,
no with a GPU or TPU, or `--speed_paths=plain`), read when a call is traced.
`disabled()` makes the functions below traced inside it use the plain ops whatever the
decision (for comparisons in tests and benches).
"""

from __future__ import annotations

import contextlib
import functools
import threading

import tensorflow as tf

from albert_tf.cpu import native_kernels, paths, tf_internals
from albert_tf.model.layers import GELU_A, GELU_C

_state = threading.local()


def enabled():
    """Whether calls traced now use the fused kernels (XLA loops, oneDNN layer norm,
    and the hand-written gradients of albert_tf.cpu.block): the speed-path decision,
    unless `disabled()` is in effect in this thread."""
    return getattr(_state, "enabled", True) and paths.taken().fused_elementwise


@contextlib.contextmanager
def disabled():
    """Within this block (this thread) the functions below trace as plain TensorFlow ops."""
    previous = getattr(_state, "enabled", True)
    _state.enabled = False
    try:
        yield
    finally:
        _state.enabled = previous


@functools.cache
def cpu_flags() -> frozenset:
    """The instruction-set flags of this CPU as Linux lists them (e.g. "avx512bw",
    "avx512_bf16", "amx_bf16"); empty where /proc/cpuinfo has none. What oneDNN does with
    bfloat16 depends on them: its bfloat16 kernels and fusions need AVX-512 (avx512bw)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def _in_float32(fn):
    """fn of bfloat16 tensors computed in float32, the result rounded once to bfloat16."""

    def fn32(*args):
        return tf.cast(fn(*(tf.cast(a, tf.float32) for a in args)), tf.bfloat16)

    fn32.__name__ = fn.__name__ + "_in_float32"
    return fn32


def _xla_or_plain(fn, casts_itself=False):
    """fn as one XLA cluster for float32 or bfloat16 arguments (unless `disabled()`);
    bfloat16 ones are computed in float32 inside the cluster. The dtype of the first
    argument decides; the others are of the same dtype, unless `casts_itself`: fn
    takes any float dtypes and computes in float32 itself."""
    compiled = {
        tf.float32: tf.function(fn, jit_compile=True, reduce_retracing=True),
        tf.bfloat16: tf.function(
            fn if casts_itself else _in_float32(fn), jit_compile=True, reduce_retracing=True
        ),
    }

    def call(*args):
        dtype = tf.as_dtype(args[0].dtype)
        return (compiled[dtype] if enabled() and dtype in compiled else fn)(*args)

    call.__name__ = fn.__name__
    call.__doc__ = fn.__doc__
    return call


def _gelu_tanh(x):  # public: gelu_tanh
    """GELU (tanh form) of x, any shape: 0.5 x (1 + tanh(c (x + a x^3)))."""
    c = tf.constant(GELU_C, x.dtype)
    a = tf.constant(GELU_A, x.dtype)
    return 0.5 * x * (1.0 + tf.tanh(c * x * (1.0 + a * (x * x))))


def _gelu_tanh_backward(dy, x):  # public: gelu_tanh_backward
    """dy times d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 a x^2),
    t = tanh(c (x + a x^3)) recomputed from x: a tanh is cheaper than a pass
    over memory, and nothing but x is kept for the gradient."""
    c = tf.constant(GELU_C, x.dtype)
    a = tf.constant(GELU_A, x.dtype)
    x2 = x * x
    t = tf.tanh(c * x * (1.0 + a * x2))
    dt = (1.0 - t * t) * (c + (3.0 * a * c) * x2)
    return dy * (0.5 * (1.0 + t) + (0.5 * x) * dt)


def _bias_add(y, bias):  # public: bias_add
    """y [..., N] + bias [N]."""
    return y + bias


def _bias_gelu_tanh(y, bias):  # public: bias_gelu_tanh
    """GELU (tanh form) of y [..., N] + bias [N]."""
    return _gelu_tanh(y + bias)


def _bias_gelu_tanh_backward(dz, y, bias):  # public: bias_gelu_tanh_backward
    """dz times GELU' at y + bias: the gradient of `bias_gelu_tanh` w.r.t. y (the
    bias's is its sum over all leading axes)."""
    return _gelu_tanh_backward(dz, y + bias)


gelu_tanh = _xla_or_plain(_gelu_tanh)
gelu_tanh_backward = _xla_or_plain(_gelu_tanh_backward)
bias_add = _xla_or_plain(_bias_add)
_bias_gelu_tanh_loop = _xla_or_plain(_bias_gelu_tanh)
_bias_gelu_tanh_backward_loop = _xla_or_plain(_bias_gelu_tanh_backward)


def bias_gelu_tanh(y, bias):
    """GELU (tanh form) of y [..., N] + bias [N]: for bfloat16 or float32 y and bias the
    native kernel where `_native_elementwise` (albert_tf.cpu.native_kernels: computed in
    float32 as the equal x sigmoid(2u), bfloat16 rounded once; 1.4x (float32) and 1.9x
    (bfloat16) faster than the loop, bench/bench_kernels.py), else one XLA loop (float32
    inside for bfloat16)."""
    if _native_elementwise(bias, y):
        return native_kernels.bias_gelu(y, bias)
    return _bias_gelu_tanh_loop(y, bias)


def bias_gelu_tanh_backward(dz, y, bias):
    """(dy, dbias): dy = dz times GELU' at y + bias (dz, y [..., N], bias [N]), the
    gradient of `bias_gelu_tanh` w.r.t. y, and the bias's gradient where it came with
    it, else None (the caller sums dy). The native kernel for bfloat16 or float32 where
    `_native_elementwise` (it sums dy over the rows in the same pass, in float32), else
    one XLA loop."""
    if dz.dtype == y.dtype and _native_elementwise(bias, y):
        return native_kernels.bias_gelu_backward(dz, y, bias)
    return _bias_gelu_tanh_backward_loop(dz, y, bias), None


def packed_kernel(kernel):
    """The kernel [K, N] (bfloat16 or float32) packed for `dense_bias_gelu`
    (albert_tf.cpu.native_kernels' product, the packing done once for every layer that shares
    the kernel) where this machine and graph can run it: `SpeedPaths.native_products`,
    `_native_usable`, a CPU with AVX512_BF16 for bfloat16 or AVX-512 (or AVX2 with FMA)
    for float32, K and N static multiples of 32. Else None: the caller keeps the oneDNN
    product and what follows it."""
    static = kernel.shape.rank == 2 and all(d is not None and d % 32 == 0 for d in kernel.shape)
    if not (static and paths.taken().native_products and _products_run(kernel.dtype)):
        return None
    return native_kernels.pack_kernel(kernel)


def _products_run(dtype):
    """Whether our products (and attention) of `dtype` may run in the graph being traced:
    bfloat16 or float32, `_native_usable`, and this CPU has them (`products_ready`)."""
    return (
        dtype in (tf.bfloat16, tf.float32)
        and _native_usable()
        and native_kernels.products_ready(dtype)
    )


def attention_usable(q):
    """Whether inference may run its attention for the queries q [B, N, P, D] as
    `attention`: `SpeedPaths.native_attention`, `_native_usable`, our products for q's
    dtype on this CPU, D static and a multiple of 32."""
    return (
        q.shape.rank == 4
        and q.shape[-1] is not None
        and q.shape[-1] % 32 == 0
        and paths.taken().native_attention
        and _products_run(q.dtype)
    )


def attention(q, k, v, adder, scale):
    """softmax(q . k^T * scale + adder) . v per head as one kernel of ours (inference):
    q [B, N, P, D], k and v [B, N, S, D], adder [B, 1, 1, S] float32 -> context rows
    [B * P, N * D] in q's dtype, the scores and softmax in float32, the probabilities in
    q's dtype before their product with v (as the layers' path rounds them); where
    `attention_usable(q)`."""
    context = native_kernels.attention(q, k, v, adder, scale)
    return tf.reshape(context, [-1, context.shape[-1] or tf.shape(context)[-1]])


@tf.RegisterGradient("AlbertAttention")
def _attention_gradient(op, dcontext):
    """Gradients of `attention` w.r.t. q, k, v and the adder (inference graphs
    differentiated by a user), from the probabilities recomputed with TensorFlow's ops."""
    q, k, v, adder = op.inputs
    scale = op.get_attr("scale")
    batch, heads, queries, size = (tf.shape(q)[i] for i in range(4))
    scores = tf.matmul(tf.cast(q, tf.float32), tf.cast(k, tf.float32), transpose_b=True)
    probs = tf.nn.softmax(scores * scale + adder, axis=-1)  # [B, N, P, S]
    dheads = tf.transpose(tf.reshape(dcontext, [batch, queries, heads, size]), [0, 2, 1, 3])
    dheads = tf.cast(dheads, tf.float32)
    dv = tf.matmul(tf.cast(tf.cast(probs, q.dtype), tf.float32), dheads, transpose_a=True)
    dprobs = tf.matmul(dheads, tf.cast(v, tf.float32), transpose_b=True)
    dscores = probs * (dprobs - tf.reduce_sum(dprobs * probs, -1, keepdims=True))
    dq = tf.matmul(dscores, tf.cast(k, tf.float32)) * scale
    dk = tf.matmul(dscores, tf.cast(q, tf.float32), transpose_a=True) * scale
    dadder = tf.reshape(tf.reduce_sum(dscores, [1, 2]), tf.shape(adder))
    return tf.cast(dq, q.dtype), tf.cast(dk, k.dtype), tf.cast(dv, v.dtype), dadder


def dense_bias_gelu(x, kernel, packed, bias):
    """GELU (tanh form) of x [rows, K] . kernel [K, N] + bias [N], bfloat16 or float32, as
    one product of ours whose float32 accumulators take the bias and the GELU before
    they are stored; `packed` is `packed_kernel(kernel)` (not None)."""
    return native_kernels.dense_bias_gelu(x, kernel, packed, bias)


@tf.RegisterGradient("AlbertDenseBiasGelu")
def _dense_bias_gelu_gradient(op, dz):
    """Gradients of `dense_bias_gelu` w.r.t. x, the kernel and the bias (inference graphs
    differentiated by a user): the product again, then the training graphs' GELU
    gradient. The packed kernel gets none (the kernel input carries it)."""
    x, kernel, _, bias = op.inputs
    dy, dbias = _bias_gelu_gradients(dz, tf.matmul(x, kernel), bias)
    return tf.matmul(dy, kernel, transpose_b=True), tf.matmul(x, dy, transpose_a=True), None, dbias


def dense_heads(x, kernel, packed, bias, groups, num_heads):
    """x [B, S, K] . kernel [K, N] + bias [N], bfloat16 or float32, as one product of ours
    written as attention heads [groups, B, num_heads, S, D] (the N columns `groups`
    blocks side by side of num_heads heads of D), the bias added to the float32
    accumulators before they are stored; `packed` is `packed_kernel(kernel)` (not None)."""
    return native_kernels.dense_heads(x, kernel, packed, bias, groups, num_heads)


@tf.RegisterGradient("AlbertDenseHeads")
def _dense_heads_gradient(op, dheads):
    """Gradients of `dense_heads` w.r.t. x, the kernel and the bias (inference graphs
    differentiated by a user): the heads back in the product's layout, then its two
    products and the bias's sum. The packed kernel gets none."""
    x, kernel, _, bias = op.inputs
    batch, seq = tf.shape(x)[0], tf.shape(x)[1]
    dy = tf.reshape(tf.transpose(dheads, [1, 3, 0, 2, 4]), [batch * seq, -1])
    x_rows = tf.reshape(x, [batch * seq, -1])
    dx = tf.reshape(tf.matmul(dy, kernel, transpose_b=True), tf.shape(x))
    dbias = tf.cast(leading_sum(dy), bias.dtype)
    return dx, tf.matmul(x_rows, dy, transpose_a=True), None, dbias


def dense_layer_norm(x, kernel, packed, bias, residual, gamma, beta, epsilon):
    """LN(x [rows, K] . kernel [K, N] + bias [N] + residual [rows, N]) over each row ->
    float32 [rows, N], for bfloat16 x carrying its bfloat16 copy (`bfloat16_copy`): one
    product of ours whose float32 accumulators are summed with the bias and residual and
    normalised in the same pass (x, kernel, bias bfloat16 or float32; residual, gamma,
    beta float32); `packed` is `packed_kernel(kernel)` (not None)."""
    out, out_bfloat16 = native_kernels.dense_residual_layer_norm(
        x, kernel, packed, bias, residual, gamma, beta, epsilon
    )
    if x.dtype == tf.float32:
        return out
    return with_bfloat16_copy(out, out_bfloat16)


@tf.RegisterGradient("AlbertDenseResidualLayerNorm")
def _dense_layer_norm_gradient(op, dy, dy_bfloat16):
    """Gradients of `dense_layer_norm` (inference graphs differentiated by a user): the
    product again, the layer norm's gradient as for AlbertResidualLayerNorm, then the
    product's two gradient products. The packed kernel gets none, nor the empty second
    output of the float32 product."""
    x, kernel, _, bias, residual, gamma, beta = op.inputs
    dproduct, dbias, dresidual, dgamma, dbeta = _residual_layer_norm_gradients(
        tf.matmul(x, kernel),
        bias,
        residual,
        gamma,
        beta,
        op.get_attr("epsilon"),
        dy,
        dy_bfloat16,
    )
    dx = tf.matmul(dproduct, kernel, transpose_b=True)
    dkernel = tf.matmul(x, dproduct, transpose_a=True)
    return dx, dkernel, None, dbias, dresidual, dgamma, dbeta


def known_zeros(t):
    """Whether graph tensor t is zeros by construction: the zeros (ZerosLike, Fill or,
    for small static shapes, a constant) that TensorFlow's gradient code makes for an
    output nothing used. A custom gradient can skip such a term instead of adding it
    (a pass over activation-sized memory)."""
    if t is None or tf.executing_eagerly() or not hasattr(t, "op"):
        return False
    if t.op.type == "ZerosLike":
        return True
    if t.op.type in ("Fill", "Const"):
        value = tf.get_static_value(t.op.inputs[1] if t.op.type == "Fill" else t)
        return value is not None and not value.any()
    return False


# A float32 `sum_terms` adds at most this many terms in one native pass.
FLOAT32_TERMS_PER_PASS = 4


def sum_terms(terms):
    """The sum of `terms`, tensors of one shape and dtype, in their order. Where
    `_native_usable`: bfloat16 in one native pass (added in float32, rounded once; 3.7x
    faster than TensorFlow's bfloat16 AddN for twelve [768, 3072] terms, and more exact);
    float32 in passes of up to `FLOAT32_TERMS_PER_PASS` terms, each after the first
    starting from the sum so far: the running sum's numbers to the bit, in about half its
    memory traffic (twelve terms: 19 reads and writes of a term's size against 33),
    with no more terms kept waiting than a pass takes. Else a running sum (each term can
    be freed once added)."""
    dtype = terms[0].dtype
    native = (
        len(terms) > 1
        and dtype in (tf.bfloat16, tf.float32)
        and all(t.dtype == dtype for t in terms)
        and _native_usable()
    )
    if native and dtype == tf.bfloat16:
        return native_kernels.sum_terms(terms)
    if native:
        total, rest = terms[0], list(terms[1:])
        while rest:
            count = FLOAT32_TERMS_PER_PASS - 1
            total, rest = native_kernels.sum_terms([total, *rest[:count]]), rest[count:]
        return total
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return total


def _native_elementwise(v, x):
    """Whether an elementwise native kernel may take x (bfloat16 or float32) with v, a
    vector [H] of x's dtype and last dimension H (static shapes; the kernels do not
    broadcast), in the graph being traced (`_native_usable`)."""
    return x.dtype in (tf.bfloat16, tf.float32) and _is_row_vector(v, x) and _native_usable()


def _is_row_vector(v, x):
    """Whether v is a vector [H] of x's dtype and last dimension H (static shapes)."""
    return (
        v.dtype == x.dtype
        and v.shape.rank == 1
        and x.shape.rank is not None
        and x.shape.rank >= 1
        and v.shape[0] is not None
        and v.shape[0] == x.shape[-1]
    )


def leading_sum(t):
    """t [..., N] summed over all leading axes in float32 -> [N]."""
    return tf.reduce_sum(tf.reshape(tf.cast(t, tf.float32), [-1, tf.shape(t)[-1]]), axis=0)


def bias_add_heads(y, bias, num_heads, batch):
    """y [batch * S, H] + bias [H] split into attention heads -> [batch, num_heads, S, H /
    num_heads], where the native kernel takes them (bfloat16 or float32,
    `_native_elementwise`: one pass instead of the bias's loop or the product's bias and a
    transpose, and a gradient in one pass with the bias's sum); else None, and the caller
    adds the bias and transposes."""
    if not (y.shape.rank == 2 and _native_elementwise(bias, y)):
        return None
    y = tf.reshape(y, [batch, -1, y.shape[-1]])
    return native_kernels.bias_add_heads(y, bias, num_heads)


@tf.RegisterGradient("AlbertBiasAddHeads")
def _native_bias_add_heads_gradient(op, dheads):
    """Gradients of albert_tf.cpu.native_kernels.bias_add_heads w.r.t. y and the bias."""
    return native_kernels.heads_backward(dheads)


@tf.RegisterGradient("AlbertBiasGelu")
def _native_bias_gelu_gradient(op, dz):
    """Gradients of albert_tf.cpu.native_kernels.bias_gelu (inference graphs differentiated
    by a user): the training graphs' loop."""
    y, bias = op.inputs
    return _bias_gelu_gradients(dz, y, bias)


def _bias_gelu_gradients(dz, y, bias):
    """(dy, dbias) of gelu(y + bias): `bias_gelu_tanh_backward`, with the bias's sum of
    dy where it did not come with it."""
    dy, dbias = bias_gelu_tanh_backward(dz, y, bias)
    return dy, tf.cast(leading_sum(dy), bias.dtype) if dbias is None else dbias


@tf.RegisterGradient("AlbertResidualLayerNorm")
def _native_residual_layer_norm_gradient(op, dy, dy_bfloat16):
    """Gradients of albert_tf.cpu.native_kernels.residual_layer_norm w.r.t. x, bias,
    residual, gamma and beta: the closed form of `layer_norm_backward`, the moments
    recomputed from the inputs (both outputs are the same values); the copy's gradient
    and the bias's sum in the native gradient's pass, as in training."""
    x, bias, residual, gamma, beta = op.inputs
    epsilon = op.get_attr("epsilon")
    return _residual_layer_norm_gradients(x, bias, residual, gamma, beta, epsilon, dy, dy_bfloat16)


def _residual_layer_norm_gradients(x, bias, residual, gamma, beta, epsilon, dy, dy_bfloat16):
    """(dx, dbias, dresidual, dgamma, dbeta) of LN(x + bias + residual) for the gradients
    dy of its float32 output and dy_bfloat16 of its bfloat16 copy (either may be None;
    for a float32 x the copy is an empty [0], and its gradient is ignored)."""
    if x.dtype == tf.float32:
        dy_bfloat16 = None
    if dy is None:  # only the bfloat16 copy was used
        dy, dy_bfloat16 = tf.cast(dy_bfloat16, tf.float32), None
    dy_bfloat16 = [] if dy_bfloat16 is None else [dy_bfloat16]
    _, xhat, rstd = layer_norm_forward(x, residual, gamma, beta, epsilon, bias)
    dx, dgamma, dbeta, dx_sum = layer_norm_backward(
        dy,
        xhat,
        rstd,
        gamma,
        native=True,
        dy_bfloat16=dy_bfloat16,
        dx_sum=True,
        input_dtype=x.dtype,
    )
    return cast(dx, x.dtype), tf.cast(dx_sum, bias.dtype), dx, dgamma, dbeta


def _attention_softmax(scores, adder, scale):  # public: attention_softmax
    """softmax(scores * scale + adder) over the last axis: scores [B, N, P, S], adder
    [B, 1, 1, S] (0 or the mask's large negative), scale a scalar."""
    return tf.nn.softmax(scores * scale + adder, axis=-1)


def _attention_softmax_backward(dprobs, probs, scale):
    """The gradient of `attention_softmax` w.r.t. scores, from probs (its output) and
    dprobs [B, N, P, S]: scale * probs * (dprobs - sum(dprobs * probs) over the last axis)."""
    inner = tf.reduce_sum(dprobs * probs, axis=-1, keepdims=True)
    return scale * probs * (dprobs - inner)


attention_softmax = _xla_or_plain(_attention_softmax)
_attention_softmax_backward_loop = _xla_or_plain(_attention_softmax_backward)


def attention_softmax_backward(dprobs, probs, scale):
    """The gradient of `attention_softmax` (or `product_attention_softmax`) w.r.t. the
    scores, dprobs and probs [B, N, P, S], scale a Python float: the native kernel for
    bfloat16 or float32 where `_native_usable` (one pass over each row, in float32,
    bfloat16 rounded once; about 3x faster than the loop at [16, 12, 128, 128]), else
    one XLA loop (float32 inside for bfloat16)."""
    if dprobs.dtype == probs.dtype and native_kernels_for(probs.dtype):
        return native_kernels.softmax_backward(dprobs, probs, scale)
    return _attention_softmax_backward_loop(dprobs, probs, tf.constant(scale, tf.float32))


def product_attention_softmax(scores, adder, scale):
    """softmax(scores * scale + adder) over the last axis, fused into the scores'
    product: scores [B, N, P, S] the bfloat16 or float32 output of a batch matrix product
    and nothing else, adder [B, 1, 1, S] float32 (0 or the mask's large negative), scale
    a Python float -> probabilities in the scores' dtype; None where `product_fusable` is
    not.

    The scale and the mask as ops of the scores' dtype on the product: the pattern
    Grappler's remapper fuses into the product itself (oneDNN's matmul with post-ops,
    computed in float32 on the accumulator before a bfloat16 product's one rounding);
    then oneDNN's softmax (float32 inside). For float32 these are the plain ops' numbers.
    For bfloat16, for every row with a real key the softmax's input equals the float32
    loop's (the scale is a power of two; the mask's -10000 rounds to -9984 in bfloat16,
    and exp gives 0 either way); a whole step is about 6% faster in inference than with
    product + `attention_softmax` (as measured when it was written)."""
    if not product_fusable(scores, scale):
        return None
    # Grappler's shape inference can lose the mask's shape, and the remapper fuses
    # only a mask whose broadcast dimensions it knows.
    mask = tf.ensure_shape(tf.cast(adder, scores.dtype), [None, 1, 1, None])
    return tf.nn.softmax(scores * tf.constant(scale, scores.dtype) + mask, axis=-1)


def product_fusable(scores, scale):
    """Whether `product_attention_softmax` applies: scores in a oneDNN graph
    (`_onednn_graph`), float32 or bfloat16 with a scale exact in bfloat16 (a power of
    two: 1/8 for the head size 64 of every released model)."""
    exact = scores.dtype == tf.float32 or (
        scores.dtype == tf.bfloat16 and _exact_in_bfloat16(scale)
    )
    return exact and _onednn_graph()


def _exact_in_bfloat16(value):
    return float(tf.bfloat16.as_numpy_dtype(value)) == value


def _residual_sum(x, bias, residual):  # public: residual_sum
    """x [..., H] (any float dtype) + bias [H] (any float dtype) + residual float32
    [..., H], in float32."""
    return tf.cast(x, tf.float32) + tf.cast(bias, tf.float32) + residual


residual_sum = _xla_or_plain(_residual_sum, casts_itself=True)


def _sum_input(x, residual, bias=None):
    """x + bias + residual in float32; bias and residual may be None."""
    x = tf.convert_to_tensor(x)
    if bias is not None and residual is not None:
        return residual_sum(x, bias, residual)
    if x.dtype in (tf.bfloat16, tf.float16):  # mixed precision: normalise in float32
        x = tf.cast(x, tf.float32)
    if bias is not None:
        x = x + tf.cast(bias, tf.float32)
    return x if residual is None else x + residual


def _onednn_graph():
    """Whether the graph being traced runs oneDNN's kernels and Grappler's fusions of
    them: a oneDNN CPU build, `enabled()` (so not with a GPU or TPU present), graph
    mode outside XLA contexts (jit_compile, TPU), and not while `tf.saved_model.save`
    traces, so that a SavedModel loads on any build (functions traced before the save
    keep their graphs: trace those inside `disabled()`)."""
    return (
        enabled()
        and not tf.executing_eagerly()
        and not _saving()
        and not tf_internals.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
        and _onednn_registered()
    )


def _onednn_layer_norm_usable(s):
    """Whether oneDNN's layer-norm kernel can run s [..., H] in the graph being traced
    (`_onednn_graph`).

    `_MklLayerNorm` is the op Grappler's remapper makes out of Keras 2's layer
    norm; our graphs never match its patterns (they need constant gamma and
    beta), so it is created directly. It exists only in TensorFlow's oneDNN
    CPU builds and has no gradient and no XLA lowering."""
    return s.dtype == tf.float32 and s.shape.rank in (2, 3) and _onednn_graph()


def _native_usable():
    """Whether the graph being traced may run albert_tf.cpu.native_kernels: the speed-path
    decision (and `enabled()`), outside XLA contexts (the kernels have no XLA
    lowering) and `tf.saved_model.save` (a SavedModel must load without them), on a
    machine where the kernels could be built."""
    return (
        enabled()
        and paths.taken().native_cpu_kernels
        and not _saving()
        and not tf_internals.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())
        and native_kernels.library() is not None
    )


def _saving():
    return tf_internals.in_save_context()


@functools.cache
def _onednn_registered():
    return bool(
        tf_internals.IsMklEnabled() and tf_internals.registered_op("_MklLayerNorm") is not None
    )


def _onednn_layer_norm(s, gamma, beta, epsilon):
    op = tf.compat.v1.get_default_graph().create_op(
        "_MklLayerNorm",
        [s, tf.convert_to_tensor(gamma), tf.convert_to_tensor(beta)],
        [tf.float32],
        name="layer_norm",
        attrs={
            "T": tf_internals.AttrValue(type=tf.float32.as_datatype_enum),
            "epsilon": tf_internals.AttrValue(f=epsilon),
        },
    )
    return op.outputs[0]


def layer_norm(x, residual, gamma, beta, epsilon, bias=None):
    """LN(x + bias + residual) over the last axis, [..., H] -> float32 [..., H]
    (inference form). `residual` (float32) and `bias` [H] may be None; x may be
    bfloat16. For a bfloat16 x with its bias and a float32 residual, the native
    kernel where `_native_usable` (one pass instead of the sum's loop, oneDNN's layer
    norm and the next product's cast, albert_tf.cpu.native_kernels); otherwise one oneDNN
    kernel where `_onednn_layer_norm_usable` (5x faster than the op chain on the bench
    machine); both take the same two-pass mean and variance."""
    x = tf.convert_to_tensor(x)
    if native_layer_norm_usable(x, residual, bias):
        out, out_bfloat16 = native_kernels.residual_layer_norm(
            x, bias, residual, gamma, beta, epsilon
        )
        return _with_copy_of(x, out, out_bfloat16)
    s = _sum_input(x, residual, bias)
    if _onednn_layer_norm_usable(s):
        return _onednn_layer_norm(s, gamma, beta, epsilon)
    return layer_norm_forward(s, None, gamma, beta, epsilon)[0]


def native_kernels_for(dtype):
    """Whether the graph being traced runs the native elementwise kernels for tensors of
    `dtype` (bfloat16 or float32, `_native_usable`): then a dense sublayer's output, with
    its bias, goes to a native layer norm (`native_layer_norm_usable`, for a float32
    residual), and a training graph's GELU, heads and softmax gradient are native too."""
    return tf.as_dtype(dtype) in (tf.bfloat16, tf.float32) and _native_usable()


def native_layer_norm_usable(x, residual, bias):
    """Whether the native layer norms take x (bfloat16 or float32, with its bias of the
    same dtype and a float32 residual) in the graph being traced (then
    `layer_norm_backward(native=True)` too)."""
    return (
        bias is not None
        and x.dtype in (tf.bfloat16, tf.float32)
        and _is_row_vector(bias, x)
        and residual is not None
        and residual.dtype == tf.float32
        and _native_usable()
    )


# The attribute of a float32 graph tensor holding its bfloat16 copies (see `cast`).
_BFLOAT16_COPY = "_albert_tf_bfloat16_copy"


def with_bfloat16_copy(x, *copies):
    """x, carrying `copies` (x rounded to bfloat16; several distinct tensors of the same
    values, see `casts`) for `cast`, `casts` and `reshape`; eager tensors take no
    attributes and carry nothing."""
    if not tf.executing_eagerly():
        setattr(x, _BFLOAT16_COPY, copies)
    return x


def _with_copy_of(x, out, out_bfloat16):
    """out carrying out_bfloat16 (`with_bfloat16_copy`) where the native kernel wrote one,
    for a bfloat16 input x; for a float32 one out alone (the kernel's copy is empty)."""
    return with_bfloat16_copy(out, out_bfloat16) if x.dtype == tf.bfloat16 else out


def bfloat16_copy(x):
    """The (first) bfloat16 copy x carries (`with_bfloat16_copy`), or None."""
    copies = getattr(x, _BFLOAT16_COPY, ())
    return copies[0] if copies else None


def cast(x, dtype):
    """tf.cast(x, dtype); for bfloat16, the copy the native layer norm that computed x
    wrote beside it where it did (the same values, tf.cast's rounding): one pass less
    before each product that reads a layer norm's output."""
    copy = bfloat16_copy(x)
    if copy is not None and tf.as_dtype(dtype) == tf.bfloat16:
        return copy
    return tf.cast(x, dtype)


def casts(x, dtype, count):
    """`count` tensors equal to `cast(x, dtype)`, one per product that reads x: for
    bfloat16 the distinct copies x carries where it carries `count`, so that each
    product's gradient reaches the layer norm's gradient pass on its own (added there
    in float32) instead of through a bfloat16 AddN; else one cast, `count` times."""
    copies = getattr(x, _BFLOAT16_COPY, ())
    if len(copies) >= count and tf.as_dtype(dtype) == tf.bfloat16:
        return list(copies[:count])
    return [cast(x, dtype)] * count


def reshape(x, shape):
    """tf.reshape(x, shape), with x's bfloat16 copies (see `cast`) reshaped alike."""
    copies = getattr(x, _BFLOAT16_COPY, ())
    y = tf.reshape(x, shape)
    return with_bfloat16_copy(y, *(tf.reshape(c, shape) for c in copies)) if copies else y


def layer_norm_forward(x, residual, gamma, beta, epsilon, bias=None):
    """LN(x + bias + residual) -> (output, xhat, rstd): xhat [..., H] the normalised
    input and rstd [..., 1] the reciprocal standard deviation, for the gradient. For x
    with its bias and a float32 residual (`native_layer_norm_usable`), one native
    kernel, a bfloat16 x's output carrying its bfloat16 copy (`bfloat16_copy`)."""
    x = tf.convert_to_tensor(x)
    if native_layer_norm_usable(x, residual, bias):
        out, out_bfloat16, xhat, rstd = native_kernels.residual_layer_norm_moments(
            x, bias, residual, gamma, beta, epsilon
        )
        return _with_copy_of(x, out, out_bfloat16), xhat, rstd
    s = _sum_input(x, residual, bias)
    mean = tf.reduce_mean(s, axis=-1, keepdims=True)
    centered = s - mean
    rstd = tf.math.rsqrt(tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True) + epsilon)
    xhat = centered * rstd
    return xhat * gamma + beta, xhat, rstd


def _layer_norm_input_gradient(dy, xhat, rstd, gamma, mean_g, mean_gxhat):
    """rstd * (dy * gamma - mean_g - xhat * mean_gxhat): [..., H], the row means
    [..., 1] given."""
    return rstd * (dy * gamma - mean_g - xhat * mean_gxhat)


_fused_layer_norm_input_gradient = _xla_or_plain(_layer_norm_input_gradient)


def layer_norm_backward(
    dy, xhat, rstd, gamma, native=False, dy_bfloat16=(), dx_sum=False, input_dtype=tf.bfloat16
):
    """Closed-form layer-norm gradient, dy and xhat [..., H], rstd [..., 1]:
      dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),  g = dy * gamma,
      dgamma = sum(dy * xhat), dbeta = sum(dy) over all leading axes.
    The row means are matrix-vector products (mean(g) = dy . gamma / H), which
    read their input once on all cores; the rest is one fused loop.
    native: one pass of the native kernel instead, where `_native_usable` (for the
    layer norms of `native_layer_norm_usable`, whose input dtype is `input_dtype`), dx
    of a bfloat16 input carrying its bfloat16 copy (`cast`).
    dy_bfloat16: the gradients of the output's bfloat16 copies (a list, maybe empty),
    added to dy (by the native kernel in its pass, in float32).
    dx_sum: also return dx summed over all leading axes [H] (the gradient of a bias
    added to the input; the native kernel sums it in its pass), as a fourth value."""
    if native and _native_usable():
        dx, dx_bfloat16, dgamma, dbeta, dx_total = native_kernels.layer_norm_backward(
            dy, xhat, rstd, gamma, dy_bfloat16, dtype=input_dtype
        )
        copies = (dx_bfloat16,) if input_dtype == tf.bfloat16 else ()
        grads = (with_bfloat16_copy(dx, *copies), dgamma, dbeta)
        return grads + (dx_total,) if dx_sum else grads
    for copy_gradient in dy_bfloat16:
        dy = dy + tf.cast(copy_gradient, dy.dtype)
    width = tf.shape(dy)[-1]
    rows_dy = tf.reshape(dy, [-1, width])  # any rank: [rows, H]
    rows_p = rows_dy * tf.reshape(xhat, [-1, width])
    column = tf.reshape(gamma, [-1, 1]) / tf.cast(width, gamma.dtype)
    lead = tf.shape(dy)[:-1]

    def row_mean(rows):  # [rows, H] -> [..., 1]
        return tf.reshape(tf.matmul(rows, column), tf.concat([lead, [1]], axis=0))

    dx = _fused_layer_norm_input_gradient(
        dy, xhat, rstd, gamma, row_mean(rows_dy), row_mean(rows_p)
    )
    grads = (dx, tf.reduce_sum(rows_p, axis=0), tf.reduce_sum(rows_dy, axis=0))
    return grads + (leading_sum(dx),) if dx_sum else grads
