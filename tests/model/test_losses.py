"""The original's pretraining losses and eval metrics against numpy written from the math."""

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.model import losses


def log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


@pytest.fixture
def batch():
    rng = np.random.default_rng(3)
    mlm_logits = rng.normal(0, 2, (3, 4, 11)).astype(np.float32)
    ids = rng.integers(0, 11, (3, 4)).astype(np.int32)
    weights = np.array([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]], np.float32)
    sop_logits = rng.normal(0, 2, (3, 2)).astype(np.float32)
    labels = np.array([[0], [1], [1]], np.int32)  # the TFRecord's [B, 1]
    outputs = {"mlm_logits": mlm_logits, "sop_logits": sop_logits}
    features = {"masked_lm_ids": ids, "masked_lm_weights": weights, "next_sentence_labels": labels}
    return outputs, features


def numpy_losses(outputs, features):
    ce = -np.take_along_axis(
        log_softmax(outputs["mlm_logits"].astype(np.float64)),
        features["masked_lm_ids"][..., None],
        -1,
    )[..., 0]
    w = features["masked_lm_weights"]
    mlm = (w * ce).sum() / (w.sum() + 1e-5)
    sop_ce = -np.take_along_axis(
        log_softmax(outputs["sop_logits"].astype(np.float64)), features["next_sentence_labels"], -1
    )[:, 0]
    return mlm, sop_ce.mean(), ce, sop_ce


def test_losses_match_numpy(batch):
    outputs, features = batch
    mlm, sop, _, _ = numpy_losses(outputs, features)
    total, parts = losses.pretraining_loss(outputs, features)
    np.testing.assert_allclose(float(parts["masked_lm_loss"]), mlm, rtol=1e-6)
    np.testing.assert_allclose(float(parts["sentence_order_loss"]), sop, rtol=1e-6)
    np.testing.assert_allclose(float(total), mlm + sop, rtol=1e-6)


@pytest.mark.parametrize("weight", [0.0, 0.5])
def test_sentence_order_weight(batch, weight):
    """0 trains the masked LM alone (Table 5 "None"); the SOP part is still reported."""
    outputs, features = batch
    mlm, sop, _, _ = numpy_losses(outputs, features)
    sop_logits = tf.Variable(outputs["sop_logits"])
    with tf.GradientTape() as tape:
        total, parts = losses.pretraining_loss(
            {**outputs, "sop_logits": sop_logits}, features, sentence_order_weight=weight
        )
    np.testing.assert_allclose(float(total), mlm + weight * sop, rtol=1e-6)
    np.testing.assert_allclose(float(parts["sentence_order_loss"]), sop, rtol=1e-6)
    grad = tape.gradient(total, sop_logits)
    assert (np.abs(grad.numpy()).max() == 0) == (weight == 0)


def test_all_padding_batch_gives_zero_mlm_loss(batch):
    outputs, features = batch
    features = {**features, "masked_lm_weights": np.zeros((3, 4), np.float32)}
    assert (
        float(
            losses.masked_lm_loss(
                outputs["mlm_logits"], features["masked_lm_ids"], features["masked_lm_weights"]
            )
        )
        == 0.0
    )


def test_normalizers_are_the_masked_count_and_the_example_count(batch):
    _, features = batch
    weight_total, example_total = losses.pretraining_loss_normalizers(features)
    assert (float(weight_total), float(example_total)) == (8.0, 3.0)


def test_shares_of_a_split_batch_add_up_to_the_whole_batch_loss(batch):
    """Rows [0] and [1, 2] hold 3 and 5 masked tokens: divided by the whole batch's
    normalizers, their losses add up to the whole batch's (numpy); the mean of their own
    losses (the per-replica mean) is another number."""
    outputs, features = batch
    mlm, sop, _, _ = numpy_losses(outputs, features)
    parts = [
        ({k: v[rows] for k, v in outputs.items()}, {k: v[rows] for k, v in features.items()})
        for rows in (slice(0, 1), slice(1, 3))
    ]
    totals = losses.pretraining_loss_normalizers(features)
    shares = [losses.pretraining_loss(o, f, normalizers=totals) for o, f in parts]
    np.testing.assert_allclose(sum(float(t) for t, _ in shares), mlm + sop, rtol=1e-6)
    for name, want in (("masked_lm_loss", mlm), ("sentence_order_loss", sop)):
        np.testing.assert_allclose(sum(float(p[name]) for _, p in shares), want, rtol=1e-6)
    own = [losses.pretraining_loss(o, f)[0] for o, f in parts]
    assert abs(np.mean([float(t) for t in own]) - (mlm + sop)) > 1e-2


def test_metric_sums_add_up_over_batches(batch):
    """Summed statistics of two halves give the metrics of the whole batch."""
    outputs, features = batch
    _, sop, ce, _ = numpy_losses(outputs, features)
    halves = [
        {k: v[s] for k, v in d.items()}
        for d in (outputs, features)
        for s in (slice(0, 1), slice(1, 3))
    ]
    parts = [losses.pretraining_metric_sums(halves[i], halves[i + 2]) for i in (0, 1)]
    sums = {k: float(parts[0][k]) + float(parts[1][k]) for k in parts[0]}
    got = losses.finalize_pretraining_metrics(sums)
    w = features["masked_lm_weights"]
    correct = outputs["mlm_logits"].argmax(-1) == features["masked_lm_ids"]
    sop_correct = outputs["sop_logits"].argmax(-1) == features["next_sentence_labels"][:, 0]
    np.testing.assert_allclose(got["masked_lm_accuracy"], (w * correct).sum() / w.sum(), rtol=1e-6)
    np.testing.assert_allclose(got["masked_lm_loss"], (w * ce).sum() / w.sum(), rtol=1e-6)
    np.testing.assert_allclose(got["sentence_order_accuracy"], sop_correct.mean(), rtol=1e-6)
    np.testing.assert_allclose(got["sentence_order_loss"], sop, rtol=1e-6)
    assert losses.finalize_pretraining_metrics({k: 0.0 for k in sums})["masked_lm_accuracy"] == 0.0


def test_masked_lm_gradient_is_softmax_minus_one_hot(batch):
    # The gradient w.r.t. the logits, w (softmax - one_hot) / (sum(w) + 1e-5), computed in
    # one pass: no scatter of the picked log-probabilities over all of them.
    outputs, features = batch
    logits = tf.constant(outputs["mlm_logits"])
    ids, weights = features["masked_lm_ids"], features["masked_lm_weights"]

    @tf.function
    def gradient(logits):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            loss = losses.masked_lm_loss(logits, ids, weights)
        return tape.gradient(loss, logits)

    x = outputs["mlm_logits"].astype(np.float64)
    probs = np.exp(log_softmax(x))
    one_hot = np.eye(x.shape[-1])[ids]
    want = weights[..., None] * (probs - one_hot) / (weights.sum() + 1e-5)
    np.testing.assert_allclose(gradient(logits).numpy(), want, rtol=1e-5, atol=1e-7)
    graph = gradient.get_concrete_function(logits).graph
    assert not {"UnsortedSegmentSum", "ScatterNd"} & {op.type for op in graph.get_operations()}
