"""Task heads on top of the ALBERT encoder (original scopes in brackets).

Each head owns only its own variables; the checkpoint names are in
albert_tf/weights/checkpoints.py.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from albert_tf.model.layers import Dense2D, LayerNorm, truncated_normal


class MaskedLMHead(keras.layers.Layer):
    """Masked-LM head [`cls/predictions`].

    Gathers `sequence_output` [B, S, H] at `positions` [B, Pm], applies the
    transform dense H -> E with `hidden_act` and a layer norm, then the
    decoder tied to the embedding table [V, E] plus `output_bias` [V].
    Returns logits [B, Pm, V] float32.
    """

    def __init__(
        self, embedding_size, vocab_size, hidden_act="gelu", initializer_range=0.02, **kwargs
    ):
        super().__init__(**kwargs)
        self.embedding_size = embedding_size
        self.vocab_size = vocab_size
        self.hidden_act = hidden_act
        self.initializer_range = initializer_range
        self.transform = Dense2D(
            embedding_size,
            activation=hidden_act,
            initializer_range=initializer_range,
            dtype=self.dtype_policy,
            name="transform",
        )
        self.layer_norm = LayerNorm(name="transform_layer_norm")

    def build(self, input_shape):
        self.transform.build((None, input_shape[-1]))
        self.layer_norm.build((None, self.embedding_size))
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.vocab_size,), initializer="zeros", autocast=False
        )  # added to float32 logits

    def call(self, sequence_output, positions, embedding_table):
        """positions None: `sequence_output` is already [B, Pm, H] at the masked positions."""
        gathered = (
            sequence_output
            if positions is None
            else tf.gather(sequence_output, positions, batch_dims=1)
        )  # (B, Pm, H)
        batch, num = tf.shape(gathered)[0], tf.shape(gathered)[1]
        x = tf.reshape(gathered, [-1, sequence_output.shape[-1]])
        x = self.layer_norm(self.transform(x))
        dtype = self.compute_dtype
        logits = tf.matmul(tf.cast(x, dtype), tf.cast(embedding_table, dtype), transpose_b=True)
        logits = tf.cast(logits, tf.float32) + self.output_bias
        return tf.reshape(logits, [batch, num, self.vocab_size])

    def get_config(self):
        return {
            **super().get_config(),
            "embedding_size": self.embedding_size,
            "vocab_size": self.vocab_size,
            "hidden_act": self.hidden_act,
            "initializer_range": self.initializer_range,
        }


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
            name="output_weights",
            shape=(self.num_outputs, input_shape[-1]),
            initializer=truncated_normal(self.initializer_range),
        )
        self.output_bias = self.add_weight(
            name="output_bias", shape=(self.num_outputs,), initializer="zeros", autocast=False
        )  # added to float32 logits

    def call(self, x):
        dtype = self.compute_dtype
        logits = tf.matmul(tf.cast(x, dtype), tf.cast(self.output_weights, dtype), transpose_b=True)
        return tf.cast(logits, tf.float32) + self.output_bias

    def get_config(self):
        return {
            **super().get_config(),
            "num_outputs": self.num_outputs,
            "initializer_range": self.initializer_range,
        }


class SentenceOrderHead(OutputProjection):
    """Sentence-order head [`cls/seq_relationship`]: pooled [B, H] -> [B, 2]."""

    def __init__(self, initializer_range=0.02, **kwargs):
        kwargs.pop("num_outputs", None)
        super().__init__(2, initializer_range=initializer_range, **kwargs)


class SquadV2Head(keras.layers.Layer):
    """run_squad_v2.py's XLNet-style head [top-level scopes `start_logits`,
    `end_logits`, `answer_class`].

    start: h . w + b (dense H -> 1). end, given start vectors s: dense_1(LN(tanh(
    [h_t ; s] . W0 + b0))) with W0 [2H, H] (computed as h . W0[:H] + s . W0[H:], the
    same sum without building the [.., 2H] concatenation). answer class: dense_1(
    dropout(tanh([start_feature ; h_cls] . A0 + a0))), dense_1 without bias.
    Positions where p_mask = 1 get logit -1e30. Shapes: h [B, S, H], p_mask [B, S].
    """

    def __init__(self, hidden_size, initializer_range=0.02, dropout_prob=0.1, **kwargs):
        super().__init__(**kwargs)
        self.hidden_size = hidden_size
        self.initializer_range = initializer_range
        self.dropout_prob = dropout_prob
        dense = dict(initializer_range=initializer_range, dtype=self.dtype_policy)
        self.start_dense = Dense2D(1, name="start_dense", **dense)
        self.end_dense_0 = Dense2D(hidden_size, name="end_dense_0", **dense)
        self.end_layer_norm = LayerNorm(name="end_layer_norm")
        self.end_dense_1 = Dense2D(1, name="end_dense_1", **dense)
        self.answer_dense_0 = Dense2D(hidden_size, name="answer_dense_0", **dense)
        self.answer_dense_1 = Dense2D(1, use_bias=False, name="answer_dense_1", **dense)
        self.answer_dropout = keras.layers.Dropout(dropout_prob)

    def build(self, input_shape=None):
        h = self.hidden_size
        self.start_dense.build((None, h))
        self.end_dense_0.build((None, 2 * h))
        self.end_layer_norm.build((None, h))
        self.end_dense_1.build((None, h))
        self.answer_dense_0.build((None, 2 * h))
        self.answer_dense_1.build((None, h))

    @staticmethod
    def masked(logits, p_mask):
        return logits * (1.0 - p_mask) - 1e30 * p_mask

    def start_logits(self, h, p_mask):
        """Masked start logits [B, S]."""
        return self.masked(tf.cast(tf.squeeze(self.start_dense(h), -1), tf.float32), p_mask)

    def end_logits(self, h, start_vectors, p_mask):
        """Masked end logits: start_vectors [B, H] -> [B, S]; [B, K, H] -> [B, K, S]."""
        dtype = self.compute_dtype
        kernel = tf.cast(self.end_dense_0.kernel, dtype)
        h_part = tf.matmul(tf.cast(h, dtype), kernel[: self.hidden_size])  # [B, S, H]
        s_part = tf.matmul(tf.cast(start_vectors, dtype), kernel[self.hidden_size :])
        if start_vectors.shape.rank == 3:  # beam: [B, K, 1, H] + [B, 1, S, H]
            h_part, s_part, p_mask = h_part[:, None], s_part[:, :, None], p_mask[:, None]
        else:
            s_part = s_part[:, None]
        hidden = tf.tanh(h_part + s_part + tf.cast(self.end_dense_0.bias, dtype))
        logits = tf.squeeze(self.end_dense_1(self.end_layer_norm(hidden)), -1)
        return self.masked(tf.cast(logits, tf.float32), p_mask)

    def answer_logits(self, h, start_logits_masked, training=False):
        """cls_logits [B] from the start distribution's expected vector and h[:, 0]."""
        start_p = tf.nn.softmax(start_logits_masked, axis=-1)
        start_feature = tf.einsum("bs,bsh->bh", start_p, tf.cast(h, tf.float32))
        features = tf.concat([start_feature, tf.cast(h[:, 0], tf.float32)], axis=-1)
        hidden = tf.tanh(self.answer_dense_0(features))
        if training and self.dropout_prob > 0:
            hidden = self.answer_dropout(hidden, training=True)
        return tf.squeeze(tf.cast(self.answer_dense_1(hidden), tf.float32), -1)

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "initializer_range": self.initializer_range,
            "dropout_prob": self.dropout_prob,
        }
