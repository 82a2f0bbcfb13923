"""Losses and metrics of the original run_pretraining.py (all float32).

Shapes: mlm_logits [B, Pm, V]; masked_lm_ids, masked_lm_weights [B, Pm]
(padded prediction slots have weight 0); sop_logits [B, 2]; sop labels [B]
(0 = original order, 1 = swapped or random document).

Each loss term is a weighted sum over the batch divided by a normalizer: the masked-LM
term by its weight sum (the number of masked tokens), the sentence-order term by the
number of examples. By default a batch divides by its own normalizers (the original on
one device). When a step's global batch is split into parts (replicas, accumulation
micro-batches), the training loop totals the normalizers over the whole global batch
first (`pretraining_loss_normalizers` needs only the input) and passes the totals: each
part then returns its share of the global-batch loss, and the shares add up to the loss
of the whole batch computed at once, however the batch is split.
"""

from __future__ import annotations

import tensorflow as tf

# The original adds this to the weight sum so an all-padding batch gives 0.
MLM_DENOMINATOR_EPSILON = 1e-5


def _per_example_cross_entropy(logits, labels):
    """-log softmax(logits)[label]: logits [..., C], labels [...] -> float32 [...].

    The original sums log_softmax(logits) times a one-hot of the labels; TensorFlow's fused
    op gives the same numbers to float32 rounding, and its gradient is one pass (softmax
    minus the one-hot). Picking the log-probabilities with a gather instead differentiates
    into a scatter over all [..., C] of them: for the masked-LM head's [B * 20, 30000],
    tens of milliseconds of a pretraining step on a 2-core CPU (measured when it was replaced)."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int32), logits=tf.cast(logits, tf.float32)
    )


def masked_lm_loss(mlm_logits, masked_lm_ids, masked_lm_weights, weight_total=None):
    """sum(w * -log p(label)) / (weight_total + 1e-5) over the batch; weight_total
    defaults to this batch's sum(w) (the original). Returns []."""
    weights = tf.cast(masked_lm_weights, tf.float32)
    per_prediction = _per_example_cross_entropy(mlm_logits, masked_lm_ids)
    if weight_total is None:
        weight_total = tf.reduce_sum(weights)
    return tf.reduce_sum(weights * per_prediction) / (weight_total + MLM_DENOMINATOR_EPSILON)


def sentence_order_loss(sop_logits, labels, example_total=None):
    """Cross-entropy summed over the batch / example_total (default: the batch's mean).
    labels [B] or [B, 1]. Returns []."""
    per_example = _per_example_cross_entropy(sop_logits, tf.reshape(labels, [-1]))
    if example_total is None:
        return tf.reduce_mean(per_example)
    return tf.reduce_sum(per_example) / example_total


def pretraining_loss_normalizers(features):
    """(masked-LM weight sum, number of examples) of a batch, float32 []: what the two
    loss terms divide by. They depend on the input alone, so they can be totalled over a
    global batch before any forward pass."""
    weights = tf.cast(features["masked_lm_weights"], tf.float32)
    return tf.reduce_sum(weights), tf.cast(tf.shape(weights)[0], tf.float32)


def pretraining_loss(outputs, features, sentence_order_weight=1.0, normalizers=None):
    """Total loss = MLM + SOP (unweighted, as the original), and the parts.

    Args:
      outputs: dict with `mlm_logits`, `sop_logits` (AlbertPretrainer).
      features: dict with `masked_lm_ids`, `masked_lm_weights`,
        `next_sentence_labels` (the original's feature name for SOP labels).
      sentence_order_weight: factor on the SOP (or NSP) term; 0 trains the MLM
        alone (the paper's "None" row of Table 5). The part is reported either way.
      normalizers: (masked-LM weight total, example total) to divide by, the
        `pretraining_loss_normalizers` of a global batch this batch is part of; the
        results are then this part's shares of the global batch's losses. Default:
        this batch's own, the original's per-batch losses.
    Returns: (total [], {"masked_lm_loss": [], "sentence_order_loss": []}).
    """
    weight_total, example_total = (None, None) if normalizers is None else normalizers
    mlm = masked_lm_loss(
        outputs["mlm_logits"],
        features["masked_lm_ids"],
        features["masked_lm_weights"],
        weight_total,
    )
    sop = sentence_order_loss(
        outputs["sop_logits"], features["next_sentence_labels"], example_total
    )
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
