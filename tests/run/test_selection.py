"""The output folder's bookkeeping: checkpoint listing in both formats, eval_results.txt in
the original scripts' layouts, best_trial.txt, best_checkpoint."""

import json

import pytest
import tensorflow as tf

from albert_tf.errors import UserError
from albert_tf.run import selection

# Blocks as the original scripts wrote them (run_classifier.py, run_race.py,
# run_squad_v1.py, run_pretraining.py) and as earlier versions of albert_tf did.
ORIGINAL_LAYOUTS = """\
eval_accuracy = 0.5
eval_loss = 0.7
global_step = 100
loss = 0.7
best = -1
==================================================
eval_accuracy = 0.75
eval_loss = 0.6
global_step = 200
loss = 0.6
best = 0.5
saved out/model.ckpt-200.index to out/model.ckpt-best.index
==================================================
exact_match = 40.0
f1 = 50.5
best f1 = 50.5
==================================================
global_step = 300
loss = 6.1
masked_lm_accuracy = 0.2
saved out/model.ckpt-300.meta to out/model.ckpt-best.meta
global_step = 400
loss = 5.9
masked_lm_accuracy = 0.25
global_step = 500
f1 = 0.5
"""


def test_eval_results_of_every_original_layout_are_read(tmp_path):
    (tmp_path / "eval_results.txt").write_text(ORIGINAL_LAYOUTS)
    assert selection.read_eval_results(str(tmp_path)) == {
        100: {"eval_accuracy": 0.5, "eval_loss": 0.7, "loss": 0.7},
        200: {"eval_accuracy": 0.75, "eval_loss": 0.6, "loss": 0.6},
        300: {"loss": 6.1, "masked_lm_accuracy": 0.2},
        400: {"loss": 5.9, "masked_lm_accuracy": 0.25},
        500: {"f1": 0.5},
    }


def test_eval_blocks_are_the_original_scripts_lines():
    metrics = {"eval_loss": 0.6, "eval_accuracy": 0.75, "loss": 0.6}
    assert selection.eval_block(
        metrics, 200, selection.GLUE_FORMAT, "eval_accuracy", 0.5, 0.75
    ) == (
        "eval_accuracy = 0.75\neval_loss = 0.6\n"
        "global_step = 200\nloss = 0.6\nbest = 0.5\n" + "=" * 50 + "\n"
    )
    assert selection.eval_block(
        {"f1": 50.5, "exact_match": 40.0},
        7,
        selection.SQUAD_FORMAT,
        "f1",
        -1,
        50.5,
        saved_from="o/model.ckpt-7",
    ) == (
        "exact_match = 40.0\nf1 = 50.5\nglobal_step = 7\n"
        "saved o/model.ckpt-7.data-00000-of-00001 to o/model.ckpt-best.data-00000-of-00001\n"
        "saved o/model.ckpt-7.index to o/model.ckpt-best.index\nbest f1 = 50.5\n" + "=" * 50 + "\n"
    )
    assert selection.eval_block(
        {"masked_lm_accuracy": 0.2, "loss": 6.0},
        3,
        selection.PRETRAINING_FORMAT,
        "masked_lm_accuracy",
        0,
        0.2,
    ) == ("global_step = 3\nloss = 6.0\nmasked_lm_accuracy = 0.2\n")


def test_eval_blocks_write_values_keys_and_lines_as_the_original():
    """float32 text for TensorFlow metrics (GLUE, RACE, pretraining), Python floats for
    SQuAD; SQuAD v2.0 writes only the original's four scores; pretraining's saved lines
    follow its first key; SQuAD ends a run with the best checkpoint's scores."""
    glue = selection.eval_block(
        {"eval_accuracy": 23 / 66, "loss": 1.385378122329712},
        4,
        selection.GLUE_FORMAT,
        "eval_accuracy",
        0.3,
        23 / 66,
    )
    assert glue.splitlines()[:4] == [
        "eval_accuracy = 0.34848484",
        "global_step = 4",
        "loss = 1.3853781",
        "best = 0.3",
    ]
    v2 = {
        "exact": 60.25,
        "f1": 63.875,
        "total": 224,
        "null_score_diff_threshold": -1.5,
        "HasAns_f1": 53.2,
        "best_f1": 64.0,
        "best_f1_thresh": -1.5,
    }
    block = selection.eval_block(v2, 9, selection.SQUAD_V2_FORMAT, "f1", -1, 63.875)
    assert block.splitlines()[:6] == [
        "exact = 60.25",
        "f1 = 63.875",
        "global_step = 9",
        "null_score_diff_threshold = -1.5",
        "total = 224",
        "best f1 = 63.875",
    ]
    assert selection.final_block(v2, 9, selection.SQUAD_V2_FORMAT) == (
        "exact = 60.25\nf1 = 63.875\nnull_score_diff_threshold = -1.5\ntotal = 224\n"
        "best perf happened at step: 9\n"
    )
    pre = selection.eval_block(
        {"masked_lm_accuracy": 0.2, "loss": 6.0},
        3,
        selection.PRETRAINING_FORMAT,
        "masked_lm_accuracy",
        -1,
        0.2,
        saved_from="o/model.ckpt-3",
    )
    assert pre.splitlines()[:2] == [
        "global_step = 3",
        "saved o/model.ckpt-3.data-00000-of-00001 to o/model.ckpt-best.data-00000-of-00001",
    ]
    assert pre.splitlines()[-1] == "masked_lm_accuracy = 0.2"


class _Model(tf.Module):
    pass


def test_selector_keeps_the_best_and_skips_evaluated_steps(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(
        selection.checkpoints,
        "save_original_checkpoint",
        lambda model, prefix, **kw: saved.append(kw["global_step"]),
    )
    values = iter([0.5, 0.4, 0.9])
    selector = selection.CheckpointSelector(
        "acc", str(tmp_path), _Model(), lambda: {"acc": next(values)}, "classifier"
    )
    for step in (1, 2, 3):
        selector.evaluate_current(step)
    assert saved == [1, 3] and selector.best["global_step"] == 3
    assert (tmp_path / "best_trial.txt").read_text() == "3:3:0.9"
    text = (tmp_path / "eval_results.txt").read_text()
    assert text.count("=" * 50) == 3 and "best = -1\n" in text and "best = 0.5\n" in text
    again = selection.CheckpointSelector("acc", str(tmp_path), _Model(), None, "classifier")
    assert again.best["value"] == 0.9 and sorted(again.results) == [1, 2, 3]
    # ckpt-2 was evaluated already: evaluate_pending neither restores nor evaluates it.
    (tmp_path / "ckpt-2.index").write_text("")
    assert again.evaluate_pending() == 0


@pytest.mark.parametrize("fmt", [selection.GLUE_FORMAT, selection.SQUAD_FORMAT])
def test_a_stop_before_the_step_is_logged_repeats_its_evaluation_alike(tmp_path, monkeypatch, fmt):
    """Killed after best_checkpoint (and model.ckpt-best) were written for step 3 but
    before eval_results.txt logged it: the rerun evaluates step 3 against the best
    before it and writes what an uninterrupted run wrote, byte for byte."""
    monkeypatch.setattr(selection.checkpoints, "save_original_checkpoint", lambda *a, **k: None)

    def run(folder, steps, values):
        it = iter(values)
        selector = selection.CheckpointSelector(
            "acc", str(folder), _Model(), lambda: {"acc": next(it)}, "classifier", fmt=fmt
        )
        for step in steps:
            selector.evaluate_current(step)
        return selector

    straight, killed = tmp_path / "straight", tmp_path / "killed"
    straight.mkdir(), killed.mkdir()
    # 1/3 is not exact in float32 text: a best re-read from the log would differ.
    run(straight, (1, 2, 3), [1 / 3, 0.25, 0.5])
    real_write = selection.fileio.atomic_write_text

    def stop_at_the_log(path, text):
        if path.endswith("eval_results.txt") and "global_step = 3" in text:
            raise KeyboardInterrupt  # the kill
        real_write(path, text)

    with monkeypatch.context() as patch:
        patch.setattr(selection.fileio, "atomic_write_text", stop_at_the_log)
        with pytest.raises(KeyboardInterrupt):
            run(killed, (1, 2, 3), [1 / 3, 0.25, 0.5])
    assert json.loads((killed / "best_checkpoint").read_text())["global_step"] == 3
    rerun = run(killed, (3,), [0.5])
    assert rerun.best["global_step"] == 3 and rerun.best["previous"]["value"] == 1 / 3
    for name in ("eval_results.txt", "best_trial.txt", "best_checkpoint"):
        text = (killed / name).read_text().replace(str(killed), str(straight))
        assert text == (straight / name).read_text(), name


def test_a_checkpoint_without_the_head_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(selection.checkpoints, "is_object_based", lambda prefix: True)
    monkeypatch.setattr(
        selection.checkpoints, "restore_object_checkpoint", lambda model, prefix: ["albert"]
    )
    with pytest.raises(UserError, match="holds no classifier head"):
        selection.restore_checkpoint(object(), "ckpt-4", "classifier")
