"""The model and speed-path tests' configs (variants of config_fixtures.tiny_config),
inputs and weight helpers."""

import keras
import numpy as np
import tensorflow as tf
from config_fixtures import tiny_config

from albert_tf.model.modeling import AlbertModel
from albert_tf.weights.checkpoints import original_variable_map

CONFIGS = {
    "shared_gelu": tiny_config(),
    "groups2_inner2_relu": tiny_config(num_hidden_groups=2, inner_group_num=2, hidden_act="relu"),
    "bert_shaped_E_eq_H_tanh": tiny_config(
        embedding_size=16, num_hidden_groups=3, hidden_act="tanh"
    ),
    "groups3_L4_linear_type3": tiny_config(
        num_hidden_layers=4, num_hidden_groups=3, hidden_act="linear", type_vocab_size=3
    ),
    # Paper Table 4: one set of attention (or FFN) weights, the other part per layer.
    "shared_attention_inner2": tiny_config(num_hidden_groups=3, inner_group_num=2).replace(
        cross_layer_sharing="attention"
    ),
    "shared_ffn_E_eq_H": tiny_config(embedding_size=16, num_hidden_groups=3).replace(
        cross_layer_sharing="ffn"
    ),
}


def make_inputs(cfg, batch=3, seq=11, preds=4, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, cfg.vocab_size, size=(batch, seq)).astype(np.int32)
    mask = np.ones((batch, seq), np.int32)
    mask[1, 7:] = 0  # padded example
    mask[2, 3:] = 0
    seg = rng.integers(0, cfg.type_vocab_size, size=(batch, seq)).astype(np.int32)
    pos = np.sort(rng.integers(0, seq, size=(batch, preds)), axis=1).astype(np.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": seg, "masked_lm_positions": pos}


def set_weights(model, weights):
    for name, variable in original_variable_map(model).items():
        variable.assign(weights[name])


def assert_rel_close(actual, expected, tol=1e-5):
    actual = np.asarray(actual, np.float64)
    expected = np.asarray(expected, np.float64)
    assert actual.shape == expected.shape
    err = np.max(np.abs(actual - expected)) / max(np.max(np.abs(expected)), 1e-12)
    assert err <= tol, f"relative error {err:.3g} > {tol}"


def built_encoder(cfg, policy):
    """(AlbertModel of cfg built under the Keras dtype policy, its encoder inputs)."""
    keras.mixed_precision.set_global_policy(policy)
    try:
        model = AlbertModel(cfg)
    finally:
        keras.mixed_precision.set_global_policy("float32")
    inputs = {k: tf.constant(v) for k, v in make_inputs(cfg).items() if k != "masked_lm_positions"}
    model(inputs)
    return model, inputs
