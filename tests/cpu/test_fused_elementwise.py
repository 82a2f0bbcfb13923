"""fused_elementwise: the XLA-fused GELU and layer-norm gradient against float64
references written from the math, and when XLA is (not) used."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.cpu import fused_elementwise as fe
from albert_tf.cpu import speed_paths

import albert_numpy

NO_NATIVE_KERNELS = speed_paths.CPU_AUTO


def _xla_functions(fn, spec):
    """Names of the XLA-compiled functions a trace of fn(spec) calls."""
    graph = tf.function(fn).get_concrete_function(spec).graph.as_graph_def()
    return [f.signature.name for f in graph.library.function if f.attr["_XlaMustCompile"].b]


def _gelu_grid():
    rng = np.random.default_rng(0)
    return np.concatenate([np.linspace(-8, 8, 4001), rng.normal(size=4000) * 3]).astype(np.float32)


def test_gelu_matches_float64_reference():
    x = _gelu_grid()
    got = fe.gelu_tanh(tf.constant(x)).numpy()
    want = albert_numpy.gelu_tanh(x.astype(np.float64))
    # Absolute 1e-6: for x < -4, 1 + tanh(u) cancels in float32 (TensorFlow's
    # own tanh gives the same 7e-7 there).
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_gelu_gradient_matches_float64_finite_differences():
    x = _gelu_grid()
    dy = np.random.default_rng(1).normal(size=x.shape).astype(np.float32)
    got = fe.gelu_tanh_backward(tf.constant(dy), tf.constant(x)).numpy()
    x64, h = x.astype(np.float64), 1e-6
    slope = (albert_numpy.gelu_tanh(x64 + h) - albert_numpy.gelu_tanh(x64 - h)) / (2 * h)
    np.testing.assert_allclose(got, dy * slope, rtol=1e-5, atol=1e-5)


def _layer_norm_reference_gradients(x, gamma, beta, dy):
    """float64 autodiff of the textbook layer norm (eps 1e-12)."""
    x, gamma, beta = (tf.constant(a, tf.float64) for a in (x, gamma, beta))
    with tf.GradientTape() as tape:
        tape.watch([x, gamma, beta])
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        y = (x - mean) / tf.sqrt(var + 1e-12) * gamma + beta
        loss = tf.reduce_sum(y * tf.constant(dy, tf.float64))
    return [g.numpy() for g in tape.gradient(loss, [x, gamma, beta])]


@pytest.mark.parametrize("shape", [(37, 48), (3, 5, 64)])
def test_layer_norm_backward_matches_float64_autodiff(shape):
    rng = np.random.default_rng(2)
    x = (rng.normal(size=shape) * 3 + 1).astype(np.float32)
    gamma = (rng.normal(size=shape[-1]) + 1).astype(np.float32)
    beta = rng.normal(size=shape[-1]).astype(np.float32)
    dy = rng.normal(size=shape).astype(np.float32)
    _, xhat, rstd = fe.layer_norm_forward(tf.constant(x), None, gamma, beta, 1e-12)
    got = fe.layer_norm_backward(tf.constant(dy), xhat, rstd, tf.constant(gamma))
    for g, w, name in zip(
        got, _layer_norm_reference_gradients(x, gamma, beta, dy), ("dx", "dgamma", "dbeta")
    ):
        assert g.shape == w.shape, name
        scale = np.max(np.abs(w))
        assert np.max(np.abs(g.numpy() - w)) / scale < 1e-5, name


@pytest.mark.parametrize(
    "dtype,native", [(tf.float32, False), (tf.bfloat16, False), (tf.bfloat16, True)]
)
def test_attention_softmax_and_its_gradient_match_float64(dtype, native):
    rng = np.random.default_rng(8)
    scores = tf.cast(rng.normal(size=(2, 3, 5, 7)) * 4, dtype)
    mask = np.ones((2, 7), np.float32)
    mask[1, 4:] = 0
    adder = tf.constant((1.0 - mask)[:, None, None, :] * -10000.0)
    dprobs = tf.cast(rng.normal(size=(2, 3, 5, 7)), dtype)
    probs = fe.attention_softmax(scores, adder, tf.constant(0.125))
    paths = dataclasses.replace(speed_paths.CPU_NATIVE, native_cpu_kernels=native)
    with speed_paths.forced(paths):
        backward = tf.function(lambda d, p: fe.attention_softmax_backward(d, p, 0.125))
        dscores = backward(dprobs, probs)
        graph = backward.get_concrete_function(dprobs, probs).graph
    assert native == ("AlbertSoftmaxBackward" in [op.type for op in graph.get_operations()])
    s64, d64, a64 = (tf.cast(t, tf.float64) for t in (scores, dprobs, adder))
    with tf.GradientTape() as tape:
        tape.watch(s64)
        want = tf.nn.softmax(s64 * 0.125 + a64, axis=-1)
        loss = tf.reduce_sum(want * d64)
    want_grad = tape.gradient(loss, s64)
    # bfloat16: the probabilities within one rounding (2^-8 relative); the gradient is
    # computed from them and the rounded dprobs, so its row sums carry their error
    # (absolute, up to 2^-8 of the largest entry).
    bf16 = dtype == tf.bfloat16
    tolerances = [(2**-8 if bf16 else 1e-5, 1e-6)]
    tolerances.append((2**-7, 2**-8 * np.max(np.abs(want_grad))) if bf16 else (1e-5, 1e-6))
    for got, w, (rtol, atol) in zip((probs, dscores), (want, want_grad), tolerances):
        assert got.dtype == dtype
        np.testing.assert_allclose(tf.cast(got, tf.float64), w, rtol=rtol, atol=atol)
    assert np.all(tf.cast(probs, tf.float64).numpy()[1, :, :, 4:] < 1e-30)  # masked keys


def _grappler_op_types(fn, *args):
    """Op types of fn's graph after Grappler's default passes, nodes placed on the CPU
    (the remapper's fusions apply only there)."""
    from tensorflow.core.protobuf import config_pb2
    from tensorflow.python.grappler import tf_optimizer

    concrete = tf.function(fn).get_concrete_function(*args)
    meta = tf.compat.v1.train.export_meta_graph(
        graph_def=concrete.graph.as_graph_def(), graph=concrete.graph
    )
    for node in meta.graph_def.node:
        node.device = "/job:localhost/replica:0/task:0/device:CPU:0"
    meta.collection_def["train_op"].node_list.value.extend(t.name for t in concrete.outputs)
    graph = tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta)
    return {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}


@pytest.mark.parametrize("head_size", [64, 48])  # scale 1/8 exact in bfloat16; 1/sqrt(48) not
def test_product_attention_softmax_in_a_graph_matches_float64(head_size):
    rng = np.random.default_rng(9)
    q, k = (tf.cast(rng.normal(size=(2, 3, 5, head_size)), tf.bfloat16) for _ in range(2))
    mask = np.ones((2, 7), np.float32)
    mask[1, 4:] = 0
    k = tf.concat([k, k[:, :, :2]], axis=2)  # 7 keys
    adder = tf.constant((1.0 - mask)[:, None, None, :] * -10000.0)
    scale = 1.0 / np.sqrt(head_size)

    def probs(q, k, adder):
        scores = tf.matmul(q, k, transpose_b=True)
        probs = fe.product_attention_softmax(scores, adder, scale)
        return fe.attention_softmax(scores, adder, tf.constant(scale)) if probs is None else probs

    got = tf.function(probs)(q, k, adder)
    q64, k64 = (tf.cast(t, tf.float64) for t in (q, k))
    want = tf.nn.softmax(
        tf.matmul(q64, k64, transpose_b=True) * scale + tf.cast(adder, tf.float64), axis=-1
    )
    assert got.dtype == tf.bfloat16
    # One bfloat16 rounding of the product (the fused path rounds it once, after the
    # scale) and one of the probabilities.
    np.testing.assert_allclose(tf.cast(got, tf.float64), want, rtol=2**-6, atol=2**-9)
    assert np.all(tf.cast(got, tf.float64).numpy()[1, :, :, 4:] < 1e-30)  # masked keys
    # oneDNN's softmax right in the graph, or the float32 loop (an XLA function).
    graph = tf.function(probs).get_concrete_function(q, k, adder).graph
    fused = head_size == 64 and fe._onednn_registered()
    assert ("Softmax" in {op.type for op in graph.get_operations()}) == fused


@pytest.mark.skipif(not fe._onednn_registered(), reason="TensorFlow built without oneDNN")
@pytest.mark.skipif(
    "avx512bw" not in fe.cpu_flags(),
    reason="oneDNN fuses bfloat16 products only on CPUs with AVX-512 (the numbers: "
    "test_product_attention_softmax_in_a_graph_matches_float64)",
)
def test_bfloat16_inference_attention_is_fused_into_its_product_by_grappler():
    """The pattern `product_attention_softmax` leaves must reach the remapper intact
    in the whole model's graph: no other op between the scores product, the scale
    and the mask, and shapes Grappler can see."""
    from model_fixtures import CONFIGS, built_encoder

    # Head size 4: the scale 1/2 is exact in bfloat16.
    model, inputs = built_encoder(CONFIGS["shared_gelu"], "mixed_bfloat16")
    ops = _grappler_op_types(lambda x: model(x)["sequence_output"], inputs)
    assert "_MklFusedBatchMatMulV2" in ops, sorted(ops)


def test_layer_norm_forward_adds_the_residual_first():
    rng = np.random.default_rng(3)
    x, residual = (rng.normal(size=(6, 32)).astype(np.float32) for _ in range(2))
    gamma, beta = rng.normal(size=32).astype(np.float32), rng.normal(size=32).astype(np.float32)
    want = albert_numpy.layer_norm((x + residual).astype(np.float64), beta, gamma, eps=1e-12)
    for out in (
        fe.layer_norm(x, residual, gamma, beta, 1e-12),
        fe.layer_norm_forward(tf.constant(x), residual, gamma, beta, 1e-12)[0],
    ):
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


def test_xla_for_float32_and_bfloat16_not_when_disabled():
    f32 = tf.TensorSpec([4, 8], tf.float32)
    bf16 = tf.TensorSpec([4, 8], tf.bfloat16)
    assert len(_xla_functions(fe.gelu_tanh, f32)) == 1
    assert len(_xla_functions(lambda dy: fe.gelu_tanh_backward(dy, dy), f32)) == 1
    assert (
        len(_xla_functions(lambda dy: fe.layer_norm_backward(dy, dy, dy[:, :1], dy[0]), f32)) == 1
    )
    assert len(_xla_functions(fe.gelu_tanh, bf16)) == 1
    with speed_paths.forced(NO_NATIVE_KERNELS):  # else the native kernel (test_native_kernels)
        assert len(_xla_functions(lambda y: fe.bias_gelu_tanh(y, y[0]), bf16)) == 1
    adder = tf.zeros([1, 1, 1, 8])
    assert len(_xla_functions(lambda y: fe.attention_softmax(y, adder, 0.5), bf16)) == 1
    assert _xla_functions(fe.gelu_tanh, tf.TensorSpec([4, 8], tf.float16)) == []
    with fe.disabled():
        assert not fe.enabled()
        assert _xla_functions(fe.gelu_tanh, f32) == []
        assert _xla_functions(fe.gelu_tanh, bf16) == []
    assert fe.enabled()


def _bf16_values(x):
    """float32 x rounded to bfloat16, as float64 (the exact values a bfloat16 tensor holds)."""
    return tf.cast(tf.cast(x, tf.bfloat16), tf.float64).numpy()


def test_bfloat16_loops_compute_in_float32_and_round_once():
    # One rounding of the exact result: within half a bfloat16 ulp (2^-8 relative)
    # plus float32 noise. TensorFlow's bfloat16 op chain rounds after every op and
    # misses this by several ulps.
    x = _gelu_grid()
    # Away from GELU's zero (relative error ill-defined) and from x < -3, where
    # 1 + tanh cancels in float32 itself.
    x = x[(np.abs(x) > 0.05) & (x > -3)]
    bias = np.float32(0.375)  # exact in bfloat16
    dz = np.random.default_rng(4).normal(size=x.shape).astype(np.float32)
    x64, dz64 = _bf16_values(x), _bf16_values(dz)
    u, h = x64 + bias, 1e-6
    slope = (albert_numpy.gelu_tanh(u + h) - albert_numpy.gelu_tanh(u - h)) / (2 * h)
    cases = [
        (fe.gelu_tanh(tf.cast(x, tf.bfloat16)), albert_numpy.gelu_tanh(x64)),
        (
            fe.bias_gelu_tanh(tf.cast(x, tf.bfloat16), tf.cast([bias], tf.bfloat16)),
            albert_numpy.gelu_tanh(x64 + bias),
        ),
        (
            fe.bias_gelu_tanh_backward(
                tf.cast(dz, tf.bfloat16), tf.cast(x, tf.bfloat16), tf.cast([bias], tf.bfloat16)
            )[0],
            dz64 * slope,
        ),
        (fe.bias_add(tf.cast(x, tf.bfloat16), tf.cast([bias], tf.bfloat16)), x64 + bias),
    ]
    for got, want in cases:
        assert got.dtype == tf.bfloat16
        got = tf.cast(got, tf.float64).numpy()
        big = np.abs(want) > 1e-3  # GELU of large negative x underflows to ~0
        assert np.max(np.abs(got - want)[big] / np.abs(want)[big]) < 2**-8 + 1e-5


def test_disabled_gives_the_same_numbers():
    x = tf.constant(_gelu_grid())
    dy = tf.random.stateless_normal(x.shape, seed=[0, 1])
    with fe.disabled():
        plain = tf.function(fe.gelu_tanh)(x).numpy()
        plain_grad = tf.function(fe.gelu_tanh_backward)(dy, x).numpy()
    np.testing.assert_allclose(fe.gelu_tanh(x).numpy(), plain, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(
        fe.gelu_tanh_backward(dy, x).numpy(), plain_grad, rtol=1e-5, atol=1e-5
    )


def _graph_op_types(fn, *args, jit_compile=False):
    graph = tf.function(fn, jit_compile=jit_compile).get_concrete_function(*args).graph
    return {op.type for op in graph.get_operations()}


@pytest.mark.skipif(
    not fe._onednn_registered(),
    reason="TensorFlow built without oneDNN's layer-norm kernel",
)
def test_inference_layer_norm_uses_onednn_kernel_only_where_it_can():
    rng = np.random.default_rng(5)
    x, residual = (rng.normal(size=(2, 7, 48)).astype(np.float32) for _ in range(2))
    gamma, beta = rng.normal(size=48).astype(np.float32), rng.normal(size=48).astype(np.float32)
    want = albert_numpy.layer_norm((x + residual).astype(np.float64), beta, gamma, eps=1e-12)

    def ln(x, residual):
        return fe.layer_norm(x, residual, gamma, beta, 1e-12)

    args = (tf.constant(x), tf.constant(residual))
    assert "_MklLayerNorm" in _graph_op_types(ln, *args)
    assert "_MklLayerNorm" not in _graph_op_types(ln, *args, jit_compile=True)
    with fe.disabled():
        assert "_MklLayerNorm" not in _graph_op_types(ln, *args)
    for got in (tf.function(ln)(*args), tf.function(ln, jit_compile=True)(*args), ln(*args)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(
    not fe._onednn_registered(),
    reason="TensorFlow built without oneDNN's layer-norm kernel",
)
def test_saved_model_traced_by_save_has_no_onednn_layer_norm(tmp_path):
    from tensorflow.core.protobuf import saved_model_pb2

    gamma, beta = tf.Variable(tf.ones([8])), tf.Variable(tf.zeros([8]))
    module = tf.Module()
    module.vars = [gamma, beta]
    module.serve = tf.function(
        lambda x: fe.layer_norm(x, None, gamma, beta, 1e-12),
        input_signature=[tf.TensorSpec([None, 8], tf.float32)],
    )
    tf.saved_model.save(module, str(tmp_path))
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString((tmp_path / "saved_model.pb").read_bytes())
    graph = saved.meta_graphs[0].graph_def
    op_types = {n.op for n in graph.node} | {
        n.op for f in graph.library.function for n in f.node_def
    }
    assert "_MklLayerNorm" not in op_types and "Rsqrt" in op_types
    loaded = tf.saved_model.load(str(tmp_path))
    x = np.random.default_rng(0).normal(size=(3, 8)).astype(np.float32)
    want = albert_numpy.layer_norm(x.astype(np.float64), np.zeros(8), np.ones(8), eps=1e-12)
    np.testing.assert_allclose(loaded.serve(tf.constant(x)).numpy(), want, rtol=1e-5, atol=1e-5)


def test_accelerator_decision_turns_the_fused_kernels_off():
    from albert_tf.cpu import speed_paths

    f32 = tf.TensorSpec([4, 8], tf.float32)
    with speed_paths.forced(speed_paths.PLAIN):
        assert not fe.enabled()
        assert _xla_functions(fe.gelu_tanh, f32) == []
        assert _xla_functions(lambda dy: fe.gelu_tanh_backward(dy, dy), f32) == []
    with speed_paths.forced(speed_paths.CPU_NATIVE):
        assert fe.enabled()
        with fe.disabled():  # disabled() wins over the decision
            assert not fe.enabled()
        assert len(_xla_functions(fe.gelu_tanh, f32)) == 1


def test_known_zeros_are_the_gradient_codes_zeros():
    with tf.Graph().as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 3])
        made = [tf.zeros_like(x), tf.zeros([2, 3]), tf.fill([2, 3], 0.0)]
        others = [x, tf.fill([2, 3], 1.0), x * 0.0, tf.fill([2, 3], x[0, 0]), None]
        others.append(tf.constant([0.0, 1.0]))
        assert [fe.known_zeros(t) for t in made] == [True] * 3
        assert [fe.known_zeros(t) for t in others] == [False] * 6
    assert not fe.known_zeros(tf.zeros([2, 3]))  # eager tensors: never
