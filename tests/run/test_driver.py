"""albert_tf.run.driver: the selection rule, the final weights and the batch split (the whole
driver runs in every end-to-end test of the four tasks)."""

import types

import pytest

from albert_tf.errors import UserError
from albert_tf.model.config import AlbertConfig, preset
from albert_tf.run import driver


class _Selector:
    def __init__(self, pending=(), results=None, best=None):
        self.pending, self.results, self.best = list(pending), dict(results or {}), best
        self.current = []

    def evaluate_pending(self, skip=None):
        pending = [s for s in self.pending if skip is None or not skip(s, f"ckpt-{s}")]
        for step in pending:
            self.results[step] = {"acc": 0.5}
        return len(pending)

    def evaluate_current(self, step):
        self.current.append(step)
        self.results[step] = {"acc": 0.25}

    def write_final_block(self):
        self.final_written = True


def _run(tmp_path, initialized, is_chief=False):
    opts = driver.RunOptions(output_dir=str(tmp_path))
    return driver.Run(
        opts,
        preset("albert_tiny"),
        None,
        is_chief,
        initialized=initialized,
        release_folder=True,
    )


def test_selection_evaluates_pending_checkpoints_first(tmp_path):
    selector, current = _Selector(pending=[2, 4]), _run(tmp_path, initialized=True)
    driver.finish_selection(selector, current)
    assert selector.current == [] and current.summary["eval_step"] == 4
    # The folder's own checkpoints: described when written.
    assert not (tmp_path / "albert_config.json").exists()


def test_selection_falls_back_to_the_initial_weights_only(tmp_path):
    described = []  # whether the config was written when the initial weights were evaluated

    class Selector(_Selector):
        def evaluate_current(self, step):
            described.append((tmp_path / "albert_config.json").exists())
            super().evaluate_current(step)

    selector, current = Selector(), _run(tmp_path, initialized=True, is_chief=True)
    driver.finish_selection(selector, current)
    assert selector.current == [0] and current.summary["eval"] == {"acc": 0.25}
    assert described == [True]  # before the initial weights became model.ckpt-best
    assert AlbertConfig.from_json_file(tmp_path / "albert_config.json") == current.config
    with pytest.raises(UserError, match="no checkpoint .* and no --init_checkpoint"):
        driver.finish_selection(_Selector(), _run(tmp_path, initialized=False))
    # Steps evaluated by an earlier run count: nothing is evaluated again.
    selector = _Selector(results={6: {"acc": 0.7}}, best={"value": 0.7})
    driver.finish_selection(selector, _run(tmp_path, initialized=False))
    assert selector.current == []


def test_final_weights_needs_something_to_predict_with(tmp_path):
    with pytest.raises(UserError, match="nothing to predict with"):
        driver.final_weights(_run(tmp_path, False), "classifier")
    current = _run(tmp_path, False)
    current.options.init_checkpoint = "init/ckpt"
    assert driver.final_weights(current, "classifier") == "init/ckpt"


def test_training_batch_must_split_over_replicas_and_micro_batches(tmp_path):
    opts = driver.RunOptions(output_dir=str(tmp_path), train_batch_size=10)
    with pytest.raises(
        UserError,
        match=r"--train_batch_size=10: expected a multiple of the "
        r"1 replicas x 4 accumulation steps",
    ):
        driver.start(opts, preset("albert_tiny"), batch_divisor=4)
    assert isinstance(driver.start(opts, preset("albert_tiny"), 2), driver.Run)


def test_task_defaults_do_nothing(tmp_path):
    task = driver.Task(driver.RunOptions(output_dir=str(tmp_path)))
    current = types.SimpleNamespace()
    assert task.evaluator(current) is None and not task.wants_final_weights()
    assert task.batch_divisor() == 1
    with pytest.raises(NotImplementedError):
        task.resolve()


def test_a_signals_resume_point_is_not_evaluated_by_a_training_run():
    skip = driver.resume_points(driver.RunOptions(output_dir="o", save_checkpoints_steps=10))
    assert skip(25, "o/ckpt-25")  # object checkpoint only, off the schedule
    assert not skip(20, "o/ckpt-20")  # on the schedule (its copy may be missing)
    assert not skip(25, "o/model.ckpt-25")  # an original-format checkpoint


def test_best_checkpoint_line_is_what_the_scripts_print():
    best = {"global_step": 200, "key": "eval_accuracy", "value": 0.81234}
    assert driver.best_checkpoint_line({"best": best}) == (
        "best checkpoint on dev: step 200, eval_accuracy = 0.8123"
    )
    assert driver.best_checkpoint_line({}) is None
    assert driver.best_checkpoint_line({"best": None}) is None


def test_the_run_sets_the_speed_path_switch_before_anything_is_traced(tmp_path, monkeypatch):
    """driver.run applies --speed_paths first: the task's own checks already see it."""
    from albert_tf.cpu import speed_paths

    monkeypatch.setattr(speed_paths, "_mode", "plain")
    seen = []

    class _Stops(driver.Task):
        def resolve(self):
            seen.append(speed_paths.mode())
            raise UserError("stop here")

    for setting in ("native", "auto"):
        opts = driver.RunOptions(output_dir=str(tmp_path / setting), speed_paths=setting)
        with pytest.raises(UserError, match="stop here"):
            driver.run(_Stops(opts))
    assert seen == ["native", "auto"]


@pytest.mark.parametrize(
    "flag, use_tpu, recorded, expected",
    [
        ("auto", False, None, "gpu"),  # a fresh run: the original on this hardware
        ("auto", True, None, "tpu"),
        ("auto", True, {"clip_norm_like": "gpu"}, "gpu"),  # a resume keeps its value
        ("auto", False, {"train_batch_size": 8}, "tpu"),  # recorded before the flag
        ("tpu", False, None, "tpu"),
        ("gpu", True, {"clip_norm_like": "tpu"}, "gpu"),  # check_resume refuses it first
    ],
)
def test_clip_norm_like_resolves_auto(flag, use_tpu, recorded, expected):
    opts = types.SimpleNamespace(clip_norm_like=flag, use_tpu=use_tpu)
    assert driver.clip_norm_like(opts, recorded) == expected
