"""albert_tf/run/output_folder.py: a run's output folder. Its checkpoint layout through
tf.io.gfile (written, listed and removed on TensorFlow's in-memory ram:// filesystem,
restored from a file:// URI: ram:// takes a checkpoint prefix for a folder when reading,
which gs:// does not), and its answers on tiny folders: steps, latest, best, the names
of its files, the run record, the task and the lock."""

import dataclasses
import json
import os
import uuid

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.errors import UserError
from albert_tf.model.modeling import AlbertPretrainer
from albert_tf.run import run_lock
from albert_tf.run.optimization import create_optimizer
from albert_tf.run.output_folder import OutputFolder, is_resume_point, state_objects
from albert_tf.weights import checkpoints

from training_fixtures import build, pretraining_config


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
    state = state_objects(model, opt, iterator)
    # The state holds no weight or slot: only the dropout streams besides the iterator.
    assert state["variables"]
    assert all("seed_generator_state" in v.name for v in state["variables"])
    for step in (5, 7):
        OutputFolder(folder).save(step, model, opt, state)
    OutputFolder(local).save(7, model, opt, state)
    OutputFolder(folder).write_state_file([5, 7])
    assert tf.train.latest_checkpoint(folder) == f"{folder}/model.ckpt-7"
    assert OutputFolder(folder).contents().resume_points() == [
        (5, f"{folder}/model.ckpt-5"),
        (7, f"{folder}/model.ckpt-7"),
    ]
    names = checkpoints.checkpoint_variable_shapes(f"{local}/model.ckpt-7")
    assert "global_step" in names and "cls/predictions/output_bias/adam_v" in names

    fresh, fresh_opt = build(strategy, "lamb", seed=5, dropout=0.1)
    fresh_opt.build(fresh.trainable_variables)
    fresh_iterator = iter(tf.data.Dataset.range(100))
    fresh_state = state_objects(fresh, fresh_opt, fresh_iterator)
    restored = OutputFolder(local).restore(7, fresh, fresh_opt, fresh_state, {})
    assert restored == f"{local}/model.ckpt-7"
    assert int(fresh_opt.iterations.numpy()) == 7 and int(next(fresh_iterator)) == 2
    for a, b in zip(model.variables, fresh.variables):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    for v, w in zip(model.trainable_variables, fresh.trainable_variables):
        np.testing.assert_array_equal(
            opt.get_slot(v, "adam_m").numpy(), fresh_opt.get_slot(w, "adam_m").numpy()
        )

    [five] = [s for s in OutputFolder(folder).saved_steps() if s.step == 5]
    OutputFolder.remove_step(five)
    assert OutputFolder(folder).contents().latest_step == 7
    assert sorted(tf.io.gfile.listdir(f"{folder}/train_state")) == [
        "state-7.data-00000-of-00001",
        "state-7.index",
    ]
    # A save killed after its state: the step does not count, and its leftover goes.
    OutputFolder(folder).save(9, model, opt, state, write_weights=False)
    assert OutputFolder(folder).contents().latest_step == 7
    assert OutputFolder(folder).remove_unfinished() == [f"{folder}/train_state/state-9"]
    assert [s.step for s in OutputFolder(folder).saved_steps()] == [7]


def test_a_folder_the_original_code_trained_resumes_from_its_weights_alone(tmp_path, caplog):
    """model.ckpt-N without train_state: weights, slots and global_step restored; a model
    of another shape is refused in one line."""
    strategy = tf.distribute.get_strategy()
    model, opt = build(strategy, "lamb")
    opt.build(model.trainable_variables)
    for v in model.trainable_variables:
        opt.get_slot(v, "adam_v").assign(tf.fill(v.shape, 0.5))
    prefix = str(tmp_path / "model.ckpt-6")
    checkpoints.save_original_checkpoint(model, prefix, global_step=9, optimizer=opt)
    fresh, fresh_opt = build(strategy, "lamb", seed=5)
    fresh_opt.build(fresh.trainable_variables)
    assert OutputFolder(tmp_path).restore_original(6, prefix, fresh, fresh_opt) == 9
    assert int(fresh_opt.iterations.numpy()) == 9
    assert "the input starts from its beginning" in caplog.text
    for v, w in zip(model.trainable_variables, fresh.trainable_variables):
        np.testing.assert_array_equal(v.numpy(), w.numpy())
        np.testing.assert_array_equal(
            opt.get_slot(v, "adam_v").numpy(), fresh_opt.get_slot(w, "adam_v").numpy()
        )
    wide = AlbertPretrainer(dataclasses.replace(pretraining_config(), hidden_size=32))
    wide.build()
    wide_opt = create_optimizer(1e-3, 100, 0, "lamb")
    wide_opt.build(wide.trainable_variables)
    with pytest.raises(UserError, match=f"^cannot resume from {prefix}: "):
        OutputFolder(tmp_path).restore_original(6, prefix, wide, wide_opt)


def test_trained_checkpoints_of_both_formats_in_step_order(tmp_path):
    for name in (
        "ckpt-10",
        "ckpt-2",
        "ckpt-x",
        "model.ckpt-best",
        "model.ckpt-7",
        "model.ckpt-10",
        "ckpt-3.tmp",
    ):
        (tmp_path / f"{name}.index").write_text("")
    folder = OutputFolder(str(tmp_path))
    assert folder.contents().original_checkpoints() == [
        (7, str(tmp_path / "model.ckpt-7")),
        (10, str(tmp_path / "model.ckpt-10")),
    ]
    assert folder.contents().trained_checkpoints() == [
        (2, str(tmp_path / "ckpt-2")),
        (7, str(tmp_path / "model.ckpt-7")),
        (10, str(tmp_path / "model.ckpt-10")),
    ]
    assert folder.contents().best == folder.best_prefix == str(tmp_path / "model.ckpt-best")


def test_the_steps_of_a_tiny_folder_latest_and_resume_points(tmp_path):
    """A step counts for a resume once its model.ckpt and its train_state are both there,
    or as a ckpt-N; a lone train_state is listed but not resumable."""
    for name in ("model.ckpt-4", "train_state/state-4", "model.ckpt-8", "train_state/state-12"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / f"{name}.index").write_text("")
    (tmp_path / "ckpt-10.index").write_text("")
    folder = OutputFolder(str(tmp_path))
    steps = folder.saved_steps()
    assert [(s.step, s.resumable) for s in steps] == [
        (4, True),
        (8, False),
        (10, True),
        (12, False),
    ]
    assert steps[0].state == str(tmp_path / "train_state" / "state-4")
    assert folder.contents().resume_points() == [
        (4, str(tmp_path / "model.ckpt-4")),
        (10, str(tmp_path / "ckpt-10")),
    ]
    assert folder.contents().latest_step == 10
    assert not folder.contents().best
    assert OutputFolder(str(tmp_path / "none")).contents().latest_step is None


def test_the_names_of_a_folders_files(tmp_path):
    folder = OutputFolder(str(tmp_path))
    names = {
        folder.weights_prefix(3): "model.ckpt-3",
        folder.state_prefix(3): "train_state/state-3",
        folder.resume_point_prefix(3): "ckpt-3",
        folder.best_prefix: "model.ckpt-best",
        folder.best_record_path: "best_checkpoint",
        folder.best_trial_path: "best_trial.txt",
        folder.results_path(): "eval_results.txt",
        folder.summaries("eval"): "eval",
        folder.record_path: "run_record.json",
        folder.task_path: "task.json",
        folder.lock_path: ".albert_tf.lock",
    }
    for path, name in names.items():
        assert path == str(tmp_path / name)
    assert is_resume_point(folder.resume_point_prefix(3))
    assert not is_resume_point(folder.weights_prefix(3))


def test_which_checkpoints_a_run_would_replace(tmp_path):
    folder = OutputFolder(str(tmp_path / "out"))
    for name in ("model.ckpt-best", "model.ckpt-12", "ckpt-3"):
        assert folder.writes_checkpoint(str(tmp_path / "out" / name)), name
    (tmp_path / "out").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "out")
    assert folder.writes_checkpoint(str(tmp_path / "link" / "model.ckpt-best"))
    assert not folder.writes_checkpoint(str(tmp_path / "out" / "model.ckpt"))
    assert not folder.writes_checkpoint(str(tmp_path / "out" / "model.ckpt-best-2"))
    assert not folder.writes_checkpoint(str(tmp_path / "other" / "model.ckpt-best"))


def test_the_run_record_and_task_are_read_back_and_refused_when_damaged(tmp_path):
    folder = OutputFolder(str(tmp_path))
    assert folder.read_record() is None and folder.read_task() is None
    folder.write_record({"train_batch_size": 8, "input_file": "/a"})
    assert (tmp_path / "run_record.json").read_text() == (
        '{\n  "input_file": "/a",\n  "train_batch_size": 8\n}\n'
    )
    assert folder.read_record() == {"train_batch_size": 8, "input_file": "/a"}
    folder.write_task({"task_name": "mrpc"})
    assert folder.read_task() == {"task_name": "mrpc"}
    (tmp_path / "run_record.json").write_text("[1]")
    with pytest.raises(UserError, match=r"run_record.json: expected a JSON object"):
        folder.read_record()
    (tmp_path / "task.json").write_text("{")
    with pytest.raises(UserError, match=r"task.json: not JSON .*; expected what task.json holds"):
        folder.read_task()


def test_the_lock_file_is_the_folders(tmp_path):
    """run_lock takes the lock at the path the folder names."""
    folder = OutputFolder(str(tmp_path))
    with run_lock.hold(folder.path):
        holder = json.loads(open(folder.lock_path).read())
        assert holder["pid"] == os.getpid()
    assert not os.path.exists(folder.lock_path)
