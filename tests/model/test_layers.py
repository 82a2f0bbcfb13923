"""The plain layers (albert_tf.model.layers): GELU, layer norm and the block against the numpy
reference, at head size 4 and 32."""

import math

import numpy as np
import pytest
import tensorflow as tf
from config_fixtures import tiny_config

from albert_tf.model import layers
from albert_tf.model.modeling import AlbertModel

import albert_numpy
from model_fixtures import make_inputs, set_weights


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
    got = ln(tf.constant(x, tf.float32)).numpy()
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)
    assert layers.LAYER_NORM_EPSILON == 1e-12


def test_layer_norm_of_bfloat16_input_normalises_in_float32():
    ln = layers.LayerNorm()
    ln.build((None, 8))
    x = tf.cast(tf.random.stateless_normal([3, 8], seed=[1, 2]), tf.bfloat16)
    with tf.GradientTape() as tape:
        tape.watch(x)
        out = ln(x)
    assert out.dtype == tf.float32
    assert tape.gradient(out, x).dtype == tf.bfloat16
    want = albert_numpy.layer_norm(
        tf.cast(x, tf.float64).numpy(), ln.beta.numpy(), ln.gamma.numpy(), eps=1e-12
    )
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("head_size", [4, 32])
def test_block_matches_numpy_reference(head_size):
    """One plain block (its own call, no model around it) against the numpy block."""
    heads = 2
    cfg = tiny_config(
        hidden_size=heads * head_size,
        num_attention_heads=heads,
        intermediate_size=3 * head_size,
        num_hidden_layers=1,
    )
    weights = albert_numpy.random_weights(cfg.to_dict(), seed=4)
    model = AlbertModel(cfg)
    model.build()
    set_weights(model, weights)
    mask = make_inputs(cfg)["input_mask"]
    x = np.random.default_rng(5).normal(size=(*mask.shape, cfg.hidden_size))
    adder = (1.0 - mask.astype(np.float32))[:, None, None, :] * layers.MASK_ADDER
    got = model.groups[0][0](tf.constant(x, tf.float32), tf.constant(adder))
    prefix = "bert/encoder/transformer/group_0/inner_group_0"
    want = albert_numpy.block(weights, prefix, x, mask.astype(np.float64), cfg.to_dict())
    assert got.shape == want.shape and got.dtype == tf.float32
    np.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-5)
