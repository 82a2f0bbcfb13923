"""GLUE evaluation metrics and submission files (NumPy only; no model imports).

Every metric takes an optional ``is_real_example`` vector: rows where it is 0 are padding
(the eval pipeline pads the last batch, as the original did for TPUs) and are ignored; this is
what the original's metrics did by using ``is_real_example`` as the 0/1 metric weight.

Conventions for undefined values: the original defined the Matthews correlation as 0 when its
denominator is 0; we use the same convention for F1, Pearson and Spearman (and accuracy / MSE
of an empty set), logging a warning, so a checkpoint-selection loop never sees NaN.
"""

from __future__ import annotations

import logging
import math
import os
from typing import Sequence

import numpy as np

from albert_tf.fileio import atomic_write_text

_logger = logging.getLogger(__name__)

#: The submission file name of each task on the GLUE server.
GLUE_SUBMISSION_NAMES = {
    "cola": "CoLA",
    "sst-2": "SST-2",
    "mrpc": "MRPC",
    "sts-b": "STS-B",
    "qqp": "QQP",
    "mnli": "MNLI-m",
    "mismnli": "MNLI-mm",
    "qnli": "QNLI",
    "rte": "RTE",
    "wnli": "WNLI",
    "ax": "AX",
}

_REGRESSION_TASKS = ("sts-b",)


def _filter(predictions, labels, is_real_example):
    """Returns (predictions, labels) as 1-D arrays restricted to the real examples."""
    p = np.asarray(predictions).reshape(-1)
    y = np.asarray(labels).reshape(-1)
    if p.shape != y.shape:
        raise ValueError(f"predictions and labels differ in length: {p.shape[0]} vs {y.shape[0]}")
    if is_real_example is not None:
        w = np.asarray(is_real_example).reshape(-1)
        if w.shape != p.shape:
            raise ValueError(f"is_real_example has length {w.shape[0]}, expected {p.shape[0]}")
        keep = w != 0
        p, y = p[keep], y[keep]
    return p, y


def _undefined(name: str) -> float:
    _logger.warning("%s is undefined for these inputs; reporting 0.0", name)
    return 0.0


def accuracy(predictions, labels, is_real_example=None) -> float:
    """Fraction of real examples whose predicted class equals the label."""
    p, y = _filter(predictions, labels, is_real_example)
    if p.size == 0:
        return _undefined("accuracy")
    return float(np.mean(p == y))


def confusion_counts(predictions, labels, is_real_example=None, positive=1):
    """(tp, tn, fp, fn) of a binary task, class ``positive`` being positive."""
    p, y = _filter(predictions, labels, is_real_example)
    pp, yp = p == positive, y == positive
    tp = int(np.sum(pp & yp))
    tn = int(np.sum(~pp & ~yp))
    fp = int(np.sum(pp & ~yp))
    fn = int(np.sum(~pp & yp))
    return tp, tn, fp, fn


def f1_score(predictions, labels, is_real_example=None, positive=1) -> float:
    """Binary F1 with class ``positive`` (label "1" = index 1 for MRPC/QQP) as positive."""
    tp, _, fp, fn = confusion_counts(predictions, labels, is_real_example, positive)
    if 2 * tp + fp + fn == 0:
        return _undefined("F1")
    return 2.0 * tp / (2 * tp + fp + fn)


def matthews_corrcoef(predictions, labels, is_real_example=None, positive=1) -> float:
    """Matthews correlation from the binary confusion counts; 0 when undefined (the original)."""
    tp, tn, fp, fn = confusion_counts(predictions, labels, is_real_example, positive)
    # Python ints: the product of four counts can overflow int64 on large sets.
    denominator = (tp + fp) * (tp + fn) * (tn + fp) * (tn + fn)
    if denominator == 0:
        return 0.0
    return float((tp * tn - fp * fn) / math.sqrt(denominator))


def _pearson(x: np.ndarray, y: np.ndarray, name: str) -> float:
    if x.size < 2:
        return _undefined(name)
    dx = x - x.mean()
    dy = y - y.mean()
    denominator = math.sqrt(float(np.sum(dx * dx)) * float(np.sum(dy * dy)))
    if denominator == 0.0:
        return _undefined(name)
    return float(np.sum(dx * dy) / denominator)


def pearson(predictions, labels, is_real_example=None) -> float:
    """Pearson correlation of predictions and labels over the real examples."""
    p, y = _filter(predictions, labels, is_real_example)
    return _pearson(p.astype(np.float64), y.astype(np.float64), "Pearson correlation")


def rankdata(values) -> np.ndarray:
    """1-based ranks with ties given their average rank (as scipy.stats.rankdata 'average')."""
    v = np.asarray(values).reshape(-1)
    order = np.argsort(v, kind="mergesort")
    sorted_v = v[order]
    ranks = np.empty(v.size, dtype=np.float64)
    # Boundaries of runs of equal values in sorted order.
    starts = np.flatnonzero(np.r_[True, sorted_v[1:] != sorted_v[:-1]])
    ends = np.r_[starts[1:], v.size]
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + 1 + e) / 2.0  # mean of ranks s+1 .. e
    return ranks


def spearman(predictions, labels, is_real_example=None) -> float:
    """Spearman correlation: Pearson of the average ranks (ties share their mean rank)."""
    p, y = _filter(predictions, labels, is_real_example)
    return _pearson(rankdata(p), rankdata(y), "Spearman correlation")


def mean_squared_error(predictions, labels, is_real_example=None) -> float:
    """Mean squared error over the real examples."""
    p, y = _filter(predictions, labels, is_real_example)
    if p.size == 0:
        return _undefined("MSE")
    d = p.astype(np.float64) - y.astype(np.float64)
    return float(np.mean(d * d))


def _check_task(task_name: str) -> str:
    key = task_name.lower()
    if key not in GLUE_SUBMISSION_NAMES:
        raise ValueError(
            f"unknown GLUE task {task_name!r}; known tasks: {sorted(GLUE_SUBMISSION_NAMES)}"
        )
    return key


def glue_metrics(task_name: str, predictions, labels, is_real_example=None) -> dict[str, float]:
    """The eval metrics of a task, with the original's keys.

    * classification: ``eval_accuracy``; MRPC and QQP add ``f1`` (not in the original);
      CoLA adds ``matthew_corr``;
    * STS-B: ``pearson``, ``spearman`` (our addition) and ``MSE``.

    ``predictions`` are class indices (argmax) or, for STS-B, the regression values.
    """
    key = _check_task(task_name)
    if key in _REGRESSION_TASKS:
        return {
            "pearson": pearson(predictions, labels, is_real_example),
            "spearman": spearman(predictions, labels, is_real_example),
            "MSE": mean_squared_error(predictions, labels, is_real_example),
        }
    result = {"eval_accuracy": accuracy(predictions, labels, is_real_example)}
    if key in ("mrpc", "qqp"):
        result["f1"] = f1_score(predictions, labels, is_real_example)
    if key == "cola":
        result["matthew_corr"] = matthews_corrcoef(predictions, labels, is_real_example)
    return result


def selection_key(task_name: str) -> str:
    """The metric the original used to pick the best checkpoint on dev (higher is better)."""
    key = _check_task(task_name)
    if key == "cola":
        return "matthew_corr"
    if key in _REGRESSION_TASKS:
        return "pearson"
    return "eval_accuracy"


def glue_submission_filename(task_name: str) -> str:
    """``<TASK>.tsv`` as the GLUE server expects (e.g. ``MNLI-m.tsv`` for mnli)."""
    return GLUE_SUBMISSION_NAMES[_check_task(task_name)] + ".tsv"


def _format_float(x) -> str:
    # str() of a NumPy scalar is the shortest repr in its own precision ("0.1" for float32).
    if isinstance(x, np.generic):
        return str(x)
    return repr(float(x))


def write_glue_submission(
    output_dir: str, task_name: str, guids: Sequence, predictions, label_list: Sequence
) -> str:
    """Writes ``<output_dir>/<TASK>.tsv`` for the GLUE server; returns its path.

    Header ``index\\tprediction``, then one ``guid\\tlabel`` line per example: the label string
    ``label_list[prediction]`` for classification, the float value for STS-B. This is the
    content of the original's ``submit_results.tsv``. ``predictions`` must contain only real
    examples (drop the eval padding first). Written atomically.
    """
    key = _check_task(task_name)
    preds = np.asarray(predictions)
    if preds.ndim != 1:
        preds = preds.reshape(-1)
    if len(guids) != preds.shape[0]:
        raise ValueError(
            f"{len(guids)} guids but {preds.shape[0]} predictions; drop padding "
            "(is_real_example == 0) rows before writing the submission"
        )
    lines = ["index\tprediction"]
    for guid, pred in zip(guids, preds):
        if key in _REGRESSION_TASKS:
            value = _format_float(pred)
        else:
            index = int(pred)
            if not 0 <= index < len(label_list):
                raise ValueError(
                    f"prediction {index} for {guid!r} is not a class index of {list(label_list)}"
                )
            value = str(label_list[index])
        lines.append(f"{guid}\t{value}")
    path = os.path.join(output_dir, glue_submission_filename(key))
    atomic_write_text(path, "\n".join(lines) + "\n")
    return path


def write_test_results(path: str, outputs) -> str:
    """Writes the original's ``test_results.tsv``: per example, the class probabilities joined
    by tabs (or the single regression value); no header. Written atomically; returns ``path``."""
    arr = np.asarray(outputs)
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    if arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2:
        raise ValueError(f"expected [N] or [N, C] outputs, got shape {arr.shape}")
    text = "".join("\t".join(_format_float(x) for x in row) + "\n" for row in arr)
    atomic_write_text(path, text)
    return path


__all__ = [
    "accuracy",
    "confusion_counts",
    "f1_score",
    "matthews_corrcoef",
    "pearson",
    "spearman",
    "rankdata",
    "mean_squared_error",
    "glue_metrics",
    "selection_key",
    "glue_submission_filename",
    "write_glue_submission",
    "write_test_results",
    "GLUE_SUBMISSION_NAMES",
]
