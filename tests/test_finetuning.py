"""Shared fine-tuning pieces: output-folder files, segmented training, final weights."""

import types

import pytest
import tensorflow as tf

from albert_tf import finetuning


def test_object_checkpoints_are_in_step_order(tmp_path):
    for name in ("ckpt-10", "ckpt-2", "ckpt-x", "model.ckpt-best", "ckpt-3.tmp"):
        (tmp_path / f"{name}.index").write_text("")
    assert finetuning.object_checkpoints(str(tmp_path)) == [
        (2, str(tmp_path / "ckpt-2")), (10, str(tmp_path / "ckpt-10"))]


def test_evaluated_steps_come_from_eval_results(tmp_path):
    assert finetuning.evaluated_steps(str(tmp_path)) == set()
    finetuning.append_eval_results(str(tmp_path), {"f1": 0.5}, 3)
    finetuning.append_eval_results(str(tmp_path), {"f1": 0.7}, 12)
    assert finetuning.evaluated_steps(str(tmp_path)) == {3, 12}
    assert finetuning.read_best(str(tmp_path)) is None


class _FakeTrainer:
    def __init__(self, total, save):
        self.config = types.SimpleNamespace(num_train_steps=total, save_checkpoints_steps=save)
        self.optimizer = types.SimpleNamespace(iterations=tf.Variable(0, dtype=tf.int64))
        self.segments = []

    def train(self, dataset_fn):
        self.segments.append(self.config.num_train_steps)
        self.optimizer.iterations.assign(self.config.num_train_steps)


def test_train_and_select_stops_at_every_checkpoint():
    trainer = _FakeTrainer(total=7, save=3)
    calls = []
    selector = types.SimpleNamespace(evaluate_pending=lambda: calls.append(
        int(trainer.optimizer.iterations.numpy())))
    assert finetuning.train_and_select(trainer, None, selector) == 7
    assert trainer.segments == [3, 6, 7]
    assert calls == [0, 3, 6, 7]  # a resumed run's pending checkpoints first
    assert trainer.config.num_train_steps == 7
    plain = _FakeTrainer(total=7, save=3)
    assert finetuning.train_and_select(plain, None, None) == 7 and plain.segments == [7]


def test_final_weights_needs_something_to_predict_with(tmp_path):
    with pytest.raises(finetuning.FineTuningError, match="nothing to predict with"):
        finetuning.final_weights(None, str(tmp_path), None, "classifier")
    assert finetuning.final_weights(None, str(tmp_path), "init/ckpt", "classifier") == "init/ckpt"
