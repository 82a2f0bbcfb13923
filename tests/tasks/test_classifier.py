"""AlbertClassifier, its loss, and --init_checkpoint handling (albert_tf/tasks/classifier.py)."""

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.errors import UserError
from albert_tf.model.modeling import AlbertPretrainer
from albert_tf.tasks.classifier import (
    AlbertClassifier,
    init_from_checkpoint,
    loss_fn,
    per_example_loss,
)
from albert_tf.weights import checkpoints

from classifier_fixtures import glue_config
from worker_fixtures import run_cluster, run_script


def _inputs(batch=3, seq=8, seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, 100, size=(batch, seq)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, 5:] = 0
    return {"input_ids": ids, "input_mask": mask, "segment_ids": np.zeros_like(ids)}


@pytest.fixture(scope="module")
def config():
    return glue_config()


def _encoder_values(model):
    enc = checkpoints.encoder_of(model)
    return {n: v.numpy() for n, v in checkpoints.original_variable_map(enc).items()}


def test_outputs_and_original_names(config):
    model = AlbertClassifier(config, 3)
    model.build()
    names = checkpoints.original_variable_map(model)
    assert list(names["output_weights"].shape) == [3, config.hidden_size]
    assert list(names["output_bias"].shape) == [3]
    assert not any(n.startswith("cls/") for n in names)
    out = model(_inputs(), training=False)
    assert out["logits"].shape == (3, 3)
    np.testing.assert_allclose(out["probabilities"].numpy().sum(-1), 1.0, rtol=1e-5)
    np.testing.assert_array_equal(out["predictions"].numpy(), np.argmax(out["logits"].numpy(), -1))
    reg = AlbertClassifier(config, 1)
    reg.build()
    out = reg(_inputs(), training=False)
    assert out["logits"].shape == (3,)
    np.testing.assert_array_equal(out["predictions"].numpy(), out["logits"].numpy())


def test_head_dropout_only_in_training(config):
    # The config has no dropout: any training-mode randomness is the fixed 0.1 head dropout.
    model = AlbertClassifier(
        config.replace(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), 2
    )
    model.build()
    x = _inputs(batch=16)
    a, b = model(x, training=False)["logits"], model(x, training=False)["logits"]
    np.testing.assert_array_equal(a.numpy(), b.numpy())
    t = model(x, training=True)["logits"]
    assert not np.allclose(a.numpy(), t.numpy())
    assert model.classifier_dropout == 0.1


def test_losses_match_numpy(config):
    logits = np.array([[1.0, -1.0, 0.5], [0.2, 0.3, -2.0]], np.float32)
    labels = np.array([2, 0])
    got = per_example_loss(logits, labels, False).numpy()
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    np.testing.assert_allclose(got, -logp[[0, 1], labels], rtol=1e-6)
    got = per_example_loss(np.array([1.0, 2.0]), np.array([0.5, 4.0]), True).numpy()
    np.testing.assert_allclose(got, [0.25, 4.0])
    model = AlbertClassifier(config, 2)
    model.build()
    features = {**_inputs(), "label_ids": np.array([0, 1, 1], np.int32)}
    loss, extra = loss_fn(model, features, training=False)
    out = model(features, training=False)
    np.testing.assert_allclose(
        float(loss),
        np.mean(per_example_loss(out["logits"], features["label_ids"], False)),
        rtol=1e-6,
    )
    assert extra == {}


def test_init_from_original_pretraining_checkpoint(config, tmp_path):
    pre = AlbertPretrainer(config)
    pre.build()
    prefix = checkpoints.save_original_checkpoint(
        pre, str(tmp_path / "model.ckpt-7"), global_step=7
    )
    model = AlbertClassifier(config, 2)
    model.build()
    head_before = model.classifier.output_weights.numpy().copy()
    message = init_from_checkpoint(model, prefix)
    assert "fresh classifier head" in message
    want, got = _encoder_values(pre), _encoder_values(model)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    np.testing.assert_array_equal(model.classifier.output_weights.numpy(), head_before)


def test_init_from_original_finetuned_checkpoint_restores_head(config, tmp_path):
    src = AlbertClassifier(config, 2)
    src.build()
    prefix = checkpoints.save_original_checkpoint(src, str(tmp_path / "model.ckpt-best"))
    model = AlbertClassifier(config, 2)
    model.build()
    message = init_from_checkpoint(model, prefix)
    assert "fresh" not in message
    np.testing.assert_array_equal(
        model.classifier.output_weights.numpy(), src.classifier.output_weights.numpy()
    )


def test_init_from_a_head_for_another_label_set_keeps_the_encoder(config, tmp_path):
    """An MNLI model (3 labels) as the start of a 2-label task: the encoder is loaded and
    the head, of another shape, starts fresh (the original stopped on the shapes)."""
    src = AlbertClassifier(config, 3)
    src.build()
    prefix = checkpoints.save_original_checkpoint(src, str(tmp_path / "model.ckpt-best"))
    model = AlbertClassifier(config, 2)
    model.build()
    fresh = model.classifier.output_weights.numpy()
    message = init_from_checkpoint(model, prefix)
    assert message.endswith("; fresh classifier head"), message
    np.testing.assert_array_equal(model.classifier.output_weights.numpy(), fresh)
    for got, want in zip(model.albert.weights, src.albert.weights):
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_init_from_object_checkpoint_restores_every_encoder_block(tmp_path):
    config = glue_config(num_hidden_groups=2)
    pre = AlbertPretrainer(config)
    pre.build()
    # What run_pretraining.py's trainer writes: tf.train.Checkpoint(model=..., ...).
    prefix = tf.train.Checkpoint(model=pre).save(str(tmp_path / "ckpt"))
    names = [n for n, _ in tf.train.list_variables(prefix)]
    assert any("group_1_inner_group_0" in n for n in names), names
    model = AlbertClassifier(config, 3)
    model.build()
    message = init_from_checkpoint(model, prefix)
    assert "object checkpoint" in message and "fresh classifier head" in message
    want, got = _encoder_values(pre), _encoder_values(model)
    assert any("group_1" in n for n in want)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_init_refuses_when_nothing_matches(config, tmp_path):
    model = AlbertClassifier(config, 2)
    model.build()
    # An object checkpoint of something else.
    other = tf.train.Checkpoint(x=tf.Variable(1.0)).save(str(tmp_path / "other"))
    with pytest.raises(UserError, match="nothing loaded"):
        init_from_checkpoint(model, other)
    # An original-format checkpoint of a different model size.
    big = AlbertPretrainer(config.replace(hidden_size=48, num_attention_heads=2))
    big.build()
    prefix = checkpoints.save_original_checkpoint(big, str(tmp_path / "big" / "model.ckpt-1"))
    with pytest.raises(UserError, match="nothing loaded"):
        init_from_checkpoint(model, prefix)
    with pytest.raises(UserError, match="no checkpoint"):
        init_from_checkpoint(model, str(tmp_path / "missing" / "model.ckpt-3"))


def _write_eval_file(path, n, seq, labels, seed=0):
    """n labelled records of the classifier schema with random ids; returns the labels."""
    from albert_tf.data.classifier_data import InputFeatures, _to_tf_example

    rng = np.random.default_rng(seed)
    label_ids = [int(i % labels) for i in range(n)]
    with tf.io.TFRecordWriter(str(path)) as writer:
        for i in range(n):
            length = int(rng.integers(3, seq + 1))
            ids = [int(t) for t in rng.integers(5, 40, length)] + [0] * (seq - length)
            mask = [1] * length + [0] * (seq - length)
            feature = InputFeatures(ids, mask, [0] * seq, label_ids[i])
            writer.write(_to_tf_example(feature, False).SerializeToString())
    return np.array(label_ids)


@pytest.mark.slow
def test_eval_over_replicas_and_workers_is_complete_and_in_file_order(tmp_path):
    """GLUE eval (predict_arrays) gives every example once, in file order, with the
    same probabilities on one device, two local replicas and two workers (11
    examples, per-replica batch 2: the last batches are padded)."""
    n = 11
    eval_file = tmp_path / "eval.tf_record"
    labels = _write_eval_file(eval_file, n, 16, 3)
    run_script("multiworker_eval_script.py", eval_file, tmp_path / "one.npz", "default", n)
    run_script("multiworker_eval_script.py", eval_file, tmp_path / "mirrored.npz", "mirrored2", n)
    run_cluster(
        "multiworker_eval_script.py",
        lambda index: [eval_file, tmp_path / f"worker{index}.npz", "multi_worker", n],
    )
    one = np.load(tmp_path / "one.npz")
    assert int(one["replicas"]) == 1
    real = one["is_real_example"] != 0
    np.testing.assert_array_equal(one["label_ids"][real], labels)
    for name in ("mirrored", "worker0", "worker1"):
        other = np.load(tmp_path / f"{name}.npz")
        assert int(other["replicas"]) == 2, name
        keep = other["is_real_example"] != 0
        np.testing.assert_array_equal(other["label_ids"][keep], labels, err_msg=name)
        for key in ("probabilities", "per_example_loss"):
            np.testing.assert_allclose(
                other[key][keep], one[key][real], rtol=1e-5, atol=1e-6, err_msg=f"{name} {key}"
            )
        np.testing.assert_array_equal(other["predictions"][keep], one["predictions"][real])
