"""Checkpoint selection on dev and the output folder's bookkeeping files.

Training writes every save_checkpoints_steps `model.ckpt-<step>` (the weights, optimizer
slots and global_step under the original's names; the `checkpoint` state file names
these, so the original's tools find them) with the state only a resume needs beside it
(albert_tf/run/output_folder.py, which names every file here). Each checkpoint is
evaluated on dev; its metrics are appended to `eval_results.txt` in the original script's layout
(`EvalFormat`), `best_trial.txt` records "<last step>:<best step>:<best value>" as the
original's run_classifier.py did, and the best by the task's key is kept as
`model.ckpt-best` in the original variable format, described in `best_checkpoint`
(JSON). Reported dev numbers are therefore best-checkpoint-on-dev, as the original's
(docs/original.md §11.6). A resumed run, or a second command evaluating a training
folder, skips the steps already in eval_results.txt.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Callable

import numpy as np
import tensorflow as tf

from albert_tf import fileio
from albert_tf.errors import UserError
from albert_tf.run.output_folder import BEST_NAME, EVAL_RESULTS_NAME, OutputFolder
from albert_tf.weights import checkpoints

_logger = logging.getLogger(__name__)

_SEPARATOR = "=" * 50


@dataclasses.dataclass(frozen=True)
class EvalFormat:
    """How the original script laid out one checkpoint's block in eval_results.txt:
    its metrics as sorted "key = value" lines (global_step among them), then

    best: "before" -> "best = <best value before this checkpoint>" (run_classifier.py,
      run_race.py); "after" -> "best <key> = <best value including it>" (run_squad_*.py);
      None -> no best line (run_pretraining.py).
    saved_lines: "saved <checkpoint file> to <model.ckpt-best file>" when it became the
      best; `saved_after_first_key`: right after the first metric line instead
      (run_pretraining.py wrote them from inside its loop over the keys).
    separator: a line of 50 "=".
    keys: the metrics the original wrote (ours has more, in best_checkpoint and the
      summaries); None: all.
    float32: values written as str() of a float32, as the original's TensorFlow metrics
      were (0.34848484); False: Python floats (SQuAD's scores).
    final_block: after the run's last checkpoint, the best one's metrics again and
      "best perf happened at step: <step>" (run_squad_*.py).
    """

    best: str | None = "before"
    saved_lines: bool = False
    saved_after_first_key: bool = False
    separator: bool = True
    keys: tuple[str, ...] | None = None
    float32: bool = True
    final_block: bool = False

    def written(self, metrics: dict) -> dict:
        """The metrics the original wrote (`keys`)."""
        return {k: v for k, v in metrics.items() if self.keys is None or k in self.keys}

    def text(self, value) -> str:
        """A value as the original wrote it."""
        if isinstance(value, float) and self.float32:
            return str(np.float32(value))
        return str(value)


GLUE_FORMAT = EvalFormat()
RACE_FORMAT = EvalFormat(saved_lines=True)
SQUAD_FORMAT = EvalFormat(
    best="after", saved_lines=True, keys=("exact_match", "f1"), float32=False, final_block=True
)
SQUAD_V2_FORMAT = dataclasses.replace(
    SQUAD_FORMAT, keys=("exact", "f1", "null_score_diff_threshold", "total")
)
PRETRAINING_FORMAT = EvalFormat(
    best=None, saved_lines=True, saved_after_first_key=True, separator=False
)


def restore_checkpoint(model, prefix, head) -> None:
    """Fills a task model from one training checkpoint of either format; the encoder
    and the `head` attribute must both be in it (UserError naming the file otherwise)."""
    if checkpoints.is_object_based(prefix):
        parts = checkpoints.restore_object_checkpoint(model, prefix)
        if head not in parts:
            raise UserError(f"{prefix}: holds no {head} head (model/{head})")
        return
    try:
        checkpoints.load_original_checkpoint(model, prefix)
    except checkpoints.CheckpointMismatchError as err:
        lines = str(err).splitlines()
        raise UserError(
            f"{prefix}: cannot fill this model: "
            + "; ".join(line.strip() for line in lines[1:6])
            + (f"; ... ({len(lines) - 6} more)" if len(lines) > 6 else "")
        ) from None


def eval_block(
    metrics, step, fmt: EvalFormat, key, best_before, best_after, saved_from=None
) -> str:
    """One checkpoint's lines of eval_results.txt in the original's layout."""
    values = fmt.written(metrics)
    values["global_step"] = int(step)
    lines = [f"{k} = {fmt.text(values[k])}" for k in sorted(values)]
    saved = []
    if fmt.saved_lines and saved_from:
        best = OutputFolder(os.path.dirname(saved_from)).best_prefix
        saved = [
            f"saved {saved_from}.{ext} to {best}.{ext}" for ext in ("data-00000-of-00001", "index")
        ]
    if fmt.saved_after_first_key:
        lines[1:1], saved = saved, []
    if fmt.best == "before":
        lines.append(f"best = {fmt.text(best_before)}")
    lines += saved
    if fmt.best == "after":
        lines.append(f"best {key} = {fmt.text(best_after)}")
    if fmt.separator:
        lines.append(_SEPARATOR)
    return "\n".join(lines) + "\n"


def final_block(metrics, step, fmt: EvalFormat) -> str:
    """The lines run_squad_*.py wrote after its last checkpoint: the best checkpoint's
    metrics (sorted, without global_step) and the step it came from."""
    values = fmt.written(metrics)
    lines = [f"{k} = {fmt.text(values[k])}" for k in sorted(values)]
    # The original ended the file there without a newline; ours may be appended to.
    return "\n".join(lines + [f"best perf happened at step: {int(step)}"]) + "\n"


def read_eval_results(output_dir, name=EVAL_RESULTS_NAME) -> dict[int, dict]:
    """{step: {key: value}} of the checkpoints in eval_results.txt (or the file `name`).
    Reads every layout the original scripts wrote (blocks end at a separator line or when
    a key repeats) and ours; "best ..." and "saved ..." lines are skipped. Values are
    floats where they parse."""
    path = OutputFolder(output_dir).results_path(name)
    if not tf.io.gfile.exists(path):
        return {}
    blocks, current = [], {}
    for line in fileio.read_text(path).splitlines():
        key, sep, value = line.partition(" = ")
        if line.startswith("="):
            blocks.append(current)
            current = {}
            continue
        if not sep or key == "best" or key.startswith(("best ", "saved ")):
            continue
        if key in current:
            blocks.append(current)
            current = {}
        try:
            current[key] = float(value)
        except ValueError:
            current[key] = value
    blocks.append(current)
    return {int(b.pop("global_step")): b for b in blocks if "global_step" in b}


def write_eval_summaries(output_dir, metrics, global_step) -> None:
    """The metrics as TensorBoard scalars under <output_dir>/eval at `global_step`."""
    writer = tf.summary.create_file_writer(OutputFolder(output_dir).summaries("eval"))
    with writer.as_default(step=global_step):
        for name, value in metrics.items():
            if isinstance(value, (int, float)):
                tf.summary.scalar(name, value)
    writer.flush()


class CheckpointSelector:
    """Evaluates checkpoints on dev and keeps the best as model.ckpt-best.

    evaluate(): the dev metrics of the model's current weights; `key` names the one
    to maximize. Only the chief writes files.
    """

    def __init__(
        self,
        key: str,
        output_dir: str,
        model,
        evaluate: Callable[[], dict],
        head: str,
        is_chief: bool = True,
        fmt: EvalFormat = GLUE_FORMAT,
    ):
        self.key = key
        self.output_dir = output_dir
        self.folder = OutputFolder(output_dir)
        self.model = model
        self.evaluate = evaluate
        self.head = head
        self.is_chief = is_chief
        self.fmt = fmt
        self.evaluated = 0  # checkpoints this run evaluated
        self.results = read_eval_results(output_dir)  # step -> metrics
        self.best = self.folder.read_best()
        if self.best is not None and self.best["global_step"] not in self.results:
            # A run stopped after recording this best but before logging its step in
            # eval_results.txt (the last write of an evaluation): the step is evaluated
            # again, against the best before it.
            self.best = self.best.get("previous")

    def evaluate_current(self, step) -> dict:
        """Evaluates the model's current weights as global step `step`."""
        result = self.evaluate()
        self.results[int(step)] = result
        value = result[self.key]
        _logger.info(
            "eval at step %d: %s",
            step,
            ", ".join(f"{k} = {v:.4f}" for k, v in sorted(result.items())),
        )
        if not self.is_chief:
            return result
        before = self.best["value"] if self.best is not None else -1
        improved = self.best is None or value > self.best["value"]
        if improved:
            checkpoints.save_original_checkpoint(
                self.model,
                self.folder.best_prefix,
                global_step=step,
                update_checkpoint_state=False,
            )  # the `checkpoint` file names model.ckpt-<step>
            previous = self.best and {k: v for k, v in self.best.items() if k != "previous"}
            self.best = {
                "global_step": int(step),
                "key": self.key,
                "value": float(value),
                "checkpoint": BEST_NAME,
                "metrics": result,
                "previous": previous,  # the best again if this step's log is lost
            }
            fileio.atomic_write_text(
                self.folder.best_record_path,
                json.dumps(self.best, indent=2, sort_keys=True) + "\n",
            )
            _logger.info("new best %s = %.4f at step %d -> %s", self.key, value, step, BEST_NAME)
        saved_from = self.folder.weights_prefix(step) if improved and step else None
        fileio.atomic_write_text(
            self.folder.best_trial_path,
            f"{int(step)}:{self.best['global_step']}:{self.fmt.text(self.best['value'])}",
        )
        # Last: the step's block marks it evaluated (a run stopped before it evaluates
        # the step again and rewrites the files above the same way).
        path = self.folder.results_path()
        block = eval_block(result, step, self.fmt, self.key, before, self.best["value"], saved_from)
        fileio.atomic_write_text(path, fileio.read_text(path) + block)
        self.evaluated += 1
        write_eval_summaries(self.output_dir, result, step)
        return result

    def write_final_block(self) -> None:
        """Appends the format's final block (`EvalFormat.final_block`) when this run
        evaluated a checkpoint and one is the best."""
        if not (self.fmt.final_block and self.evaluated and self.best and self.is_chief):
            return
        path = self.folder.results_path()
        block = final_block(self.best["metrics"], self.best["global_step"], self.fmt)
        fileio.atomic_write_text(path, fileio.read_text(path) + block)

    def evaluate_pending(self, skip=None) -> int:
        """Evaluates every training checkpoint (either format) not yet in
        eval_results.txt, in step order, but those for which `skip(step, prefix)` is
        true. Returns the number evaluated."""
        count = 0
        for step, prefix in self.folder.contents().trained_checkpoints():
            if step in self.results or (skip is not None and skip(step, prefix)):
                continue
            restore_checkpoint(self.model, prefix, self.head)
            self.evaluate_current(step)
            count += 1
        return count


__all__ = [
    "EvalFormat",
    "GLUE_FORMAT",
    "RACE_FORMAT",
    "SQUAD_FORMAT",
    "SQUAD_V2_FORMAT",
    "final_block",
    "PRETRAINING_FORMAT",
    "CheckpointSelector",
    "restore_checkpoint",
    "eval_block",
    "read_eval_results",
    "write_eval_summaries",
]
