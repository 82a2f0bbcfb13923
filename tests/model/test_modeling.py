"""AlbertModel / AlbertPretrainer against the independent numpy reference."""

import keras
import numpy as np
import pytest
import tensorflow as tf
from config_fixtures import tiny_config

from albert_tf import AlbertConfig
from albert_tf.cpu import speed_paths
from albert_tf.model.modeling import AlbertModel, AlbertPretrainer
from albert_tf.weights.checkpoints import original_variable_map

import albert_numpy
from model_fixtures import CONFIGS, assert_rel_close, built_encoder, make_inputs, set_weights


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_plain_pretrainer_matches_numpy_reference(name):
    # The plain model (albert_tf.model.layers): the CPU speed paths are compared with it in
    # tests/cpu/test_block.py, and with this reference at selected rows below.
    cfg = CONFIGS[name]
    weights = albert_numpy.random_weights(cfg.to_dict(), seed=1)
    model = AlbertPretrainer(cfg)
    model.build()
    set_weights(model, weights)
    inputs = make_inputs(cfg)
    with speed_paths.forced(speed_paths.PLAIN):
        got = model(inputs, training=False)
    want = albert_numpy.forward_features(weights, cfg, inputs)
    for key in ("sequence_output", "pooled_output", "embedding_output", "mlm_logits", "sop_logits"):
        assert_rel_close(got[key], want[key])
    assert len(got["encoder_outputs"]) == cfg.num_hidden_layers * cfg.inner_group_num
    for a, b in zip(got["encoder_outputs"], want["encoder_outputs"]):
        assert_rel_close(a, b)
    assert got["mlm_logits"].shape == (3, 4, cfg.vocab_size)
    assert got["sop_logits"].shape == (3, 2)
    assert got["embedding_output"].shape == (3, 11, cfg.embedding_size)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_last_block_at_selected_rows_matches_numpy_reference(name):
    """full_sequence_output=False (pretraining) and output_positions (classifier: none)
    give the numpy reference's logits, pooled output and rows."""
    cfg = CONFIGS[name]
    weights = albert_numpy.random_weights(cfg.to_dict(), seed=2)
    inputs = make_inputs(cfg)
    want = albert_numpy.forward_features(weights, cfg, inputs)
    model = AlbertPretrainer(cfg, full_sequence_output=False)
    model.build()
    set_weights(model, weights)
    got = model(inputs, training=False)
    for key in ("pooled_output", "mlm_logits", "sop_logits"):
        assert_rel_close(got[key], want[key])
    rows = np.take_along_axis(
        want["sequence_output"], inputs["masked_lm_positions"][..., None], axis=1
    )
    assert_rel_close(got["sequence_output"], rows)
    none = np.zeros((3, 0), np.int32)
    cls_only = model.albert(inputs, output_positions=none)
    assert cls_only["sequence_output"].shape == (3, 0, cfg.hidden_size)
    assert_rel_close(cls_only["pooled_output"], want["pooled_output"])


def test_selected_rows_give_the_same_gradients():
    cfg = CONFIGS["groups2_inner2_relu"]
    inputs = make_inputs(cfg)
    full, sel = AlbertPretrainer(cfg), AlbertPretrainer(cfg, full_sequence_output=False)
    full.build()
    sel.build()
    for a, b in zip(full.weights, sel.weights):
        b.assign(a)

    def grads(model):
        with tf.GradientTape() as tape:
            out = model(inputs, training=True)
            loss = tf.reduce_sum(out["mlm_logits"] ** 2) + tf.reduce_sum(out["sop_logits"])
        return tape.gradient(loss, model.trainable_variables)

    for var, a, b in zip(full.trainable_variables, grads(full), grads(sel)):
        a, b = tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy()
        if var.path.endswith("key/bias"):
            # Softmax ignores a per-query constant: the exact gradient is 0, both
            # sides are float noise of ~1e-9.
            assert np.max(np.abs(a)) < 1e-6 and np.max(np.abs(b)) < 1e-6
            continue
        assert_rel_close(b, a, tol=2e-5)


def test_docstring_examples_run():
    import doctest

    from albert_tf.model import modeling

    result = doctest.testmod(modeling)
    assert result.attempted > 0 and result.failed == 0


def test_defaults_for_mask_and_segments():
    cfg = CONFIGS["shared_gelu"]
    model = AlbertModel(cfg)
    inputs = make_inputs(cfg)
    full = model(
        {
            "input_ids": inputs["input_ids"],
            "input_mask": np.ones_like(inputs["input_ids"]),
            "segment_ids": np.zeros_like(inputs["input_ids"]),
        }
    )
    default = model({"input_ids": inputs["input_ids"]})
    np.testing.assert_array_equal(full["sequence_output"], default["sequence_output"])


def test_padding_does_not_change_real_tokens():
    cfg = CONFIGS["groups2_inner2_relu"]
    model = AlbertModel(cfg)
    ids = np.array([[5, 6, 7, 8]], np.int32)
    short = model({"input_ids": ids, "input_mask": np.ones_like(ids)})
    padded_ids = np.array([[5, 6, 7, 8, 0, 0]], np.int32)
    padded = model(
        {"input_ids": padded_ids, "input_mask": np.array([[1, 1, 1, 1, 0, 0]], np.int32)}
    )
    # -10000 is not -inf: padded keys get ~e^-10000 weight, i.e. exactly 0 in float32.
    np.testing.assert_allclose(
        padded["sequence_output"][:, :4], short["sequence_output"], atol=2e-6
    )


def test_group_mapping_float_rule_and_weights():
    cfg = AlbertConfig(
        vocab_size=10,
        embedding_size=4,
        hidden_size=4,
        num_hidden_layers=22,
        num_hidden_groups=22,
        num_attention_heads=1,
        intermediate_size=4,
    )
    # int(15 / 22 * 22) == 14 in floating point: group_15 is never created.
    assert cfg.group_index(15) == 14
    assert 15 not in cfg.used_groups() and len(cfg.used_groups()) == 21
    model = AlbertModel(cfg)
    model.build()
    names = original_variable_map(model)
    assert not any("/group_15/" in n for n in names)
    assert model.layer_groups[14] == model.layer_groups[15] == 14


def test_dropout_only_in_training():
    cfg = CONFIGS["shared_gelu"].replace(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    model = AlbertModel(cfg)
    inputs = make_inputs(cfg)
    eval_a = model(inputs, training=False)["sequence_output"]
    eval_b = model(inputs, training=False)["sequence_output"]
    train = model(inputs, training=True)["sequence_output"]
    np.testing.assert_array_equal(eval_a, eval_b)
    assert np.max(np.abs(np.asarray(train) - np.asarray(eval_a))) > 1e-2
    # Eval output equals a dropout-free config with the same weights.
    nodrop = AlbertModel(CONFIGS["shared_gelu"])
    nodrop.build()
    for (_n, src), (_, dst) in zip(
        original_variable_map(model).items(), original_variable_map(nodrop).items()
    ):
        dst.assign(src)
    np.testing.assert_array_equal(nodrop(inputs)["sequence_output"], eval_a)


def test_mixed_bfloat16_policy():
    # gelu: with relu the E=8 MLM layer norm sees near-constant inputs and
    # amplifies bfloat16 rounding far beyond what this test is about.
    cfg = CONFIGS["shared_gelu"].replace(num_hidden_groups=2, inner_group_num=2)
    weights = albert_numpy.random_weights(cfg.to_dict(), seed=3, scale=0.1)
    inputs = make_inputs(cfg)
    ref = albert_numpy.forward_features(weights, cfg, inputs)
    keras.mixed_precision.set_global_policy("mixed_bfloat16")
    try:
        model = AlbertPretrainer(cfg)
        model.build()
        set_weights(model, weights)
        out = model(inputs)
        # In a graph, too: there oneDNN builds fuse the attention's scale and mask into
        # its product (fused_elementwise.product_attention_softmax).
        traced = tf.function(model)({k: tf.constant(v) for k, v in inputs.items()})
        # The encoder alone computes every row: fused Q/K/V, and the attention's scale
        # and mask fused into its product.
        encoder_inputs = {
            k: tf.constant(inputs[k]) for k in ("input_ids", "input_mask", "segment_ids")
        }
        encoded = tf.function(model.albert)(encoder_inputs)["sequence_output"]
        block = model.albert.groups[0][0]
        assert block.compute_dtype == "bfloat16"
        assert block.query.kernel.dtype == "float32"
        assert block.attention_layer_norm.compute_dtype == "float32"
    finally:
        keras.mixed_precision.set_global_policy("float32")
    for key in ("sequence_output", "mlm_logits", "sop_logits"):
        for got in (out[key], traced[key]):
            assert got.dtype == tf.float32
            assert_rel_close(got, ref[key], tol=3e-2)
    assert encoded.dtype == tf.float32
    assert_rel_close(encoded, ref["sequence_output"], tol=3e-2)


def test_mixed_bfloat16_training_gradients_match_float32():
    # The hand-written bfloat16 gradients (bias and GELU loops, the bias added in
    # the layer norm's input) against float32 autodiff-equivalent gradients.
    cfg = CONFIGS["shared_gelu"].replace(num_hidden_groups=2, inner_group_num=2)
    weights = albert_numpy.random_weights(cfg.to_dict(), seed=3, scale=0.1)
    inputs = make_inputs(cfg)

    def gradients(policy):
        keras.mixed_precision.set_global_policy(policy)
        try:
            model = AlbertPretrainer(cfg)
            model.build()
            set_weights(model, weights)

            @tf.function
            def step():
                with tf.GradientTape() as tape:
                    out = model(inputs, training=True)
                    loss = tf.reduce_sum(tf.nn.log_softmax(out["mlm_logits"])[..., 5])
                    loss += tf.reduce_sum(out["sop_logits"][:, 0])
                return tape.gradient(loss, model.trainable_variables)

            grads = step()
        finally:
            keras.mixed_precision.set_global_policy("float32")
        return {v.path: tf.convert_to_tensor(g) for v, g in zip(model.trainable_variables, grads)}

    want, got = gradients("float32"), gradients("mixed_bfloat16")
    assert sorted(got) == sorted(want)
    # Relative to each gradient's size, but at least 1e-3 of the largest: the key
    # biases' gradients are zero up to rounding (softmax ignores a shift per query).
    floor = 1e-3 * max(np.max(np.abs(g)) for g in want.values())
    for path in want:
        assert got[path].dtype == tf.float32, path
        scale = max(np.max(np.abs(want[path])), floor)
        assert np.max(np.abs(got[path] - want[path])) / scale < 3e-2, path


def test_jit_compile_matches_eager():
    cfg = CONFIGS["groups2_inner2_relu"]
    model = AlbertPretrainer(cfg)
    inputs = make_inputs(cfg)
    eager = model(inputs)
    compiled = tf.function(lambda x: model(x), jit_compile=True)(
        {k: tf.constant(v) for k, v in inputs.items()}
    )
    assert_rel_close(compiled["mlm_logits"], eager["mlm_logits"], tol=1e-5)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_training_step_calls_the_plain_gelu_loop(policy):
    """The GELU forward (bfloat16: also the bias and layer-norm input loops) has its
    own gradient; a recording tape must not switch its compiled loop to the
    autodiff variant that also writes out every intermediate (seen through the
    shared-kernel encoder: 5x slower)."""
    model, inputs = built_encoder(CONFIGS["shared_gelu"], policy)

    @tf.function
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model(x, training=True)["sequence_output"])
        return tape.gradient(loss, model.trainable_variables)

    # The loops, not the native kernels that replace some of them (test_native_kernels).
    with speed_paths.forced(speed_paths.CPU_AUTO):
        graph = step.get_concrete_function(inputs).graph
    called = [
        op.get_attr("f").name
        for op in graph.get_operations()
        if op.type in ("PartitionedCall", "StatefulPartitionedCall")
    ]
    assert any("gelu_tanh" in name for name in called), called
    if policy == "mixed_bfloat16":
        assert any("bias_add" in name for name in called), called
        assert any("residual_sum" in name for name in called), called
        assert any("attention_softmax" in name for name in called), called
    assert not [name for name in called if "forward" in name], called


def test_int64_inputs_are_accepted():
    cfg = CONFIGS["shared_gelu"]
    model = AlbertModel(cfg)
    inputs = make_inputs(cfg)
    a = model({k: v.astype(np.int64) for k, v in inputs.items()})
    b = model(inputs)
    np.testing.assert_array_equal(a["pooled_output"], b["pooled_output"])


def test_errors():
    cfg = CONFIGS["shared_gelu"]
    model = AlbertModel(cfg)
    too_long = np.zeros((1, cfg.max_position_embeddings + 1), np.int32)
    with pytest.raises(ValueError, match="exceeds max_position_embeddings 20"):
        model({"input_ids": too_long})
    with pytest.raises(ValueError, match="rank 2"):
        model({"input_ids": np.zeros((1, 2, 3), np.int32)})
    with pytest.raises(TypeError, match="integer"):
        model({"input_ids": np.zeros((1, 4), np.float32)})
    with pytest.raises(ValueError, match="missing 'input_ids'"):
        model({"input_mask": np.ones((1, 4), np.int32)})
    with pytest.raises(TypeError, match="dict"):
        model(np.zeros((1, 4), np.int32))
    # Unknown shapes in a graph: the check runs at execution time.
    fn = tf.function(
        lambda ids: model({"input_ids": ids})["pooled_output"],
        input_signature=[tf.TensorSpec([None, None], tf.int32)],
    )
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_position_embeddings"):
        fn(tf.constant(too_long))


def test_outputs_and_config_round_trip():
    cfg = CONFIGS["groups3_L4_linear_type3"]
    model = AlbertModel(cfg)
    clone = AlbertModel.from_config(model.get_config())
    assert clone.config == cfg
    rows = AlbertPretrainer.from_config(
        AlbertPretrainer(cfg, full_sequence_output=False).get_config()
    )
    assert rows.config == cfg and not rows.full_sequence_output
    out = model(make_inputs(cfg))
    assert set(out) >= {"sequence_output", "pooled_output", "encoder_outputs", "embedding_output"}


RELEASED_COUNTS = {
    # encoder incl. pooler, docs/original.md §4
    "albert_base_v2": 11_683_584,
    "albert_large_v2": 17_683_968,
    "albert_xlarge_v2": 58_724_864,
    "albert_xxlarge_v2": 222_595_584,
    "bert_large": 334_607_360,
}
PRETRAINING_TOTALS = {"albert_base_v2": 11_813_810, "albert_xxlarge_v2": 223_158_450}


def _count_in_graph(model_cls, cfg):
    # Variables created inside a tf.Graph are never initialised: counting
    # xxlarge costs no memory for its 223M parameters.
    with tf.Graph().as_default():
        model = model_cls(cfg)
        model.build()
        return sum(int(np.prod(v.shape)) for v in model.weights)


@pytest.mark.parametrize("name", sorted(RELEASED_COUNTS))
def test_parameter_counts_of_released_configs(name):
    from albert_tf.model.config import preset

    assert _count_in_graph(AlbertModel, preset(name)) == RELEASED_COUNTS[name]
    assert preset(name).num_parameters() == RELEASED_COUNTS[name]


def test_num_parameters_with_groups_and_inner_groups():
    from albert_tf.model.config import preset

    cfg = preset("albert_tiny").replace(num_hidden_layers=6, num_hidden_groups=3, inner_group_num=2)
    assert cfg.num_parameters() == _count_in_graph(AlbertModel, cfg)
    unshared = preset("albert_tiny").replace(embedding_size=preset("albert_tiny").hidden_size)
    assert unshared.num_parameters() == _count_in_graph(AlbertModel, unshared)


@pytest.mark.parametrize(
    "sharing,paper_millions", [("all", 89.65), ("attention", 63.65), ("ffn", 37.69)]
)
def test_parameter_counts_of_sharing_strategies(sharing, paper_millions):
    """ALBERT-base shape, E = 128, one group per layer: the counts of docs/original.md's
    ablation table (paper Table 4: 89M not-shared, 64M shared-attention, 38M shared-FFN)."""
    from albert_tf.model.config import preset

    cfg = preset("base", num_hidden_groups=12, cross_layer_sharing=sharing)
    assert round(cfg.num_parameters() / 1e6, 2) == paper_millions
    assert _count_in_graph(AlbertModel, cfg) == cfg.num_parameters()


def test_partial_sharing_shares_the_variables_themselves():
    cfg = tiny_config(num_hidden_groups=3).replace(cross_layer_sharing="attention")
    model = AlbertModel(cfg)
    model.build()
    first, last = model.groups[0][0], model.groups[2][0]
    assert last.query.kernel is first.query.kernel
    assert last.attention_layer_norm.gamma is first.attention_layer_norm.gamma
    assert last.intermediate.kernel is not first.intermediate.kernel
    assert len({id(v) for v in model.weights}) == len(model.weights)


@pytest.mark.parametrize("name", sorted(PRETRAINING_TOTALS))
def test_pretraining_parameter_totals(name):
    from albert_tf.model.config import preset

    assert _count_in_graph(AlbertPretrainer, preset(name)) == PRETRAINING_TOTALS[name]
