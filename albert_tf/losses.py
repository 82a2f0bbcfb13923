"""Losses and metrics of the original run_pretraining.py (all float32).

Shapes: mlm_logits [B, Pm, V]; masked_lm_ids, masked_lm_weights [B, Pm]
(padded prediction slots have weight 0); sop_logits [B, 2]; sop labels [B]
(0 = original order, 1 = swapped or random document).
"""

from __future__ import annotations

import tensorflow as tf

# The original adds this to the weight sum so an all-padding batch gives 0.
MLM_DENOMINATOR_EPSILON = 1e-5


def _per_example_cross_entropy(logits, labels):
    logits = tf.cast(logits, tf.float32)
    log_probs = tf.nn.log_softmax(logits, axis=-1)
    labels = tf.convert_to_tensor(labels)
    return -tf.gather(log_probs, tf.cast(labels, tf.int32), batch_dims=labels.shape.rank)


def masked_lm_loss(mlm_logits, masked_lm_ids, masked_lm_weights):
    """sum(w * -log p(label)) / (sum(w) + 1e-5) over the batch. Returns []."""
    weights = tf.cast(masked_lm_weights, tf.float32)
    per_prediction = _per_example_cross_entropy(mlm_logits, masked_lm_ids)
    return tf.reduce_sum(weights * per_prediction) / (
        tf.reduce_sum(weights) + MLM_DENOMINATOR_EPSILON
    )


def sentence_order_loss(sop_logits, labels):
    """Mean cross-entropy over the batch. labels [B] or [B, 1]. Returns []."""
    labels = tf.reshape(labels, [-1])
    return tf.reduce_mean(_per_example_cross_entropy(sop_logits, labels))


def pretraining_loss(outputs, features, sentence_order_weight=1.0):
    """Total loss = MLM + SOP (unweighted, as the original), and the parts.

    Args:
      outputs: dict with `mlm_logits`, `sop_logits` (AlbertPretrainer).
      features: dict with `masked_lm_ids`, `masked_lm_weights`,
        `next_sentence_labels` (the original's feature name for SOP labels).
      sentence_order_weight: factor on the SOP (or NSP) term; 0 trains the MLM
        alone (the paper's "None" row of Table 5). The part is reported either way.
    Returns: (total [], {"masked_lm_loss": [], "sentence_order_loss": []}).
    """
    mlm = masked_lm_loss(
        outputs["mlm_logits"], features["masked_lm_ids"], features["masked_lm_weights"]
    )
    sop = sentence_order_loss(outputs["sop_logits"], features["next_sentence_labels"])
    total = mlm + sop if sentence_order_weight == 1.0 else mlm + sentence_order_weight * sop
    return total, {"masked_lm_loss": mlm, "sentence_order_loss": sop}


def pretraining_metric_sums(outputs, features):
    """Sufficient statistics for the original's eval metrics.

    Returns a dict of float32 scalars that can be summed over batches (and
    replicas): masked_lm_correct, masked_lm_loss_sum, masked_lm_weight,
    sentence_order_correct, sentence_order_loss_sum, sentence_order_count.
    `finalize_pretraining_metrics` turns the sums into the original's keys.
    """
    weights = tf.cast(features["masked_lm_weights"], tf.float32)
    ids = tf.cast(features["masked_lm_ids"], tf.int32)
    mlm_logits = tf.cast(outputs["mlm_logits"], tf.float32)
    mlm_pred = tf.argmax(mlm_logits, axis=-1, output_type=tf.int32)
    mlm_ce = _per_example_cross_entropy(mlm_logits, ids)
    labels = tf.reshape(tf.cast(features["next_sentence_labels"], tf.int32), [-1])
    sop_logits = tf.cast(outputs["sop_logits"], tf.float32)
    sop_pred = tf.argmax(sop_logits, axis=-1, output_type=tf.int32)
    sop_ce = _per_example_cross_entropy(sop_logits, labels)
    return {
        "masked_lm_correct": tf.reduce_sum(weights * tf.cast(tf.equal(mlm_pred, ids), tf.float32)),
        "masked_lm_loss_sum": tf.reduce_sum(weights * mlm_ce),
        "masked_lm_weight": tf.reduce_sum(weights),
        "sentence_order_correct": tf.reduce_sum(tf.cast(tf.equal(sop_pred, labels), tf.float32)),
        "sentence_order_loss_sum": tf.reduce_sum(sop_ce),
        "sentence_order_count": tf.cast(tf.size(labels), tf.float32),
    }


def finalize_pretraining_metrics(sums):
    """Original metric names from summed statistics (python floats in, out)."""

    def ratio(a, b):
        return float(a) / float(b) if float(b) > 0 else 0.0

    return {
        "masked_lm_accuracy": ratio(sums["masked_lm_correct"], sums["masked_lm_weight"]),
        "masked_lm_loss": ratio(sums["masked_lm_loss_sum"], sums["masked_lm_weight"]),
        "sentence_order_accuracy": ratio(
            sums["sentence_order_correct"], sums["sentence_order_count"]
        ),
        "sentence_order_loss": ratio(sums["sentence_order_loss_sum"], sums["sentence_order_count"]),
    }
