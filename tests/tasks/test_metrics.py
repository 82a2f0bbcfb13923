"""Tests of albert_tf.tasks.metrics against hand-computed values."""

import math
import os

import numpy as np
import pytest

from albert_tf.tasks import metrics as m

# A binary confusion matrix with tp=3, tn=2, fp=1, fn=2 (positive class 1).
PRED = [1, 1, 1, 0, 0, 1, 0, 0]
LABEL = [1, 1, 1, 0, 0, 0, 1, 1]


def test_confusion_counts_mcc_f1_accuracy():
    assert m.confusion_counts(PRED, LABEL) == (3, 2, 1, 2)
    # MCC = (3*2 - 1*2) / sqrt((3+1)(3+2)(2+1)(2+2)) = 4 / sqrt(240)
    assert m.matthews_corrcoef(PRED, LABEL) == pytest.approx(4 / math.sqrt(240))
    # F1 = 2tp / (2tp + fp + fn) = 6 / 9
    assert m.f1_score(PRED, LABEL) == pytest.approx(2 / 3)
    assert m.accuracy(PRED, LABEL) == pytest.approx(5 / 8)
    # Perfect and inverted predictions.
    assert m.matthews_corrcoef(LABEL, LABEL) == pytest.approx(1.0)
    assert m.matthews_corrcoef([1 - x for x in LABEL], LABEL) == pytest.approx(-1.0)


def test_undefined_cases_are_zero():
    # All predictions in one class: MCC denominator 0 -> 0, as the original.
    assert m.matthews_corrcoef([0, 0, 0], [0, 1, 1]) == 0.0
    assert m.matthews_corrcoef([1, 1], [1, 1]) == 0.0
    # No positive predicted nor labelled: F1 undefined -> 0.
    assert m.f1_score([0, 0], [0, 0]) == 0.0
    # Constant predictions: correlations undefined -> 0.
    assert m.pearson([1.0, 1.0, 1.0], [1.0, 2.0, 3.0]) == 0.0
    assert m.spearman([2.0, 2.0], [1.0, 3.0]) == 0.0
    assert m.pearson([1.0], [2.0]) == 0.0
    # No real example at all.
    assert m.accuracy([1, 0], [1, 0], is_real_example=[0, 0]) == 0.0


def test_is_real_example_filters_padding():
    pred = PRED + [1, 1, 0]
    label = LABEL + [0, 0, 1]  # padding rows, all wrong
    real = [1] * 8 + [0, 0, 0]
    assert m.accuracy(pred, label, real) == pytest.approx(5 / 8)
    assert m.matthews_corrcoef(pred, label, real) == pytest.approx(4 / math.sqrt(240))
    assert m.f1_score(pred, label, real) == pytest.approx(2 / 3)
    x = [1.0, 2.0, 3.0, 100.0]
    y = [2.0, 4.0, 6.0, -50.0]
    assert m.pearson(x, y, [1, 1, 1, 0]) == pytest.approx(1.0)
    assert m.mean_squared_error(x, y, [1, 1, 1, 0]) == pytest.approx((1 + 4 + 9) / 3)
    with pytest.raises(ValueError, match="is_real_example has length 2, expected 4"):
        m.accuracy(x, y, [1, 1])
    with pytest.raises(ValueError, match="differ in length"):
        m.accuracy([1, 2], [1])


def test_pearson_and_spearman_with_ties():
    x = np.array([1.0, 2.0, 2.0, 3.0])
    y = np.array([1.0, 3.0, 2.0, 4.0])
    # Direct formula for Pearson.
    dx, dy = x - x.mean(), y - y.mean()
    expected = (dx * dy).sum() / math.sqrt((dx * dx).sum() * (dy * dy).sum())
    assert m.pearson(x, y) == pytest.approx(expected)
    # Average ranks: x -> [1, 2.5, 2.5, 4], y -> [1, 3, 2, 4].
    np.testing.assert_array_equal(m.rankdata(x), [1, 2.5, 2.5, 4])
    np.testing.assert_array_equal(m.rankdata([3, 1, 3, 3, 0]), [4, 2, 4, 4, 1])
    # By hand: deviations rx [-1.5, 0, 0, 1.5], ry [-1.5, .5, -.5, 1.5] -> 4.5 / sqrt(4.5 * 5).
    assert m.spearman(x, y) == pytest.approx(4.5 / math.sqrt(4.5 * 5))
    # Spearman is invariant under monotone transforms, Pearson is not.
    assert m.spearman(np.exp(x), y**3) == pytest.approx(m.spearman(x, y))


def test_glue_metrics_keys_and_selection():
    assert set(m.glue_metrics("cola", PRED, LABEL)) == {"eval_accuracy", "matthew_corr"}
    assert set(m.glue_metrics("MRPC", PRED, LABEL)) == {"eval_accuracy", "f1"}
    assert set(m.glue_metrics("qqp", PRED, LABEL)) == {"eval_accuracy", "f1"}
    for task in ("sst-2", "mnli", "mismnli", "qnli", "rte", "wnli"):
        assert set(m.glue_metrics(task, PRED, LABEL)) == {"eval_accuracy"}
    sts = m.glue_metrics("sts-b", [1.0, 2.0, 3.5], [1.0, 2.0, 3.0])
    assert set(sts) == {"pearson", "spearman", "MSE"}
    assert sts["MSE"] == pytest.approx(0.25 / 3) and sts["spearman"] == pytest.approx(1.0)
    assert m.glue_metrics("cola", PRED, LABEL)["matthew_corr"] == pytest.approx(4 / math.sqrt(240))
    assert m.selection_key("cola") == "matthew_corr"
    assert m.selection_key("sts-b") == "pearson"
    assert m.selection_key("mrpc") == "eval_accuracy"
    with pytest.raises(ValueError, match="unknown GLUE task 'xyz'.*known tasks"):
        m.glue_metrics("xyz", PRED, LABEL)


def test_write_glue_submission(tmp_path):
    path = m.write_glue_submission(
        str(tmp_path),
        "mnli",
        ["0", "1", "2"],
        np.array([2, 0, 1]),
        ["contradiction", "entailment", "neutral"],
    )
    assert os.path.basename(path) == "MNLI-m.tsv"
    assert open(path, encoding="utf-8").read() == (
        "index\tprediction\n0\tneutral\n1\tcontradiction\n2\tentailment\n"
    )
    path = m.write_glue_submission(
        str(tmp_path), "sts-b", ["5", "6"], np.array([3.25, 0.1], np.float32), [None]
    )
    assert os.path.basename(path) == "STS-B.tsv"
    assert open(path).read() == "index\tprediction\n5\t3.25\n6\t0.1\n"
    assert m.glue_submission_filename("mismnli") == "MNLI-mm.tsv"
    assert m.glue_submission_filename("ax") == "AX.tsv"
    with pytest.raises(ValueError, match="2 guids but 3 predictions"):
        m.write_glue_submission(str(tmp_path), "rte", ["a", "b"], [0, 1, 1], ["x", "y"])
    with pytest.raises(ValueError, match="prediction 2 .* not a class index"):
        m.write_glue_submission(str(tmp_path), "rte", ["a"], [2], ["x", "y"])
    assert [p for p in os.listdir(tmp_path) if p.endswith(".tmp")] == []


def test_write_test_results(tmp_path):
    path = str(tmp_path / "test_results.tsv")
    m.write_test_results(path, np.array([[0.25, 0.75], [0.5, 0.5]], np.float32))
    assert open(path).read() == "0.25\t0.75\n0.5\t0.5\n"
    m.write_test_results(path, [1.5, 2.0])
    assert open(path).read() == "1.5\n2.0\n"
