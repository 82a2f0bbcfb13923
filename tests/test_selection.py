"""The output folder's bookkeeping: checkpoint listing, eval_results.txt, best_checkpoint."""

import types

import pytest
import tensorflow as tf

from albert_tf import selection
from albert_tf.errors import UserError


def test_object_checkpoints_are_in_step_order(tmp_path):
    for name in ("ckpt-10", "ckpt-2", "ckpt-x", "model.ckpt-best", "model.ckpt-7", "ckpt-3.tmp"):
        (tmp_path / f"{name}.index").write_text("")
    assert selection.object_checkpoints(str(tmp_path)) == [
        (2, str(tmp_path / "ckpt-2")), (10, str(tmp_path / "ckpt-10"))]


def test_eval_results_round_trip_in_the_original_format(tmp_path):
    assert selection.read_eval_results(str(tmp_path)) == {}
    selection.append_eval_results(str(tmp_path), {"f1": 0.5, "exact": 40.0}, 3)
    selection.append_eval_results(str(tmp_path), {"f1": 0.75}, 12)
    assert (tmp_path / "eval_results.txt").read_text() == (
        "global_step = 3\nexact = 40.0\nf1 = 0.5\nglobal_step = 12\nf1 = 0.75\n")
    assert selection.read_eval_results(str(tmp_path)) == {3: {"exact": 40.0, "f1": 0.5},
                                                          12: {"f1": 0.75}}
    assert selection.read_best(str(tmp_path)) is None


class _Model(tf.Module):
    pass


def test_selector_keeps_the_best_and_skips_evaluated_steps(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(selection.checkpoints, "save_original_checkpoint",
                        lambda model, prefix, **kw: saved.append(kw["global_step"]))
    values = iter([0.5, 0.4, 0.9])
    selector = selection.CheckpointSelector("acc", str(tmp_path), _Model(),
                                            lambda: {"acc": next(values)}, "classifier")
    for step in (1, 2, 3):
        selector.evaluate_current(step)
    assert saved == [1, 3] and selector.best["global_step"] == 3
    again = selection.CheckpointSelector("acc", str(tmp_path), _Model(), None, "classifier")
    assert again.best["value"] == 0.9 and sorted(again.results) == [1, 2, 3]
    # ckpt-2 was evaluated already: evaluate_pending does not restore or evaluate it.
    (tmp_path / "ckpt-2.index").write_text("")
    assert again.evaluate_pending() == 0


def test_restore_trained_needs_the_head(tmp_path, monkeypatch):
    monkeypatch.setattr(selection.checkpoints, "restore_object_checkpoint",
                        lambda model, prefix: ["albert"])
    with pytest.raises(UserError, match="holds no classifier head"):
        selection.restore_trained(types.SimpleNamespace(), "ckpt-4", "classifier")
