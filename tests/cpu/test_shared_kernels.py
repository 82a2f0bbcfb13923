"""Tests of albert_tf.cpu.shared_kernels: summed shared-kernel gradients equal autodiff."""

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from config_fixtures import tiny_config

from albert_tf.cpu import shared_kernels, speed_paths
from albert_tf.cpu.block import apply_block
from albert_tf.cpu.shared_kernels import run_with_summed_kernel_gradients
from albert_tf.model.modeling import AlbertModel

# The CPU speed paths less the summed gradients: plain autodiff over the same blocks.
UNSUMMED = dataclasses.replace(speed_paths.CPU_AUTO, summed_kernel_gradients=False)


def _body(x, tensors, matmul):
    """Three applications of two shared kernels, a bias and a variable scale."""
    outputs = []
    for _ in range(3):
        x = tf.tanh(matmul(x, "a") + tensors["b"])
        x = matmul(x, "c") * SCALE
        outputs.append(x)
    return outputs


SCALE = tf.Variable([1.5, -0.5, 2.0], name="scale")


@pytest.mark.parametrize("method", ["stack", "sum", "auto"])
def test_generic_stack_matches_numpy_gradients(method):
    rng = np.random.default_rng(0)
    x = tf.constant(rng.normal(size=(4, 3)).astype(np.float32))
    a = tf.constant(rng.normal(size=(3, 5)).astype(np.float32))
    c = tf.constant(rng.normal(size=(5, 3)).astype(np.float32))
    b = tf.constant(rng.normal(size=(5,)).astype(np.float32))
    with tf.GradientTape() as tape:
        tape.watch([x, a, c, b])
        outs = run_with_summed_kernel_gradients(_body, x, {"a": a, "c": c}, {"b": b}, method=method)
        loss = tf.reduce_sum(outs[-1] ** 2) + tf.reduce_sum(outs[0])
    got = tape.gradient(loss, [x, a, c, b, SCALE])

    # float64 numpy reference: forward, then the chain rule by hand.
    xs, a_, c_, b_, s_ = (t.numpy().astype(np.float64) for t in (x, a, c, b, SCALE))
    cache, h = [], xs
    for _ in range(3):
        t = np.tanh(h @ a_ + b_)
        y = t @ c_
        cache.append((h, t, y))
        h = y * s_
    outs_np = [y * s_ for _, _, y in cache]
    dout = [np.ones_like(outs_np[0]), np.zeros_like(outs_np[0]), 2 * outs_np[2]]
    da, dc, db, ds = (np.zeros_like(v) for v in (a_, c_, b_, s_))
    dh = np.zeros_like(outs_np[0])
    for k in reversed(range(3)):
        h_in, t, y = cache[k]
        dx_out = dh + dout[k]
        ds += np.sum(dx_out * y, axis=0)
        dy = dx_out * s_
        dc += t.T @ dy
        dt = dy @ c_.T
        dpre = dt * (1 - t**2)
        db += dpre.sum(0)
        da += h_in.T @ dpre
        dh = dpre @ a_.T
    for g, ref in zip(got, [dh, da, dc, db, ds]):
        g = tf.convert_to_tensor(g).numpy()
        np.testing.assert_allclose(g, ref, rtol=0, atol=1e-5 * np.max(np.abs(ref)))


def _models(**overrides):
    values = dict(
        vocab_size=50,
        embedding_size=8,
        hidden_size=16,
        num_hidden_layers=4,
        num_hidden_groups=2,
        inner_group_num=2,
        num_attention_heads=2,
        intermediate_size=24,
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        max_position_embeddings=32,
    )
    values.update(overrides)
    cfg = tiny_config(**values)
    summed, plain = AlbertModel(cfg), AlbertModel(cfg)  # plain: traced under UNSUMMED
    summed.build()
    plain.build()
    for a, b in zip(summed.weights, plain.weights):
        b.assign(a)
    return cfg, summed, plain


@pytest.mark.parametrize(
    "mode,act,method",
    [
        ("eager", "gelu", "stack"),
        ("eager", "relu", "sum"),
        ("function_tape", "gelu", "stack"),
        ("function_tape", "relu", "sum"),
        ("tf_gradients", "gelu", "sum"),
        ("tf_gradients", "relu", "stack"),
    ],
)
def test_model_gradients_equal_plain_autodiff(mode, act, method, monkeypatch):
    monkeypatch.setattr(shared_kernels, "_stacking_is_cheaper", lambda *a: method == "stack")
    cfg, summed, plain = _models(hidden_act=act)
    assert cfg.shares_weights
    rng = np.random.default_rng(1)
    inputs = {
        "input_ids": tf.constant(rng.integers(0, 50, (2, 7)), tf.int32),
        "input_mask": tf.constant([[1] * 7, [1] * 5 + [0] * 2], tf.int32),
        "segment_ids": tf.constant([[0] * 4 + [1] * 3] * 2, tf.int32),
    }

    def loss(model):
        out = model(inputs, training=True)
        return (
            tf.reduce_sum(out["sequence_output"] ** 2)
            + tf.reduce_sum(out["pooled_output"])
            + tf.reduce_sum(out["encoder_outputs"][1] * 0.5)
        )

    def tape_grads(model):
        with tf.GradientTape() as tape:
            value = loss(model)
        return tape.gradient(value, model.trainable_variables)

    def graph_grads(model):
        return tf.gradients(loss(model), model.trainable_variables)

    fn = {
        "eager": tape_grads,
        "function_tape": tf.function(tape_grads),
        "tf_gradients": tf.function(graph_grads),
    }[mode]
    got = fn(summed)
    with speed_paths.forced(UNSUMMED):
        want = fn(plain)
    assert len(got) == len(want) == len(summed.trainable_variables)
    got, want = ([tf.convert_to_tensor(t).numpy() for t in ts] for ts in (got, want))
    # The key bias adds q.b_k to every score of a row, which softmax cancels: its
    # exact gradient is 0 and both paths give rounding noise, so tiny gradients
    # are compared against the largest one.
    floor = 1e-3 * max(np.max(np.abs(w)) for w in want)
    for var, g, w in zip(summed.trainable_variables, got, want):
        scale = max(np.max(np.abs(w)), floor)
        assert np.max(np.abs(g - w)) / scale < 2e-6, var.path


@pytest.mark.parametrize("sharing", ["attention", "ffn"])
def test_partial_sharing_gradients_equal_plain_autodiff(sharing):
    """One group per layer sharing only attention (or FFN): the shared part's
    kernels are recorded at every layer, the rest once."""
    cfg, summed, plain = _models(
        num_hidden_groups=4, inner_group_num=1, extra={"cross_layer_sharing": sharing}
    )
    assert cfg.shares_weights
    ids = tf.constant(np.random.default_rng(2).integers(0, 50, (2, 6)), tf.int32)

    def grads(model):
        with tf.GradientTape() as tape:
            out = model({"input_ids": ids}, training=True)
            value = tf.reduce_sum(out["sequence_output"] ** 2) + tf.reduce_sum(out["pooled_output"])
        return [
            tf.convert_to_tensor(t).numpy() for t in tape.gradient(value, model.trainable_variables)
        ]

    got = grads(summed)
    with speed_paths.forced(UNSUMMED):
        want = grads(plain)
    floor = 1e-3 * max(np.max(np.abs(w)) for w in want)
    for var, g, w in zip(summed.trainable_variables, got, want):
        assert np.max(np.abs(g - w)) / max(np.max(np.abs(w)), floor) < 2e-6, var.path


def test_no_recording_without_training_or_sharing():
    """Inference and unshared (BERT-shaped) models take the plain path."""
    cfg, summed, _ = _models()
    ids = {"input_ids": tf.constant([[1, 2, 3]], tf.int32)}
    graph = tf.function(lambda: summed(ids, training=False)["sequence_output"])
    ops = {op.type for op in graph.get_concrete_function().graph.get_operations()}
    assert "IdentityN" not in ops  # the custom-gradient wrapper
    graph = tf.function(lambda: summed(ids, training=True)["sequence_output"])
    ops = {op.type for op in graph.get_concrete_function().graph.get_operations()}
    assert "IdentityN" in ops
    bert, _, _ = _models(num_hidden_groups=4, inner_group_num=1)
    assert not bert.shares_weights


def test_unused_layer_outputs_add_no_zeros():
    """Only the last layer's output feeds the loss: the other layers' outputs get
    zeros from TensorFlow's gradient code, which the summed-gradient stack skips
    instead of adding into the layers' gradients."""
    cfg, summed, _ = _models()
    ids = {"input_ids": tf.constant([[1, 2, 3, 4]], tf.int32)}

    @tf.function
    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(summed(ids, training=True)["sequence_output"])
        return tape.gradient(loss, summed.trainable_variables)

    def zeros(t):
        if t.op.type == "ZerosLike":
            return True
        value = tf.get_static_value(t) if t.op.type in ("Fill", "Const") else None
        return value is not None and value.ndim == 3 and not value.any()

    graph = step.get_concrete_function().graph
    adds = [op for op in graph.get_operations() if op.type in ("AddN", "AddV2")]
    assert len(adds) > 10
    assert [op.name for op in adds if any(zeros(t) for t in op.inputs)] == []


def test_stacking_choice_follows_bytes_moved():
    big_kernel = tf.zeros([4096, 16384])  # ALBERT-xxlarge FFN, 256 rows per use
    assert shared_kernels._stacking_is_cheaper([tf.zeros([256, 4096])] * 12, big_kernel)
    small_kernel = tf.zeros([768, 3072])  # ALBERT-base FFN, 2048 rows per use
    assert not shared_kernels._stacking_is_cheaper([tf.zeros([2048, 768])] * 12, small_kernel)
    with pytest.raises(ValueError, match="method"):
        run_with_summed_kernel_gradients(_body, tf.zeros([1, 3]), {}, {}, method="tree")


def _encoder_kernels(model, paths, training, rows):
    from albert_tf.cpu.shared_kernels import EncoderKernels

    return EncoderKernels(model.blocks(), paths, training, rows, model.config.shares_weights)


@pytest.mark.parametrize("fused_qkv", [True, False])
def test_encoder_kernels_cast_a_shared_sublayer_once(fused_qkv):
    """Shared attention, three groups: the attention weights once (group 0's), the FFN's
    once per group; Q, K and V side by side in full-length inference."""
    cfg = tiny_config(
        vocab_size=50,
        num_hidden_groups=3,
        num_attention_heads=2,
        extra={"cross_layer_sharing": "attention"},
    )
    model = AlbertModel(cfg)
    model.build()
    kernels = _encoder_kernels(model, speed_paths.CPU_AUTO, training=not fused_qkv, rows=None)
    attention = (
        [("group_0_inner_group_0", "qkv")]
        if fused_qkv
        else [("group_0_inner_group_0", name) for name in ("query", "key", "value")]
    )
    attention.append(("group_0_inner_group_0", "attention_output"))
    ffn = [
        (f"group_{g}_inner_group_0", name)
        for g in range(3)
        for name in ("intermediate", "ffn_output")
    ]
    assert list(kernels.tensors) == [
        key + (kind,) for key in attention + ffn for kind in ("kernel", "bias")
    ]
    first, last = model.groups[0][0], model.groups[2][0]
    assert kernels.names[last]["attention_output"] == kernels.names[first]["attention_output"]
    if fused_qkv:
        qkv = kernels.tensors[("group_0_inner_group_0", "qkv", "kernel")]
        np.testing.assert_array_equal(
            qkv, np.concatenate([first.query.kernel, first.key.kernel, first.value.kernel], 1)
        )


@pytest.mark.parametrize(
    "training,with_rows,paths_name,fused,last_fused,selected,summed",
    [
        (False, False, "CPU_AUTO", True, True, False, False),
        # Selected rows: Q, K and V fused where all rows are computed, apart in the last.
        (False, True, "CPU_AUTO", True, False, True, False),
        (True, False, "CPU_AUTO", False, False, False, True),
        (True, True, "CPU_AUTO", False, False, True, True),
        (False, False, "PLAIN", False, False, False, False),
        (False, True, "PLAIN", False, False, False, False),
        (True, True, "PLAIN", False, False, False, False),
    ],
)
def test_encoder_kernels_choose_each_path_once_per_pass(
    training, with_rows, paths_name, fused, last_fused, selected, summed
):
    _, model, _ = _models()
    rows = tf.constant([[0, 2]], tf.int32) if with_rows else None
    kernels = _encoder_kernels(model, getattr(speed_paths, paths_name), training, rows)
    assert all(("qkv" in names) == fused for names in kernels.names.values())
    for names in kernels.last_names.values():
        assert ("qkv" in names) == last_fused
        assert {"query", "key", "value"} <= set(names) or last_fused
    assert (kernels.select_rows, kernels.summed_gradients) == (selected, summed)


def test_unselected_rows_are_gathered_after_the_last_block():
    """Without row selection the last block computes every row; the stack's last output
    still holds only the requested ones."""
    _, model, _ = _models()
    x = tf.random.stateless_normal([2, 5, 16], seed=[0, 1])
    adder = tf.zeros([2, 1, 1, 5])
    rows = tf.constant([[0, 3], [0, 1]], tf.int32)
    seen = []

    def layers(x, weights, last_weights, last_rows):
        seen.append(last_rows)
        block = model.groups[0][0]
        return [apply_block(block, x, adder, last_weights[block], query_positions=last_rows)]

    no_selection = dataclasses.replace(speed_paths.CPU_AUTO, last_layer_row_selection=False)
    full = _encoder_kernels(model, no_selection, False, rows).run(layers, x)[-1]
    selected = _encoder_kernels(model, speed_paths.CPU_AUTO, False, rows).run(layers, x)[-1]
    assert seen[0] is None and seen[1] is rows
    assert full.shape == selected.shape == (2, 2, 16)
    np.testing.assert_allclose(full, selected, rtol=1e-5, atol=1e-5)
