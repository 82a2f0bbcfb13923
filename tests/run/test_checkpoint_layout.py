"""The output folder's checkpoint layout through tf.io.gfile: written, listed and removed
on TensorFlow's in-memory ram:// filesystem, restored from a file:// URI (ram:// takes a
checkpoint prefix for a folder when reading, which gs:// does not)."""

import uuid

import numpy as np
import tensorflow as tf

from albert_tf.run import checkpoint_layout
from albert_tf.weights import checkpoints

from training_fixtures import build


def test_save_list_restore_and_remove_a_step(tmp_path):
    folder = f"ram://layout-{uuid.uuid4().hex}/out"
    local = f"file://{tmp_path}/out"
    strategy = tf.distribute.get_strategy()
    model, opt = build(strategy, "lamb", dropout=0.1)
    opt.build(model.trainable_variables)
    for v in model.trainable_variables:  # distinct slot values, so the restore is seen
        opt.get_slot(v, "adam_m").assign(tf.fill(v.shape, 0.25))
    opt.iterations.assign(7)
    iterator = iter(tf.data.Dataset.range(100))
    next(iterator), next(iterator)
    state = checkpoint_layout.state_objects(model, opt, iterator)
    # The state holds no weight or slot: only the dropout streams besides the iterator.
    assert state["variables"]
    assert all("seed_generator_state" in v.name for v in state["variables"])
    for step in (5, 7):
        checkpoint_layout.save(folder, step, model, opt, state)
    checkpoint_layout.save(local, 7, model, opt, state)
    checkpoint_layout.write_state_file(folder, [5, 7])
    assert tf.train.latest_checkpoint(folder) == f"{folder}/model.ckpt-7"
    assert checkpoint_layout.resume_points(folder) == [
        (5, f"{folder}/model.ckpt-5"),
        (7, f"{folder}/model.ckpt-7"),
    ]
    names = checkpoints.checkpoint_variable_shapes(f"{local}/model.ckpt-7")
    assert "global_step" in names and "cls/predictions/output_bias/adam_v" in names

    fresh, fresh_opt = build(strategy, "lamb", seed=5, dropout=0.1)
    fresh_opt.build(fresh.trainable_variables)
    fresh_iterator = iter(tf.data.Dataset.range(100))
    fresh_state = checkpoint_layout.state_objects(fresh, fresh_opt, fresh_iterator)
    restored = checkpoint_layout.restore(local, 7, fresh, fresh_opt, fresh_state, {})
    assert restored == f"{local}/model.ckpt-7"
    assert int(fresh_opt.iterations.numpy()) == 7 and int(next(fresh_iterator)) == 2
    for a, b in zip(model.variables, fresh.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for v, w in zip(model.trainable_variables, fresh.trainable_variables):
        np.testing.assert_array_equal(
            opt.get_slot(v, "adam_m").numpy(), fresh_opt.get_slot(w, "adam_m").numpy()
        )

    [five] = [s for s in checkpoint_layout.saved_steps(folder) if s.step == 5]
    checkpoint_layout.remove_step(five)
    assert checkpoint_layout.latest_step(folder) == 7
    assert sorted(tf.io.gfile.listdir(f"{folder}/train_state")) == [
        "state-7.data-00000-of-00001",
        "state-7.index",
    ]
    # A save killed after its state: the step does not count, and its leftover goes.
    checkpoint_layout.save(folder, 9, model, opt, state, write_weights=False)
    assert checkpoint_layout.latest_step(folder) == 7
    assert checkpoint_layout.remove_unfinished(folder) == [f"{folder}/train_state/state-9"]
    assert [s.step for s in checkpoint_layout.saved_steps(folder)] == [7]
