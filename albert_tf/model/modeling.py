"""The ALBERT encoder and the pretraining model (encoder + MLM + SOP heads).

`AlbertModel` mirrors the original `AlbertModel` (scope `bert`):
factorized embeddings, the E -> H projection (only when E != H), L layer
applications over G parameter groups of I blocks each, and the pooler.
`AlbertPretrainer` adds the heads of run_pretraining.py (scope `cls`).

Inputs are dicts of int32 [B, S] tensors: `input_ids`, `input_mask` (1 real,
0 padding; default all ones) and `segment_ids` (token types; default zeros).

This is the plain computation (albert_tf.model.layers). On CPUs the CPU speed paths
(albert_tf.cpu, chosen by albert_tf.cpu.speed_paths) may run the stack of blocks instead,
through albert_tf.model.encoder_runner; this module imports none of them.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from albert_tf.model import encoder_runner
from albert_tf.model.config import AlbertConfig
from albert_tf.model.heads import MaskedLMHead, SentenceOrderHead
from albert_tf.model.layers import MASK_ADDER, AlbertEmbeddings, AlbertTransformerBlock, Dense2D


def _as_config(config) -> AlbertConfig:
    if isinstance(config, AlbertConfig):
        return config
    if isinstance(config, dict):
        return AlbertConfig.from_dict(config)
    raise TypeError(f"expected an AlbertConfig or dict, got {type(config).__name__}")


def _int_input(inputs, name, required=True):
    """Returns inputs[name] as int32 [B, S], checking rank and dtype."""
    if name not in inputs or inputs[name] is None:
        if required:
            raise ValueError(f"ALBERT inputs are missing {name!r}; got keys {sorted(inputs)}")
        return None
    x = inputs[name]
    if not isinstance(x, tf.Tensor):
        x = tf.convert_to_tensor(x)
    if not x.dtype.is_integer:
        raise TypeError(
            f"ALBERT input {name!r} must be an integer tensor (int32 ids), got dtype {x.dtype.name}"
        )
    if x.shape.rank is not None and x.shape.rank != 2:
        raise ValueError(
            f"ALBERT input {name!r} must have rank 2 [batch, seq], got shape {x.shape}"
        )
    return tf.cast(x, tf.int32)


def _attention_adder(input_mask):
    """int [B, S] -> float32 [B, 1, 1, S], added to attention scores: -10000 on
    padded keys only (padded queries are still computed)."""
    adder = (1.0 - tf.cast(input_mask, tf.float32)) * MASK_ADDER
    return adder[:, tf.newaxis, tf.newaxis, :]


def _cls_and(positions):
    """int [B, P] -> int32 [B, 1 + P]: the [CLS] row 0, then `positions`."""
    positions = tf.cast(positions, tf.int32)
    cls = tf.zeros([tf.shape(positions)[0], 1], tf.int32)
    return tf.concat([cls, positions], axis=1)


class AlbertModel(keras.Model):
    """The ALBERT encoder (original modeling.py `AlbertModel`, scope `bert`).

    Embeddings [B, S, E] -> projection to H (only when E != H) -> L layers, layer
    l applying the I blocks of group `config.group_index(l)` -> pooler on [CLS].

    Args:
      config: AlbertConfig (or a dict of its fields).

    Call: `model(inputs, training=False, output_positions=None)` with `inputs` a
    dict of int32 [B, S] tensors `input_ids`, `input_mask`, `segment_ids`. Returns
    a dict:
      sequence_output [B, S, H], pooled_output [B, H],
      encoder_outputs: list of L * I tensors [B, S, H] (one per block
        application, in the original's order),
      embedding_output [B, S, E] (after layer norm and dropout, before the
        projection), word_embedding_output [B, S, E] (raw lookup).
    Outputs are float32 under every dtype policy. `output_positions` int32
    [B, P]: `sequence_output` is then [B, P, H], row p being the full output's
    row output_positions[:, p], and the last entry of `encoder_outputs` holds
    the [CLS] row and those rows (all a classifier, P = 0, or the masked-LM head
    reads; on the CPU speed paths the last block computes only them).

    Example:

    >>> import numpy as np
    >>> from albert_tf import AlbertConfig
    >>> config = AlbertConfig(vocab_size=100, embedding_size=8, hidden_size=16,
    ...                       num_hidden_layers=2, num_attention_heads=2,
    ...                       intermediate_size=32)
    >>> model = AlbertModel(config)
    >>> out = model({"input_ids": np.array([[2, 15, 37, 3, 0]], np.int32),
    ...              "input_mask": np.array([[1, 1, 1, 1, 0]], np.int32)})
    >>> out["sequence_output"].shape, out["pooled_output"].shape, len(out["encoder_outputs"])
    (TensorShape([1, 5, 16]), TensorShape([1, 16]), 2)
    """

    def __init__(self, config, **kwargs):
        kwargs.setdefault("name", "albert")
        super().__init__(**kwargs)
        # === Config ===
        config = _as_config(config)
        self.config = config
        # === Layers ===
        self.embeddings = AlbertEmbeddings(
            vocab_size=config.vocab_size,
            embedding_size=config.embedding_size,
            type_vocab_size=config.type_vocab_size,
            max_position_embeddings=config.max_position_embeddings,
            dropout_rate=config.hidden_dropout_prob,
            initializer_range=config.initializer_range,
            name="embeddings",
        )
        self.embedding_projection = None
        if config.embedding_size != config.hidden_size:
            self.embedding_projection = Dense2D(
                config.hidden_size,
                initializer_range=config.initializer_range,
                name="embedding_projection",
            )
        # groups[g][i]: block i of group g; groups no layer maps to get no weights.
        # Partial sharing: the shared part of block (g, i) is block (0, i)'s.
        sharing = config.cross_layer_sharing
        # Filled before assignment: Keras wraps an assigned dict, and a wrapped dict
        # changed later under int keys can no longer be saved (SavedModel).
        groups = {}
        for g in config.used_groups():
            groups[g] = [
                AlbertTransformerBlock(
                    hidden_size=config.hidden_size,
                    num_attention_heads=config.num_attention_heads,
                    intermediate_size=config.intermediate_size,
                    hidden_act=config.hidden_act,
                    hidden_dropout_prob=config.hidden_dropout_prob,
                    attention_probs_dropout_prob=config.attention_probs_dropout_prob,
                    initializer_range=config.initializer_range,
                    **(
                        {}
                        if sharing == "all" or g == 0
                        else {"shared_part": sharing, "share_with": groups[0][i]}
                    ),
                    name=f"group_{g}_inner_group_{i}",
                )
                for i in range(config.inner_group_num)
            ]
        self.groups = groups
        # Keras 3 containers are invisible to tf.train.Checkpoint: also track each
        # block as a direct attribute so object-based checkpoints hold its weights.
        for blocks in self.groups.values():
            for block in blocks:
                setattr(self, block.name, block)
        self.pooler = Dense2D(
            config.hidden_size,
            activation="tanh",
            initializer_range=config.initializer_range,
            name="pooler",
        )
        # Layer l applies the blocks of group layer_groups[l].
        self.layer_groups = [config.group_index(l) for l in range(config.num_hidden_layers)]

    def build(self, input_shape=None):
        c = self.config
        self.embeddings.build()
        if self.embedding_projection is not None:
            self.embedding_projection.build((None, c.embedding_size))
        for block in self.blocks():
            block.build()
        self.pooler.build((None, c.hidden_size))
        self.built = True

    def blocks(self):
        """Every block once, group by group (group 0, which lends shared parts, first)."""
        return [block for blocks in self.groups.values() for block in blocks]

    def blocks_of(self, layer):
        """The I blocks layer `layer` applies, in order."""
        return self.groups[self.layer_groups[layer]]

    def call(self, inputs, training=False, output_positions=None):
        """See the class docstring."""
        input_ids, input_mask, segment_ids = self._checked_inputs(inputs)
        embedding_output, word_embedding_output = self.embeddings(
            input_ids, segment_ids, training=training
        )
        x = embedding_output
        if self.embedding_projection is not None:
            x = tf.cast(self.embedding_projection(x), tf.float32)
        adder = _attention_adder(input_mask)
        rows = None if output_positions is None else _cls_and(output_positions)
        encoder_outputs = encoder_runner.run(self, x, adder, training, rows)
        if encoder_outputs is None:
            encoder_outputs = self.run_blocks(x, adder, training, rows)
        x = encoder_outputs[-1]
        pooled = tf.cast(self.pooler(x[:, 0]), tf.float32)
        return {
            "sequence_output": x if output_positions is None else x[:, 1:],
            "pooled_output": pooled,
            "encoder_outputs": encoder_outputs,
            "embedding_output": embedding_output,
            "word_embedding_output": word_embedding_output,
        }

    def run_blocks(self, x, attention_adder, training=False, output_rows=None):
        """The L layer applications of the blocks to x [B, S, H] float32 -> the list of
        L * I outputs [B, S, H]; the last [B, P, H] at `output_rows` [B, P] when given."""
        outputs = []
        for layer in range(self.config.num_hidden_layers):
            for block in self.blocks_of(layer):
                x = block(x, attention_adder, training=training)
                outputs.append(x)
        if output_rows is not None:
            outputs[-1] = tf.gather(outputs[-1], output_rows, batch_dims=1)
        return outputs

    def _checked_inputs(self, inputs):
        """(input_ids, input_mask, segment_ids), int32 [B, S] each, the defaults
        filled in (mask all ones, segments zeros), the length checked."""
        if not isinstance(inputs, dict):
            raise TypeError(
                "AlbertModel expects a dict with input_ids, input_mask, "
                f"segment_ids; got {type(inputs).__name__}"
            )
        input_ids = _int_input(inputs, "input_ids")
        input_mask = _int_input(inputs, "input_mask", required=False)
        segment_ids = _int_input(inputs, "segment_ids", required=False)
        if input_mask is None:
            input_mask = tf.ones_like(input_ids)
        if segment_ids is None:
            segment_ids = tf.zeros_like(input_ids)
        return self._check_length(input_ids), input_mask, segment_ids

    def _check_length(self, input_ids):
        """Returns input_ids, failing if longer than max_position_embeddings."""
        limit = self.config.max_position_embeddings
        static = input_ids.shape[1]
        if static is not None:
            if static > limit:
                raise ValueError(
                    f"sequence length {static} exceeds max_position_embeddings {limit}"
                )
            return input_ids
        # Unknown length: a run-time check that everything downstream waits for
        # (otherwise the position slice could fail first with a cryptic message).
        check = tf.debugging.assert_less_equal(
            tf.shape(input_ids)[1],
            limit,
            message=f"sequence length exceeds max_position_embeddings {limit}",
        )
        with tf.control_dependencies([check]):
            return tf.identity(input_ids)

    @property
    def embedding_table(self):
        """The word-embedding table [V, E] (tied to the MLM decoder)."""
        return self.embeddings.word_embeddings

    def get_config(self):
        return {"config": self.config.to_dict(), "name": self.name}

    @classmethod
    def from_config(cls, config):
        return cls(AlbertConfig.from_dict(config["config"]), name=config.get("name", "albert"))


class AlbertPretrainer(keras.Model):
    """ALBERT encoder plus the masked-LM and sentence-order heads.

    Call with the encoder inputs plus `masked_lm_positions` int32 [B, Pm].
    Returns the encoder's dict plus:
      mlm_logits [B, Pm, V] float32 (decoder tied to the embedding table),
      sop_logits [B, 2] float32 (label 0 = original order, 1 = swapped).
    Losses and metrics of the original are in albert_tf/model/losses.py.

    `full_sequence_output=False` (what pretraining uses): the encoder returns
    only the [CLS] row and the masked positions, the only rows the two heads
    read, and on the CPU speed paths its last block computes only those (same logits;
    `sequence_output` is then [B, Pm, H] at the masked positions).
    """

    def __init__(self, config, full_sequence_output=True, **kwargs):
        kwargs.setdefault("name", "albert_pretrainer")
        super().__init__(**kwargs)
        # === Config ===
        config = _as_config(config)
        self.config = config
        self.full_sequence_output = full_sequence_output
        # === Layers ===
        self.albert = AlbertModel(config, name="albert")
        self.masked_lm = MaskedLMHead(
            embedding_size=config.embedding_size,
            vocab_size=config.vocab_size,
            hidden_act=config.hidden_act,
            initializer_range=config.initializer_range,
            name="masked_lm",
        )
        self.sentence_order = SentenceOrderHead(
            initializer_range=config.initializer_range, name="sentence_order"
        )

    def build(self, input_shape=None):
        self.albert.build()
        self.masked_lm.build((None, None, self.config.hidden_size))
        self.sentence_order.build((None, self.config.hidden_size))
        self.built = True

    def call(self, inputs, training=False):
        positions = _int_input(inputs, "masked_lm_positions")
        if self.full_sequence_output:
            outputs = dict(self.albert(inputs, training=training))
        else:
            outputs = dict(self.albert(inputs, training=training, output_positions=positions))
            positions = None  # sequence_output holds the masked rows already
        outputs["mlm_logits"] = self.masked_lm(
            outputs["sequence_output"], positions, self.albert.embedding_table
        )
        outputs["sop_logits"] = self.sentence_order(outputs["pooled_output"])
        return outputs

    def get_config(self):
        return {
            "config": self.config.to_dict(),
            "name": self.name,
            "full_sequence_output": self.full_sequence_output,
        }

    @classmethod
    def from_config(cls, config):
        return cls(
            AlbertConfig.from_dict(config["config"]),
            full_sequence_output=config.get("full_sequence_output", True),
            name=config.get("name", "albert_pretrainer"),
        )
