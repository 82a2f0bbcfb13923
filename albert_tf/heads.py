"""Task heads on top of the ALBERT encoder (original scopes in brackets).

Each head owns only its own variables; the checkpoint names are in
albert_tf/checkpoints.py.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from albert_tf.layers import Dense2D, LayerNorm, truncated_normal


class MaskedLMHead(keras.layers.Layer):
    """Masked-LM head [`cls/predictions`].

    Gathers `sequence_output` [B, S, H] at `positions` [B, Pm], applies the
    transform dense H -> E with `hidden_act` and a layer norm, then the
    decoder tied to the embedding table [V, E] plus `output_bias` [V].
    Returns logits [B, Pm, V] float32.
    """

    def __init__(self, embedding_size, vocab_size, hidden_act="gelu",
                 initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.embedding_size = embedding_size
        self.vocab_size = vocab_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.transform = Dense2D(embedding_size, activation=hidden_act,
                                 initializer_range=initializer_range,
                                 dtype=self.dtype_policy, name="transform")
        self.layer_norm = LayerNorm(name="transform_layer_norm")

    def build(self, input_shape):
        self.transform.build((None, input_shape[-1]))
        self.layer_norm.build((None, self.embedding_size))
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.vocab_size,), initializer="zeros",
            autocast=False)  # added to float32 logits

    def call(self, sequence_output, positions, embedding_table):
        """positions None: `sequence_output` is already [B, Pm, H] at the masked positions."""
        gathered = (sequence_output if positions is None
                    else tf.gather(sequence_output, positions, batch_dims=1))  # (B, Pm, H)
        batch, num = tf.shape(gathered)[0], tf.shape(gathered)[1]
        x = tf.reshape(gathered, [-1, sequence_output.shape[-1]])
        x = self.layer_norm(self.transform(x))
        dtype = self.compute_dtype
        logits = tf.matmul(tf.cast(x, dtype), tf.cast(embedding_table, dtype),
                           transpose_b=True)
        logits = tf.cast(logits, tf.float32) + self.output_bias
        return tf.reshape(logits, [batch, num, self.vocab_size])

    def get_config(self):
        return {**super().get_config(), "embedding_size": self.embedding_size,
                "vocab_size": self.vocab_size, "hidden_act": self.hidden_act,
                "initializer_range": self.initializer_range}


class OutputProjection(keras.layers.Layer):
    """logits = x . output_weights^T + output_bias, weights stored [K, H].

    The original's `output_weights [K, H]` / `output_bias [K]` layout (SOP
    head, GLUE classifier, RACE). Input [B, H] -> [B, K] float32.
    """

    def __init__(self, num_outputs, initializer_range=0.02, **kwargs):
        super().__init__(**kwargs)
        self.num_outputs = num_outputs
        self.initializer_range = initializer_range

    def build(self, input_shape):
        self.output_weights = self.add_weight(
            name="output_weights", shape=(self.num_outputs, input_shape[-1]),
            initializer=truncated_normal(self.initializer_range))
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.num_outputs,), initializer="zeros",
            autocast=False)  # added to float32 logits

    def call(self, x):
        dtype = self.compute_dtype
        logits = tf.matmul(tf.cast(x, dtype), tf.cast(self.output_weights, dtype),
                           transpose_b=True)
        return tf.cast(logits, tf.float32) + self.output_bias

    def get_config(self):
        return {**super().get_config(), "num_outputs": self.num_outputs,
                "initializer_range": self.initializer_range}


class SentenceOrderHead(OutputProjection):
    """Sentence-order head [`cls/seq_relationship`]: pooled [B, H] -> [B, 2]."""

    def __init__(self, initializer_range=0.02, **kwargs):
        kwargs.pop("num_outputs", None)
        super().__init__(2, initializer_range=initializer_range, **kwargs)
