"""albert_tf/run/loss_scale.py and the Trainer under --dtype=mixed_float16: float16
products, dynamic loss scaling, skipped overflow steps, bit-identical resume."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from albert_tf.model.modeling import AlbertPretrainer
from albert_tf.run import loss_scale, training
from albert_tf.run.optimization import create_optimizer
from albert_tf.tasks import pretraining

from training_fixtures import dataset_fn, pretraining_config, synthetic_features


@pytest.fixture
def float16_policy():
    keras.mixed_precision.set_global_policy("mixed_float16")
    yield
    keras.mixed_precision.set_global_policy("float32")


def build(seed=1, optimizer="lamb", lr=1e-2, steps=300):
    keras.utils.set_random_seed(seed)
    model = AlbertPretrainer(pretraining_config())
    model.build()
    return model, create_optimizer(lr, steps, 10, optimizer)


def make_trainer(model, opt, folder, steps, initial_scale=loss_scale.INITIAL_SCALE, save=4):
    config = training.LoopConfig(
        num_train_steps=steps,
        global_batch_size=8,
        iterations_per_loop=2,
        save_checkpoints_steps=save,
        loss_scaling=True,
        initial_loss_scale=initial_scale,
    )
    return training.Trainer(
        tf.distribute.get_strategy(),
        model,
        opt,
        pretraining.pretraining_loss_fn,
        pretraining.METRIC_NAMES,
        str(folder),
        config,
    )


def values(variables):
    return [np.array(v.numpy()) for v in variables]


def test_the_scale_halves_on_overflow_and_doubles_after_its_growth_steps():
    scale = loss_scale.DynamicLossScale(initial_scale=8.0, growth_steps=3)
    seen = []
    for finite in (True, True, False, True, True, True, True):
        scale.update(tf.constant(finite))
        seen.append((float(scale.scale.numpy()), int(scale.good_steps.numpy())))
    assert seen == [(8, 1), (8, 2), (4, 0), (4, 1), (4, 2), (8, 0), (8, 1)]


def test_a_float16_forward_pass_is_float32_to_float16_rounding(float16_policy):
    features = {k: v[:4] for k, v in synthetic_features().items()}
    half, _ = build()
    keras.mixed_precision.set_global_policy("float32")
    full, _ = build()
    assert {v.dtype for v in half.weights} == {"float32"}  # the weights stay float32
    for name in ("mlm_logits", "sop_logits", "sequence_output"):
        got = half(features)[name]
        want = full(features)[name]
        assert got.dtype == tf.float32  # the heads' outputs leave in float32
        scale = float(tf.reduce_max(tf.abs(want)))
        error = float(tf.reduce_max(tf.abs(got - want)))
        assert 0 < error < 4e-3 * scale, name  # float16: 2^-11 relative per rounding


def test_an_overflowing_step_is_skipped_and_lowers_the_scale(tmp_path, float16_policy):
    """A scale of 2^40 makes the float16 backward pass overflow: every variable and slot
    keeps its value, the step counts, the scale halves and skipped_steps says so."""
    model, opt = build()
    trainer = make_trainer(model, opt, tmp_path, steps=2, initial_scale=2.0**40)
    opt.build(model.trainable_variables)
    before = values(model.trainable_variables) + values(opt.variables[1:])
    metrics = trainer.train(dataset_fn(8))
    assert int(opt.iterations.numpy()) == 2
    assert float(trainer.loss_scale.scale.numpy()) == 2.0**38
    assert metrics["skipped_steps"] == 1.0 and metrics["loss_scale"] == 2.0**38
    assert np.isfinite(metrics["loss"]) and metrics["gradient_norm"] == 0.0
    after = values(model.trainable_variables) + values(opt.variables[1:])
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)


def test_after_the_scale_search_the_steps_apply(tmp_path, float16_policy):
    model, opt = build()
    trainer = make_trainer(model, opt, tmp_path, steps=40, initial_scale=2.0**40, save=40)
    first = values(model.trainable_variables)
    metrics = trainer.train(dataset_fn(8))
    assert metrics["skipped_steps"] == 0.0 and metrics["loss_scale"] < 2.0**40
    assert any(not np.array_equal(a, b) for a, b in zip(first, values(model.trainable_variables)))


def test_a_resumed_float16_run_is_bit_identical_loss_scale_included(tmp_path, float16_policy):
    """The first steps overflow (scale 2^40), so the scale a resumed run starts from
    decides its updates: it must come from train_state/, beside the input position."""
    straight, opt = build()
    whole = make_trainer(straight, opt, tmp_path / "straight", steps=24, initial_scale=2.0**40)
    whole.train(dataset_fn(8))
    first, opt1 = build()
    make_trainer(first, opt1, tmp_path / "resumed", steps=12, initial_scale=2.0**40).train(
        dataset_fn(8)
    )
    names = [n for n, _ in tf.train.list_variables(str(tmp_path / "resumed/train_state/state-12"))]
    assert any(n.startswith("loss_scale/scale") for n in names), names
    second, opt2 = build(seed=99)
    again = make_trainer(second, opt2, tmp_path / "resumed", steps=24, initial_scale=2.0**40)
    again.train(dataset_fn(8))
    assert float(again.loss_scale.scale.numpy()) == float(whole.loss_scale.scale.numpy())
    assert int(again.loss_scale.good_steps.numpy()) == int(whole.loss_scale.good_steps.numpy())
    for a, b in zip(values(straight.weights), values(second.weights)):
        np.testing.assert_array_equal(a, b)
    reader = tf.train.load_checkpoint(str(tmp_path / "resumed/model.ckpt-24"))
    dtypes = reader.get_variable_to_dtype_map()
    assert {dtypes[n] for n in dtypes if n.startswith("bert/")} == {tf.float32}


def test_a_few_hundred_float16_steps_learn_as_float32_does(tmp_path):
    """300 steps of the toy pretraining task from the same start: held-out masked-LM and
    sentence-order accuracy of the float16 run close to the float32 run's."""
    results = {}
    for dtype in ("float32", "mixed_float16"):
        keras.mixed_precision.set_global_policy(dtype)
        try:
            model, opt = build(optimizer="adamw", lr=3e-3)
            config = training.LoopConfig(
                num_train_steps=300,
                global_batch_size=8,
                iterations_per_loop=100,
                save_checkpoints_steps=300,
                loss_scaling=dtype == "mixed_float16",
            )
            trainer = training.Trainer(
                tf.distribute.get_strategy(),
                model,
                opt,
                pretraining.pretraining_loss_fn,
                pretraining.METRIC_NAMES,
                str(tmp_path / dtype),
                config,
            )
            trainer.train(dataset_fn(8))
            held_out = dataset_fn(16, seed=7, n=64)
            results[dtype] = pretraining.evaluate(
                tf.distribute.get_strategy(), model, lambda ctx: held_out(ctx).take(4), 4
            )
        finally:
            keras.mixed_precision.set_global_policy("float32")
    # The task was learned (chance: 1/40 and 1/2), in float16 as in float32.
    assert results["float32"]["masked_lm_accuracy"] > 0.1, results
    assert results["float32"]["sentence_order_accuracy"] > 0.9, results
    for name in ("masked_lm_accuracy", "sentence_order_accuracy"):
        assert abs(results["mixed_float16"][name] - results["float32"][name]) < 0.05, results
