"""Layers: GELU, layer norm and their hand-written training gradients."""

import dataclasses
import math

import numpy as np
import pytest
import tensorflow as tf
from test_modeling import make_inputs, tiny

from albert_tf import layers, speed_paths
from albert_tf.modeling import AlbertPretrainer

import albert_numpy


def test_gelu_is_the_tanh_approximation():
    x = np.linspace(-6, 6, 101)
    got = layers.gelu_tanh(tf.constant(x, tf.float64)).numpy()
    np.testing.assert_allclose(got, albert_numpy.gelu_tanh(x), rtol=1e-12, atol=1e-12)
    erf_form = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    assert np.max(np.abs(got - erf_form)) > 1e-4  # not TF's default (exact) GELU


def test_layer_norm_epsilon_and_formula():
    ln = layers.LayerNorm()
    ln.build((None, 5))
    ln.gamma.assign([1.0, 2.0, 0.5, 1.0, 3.0])
    ln.beta.assign([0.0, 0.1, -0.2, 0.3, 0.0])
    x = np.random.default_rng(0).normal(size=(4, 5)) * 1e-5  # tiny variance: epsilon matters
    want = albert_numpy.layer_norm(x, ln.beta.numpy(), ln.gamma.numpy(), eps=1e-12)
    for training in (False, True):
        got = ln(tf.constant(x, tf.float32), training=training).numpy()
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    assert layers.LAYER_NORM_EPSILON == 1e-12


def test_custom_gelu_gradient_equals_autodiff():
    x = tf.constant(np.linspace(-5, 5, 257), tf.float64)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        plain = layers.gelu_tanh(x)
        custom = layers.gelu_tanh_trainable(x)
    np.testing.assert_allclose(custom.numpy(), plain.numpy(), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(
        tape.gradient(custom, x).numpy(), tape.gradient(plain, x).numpy(), rtol=1e-10, atol=1e-12
    )


def test_custom_layer_norm_gradient_equals_autodiff():
    rng = np.random.default_rng(1)
    x = tf.constant(rng.normal(size=(3, 4, 6)), tf.float64)
    gamma = tf.constant(rng.normal(size=6) + 1.0, tf.float64)
    beta = tf.constant(rng.normal(size=6), tf.float64)
    upstream = tf.constant(rng.normal(size=(3, 4, 6)), tf.float64)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, gamma, beta])
        custom = layers._layer_norm_trainable(x, None, gamma, beta, 1e-12)
        mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
        plain = (x - mean) * tf.math.rsqrt(var + 1e-12) * gamma + beta
        custom_loss = tf.reduce_sum(custom * upstream)
        plain_loss = tf.reduce_sum(plain * upstream)
    np.testing.assert_allclose(custom.numpy(), plain.numpy(), rtol=1e-10, atol=1e-12)
    for a, b in zip(
        tape.gradient(custom_loss, [x, gamma, beta]), tape.gradient(plain_loss, [x, gamma, beta])
    ):
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("training", [False, True])
def test_layer_norm_residual_is_added_before_normalising(training):
    rng = np.random.default_rng(4)
    ln = layers.LayerNorm()
    ln.build((None, 16))
    ln.gamma.assign(rng.normal(size=16) + 1.0)
    ln.beta.assign(rng.normal(size=16))
    x, residual = (tf.constant(rng.normal(size=(5, 16)), tf.float32) for _ in range(2))
    upstream = tf.constant(rng.normal(size=(5, 16)), tf.float32)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([x, residual])
        fused = ln(x, residual=residual, training=training)
        summed = ln(x + residual, training=training)
        fused_loss = tf.reduce_sum(fused * upstream)
        summed_loss = tf.reduce_sum(summed * upstream)
    np.testing.assert_allclose(fused.numpy(), summed.numpy(), rtol=1e-6, atol=1e-6)
    want = tape.gradient(summed_loss, x).numpy()
    for got in tape.gradient(fused_loss, [x, residual]):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


def test_layer_norm_of_bfloat16_input_normalises_in_float32():
    ln = layers.LayerNorm()
    ln.build((None, 8))
    x = tf.cast(tf.random.stateless_normal([3, 8], seed=[1, 2]), tf.bfloat16)
    residual = tf.random.stateless_normal([3, 8], seed=[3, 4])
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = ln(x, residual=residual, training=True)
    assert out.dtype == tf.float32
    assert tape.gradient(out, x).dtype == tf.bfloat16
    want = albert_numpy.layer_norm(
        tf.cast(x, tf.float32).numpy() + residual.numpy(),
        ln.beta.numpy(),
        ln.gamma.numpy(),
        eps=1e-12,
    )
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("training", [False, True])
def test_layer_norm_adds_a_bfloat16_bias_with_the_residual(training):
    # LN(x + bias + residual) for a dense layer's bfloat16 product x: the sum in
    # float32, the gradients of x and bias in bfloat16, the residual's in float32.
    ln = layers.LayerNorm()
    ln.build((None, 8))
    ln.gamma.assign(np.linspace(0.5, 2.0, 8))
    ln.beta.assign(np.linspace(-1.0, 1.0, 8))
    rng = np.random.default_rng(7)
    x, bias = (
        tf.cast(rng.normal(size=(5, 8)), tf.bfloat16),
        tf.cast(rng.normal(size=8), tf.bfloat16),
    )
    residual, dy = (tf.constant(rng.normal(size=(5, 8)), tf.float32) for _ in range(2))
    with tf.GradientTape() as tape:
        tape.watch([x, bias, residual])
        out = ln(x, residual=residual, bias=bias, training=training)
        loss = tf.reduce_sum(out * dy)
    grads = tape.gradient(loss, [x, bias, residual])
    x64, bias64, residual64 = (tf.cast(t, tf.float64) for t in (x, bias, residual))
    with tf.GradientTape() as tape64:
        tape64.watch([x64, bias64, residual64])
        s = x64 + bias64 + residual64
        mean, var = tf.nn.moments(s, axes=[-1], keepdims=True)
        want = (s - mean) / tf.sqrt(var + 1e-12) * tf.cast(ln.gamma, tf.float64)
        want += tf.cast(ln.beta, tf.float64)
        loss64 = tf.reduce_sum(want * tf.cast(dy, tf.float64))
    np.testing.assert_allclose(out.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
    wants = tape64.gradient(loss64, [x64, bias64, residual64])
    for got, w, dtype in zip(grads, wants, (tf.bfloat16, tf.bfloat16, tf.float32)):
        assert got.dtype == dtype
        # bfloat16 results: one rounding of the float32 value (2^-8 relative).
        np.testing.assert_allclose(tf.cast(got, tf.float64), w, rtol=2**-8, atol=1e-5)


@pytest.mark.parametrize("activation", ["gelu", "relu", None])
@pytest.mark.parametrize("training", [False, True])
def test_bfloat16_bias_and_activation_and_their_gradients(activation, training):
    # bfloat16 on the fused-elementwise path: one float32 loop after the product,
    # rounded once; the gradients are those of the plain computation.
    rng = np.random.default_rng(6)
    y, dz = (tf.cast(rng.normal(size=(33, 16)) * 2, tf.bfloat16) for _ in range(2))
    bias = tf.cast(rng.normal(size=16), tf.bfloat16)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch([y, bias])
        z = layers.bias_and_activation(y, bias, activation, training)
        loss = tf.reduce_sum(tf.cast(z, tf.float32) * tf.cast(dz, tf.float32))
    assert z.dtype == tf.bfloat16
    y64, bias64, dz64 = (tf.cast(t, tf.float64) for t in (y, bias, dz))
    with tf.GradientTape() as tape64:
        tape64.watch([y64, bias64])
        act = layers.get_activation(activation) or tf.identity
        z64 = act(y64 + bias64)
        loss64 = tf.reduce_sum(z64 * dz64)
    want = [z64] + tape64.gradient(loss64, [y64, bias64])
    got = [z] + tape.gradient(loss, [y, bias])
    # The output and dy within a bfloat16 rounding of the exact value (2^-8 relative;
    # GELU's derivative at its zero gets an absolute margin); the bias's sum of 33
    # rounded terms within 2^-8 of their absolute sum.
    tolerance = [2**-8 * np.abs(want[0]) + 1e-6, 2**-8 * np.abs(want[1]) + 2e-3]
    tolerance.append(2**-7 * tf.reduce_sum(tf.abs(want[1]), axis=0).numpy())
    for g, w, tol, name in zip(got, want, tolerance, ("z", "dy", "dbias")):
        assert g.dtype == tf.bfloat16, name
        err = np.abs(tf.cast(g, tf.float64).numpy() - w.numpy())
        assert np.all(err <= tol), name


@pytest.mark.parametrize("rows", [1, 37, 4096])
def test_bfloat16_bias_gradient_is_summed_in_float32(rows):
    # A bias's gradient over many rows (a [B*S, F] product) in bfloat16: summed in
    # float32 and rounded once, so within 2^-8 of the exact sum. (TensorFlow's bfloat16
    # BiasAddGrad stalls as it sums: 4096 values near 1 came out at 512.)
    rng = np.random.default_rng(8)
    dz = tf.cast(1 + rng.normal(size=(rows, 24)) * 0.1, tf.bfloat16)
    want = tf.reduce_sum(tf.cast(dz, tf.float64), axis=0).numpy()
    for shaped in (dz, tf.reshape(dz, [1, rows, 24])):  # any leading axes
        got = layers.bias_gradient(shaped)
        assert got.dtype == tf.bfloat16 and got.shape == (24,)
        assert np.all(np.abs(tf.cast(got, tf.float64).numpy() - want) <= 2**-8 * np.abs(want))
    # The dense layer's trainable path uses it.
    bias = tf.zeros([24], tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(bias)
        z = layers.bias_and_activation(dz, bias, None, training=True)
        loss = tf.reduce_sum(tf.cast(z, tf.float32))
    got = tf.cast(tape.gradient(loss, bias), tf.float64).numpy()
    want = np.full(24, float(rows))
    assert np.all(np.abs(got - want) <= 2**-8 * want)


@pytest.mark.parametrize("training", [False, True])
def test_bfloat16_attention_probs_and_their_gradient(training):
    rng = np.random.default_rng(9)
    scores = tf.cast(rng.normal(size=(2, 2, 3, 6)) * 3, tf.bfloat16)
    adder = tf.constant(np.where(np.arange(6) < 4, 0.0, -10000.0)[None, None, None], tf.float32)
    dprobs = tf.cast(rng.normal(size=(2, 2, 3, 6)), tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(scores)
        probs = layers.attention_probs(scores, adder, 0.25, training)
        loss = tf.reduce_sum(tf.cast(probs, tf.float32) * tf.cast(dprobs, tf.float32))
    s64 = tf.cast(scores, tf.float64)
    with tf.GradientTape() as tape64:
        tape64.watch(s64)
        want = tf.nn.softmax(s64 * 0.25 + tf.cast(adder, tf.float64), axis=-1)
        loss64 = tf.reduce_sum(want * tf.cast(dprobs, tf.float64))
    assert probs.dtype == tf.bfloat16
    np.testing.assert_allclose(tf.cast(probs, tf.float64), want, rtol=2**-8, atol=1e-6)
    grad = tape.gradient(loss, scores)
    assert grad.dtype == tf.bfloat16
    np.testing.assert_allclose(
        tf.cast(grad, tf.float64), tape64.gradient(loss64, s64), rtol=2**-7, atol=1e-3
    )


def test_bias_stays_fused_with_the_product_in_float32_only():
    # float32: tf.nn.bias_add, which Grappler fuses into oneDNN's _FusedMatMul.
    # bfloat16: a plain MatMul (oneDNN's AMX kernel) and one XLA loop, or the native
    # kernel where it is built.
    def op_types(dtype):
        kernel = tf.ones([8, 4], dtype)
        fn = tf.function(lambda x: layers.dense(x, kernel, tf.ones([4], dtype), "gelu"))
        graph = fn.get_concrete_function(tf.TensorSpec([None, 8], dtype)).graph
        return {op.type for op in graph.get_operations()}

    assert {"MatMul", "BiasAdd"} <= op_types(tf.float32)
    bf16 = op_types(tf.bfloat16)
    assert "MatMul" in bf16 and "BiasAdd" not in bf16 and "AlbertBiasGelu" in bf16
    with speed_paths.forced(dataclasses.replace(speed_paths.CPU_ONLY, native_cpu_kernels=False)):
        bf16 = op_types(tf.bfloat16)
    assert "MatMul" in bf16 and "BiasAdd" not in bf16 and "PartitionedCall" in bf16


@pytest.mark.parametrize("act", ["gelu", "relu"])
def test_training_gradients_equal_inference_path_gradients(act):
    # Without dropout, training=True only switches to the hand-written
    # gradients: the gradients of the whole model must agree.
    cfg = tiny(num_hidden_groups=2, inner_group_num=2, hidden_act=act)
    model = AlbertPretrainer(cfg)
    model.build()
    inputs = make_inputs(cfg)

    def grads(training):
        with tf.GradientTape() as tape:
            out = model(inputs, training=training)
            loss = tf.reduce_sum(out["mlm_logits"] ** 2) + tf.reduce_sum(out["sop_logits"])
        return out, tape.gradient(loss, model.trainable_variables)

    # Training also takes separate Q/K/V products where inference fuses them.
    (train_out, train_grads), (infer_out, infer_grads) = grads(True), grads(False)
    for key in ("mlm_logits", "sop_logits"):
        np.testing.assert_allclose(train_out[key], infer_out[key], rtol=1e-5, atol=1e-5)
    for a, b, v in zip(train_grads, infer_grads, model.trainable_variables):
        a, b = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy()
        scale = max(np.max(np.abs(b)), 1e-3)
        assert np.max(np.abs(a - b)) / scale < 1e-4, v.path


def test_block_called_alone_equals_its_application_in_the_model():
    """A block reading its own weights (Q, K, V separate) gives the model's first block
    output (full-length inference: one QKV product), and query_positions give its rows."""
    from albert_tf.modeling import AlbertModel

    cfg = tiny(num_hidden_groups=2, inner_group_num=2)
    model = AlbertModel(cfg)
    inputs = make_inputs(cfg)
    del inputs["masked_lm_positions"]
    out = model(inputs)
    x = tf.cast(model.embedding_projection(out["embedding_output"]), tf.float32)
    adder = (1.0 - tf.cast(inputs["input_mask"], tf.float32))[:, None, None, :] * -10000.0
    block = model.groups[0][0]
    alone = block(x, adder)
    np.testing.assert_allclose(alone, out["encoder_outputs"][0], rtol=1e-5, atol=1e-5)
    positions = tf.constant([[0, 4, 2], [10, 0, 0], [1, 2, 3]], tf.int32)
    rows = block(x, adder, query_positions=positions)
    assert rows.shape == (3, 3, cfg.hidden_size)
    np.testing.assert_allclose(
        rows, tf.gather(alone, positions, batch_dims=1), rtol=1e-5, atol=1e-5
    )
