"""albert_tf.cpu.block: the CPU speed paths' block against the plain one (albert_tf.model.layers),
outputs and gradients, float32 and bfloat16, at head size 4 and 32; and the pieces it
substitutes (hand-written gradients, float32 loops, the bias's gradient)."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from config_fixtures import tiny_config

from albert_tf.cpu import block, fused_elementwise, speed_paths
from albert_tf.model import layers
from albert_tf.model.modeling import AlbertModel

from model_fixtures import make_inputs

# Head size 4 (the numpy comparisons' size) and 32 (what the C++ products and attention
# take, tests/cpu/test_native_kernels.py): two layers of two groups, so that kernels are shared.
HEAD_SIZES = {
    4: tiny_config(num_hidden_layers=4, num_hidden_groups=2),
    32: tiny_config(
        embedding_size=16,
        hidden_size=64,
        num_attention_heads=2,
        intermediate_size=128,
        num_hidden_layers=4,
        num_hidden_groups=2,
    ),
}


def _adder(mask):
    return (1.0 - np.asarray(mask, np.float32))[:, None, None, :] * -10000.0


def albert_block_weights(albert_block):
    """`block.BlockWeights` read from the block's own variables (Q, K, V apart)."""
    dtype = albert_block.compute_dtype
    dense = {name: getattr(albert_block, name) for name in layers.DENSE_SUBLAYERS}
    return block.BlockWeights(
        {name: tf.cast(d.kernel, dtype) for name, d in dense.items()},
        {name: tf.cast(d.bias, dtype) for name, d in dense.items()},
    )


def paths_against_plain(cfg, policy, paths):
    """{"inference" | "training": (on `paths`, plain)}: an AlbertModel's outputs (the
    last at selected rows) in inference, and its gradients of a loss over all of them in
    training, each traced as one graph under `paths` and under the plain model.
    (Inference graphs on the CPU paths take oneDNN's layer norm, which has no gradient.)"""
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = AlbertModel(cfg)
        model.build()
    finally:
        keras.mixed_precision.set_global_policy("float32")
    # Weights large enough that every sublayer matters.
    rng = np.random.default_rng(3)
    for v in model.weights:
        v.assign(rng.normal(size=v.shape) * (0.2 if len(v.shape) == 2 else 0.1))
    inputs = {k: tf.constant(v) for k, v in make_inputs(cfg).items()}
    positions = inputs.pop("masked_lm_positions")

    def outputs(training):
        out = model(inputs, training=training, output_positions=positions)
        return [out["pooled_output"], *out["encoder_outputs"]]

    def gradients():
        with tf.GradientTape() as tape:
            # Each output weighted by a pattern along its rows' width.
            loss = sum(
                tf.reduce_sum(t * tf.sin(tf.range(t.shape[-1], dtype=t.dtype)))
                for t in outputs(True)
            )
        return tape.gradient(loss, model.trainable_variables)

    results = {}
    for name, fn in (("inference", lambda: outputs(False)), ("training", gradients)):
        with speed_paths.forced(paths):
            fast = tf.function(fn)()
        with speed_paths.forced(speed_paths.PLAIN):
            plain = tf.function(fn)()
        results[name] = fast, plain
    return results


def assert_paths_equal_plain(results, tolerance):
    """Each output and gradient within `tolerance` of the plain one, relative to the
    largest entry of its kind (a key bias's exact gradient is 0: rounding noise either
    way)."""
    for key, (fast, plain) in results.items():
        plain = [tf.convert_to_tensor(t).numpy().astype(np.float64) for t in plain]
        fast = [tf.convert_to_tensor(t).numpy().astype(np.float64) for t in fast]
        floor = max(np.max(np.abs(p)) for p in plain)
        for i, (f, p) in enumerate(zip(fast, plain)):
            assert f.shape == p.shape, (key, i)
            err = np.max(np.abs(f - p)) / max(np.max(np.abs(p)), 1e-2 * floor)
            assert err <= tolerance, (key, i, err)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
@pytest.mark.parametrize("head_size", sorted(HEAD_SIZES))
def test_cpu_paths_equal_the_plain_block(head_size, policy):
    """What `--speed_paths=auto` runs on a CPU (XLA loops, oneDNN's layer norm, fused
    Q/K/V, selected rows, summed shared-kernel gradients) against the plain model.
    bfloat16: both round products to bfloat16, at different places (the plain model
    before the bias, the CPU paths after it, in float32)."""
    results = paths_against_plain(HEAD_SIZES[head_size], policy, speed_paths.CPU_AUTO)
    assert_paths_equal_plain(results, 1e-4 if policy == "float32" else 3e-2)


def test_custom_gelu_gradient_equals_autodiff():
    x = tf.constant(np.linspace(-5, 5, 257), tf.float64)
    with tf.GradientTape(persistent=True) as tape:
        tape.watch(x)
        plain = layers.gelu_tanh(x)
        custom = block.gelu_tanh_trainable(x)
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
        custom = block._layer_norm_trainable(x, None, gamma, beta, 1e-12)
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
        fused = block.layer_norm(ln, x, training, residual=residual)
        summed = block.layer_norm(ln, x + residual, training)
        fused_loss = tf.reduce_sum(fused * upstream)
        summed_loss = tf.reduce_sum(summed * upstream)
    np.testing.assert_allclose(fused.numpy(), summed.numpy(), rtol=1e-6, atol=1e-6)
    want = tape.gradient(summed_loss, x).numpy()
    for got in tape.gradient(fused_loss, [x, residual]):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-5, atol=1e-5)


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
        out = block.layer_norm(ln, x, training, residual=residual, bias=bias)
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
        z = block.bias_and_activation(y, bias, activation, training)
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


@pytest.mark.parametrize("cpu", ["here", "avx2_only"])
@pytest.mark.parametrize("rows", [1, 37, 4096])
def test_bfloat16_bias_gradient_is_summed_in_float32(rows, cpu, monkeypatch):
    # A bias's gradient over many rows (a [B*S, F] product) in bfloat16: summed in
    # float32 and rounded once, so within 2^-8 of the exact sum, on this CPU and as on
    # one without AVX-512 (no oneDNN bfloat16 product there). (TensorFlow's bfloat16
    # BiasAddGrad stalls as it sums: 4096 values near 1 came out at 512.)
    if cpu == "avx2_only":
        monkeypatch.setattr(fused_elementwise, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    rng = np.random.default_rng(8)
    dz = tf.cast(1 + rng.normal(size=(rows, 24)) * 0.1, tf.bfloat16)
    want = tf.reduce_sum(tf.cast(dz, tf.float64), axis=0).numpy()
    for shaped in (dz, tf.reshape(dz, [1, rows, 24])):  # any leading axes
        got = block.bias_gradient(shaped)
        assert got.dtype == tf.bfloat16 and got.shape == (24,)
        assert np.all(np.abs(tf.cast(got, tf.float64).numpy() - want) <= 2**-8 * np.abs(want))
    # The dense layer's trainable path uses it.
    bias = tf.zeros([24], tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(bias)
        z = block.bias_and_activation(dz, bias, None, training=True)
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
        probs = block.attention_probs(scores, adder, 0.25, training)
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
    # bfloat16: a plain MatMul (oneDNN's AMX kernel) and one XLA loop (the native kernel
    # with --speed_paths=native, tests/cpu/test_native_kernels.py).
    def op_types(dtype):
        kernel, bias = tf.ones([8, 4], dtype), tf.ones([4], dtype)
        fn = tf.function(lambda x: block.bias_and_activation(tf.matmul(x, kernel), bias, "gelu"))
        graph = fn.get_concrete_function(tf.TensorSpec([None, 8], dtype)).graph
        return {op.type for op in graph.get_operations()}

    assert {"MatMul", "BiasAdd"} <= op_types(tf.float32)
    bf16 = op_types(tf.bfloat16)
    assert "MatMul" in bf16 and "BiasAdd" not in bf16 and "PartitionedCall" in bf16


def test_block_at_query_positions_gives_those_rows():
    """`apply_block` with query_positions computes only those rows of the full output
    (the last block of a pretraining or classifier pass)."""
    cfg = tiny_config(num_hidden_groups=2, inner_group_num=2)
    model = AlbertModel(cfg)
    model.build()
    x = tf.random.stateless_normal([3, 11, cfg.hidden_size], seed=[5, 6])
    adder = tf.constant(_adder(make_inputs(cfg)["input_mask"]))
    albert_block = model.groups[0][0]
    weights = albert_block_weights(albert_block)
    full = block.apply_block(albert_block, x, adder, weights)
    np.testing.assert_allclose(full, albert_block(x, adder), rtol=1e-5, atol=1e-5)
    positions = tf.constant([[0, 4, 2], [10, 0, 0], [1, 2, 3]], tf.int32)
    rows = block.apply_block(albert_block, x, adder, weights, query_positions=positions)
    assert rows.shape == (3, 3, cfg.hidden_size)
    np.testing.assert_allclose(rows, tf.gather(full, positions, batch_dims=1), rtol=1e-5, atol=1e-5)
