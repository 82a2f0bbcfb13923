"""Keras layers of the ALBERT encoder: the plain model, as the original modeling.py.

Shape letters: B batch, S sequence, E embedding width, H hidden width,
N heads, D head width (H / N), F feed-forward width, V vocabulary.

Standard TensorFlow ops only, differentiated by autodiff: this is what runs on GPUs and
TPUs, and the reference every CPU speed path (albert_tf.cpu) is tested against. One
block's forward pass is `AlbertTransformerBlock.call` and `_attention`.

All kernels are stored exactly as the original checkpoint stores them (2-D,
`[in, out]`); the attention reshapes the products per head. That keeps the checkpoint
mapping (albert_tf/weights/checkpoints.py) a pure name table.

Under the Keras `mixed_bfloat16` policy the matrix products run in bfloat16,
while layer norm, softmax, the residual stream and the embedding sums stay in
float32 (their variables are float32 in every policy).
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

# The original's layer norm (tf.contrib.layers.layer_norm) hard-codes 1e-12 for
# float32; Keras' default 1e-3 would change every output.
LAYER_NORM_EPSILON = 1e-12
# Added to attention scores of padded keys (the original's constant).
MASK_ADDER = -10000.0
# The tanh approximation of GELU: sqrt(2 / pi) and the cubic term's factor.
GELU_C = math.sqrt(2.0 / math.pi)
GELU_A = 0.044715
# The sublayers of an attention-FFN block, by the part layers may share.
SUBLAYERS = {
    "attention": ("query", "key", "value", "attention_output", "attention_layer_norm"),
    "ffn": ("intermediate", "ffn_output", "ffn_layer_norm"),
}
# Its dense sublayers (a 2-D kernel and a bias each), in creation order.
DENSE_SUBLAYERS = ("query", "key", "value", "attention_output", "intermediate", "ffn_output")


def gelu_tanh(x):
    """GELU, tanh approximation (the original's "gelu"; TF's default is erf)."""
    x = tf.convert_to_tensor(x)
    c = tf.constant(GELU_C, x.dtype)
    a = tf.constant(GELU_A, x.dtype)
    return 0.5 * x * (1.0 + tf.tanh(c * (x + a * x * x * x)))


def get_activation(name):
    """Maps a config `hidden_act` to a function (None for linear)."""
    if callable(name):
        return name
    key = (name or "linear").lower()
    table = {"gelu": gelu_tanh, "relu": tf.nn.relu, "tanh": tf.tanh, "linear": None}
    if key not in table:
        raise ValueError(f"unsupported activation {name!r}; expected one of {sorted(table)}")
    return table[key]


def layer_norm(x, gamma, beta, epsilon=LAYER_NORM_EPSILON):
    """(x - mean) / sqrt(variance + epsilon) * gamma + beta over the last axis, in float32
    (x of any float dtype, [..., H]; gamma and beta [H])."""
    x = tf.cast(x, tf.float32)
    mean = tf.reduce_mean(x, axis=-1, keepdims=True)
    centered = x - mean
    variance = tf.reduce_mean(tf.square(centered), axis=-1, keepdims=True)
    return centered * tf.math.rsqrt(variance + epsilon) * gamma + beta


def truncated_normal(stddev):
    # tf.compat.v1.truncated_normal_initializer semantics: re-draw outside
    # +-2 stddev, no rescaling (Keras' TruncatedNormal does the same).
    return keras.initializers.TruncatedNormal(stddev=stddev)


class LayerNorm(keras.layers.Layer):
    """Layer norm over the last axis, epsilon 1e-12, always in float32.

    Variables `beta` then `gamma` (the original's creation order). Input of
    any float dtype, output float32, same shape.
    """

    def __init__(self, epsilon=LAYER_NORM_EPSILON, **kwargs):
        kwargs["dtype"] = "float32"
        kwargs["autocast"] = False  # a bfloat16 input is widened by `layer_norm`
        super().__init__(**kwargs)
        self.epsilon = epsilon

    def build(self, input_shape):
        width = input_shape[-1]
        # float32 wherever they are read, also inside a bfloat16 layer's autocast scope.
        weight = dict(shape=(width,), autocast=False)
        self.beta = self.add_weight(name="beta", initializer="zeros", **weight)
        self.gamma = self.add_weight(name="gamma", initializer="ones", **weight)

    def call(self, x):
        return layer_norm(x, self.gamma, self.beta, self.epsilon)

    def get_config(self):
        return {**super().get_config(), "epsilon": self.epsilon}


class Dense2D(keras.layers.Layer):
    """y = act(x . kernel + bias) with a 2-D `kernel [in, out]` and `bias [out]`.

    Computes in the layer's compute dtype; x may have any leading shape (one 2-D
    product: a reshape to [-1, in] is free, `tf.tensordot` would add transposes).
    """

    def __init__(self, units, activation=None, initializer_range=0.02, use_bias=True, **kwargs):
        super().__init__(**kwargs)
        self.units = units
        self.activation = activation
        self.initializer_range = initializer_range
        self.use_bias = use_bias

    def build(self, input_shape):
        self.kernel = self.add_weight(
            name="kernel",
            shape=(input_shape[-1], self.units),
            initializer=truncated_normal(self.initializer_range),
        )
        self.bias = (
            self.add_weight(name="bias", shape=(self.units,), initializer="zeros")
            if self.use_bias
            else None
        )

    def call(self, x):
        dtype = self.compute_dtype
        x, kernel = tf.cast(x, dtype), tf.cast(self.kernel, dtype)
        if x.shape.rank == 2:
            y = tf.matmul(x, kernel)
        else:
            y = tf.matmul(tf.reshape(x, [-1, x.shape[-1]]), kernel)
            y = tf.reshape(y, tf.concat([tf.shape(x)[:-1], [self.units]], axis=0))
        if self.bias is not None:
            y = tf.nn.bias_add(y, tf.cast(self.bias, dtype))
        activation = get_activation(self.activation)
        return y if activation is None else activation(y)

    def get_config(self):
        return {
            **super().get_config(),
            "units": self.units,
            "activation": self.activation,
            "initializer_range": self.initializer_range,
            "use_bias": self.use_bias,
        }


class AlbertEmbeddings(keras.layers.Layer):
    """Factorized embeddings: word [V, E] + token type [T, E] + position [P, E].

    Mirrors the original `embedding_lookup` + `embedding_postprocessor`
    (scope `bert/embeddings`). Call: `input_ids`, `segment_ids` int32 [B, S]
    -> (embedding_output [B, S, E] after layer norm and dropout, float32;
    word_embedding_output [B, S, E], the raw lookup). E is smaller than H in ALBERT:
    the encoder projects it to H (albert_tf.model.modeling).
    """

    def __init__(
        self,
        vocab_size,
        embedding_size,
        type_vocab_size,
        max_position_embeddings,
        dropout_rate=0.0,
        initializer_range=0.02,
        **kwargs,
    ):
        kwargs["dtype"] = "float32"
        super().__init__(**kwargs)
        self.vocab_size = vocab_size
        self.embedding_size = embedding_size
        self.type_vocab_size = type_vocab_size
        self.max_position_embeddings = max_position_embeddings
        self.dropout_rate = dropout_rate
        self.initializer_range = initializer_range
        self.layer_norm = LayerNorm(name="layer_norm")
        self.dropout = keras.layers.Dropout(dropout_rate)

    def build(self, input_shape=None):
        init = truncated_normal(self.initializer_range)
        self.word_embeddings = self.add_weight(
            name="word_embeddings", shape=(self.vocab_size, self.embedding_size), initializer=init
        )
        self.token_type_embeddings = self.add_weight(
            name="token_type_embeddings",
            shape=(self.type_vocab_size, self.embedding_size),
            initializer=init,
        )
        self.position_embeddings = self.add_weight(
            name="position_embeddings",
            shape=(self.max_position_embeddings, self.embedding_size),
            initializer=init,
        )
        self.layer_norm.build((None, None, self.embedding_size))

    def call(self, input_ids, segment_ids, training=False):
        seq_length = tf.shape(input_ids)[1]
        words = tf.gather(self.word_embeddings, input_ids)
        # A gather of T rows; the original's TPU one-hot matmul is the same numbers.
        types = tf.gather(self.token_type_embeddings, segment_ids)
        positions = self.position_embeddings[:seq_length]
        x = words + types + positions[tf.newaxis]
        x = self.layer_norm(x)
        if self.dropout_rate > 0:
            x = self.dropout(x, training=training)
        return x, words

    def get_config(self):
        return {
            **super().get_config(),
            "vocab_size": self.vocab_size,
            "embedding_size": self.embedding_size,
            "type_vocab_size": self.type_vocab_size,
            "max_position_embeddings": self.max_position_embeddings,
            "dropout_rate": self.dropout_rate,
            "initializer_range": self.initializer_range,
        }


class AlbertTransformerBlock(keras.layers.Layer):
    """One attention-FFN block (the original's `attention_ffn_block`).

    Post-layer-norm: h1 = LN(dropout(attn(x)) + x); out = LN(dropout(ffn(h1)) +
    h1). Call: `x` [B, S, H] (float32 residual stream), `attention_adder`
    [B, 1, 1, S] float32 (0 for real keys, -10000 for padding) -> [B, S, H]
    float32.

    Variables keep the checkpoint's 2-D layout: query/key/value/output
    kernels [H, H] (columns or rows ordered head-major, i.e. index n * D + d),
    intermediate [H, F], ffn_output [F, H].

    `shared_part` ("attention" or "ffn") with `share_with` (another block):
    that part's sublayers (`SUBLAYERS[shared_part]`) are `share_with`'s, so
    the two blocks share those variables (the paper's shared-attention and
    shared-FFN models, `AlbertConfig.cross_layer_sharing`).
    """

    def __init__(
        self,
        hidden_size,
        num_attention_heads,
        intermediate_size,
        hidden_act="gelu",
        hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0,
        initializer_range=0.02,
        shared_part=None,
        share_with=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        # Keep the float32 residual stream and mask adder as they come; the
        # block casts to the compute dtype only around matrix products.
        self._convert_input_args = False
        if hidden_size % num_attention_heads:
            raise ValueError(
                f"hidden_size {hidden_size} is not divisible by "
                f"num_attention_heads {num_attention_heads}"
            )
        # === Config ===
        self.hidden_size = hidden_size
        self.num_attention_heads = num_attention_heads
        self.head_size = hidden_size // num_attention_heads
        self.intermediate_size = intermediate_size
        self.hidden_act = hidden_act
        self.hidden_dropout_prob = hidden_dropout_prob
        self.attention_probs_dropout_prob = attention_probs_dropout_prob
        self.initializer_range = initializer_range
        if (shared_part is None) != (share_with is None) or (
            shared_part is not None and shared_part not in SUBLAYERS
        ):
            raise ValueError(
                "shared_part (one of "
                f"{sorted(SUBLAYERS)}) and share_with go together; got "
                f"{shared_part!r} and {type(share_with).__name__}"
            )
        self.shared_part = shared_part
        # === Layers ===
        dense = dict(initializer_range=initializer_range, dtype=self.dtype_policy)
        sublayers = {
            "query": lambda: Dense2D(hidden_size, name="query", **dense),
            "key": lambda: Dense2D(hidden_size, name="key", **dense),
            "value": lambda: Dense2D(hidden_size, name="value", **dense),
            "attention_output": lambda: Dense2D(hidden_size, name="attention_output", **dense),
            "attention_layer_norm": lambda: LayerNorm(name="attention_layer_norm"),
            "intermediate": lambda: Dense2D(
                intermediate_size, activation=hidden_act, name="intermediate", **dense
            ),
            "ffn_output": lambda: Dense2D(hidden_size, name="ffn_output", **dense),
            "ffn_layer_norm": lambda: LayerNorm(name="ffn_layer_norm"),
        }
        # The lender's layer objects themselves: one set of variables.
        borrowed = SUBLAYERS[shared_part] if shared_part else ()
        for name, make in sublayers.items():
            setattr(self, name, getattr(share_with, name) if name in borrowed else make())
        self.attention_dropout = keras.layers.Dropout(attention_probs_dropout_prob)
        self.hidden_dropout = keras.layers.Dropout(hidden_dropout_prob)

    def build(self, input_shape=None):
        h, f = self.hidden_size, self.intermediate_size
        for name in SUBLAYERS["attention"] + SUBLAYERS["ffn"]:
            layer = getattr(self, name)
            if not layer.built:  # borrowed sublayers are built by their owner
                layer.build((None, f if name == "ffn_output" else h))

    def call(self, x, attention_adder, training=False):
        """x [B, S, H] float32, attention_adder [B, 1, 1, S] -> [B, S, H] float32."""
        batch, length = tf.shape(x)[0], tf.shape(x)[1]
        rows = tf.reshape(x, [-1, self.hidden_size])  # [B*S, H]
        # Attention sublayer: its output product, dropout, residual, layer norm.
        context = self._attention(rows, attention_adder, batch, training)
        attended = self.hidden_dropout(self.attention_output(context), training=training)
        h1 = self.attention_layer_norm(tf.cast(attended, tf.float32) + rows)
        # FFN sublayer: H -> F with `hidden_act`, F -> H, dropout, residual, layer norm.
        ffn = self.hidden_dropout(self.ffn_output(self.intermediate(h1)), training=training)
        out = self.ffn_layer_norm(tf.cast(ffn, tf.float32) + h1)
        return tf.reshape(out, [batch, length, self.hidden_size])

    def _attention(self, rows, attention_adder, batch, training):
        """Multi-head self-attention of rows [B*S, H] (float32) -> context [B*S, H] in
        the compute dtype, before the output product."""
        n, d = self.num_attention_heads, self.head_size

        def heads(t):  # [B*S, H] -> [B, N, S, D]
            return tf.transpose(tf.reshape(t, [batch, -1, n, d]), [0, 2, 1, 3])

        q, k, v = (heads(dense(rows)) for dense in (self.query, self.key, self.value))
        # The original scales the product (not q) by 1/sqrt(D); softmax in float32.
        scores = tf.cast(tf.matmul(q, k, transpose_b=True), tf.float32) * (1.0 / math.sqrt(d))
        probs = tf.nn.softmax(scores + attention_adder, axis=-1)  # [B, N, S, S]
        probs = self.attention_dropout(probs, training=training)
        context = tf.matmul(tf.cast(probs, self.compute_dtype), v)  # [B, N, S, D]
        return tf.reshape(tf.transpose(context, [0, 2, 1, 3]), [-1, self.hidden_size])

    def get_config(self):
        return {
            **super().get_config(),
            "hidden_size": self.hidden_size,
            "num_attention_heads": self.num_attention_heads,
            "intermediate_size": self.intermediate_size,
            "hidden_act": self.hidden_act,
            "hidden_dropout_prob": self.hidden_dropout_prob,
            "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
            "initializer_range": self.initializer_range,
        }
