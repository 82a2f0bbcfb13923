"""albert_tf/run/preflight.py: the plan of a run and the checks before any work, in their
order (every script's own refusals are in tests/test_bad_inputs.py)."""

import json
import os
import socket

import pytest

from albert_tf.errors import UserError
from albert_tf.model.config import preset
from albert_tf.run import driver, preflight


class _Task(driver.Task):
    """A task that resolves to the tiny preset and names a GLUE task in task.json."""

    def resolve(self):
        return preset("albert_tiny")

    def output_identity(self):
        return {"task_name": "mrpc"}


def _plan(tmp_path, **flags):
    opts = driver.RunOptions(output_dir=str(tmp_path / "out"), **flags)
    return preflight.plan(_Task(opts))


def test_the_plan_lists_the_output_folder_once(tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "ckpt-4.index").write_text("")
    plan = _plan(tmp_path, do_train=True, init_checkpoint="init/model.ckpt")
    assert plan.found.trained_checkpoints() == [(4, str(tmp_path / "out" / "ckpt-4"))]
    assert plan.resuming and plan.initial == ("--init_checkpoint", "init/model.ckpt")
    assert plan.init_checkpoint.value == "init/model.ckpt"
    assert plan.init_checkpoint is plan.init_checkpoint  # looked up once
    fresh = _plan(tmp_path / "fresh", do_train=True)
    assert not fresh.resuming and fresh.init_checkpoint is None


def test_a_run_that_does_not_train_needs_weights(tmp_path):
    with pytest.raises(UserError) as err:
        preflight.check(_plan(tmp_path))
    assert str(err.value) == (
        "this run has nothing to use with: no --init_checkpoint and no checkpoint "
        f"(model.ckpt-best, model.ckpt-<step> or ckpt-<step>) in --output_dir={tmp_path}/out; "
        "expected one of them, or --do_train"
    )


def test_the_checks_run_in_their_order(tmp_path):
    """A folder held by a running run and holding a damaged checkpoint: the lock, checked
    before the folder's checkpoints, is what the run reports."""
    out = tmp_path / "out"
    out.mkdir()
    (out / "model.ckpt-2.index").write_bytes(b"not an index")
    holder = {"host": socket.gethostname(), "pid": os.getpid(), "started": "now"}
    (out / ".albert_tf.lock").write_text(json.dumps(holder))
    with pytest.raises(UserError, match=r"another run writes in it \(process"):
        preflight.check(_plan(tmp_path, do_train=True))
    (out / ".albert_tf.lock").unlink()
    with pytest.raises(UserError, match=r"checkpoint model.ckpt-2 is damaged"):
        preflight.check(_plan(tmp_path, do_train=True))


def test_a_folder_of_another_task_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "task.json").write_text(json.dumps({"task_name": "cola"}))
    with pytest.raises(UserError) as err:
        preflight.check(_plan(tmp_path, do_train=True))
    assert str(err.value) == (
        f"--output_dir={out}: holds a run for task_name=cola ({out}/task.json), this run is "
        "for task_name=mrpc; expected the same task, or another --output_dir"
    )
    (out / "task.json").write_text(json.dumps({"task_name": "mrpc"}))
    preflight.check(_plan(tmp_path, do_train=True))
