"""Checkpoint selection on dev and the output folder's bookkeeping files.

Training writes `ckpt-<step>` (object-based: model, optimizer, input position) every
save_checkpoints_steps. Each checkpoint's dev metrics are appended to `eval_results.txt`
as a "key = value" block that starts with `global_step = <step>`, the original's format;
the best by the task's key is kept as `model.ckpt-best` in the original variable format
(readable by the original code) and described in `best_checkpoint` (JSON). Reported dev
numbers are therefore best-checkpoint-on-dev, as the original's (docs/original.md §11.6).
A resumed or second run skips the steps already in eval_results.txt.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Callable

import tensorflow as tf

from albert_tf import checkpoints, fileio
from albert_tf.errors import UserError

_logger = logging.getLogger(__name__)

BEST_PREFIX = "model.ckpt-best"
BEST_FILE = "best_checkpoint"
EVAL_RESULTS = "eval_results.txt"
_OBJECT_CHECKPOINT = re.compile(r"^ckpt-(\d+)$")


def object_checkpoints(output_dir) -> list[tuple[int, str]]:
    """[(step, prefix)] of the `ckpt-<step>` files in output_dir, in step order."""
    found = {}
    for index in tf.io.gfile.glob(os.path.join(output_dir, "ckpt-*.index")):
        name = os.path.basename(index)[: -len(".index")]
        match = _OBJECT_CHECKPOINT.match(name)
        if match:
            found[int(match.group(1))] = os.path.join(output_dir, name)
    return sorted(found.items())


def append_eval_results(output_dir, metrics, global_step) -> str:
    """Appends a "key = value" block (global_step first) to eval_results.txt."""
    path = os.path.join(output_dir, EVAL_RESULTS)
    fileio.append_eval_results(path, metrics, global_step)
    return path


def read_eval_results(output_dir) -> dict[int, dict]:
    """{step: {key: value}} of the blocks in eval_results.txt (values as floats where
    they parse, strings otherwise)."""
    path = os.path.join(output_dir, EVAL_RESULTS)
    if not tf.io.gfile.exists(path):
        return {}
    blocks, current = {}, None
    for line in fileio.read_text(path).splitlines():
        key, sep, value = line.partition(" = ")
        if not sep:
            continue
        if key == "global_step":
            current = blocks.setdefault(int(value), {})
            continue
        if current is not None:
            try:
                current[key] = float(value)
            except ValueError:
                current[key] = value
    return blocks


def write_eval_summaries(output_dir, metrics, global_step) -> None:
    """The metrics as TensorBoard scalars under <output_dir>/eval at `global_step`."""
    writer = tf.summary.create_file_writer(os.path.join(output_dir, "eval"))
    with writer.as_default(step=global_step):
        for name, value in metrics.items():
            tf.summary.scalar(name, value)
    writer.flush()


def read_best(output_dir) -> dict | None:
    """The `best_checkpoint` record or None."""
    path = os.path.join(output_dir, BEST_FILE)
    if not tf.io.gfile.exists(path):
        return None
    return json.loads(fileio.read_text(path))


def restore_trained(model, prefix, head) -> None:
    """Restores a task model from one of its training checkpoints (ckpt-<step>);
    `head` is the model attribute that must be in it."""
    parts = checkpoints.restore_object_checkpoint(model, prefix)
    if head not in parts:
        raise UserError(f"{prefix}: holds no {head} head (model/{head})")


class CheckpointSelector:
    """Evaluates checkpoints on dev and keeps the best as model.ckpt-best.

    evaluate(): the dev metrics of the model's current weights; `key` names the one
    to maximize. Only the chief writes files.
    """

    def __init__(self, key: str, output_dir: str, model, evaluate: Callable[[], dict],
                 head: str, is_chief: bool = True):
        self.key = key
        self.output_dir = output_dir
        self.model = model
        self.evaluate = evaluate
        self.head = head
        self.is_chief = is_chief
        self.best = read_best(output_dir)
        self.results = read_eval_results(output_dir)  # step -> metrics

    def evaluate_current(self, step) -> dict:
        """Evaluates the model's current weights as global step `step`."""
        result = self.evaluate()
        self.results[int(step)] = result
        value = result[self.key]
        _logger.info("eval at step %d: %s", step,
                     ", ".join(f"{k} = {v:.4f}" for k, v in sorted(result.items())))
        if not self.is_chief:
            return result
        append_eval_results(self.output_dir, result, step)
        write_eval_summaries(self.output_dir, result, step)
        if self.best is None or value > self.best["value"]:
            checkpoints.save_original_checkpoint(
                self.model, os.path.join(self.output_dir, BEST_PREFIX), global_step=step,
                update_checkpoint_state=False)  # the `checkpoint` file stays the trainer's
            self.best = {"global_step": int(step), "key": self.key, "value": float(value),
                         "checkpoint": BEST_PREFIX, "metrics": result}
            fileio.atomic_write_text(os.path.join(self.output_dir, BEST_FILE),
                                     json.dumps(self.best, indent=2, sort_keys=True) + "\n")
            _logger.info("new best %s = %.4f at step %d -> %s", self.key, value, step,
                         BEST_PREFIX)
        return result

    def evaluate_pending(self) -> int:
        """Evaluates every ckpt-<step> not yet in eval_results.txt, in step order.
        Returns the number evaluated."""
        count = 0
        for step, prefix in object_checkpoints(self.output_dir):
            if step in self.results:
                continue
            restore_trained(self.model, prefix, self.head)
            self.evaluate_current(step)
            count += 1
        return count


__all__ = ["BEST_PREFIX", "BEST_FILE", "EVAL_RESULTS", "CheckpointSelector",
           "object_checkpoints", "append_eval_results", "read_eval_results",
           "write_eval_summaries", "read_best",
           "restore_trained"]
