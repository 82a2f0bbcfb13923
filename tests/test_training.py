"""The training loop: learning, accumulation, resume, non-finite stop, workers."""

import os

import numpy as np
import pytest
import tensorflow as tf

from albert_tf import pretraining, training

from training_fixtures import build, dataset_fn
from worker_fixtures import run_cluster, run_script


def make_trainer(
    model,
    opt,
    output_dir,
    steps,
    batch,
    accumulation=1,
    save_every=1000,
    strategy=None,
    loss_fn=pretraining.pretraining_loss_fn,
    jit_compile=False,
):
    strategy = strategy or tf.distribute.get_strategy()
    config = training.LoopConfig(
        num_train_steps=steps,
        global_batch_size=batch,
        iterations_per_loop=4,
        save_checkpoints_steps=save_every,
        gradient_accumulation_steps=accumulation,
        jit_compile=jit_compile,
    )
    return training.Trainer(
        strategy, model, opt, loss_fn, pretraining.METRIC_NAMES, str(output_dir), config
    )


def weights(model):
    return [v.numpy().copy() for v in model.weights]


def test_training_reduces_loss_and_writes_checkpoints(tmp_path):
    strategy = tf.distribute.get_strategy()
    model, opt = build(strategy, "adamw", lr=1e-2, steps=60, warmup=0)
    trainer = make_trainer(model, opt, tmp_path, steps=60, batch=16, save_every=20)
    assert os.listdir(tmp_path) == []  # train/ comes with the first report
    data = dataset_fn(16, n=16)  # one batch, seen 60 times: the loss must collapse
    first = pretraining.evaluate(strategy, model, data, 1)["loss"]
    metrics = trainer.train(data)
    assert metrics["loss"] < 0.4 * first
    assert int(opt.iterations.numpy()) == 60
    assert [step for step, _ in training.object_checkpoints(str(tmp_path))] == [20, 40, 60]
    assert sorted(p for p in os.listdir(tmp_path) if p.endswith(".index")) == [
        "ckpt-20.index",
        "ckpt-40.index",
        "ckpt-60.index",
    ]
    assert os.listdir(tmp_path / "train")  # TensorBoard events


def test_gradient_accumulation_equals_one_big_batch(tmp_path):
    strategy = tf.distribute.get_strategy()
    big, opt_big = build(strategy)
    make_trainer(big, opt_big, tmp_path / "big", steps=3, batch=8).train(dataset_fn(8))
    acc, opt_acc = build(strategy)
    make_trainer(acc, opt_acc, tmp_path / "acc", steps=3, batch=8, accumulation=2).train(
        dataset_fn(4)
    )
    assert int(opt_acc.iterations.numpy()) == 3
    # Same examples per step; only float summation order differs. Adam's
    # m / sqrt(v) amplifies rounding where gradients are ~0, hence atol 1e-5
    # on weights of scale 0.1 (the update of one step is lr = 1e-3).
    for a, b in zip(weights(big), weights(acc)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)


def test_resume_gives_identical_weights(tmp_path):
    strategy = tf.distribute.get_strategy()
    straight, opt = build(strategy)
    make_trainer(straight, opt, tmp_path / "straight", steps=8, batch=8, save_every=4).train(
        dataset_fn(8)
    )
    first, opt1 = build(strategy)
    make_trainer(first, opt1, tmp_path / "resumed", steps=4, batch=8, save_every=4).train(
        dataset_fn(8)
    )
    # A fresh process would start here: new model, new optimizer, same folder.
    second, opt2 = build(strategy, seed=99)
    make_trainer(second, opt2, tmp_path / "resumed", steps=8, batch=8, save_every=4).train(
        dataset_fn(8)
    )
    assert int(opt2.iterations.numpy()) == 8
    for a, b in zip(weights(straight), weights(second)):
        np.testing.assert_array_equal(a, b)


def _poisoned(after_calls):
    """The pretraining loss, NaN once it has been called `after_calls` times."""
    calls = tf.Variable(0)

    def loss_fn(model, features, training):
        loss, parts = pretraining.pretraining_loss_fn(model, features, training)
        calls.assign_add(1)
        return loss + tf.where(calls > after_calls, np.float32(np.nan), np.float32(0.0)), parts

    return loss_fn


def test_non_finite_loss_stops_and_names_the_last_good_checkpoint(tmp_path):
    strategy = tf.distribute.get_strategy()
    model, opt = build(strategy)
    trainer = make_trainer(
        model, opt, tmp_path, steps=12, batch=8, save_every=4, loss_fn=_poisoned(6)
    )
    with pytest.raises(training.NonFiniteLossError, match=r"steps 5-8: .*ckpt-4, holds finite"):
        trainer.train(dataset_fn(8))
    assert [step for step, _ in training.object_checkpoints(str(tmp_path))] == [4]


def test_weights_with_non_finite_outputs_are_not_saved(tmp_path):
    """The training loss of steps 1-4 is finite, but the weights after step 4 give NaN
    outputs: the save at step 4 is refused and nothing is written."""
    strategy = tf.distribute.get_strategy()
    model, opt = build(strategy)
    trainer = make_trainer(model, opt, tmp_path, steps=12, batch=8, save_every=4)
    real_call = type(model).call

    def call(self, inputs, training=False):
        outputs = real_call(self, inputs, training=training)
        if not training:  # what the probe sees
            outputs["sop_logits"] = outputs["sop_logits"] * np.float32(np.nan)
        return outputs

    type(model).call = call
    try:
        with pytest.raises(
            training.NonFiniteLossError,
            match="after step 4 .* not saved; stopping .no checkpoint was written",
        ):
            trainer.train(dataset_fn(8))
    finally:
        type(model).call = real_call
    assert training.object_checkpoints(str(tmp_path)) == []


def test_signal_stops_after_a_checkpoint_and_resume_is_identical(tmp_path):
    """SIGINT arrives during steps 5-8: the loop finishes, ckpt-8 is written (not a
    regular save step), TrainingInterrupted names it; resuming ends with the weights of
    an uninterrupted run, bit for bit."""
    import signal

    strategy = tf.distribute.get_strategy()
    straight, opt = build(strategy)
    make_trainer(straight, opt, tmp_path / "straight", steps=12, batch=8, save_every=12).train(
        dataset_fn(8)
    )

    calls = tf.Variable(0)

    def interrupting_loss(model, features, training):
        if training:
            calls.assign_add(1)
            tf.cond(
                tf.equal(calls, 6),
                lambda: tf.py_function(
                    lambda: os.kill(os.getpid(), signal.SIGINT) or 0, [], tf.int32
                ),
                lambda: tf.constant(0),
            )
        return pretraining.pretraining_loss_fn(model, features, training)

    first, opt1 = build(strategy)
    with pytest.raises(training.TrainingInterrupted, match="SIGINT at step 8") as stop:
        make_trainer(
            first,
            opt1,
            tmp_path / "run",
            steps=12,
            batch=8,
            save_every=12,
            loss_fn=interrupting_loss,
        ).train(dataset_fn(8))
    assert stop.value.signum == signal.SIGINT and stop.value.checkpoint.endswith("ckpt-8")
    second, opt2 = build(strategy, seed=99)
    make_trainer(second, opt2, tmp_path / "run", steps=12, batch=8, save_every=12).train(
        dataset_fn(8)
    )
    for a, b in zip(weights(straight), weights(second)):
        np.testing.assert_array_equal(a, b)


def test_loop_config_validation():
    with pytest.raises(ValueError, match="--gradient_accumulation_steps must be >= 1"):
        training.LoopConfig(num_train_steps=1, global_batch_size=1, gradient_accumulation_steps=0)


@pytest.mark.slow
def test_two_workers_equal_one_worker_with_same_global_batch(tmp_path):
    single = tmp_path / "single.npz"
    run_script("multiworker_script.py", tmp_path / "one", single)
    run_cluster(
        "multiworker_script.py",
        lambda index: [tmp_path / "two", tmp_path / f"worker{index}.npz", "multi_worker"],
    )
    one = np.load(single)
    two = np.load(tmp_path / "worker0.npz")
    other = np.load(tmp_path / "worker1.npz")
    for key in one.files:
        np.testing.assert_array_equal(two[key], other[key])  # workers stay in sync
        # Same examples, summed in a different order across workers: float32
        # rounding amplified by Adam where gradients are ~0.
        np.testing.assert_allclose(one[key], two[key], rtol=0, atol=1e-5)


def test_xla_step_matches_plain_step(tmp_path):
    strategy = tf.distribute.get_strategy()
    plain, opt = build(strategy)
    make_trainer(plain, opt, tmp_path / "plain", steps=3, batch=8).train(dataset_fn(8))
    compiled, opt_xla = build(strategy)
    make_trainer(compiled, opt_xla, tmp_path / "xla", steps=3, batch=8, jit_compile=True).train(
        dataset_fn(8)
    )
    for a, b in zip(weights(plain), weights(compiled)):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5)
