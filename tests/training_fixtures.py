"""Tiny pretraining set-ups shared by the training tests (and their worker scripts)."""

import os

import numpy as np
import tensorflow as tf
from config_fixtures import tiny_config
from tensorflow.core.util import event_pb2

from albert_tf.model.modeling import AlbertPretrainer
from albert_tf.run.optimization import create_optimizer

SEQ, PREDS, NUM_EXAMPLES = 16, 3, 64


def pretraining_config(dropout=0.0):
    """The suite's tiny config for the toy pretraining task (40 ids, sequences of SEQ)."""
    return tiny_config(
        hidden_dropout_prob=dropout,
        attention_probs_dropout_prob=dropout,
        vocab_size=40,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=32,
        max_position_embeddings=SEQ,
        initializer_range=0.1,
    )


def synthetic_features(seed=0, n=NUM_EXAMPLES):
    """A learnable toy task: ids follow a pattern; SOP label = order of two halves. Each
    example masks 1 to PREDS positions (the rest padding of weight 0), so batches, replicas
    and micro-batches hold different numbers of masked tokens."""
    rng = np.random.default_rng(seed)
    start = rng.integers(5, 20, size=(n, 1))
    ids = (start + np.arange(SEQ)[None]) % 40
    labels = rng.integers(0, 2, size=n)
    ids[labels == 1] = ids[labels == 1][:, ::-1]
    positions = np.sort(
        np.stack([rng.choice(np.arange(1, SEQ), PREDS, replace=False) for _ in range(n)]), axis=1
    )
    counts = rng.integers(1, PREDS + 1, size=n)
    masked_ids = np.take_along_axis(ids, positions, axis=1)
    masked_input = ids.copy()
    np.put_along_axis(masked_input, positions, 4, axis=1)
    return {
        "input_ids": masked_input.astype(np.int32),
        "input_mask": np.ones((n, SEQ), np.int32),
        "segment_ids": (np.arange(SEQ)[None] >= SEQ // 2).repeat(n, 0).astype(np.int32),
        "masked_lm_positions": positions.astype(np.int32),
        "masked_lm_ids": masked_ids.astype(np.int32),
        "masked_lm_weights": (np.arange(PREDS)[None] < counts[:, None]).astype(np.float32),
        "next_sentence_labels": labels.astype(np.int32),
    }


def dataset_fn(global_batch, shard_records=True, seed=0, n=NUM_EXAMPLES):
    """Deterministic, repeated; with several pipelines each takes every k-th record."""
    features = synthetic_features(seed, n)

    def fn(ctx):
        d = tf.data.Dataset.from_tensor_slices(features)
        if shard_records and ctx.num_input_pipelines > 1:
            d = d.shard(ctx.num_input_pipelines, ctx.input_pipeline_id)
        return d.repeat().batch(ctx.get_per_replica_batch_size(global_batch), drop_remainder=True)

    return fn


def build(strategy, optimizer="adamw", lr=1e-3, steps=100, warmup=0, seed=1, dropout=0.0):
    import keras

    keras.utils.set_random_seed(seed)
    with strategy.scope():
        model = AlbertPretrainer(pretraining_config(dropout))
        model.build()
        opt = create_optimizer(lr, steps, warmup, optimizer)
    return model, opt


def loss_summaries(output_dir):
    """[(step, value)] of the "loss" summaries in output_dir/train."""
    found = []
    for path in tf.io.gfile.glob(os.path.join(output_dir, "train", "events.out.tfevents.*")):
        for raw in tf.data.TFRecordDataset(path):
            event = event_pb2.Event.FromString(raw.numpy())
            for value in event.summary.value:
                if value.tag == "loss":
                    found.append((event.step, float(tf.make_ndarray(value.tensor))))
    return sorted(found)
