"""A run's output folder (--output_dir): the one module that knows its files' names and
answers every question about them -- the saved steps, the latest, the best, the input
record, the task it holds, the lock file and the evaluation outputs. `OutputFolder(path)`
is that answer; nothing else globs the folder or spells a name in it.

    model.ckpt-N.index, model.ckpt-N.data-00000-of-00001
        the weights, their adam_m/adam_v slots and global_step under the original's
        variable names: the only copy of the weights, what the original's tools and
        tf.train.latest_checkpoint read;
    train_state/state-N.index, train_state/state-N.data-00000-of-00001
        what only a resume needs (tf.train.Checkpoint): the input iterator's position,
        the dropout random streams and any variable without an original name
        (kilobytes for a plain input, the shuffle buffers' records otherwise);
    checkpoint
        the TF state file naming the newest model.ckpt-N and every kept one;
    model.ckpt-best.*, best_checkpoint, best_trial.txt, eval_results.txt, eval/
        the checkpoint best on dev (original format), its JSON description, the
        original's "<last step>:<best step>:<best value>", every evaluated step's metrics
        (albert_tf/run/selection.py) and their TensorBoard scalars;
    run_record.json
        the flags that shape the training input (albert_tf/run/run_record.py);
    task.json
        what the checkpoints are for beyond their shapes (`driver.Task.output_identity`);
    albert_config.json, 30k-clean.model, 30k-clean.vocab
        a pretraining run's config and tokenizer beside its checkpoints: the folder is a
        release folder (albert_tf/weights/release.py);
    .albert_tf.lock
        the run writing in the folder (albert_tf/run/run_lock.py).

A step N on the --save_checkpoints_steps schedule (and the last step) is saved as
model.ckpt-N plus train_state/state-N. A signal that stops a run between scheduled saves
writes `ckpt-N` instead: one tf.train.Checkpoint with the model, optimizer, input
position and random streams, a point to resume from only (not evaluated, no state-file
entry), removed by the next scheduled save. Output folders of earlier versions hold such
a `ckpt-N` at every saved step (next to a model.ckpt-N copy); they resume from it the
same way.

Order of a save: train_state/state-N, then model.ckpt-N (each file written under a
temporary name and renamed into place, the `.index` last), then the `checkpoint` file,
then the removal of older steps (their model.ckpt files before their train_state). So
step N counts -- is listed by `Contents.resume_points` -- only once model.ckpt-N.index and
train_state/state-N.index both exist: a process killed during a save leaves the
previous step to resume from, plus at most an orphaned train_state/state-N and
temporaries, which `remove_unfinished` deletes before the next run saves. On a
filesystem without atomic rename (Cloud Storage copies, then deletes) each object
still appears under its final name only once complete, so the same rule holds; a
reader there may also see a temporary that is not yet deleted.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re

import tensorflow as tf

from albert_tf import fileio, output_paths
from albert_tf.errors import UserError
from albert_tf.weights import checkpoints, release

_logger = logging.getLogger(__name__)

WEIGHTS_NAME = "model.ckpt"
STATE_FOLDER = "train_state"
STATE_NAME = "state"
RESUME_POINT_NAME = "ckpt"  # object-based: a signal's resume point, or an older layout
# A release folder is an output folder with its best checkpoint kept: one name for both.
BEST_NAME = release.CHECKPOINT_NAME
BEST_RECORD_NAME = "best_checkpoint"
BEST_TRIAL_NAME = "best_trial.txt"
EVAL_RESULTS_NAME = "eval_results.txt"
RECORD_NAME = "run_record.json"
TASK_NAME = "task.json"
LOCK_NAME = ".albert_tf.lock"
NON_CHIEF_FOLDER = ".non_chief"  # <pid>/ of each non-chief worker: its part of every save
_BUNDLE_SUFFIX = re.compile(r"\.(index|data-\d{5}-of-\d{5}|meta)")
_OWN_CHECKPOINT = re.compile(
    rf"{re.escape(BEST_NAME)}|{re.escape(WEIGHTS_NAME)}-\d+|{RESUME_POINT_NAME}-\d+"
)


@dataclasses.dataclass(frozen=True)
class SavedStep:
    """The files of one step in an output folder (prefixes; None where absent)."""

    step: int
    weights: str | None = None  # model.ckpt-N
    state: str | None = None  # train_state/state-N
    resume_point: str | None = None  # ckpt-N (a signal's, or an older layout's)

    @property
    def resumable(self) -> bool:
        return self.resume_point is not None or (
            self.weights is not None and self.state is not None
        )

    @property
    def prefix(self) -> str:
        """What to name this step by: its ckpt-N if any, else model.ckpt-N."""
        return self.resume_point or self.weights or self.state


def _indexed(folder, name) -> dict[int, str]:
    """{N: prefix} of the `<name>-N.index` files in folder."""
    pattern = re.compile(re.escape(name) + r"-(\d+)\.index")
    found = {}
    for index in tf.io.gfile.glob(os.path.join(folder, f"{name}-*.index")):
        match = pattern.fullmatch(os.path.basename(index))
        if match:
            found[int(match.group(1))] = index[: -len(".index")]
    return found


def _remove_bundle(prefix) -> None:
    for path in tf.io.gfile.glob(prefix + ".*"):
        if _BUNDLE_SUFFIX.fullmatch(path[len(prefix) :]):
            tf.io.gfile.remove(path)


def is_resume_point(prefix) -> bool:
    """Whether a checkpoint prefix names a `ckpt-N` (a signal's resume point, or an older
    layout's step) rather than a model.ckpt-N."""
    return re.fullmatch(rf"{RESUME_POINT_NAME}-\d+", os.path.basename(prefix)) is not None


@dataclasses.dataclass(frozen=True)
class Contents:
    """The checkpoints of an output folder as it was listed (`OutputFolder.contents`):
    every saved step, and model.ckpt-best's prefix (None when absent)."""

    steps: tuple[SavedStep, ...]
    best: str | None = None

    def resume_points(self) -> list[tuple[int, str]]:
        """[(step, prefix)] of the steps a run can resume from, in step order: model.ckpt-N
        with its train_state, or a ckpt-N."""
        return [(s.step, s.prefix) for s in self.steps if s.resumable]

    @property
    def latest_step(self) -> int | None:
        """The newest step a run can resume from, or None."""
        points = self.resume_points()
        return points[-1][0] if points else None

    def original_checkpoints(self) -> list[tuple[int, str]]:
        """[(step, prefix)] of the original-format model.ckpt-<step> files, in step order
        (with or without their train_state: a folder the original code trained has none)."""
        return [(s.step, s.weights) for s in self.steps if s.weights]

    def trained_checkpoints(self) -> list[tuple[int, str]]:
        """[(step, prefix)] of every training checkpoint, either format, in step order;
        where a step has both, the original-format one (loadable by name)."""
        return [
            (s.step, s.weights or s.resume_point) for s in self.steps if s.weights or s.resume_point
        ]


class OutputFolder:
    """The output folder at `path` (a local path or a gs:// URI): its files' names, what
    it holds, and the writes that keep it consistent (module docstring). Every answer is
    read afresh from the folder."""

    def __init__(self, path):
        self.path = os.fspath(path)

    def __repr__(self) -> str:
        return f"OutputFolder({self.path!r})"

    # --- names --------------------------------------------------------------------------
    def weights_prefix(self, step) -> str:
        return os.path.join(self.path, f"{WEIGHTS_NAME}-{step}")

    def state_prefix(self, step) -> str:
        return os.path.join(self.path, STATE_FOLDER, f"{STATE_NAME}-{step}")

    def resume_point_prefix(self, step) -> str:
        return os.path.join(self.path, f"{RESUME_POINT_NAME}-{step}")

    @property
    def best_prefix(self) -> str:
        return os.path.join(self.path, BEST_NAME)

    @property
    def best_record_path(self) -> str:
        return os.path.join(self.path, BEST_RECORD_NAME)

    @property
    def best_trial_path(self) -> str:
        return os.path.join(self.path, BEST_TRIAL_NAME)

    def results_path(self, name=EVAL_RESULTS_NAME) -> str:
        """eval_results.txt, or another results file of the folder (`name`)."""
        return os.path.join(self.path, name)

    def summaries(self, kind) -> str:
        """The TensorBoard folder of `kind` ("train", "eval")."""
        return os.path.join(self.path, kind)

    @property
    def record_path(self) -> str:
        return os.path.join(self.path, RECORD_NAME)

    @property
    def task_path(self) -> str:
        return os.path.join(self.path, TASK_NAME)

    @property
    def lock_path(self) -> str:
        return os.path.join(self.path, LOCK_NAME)

    @property
    def config_path(self) -> str:
        return os.path.join(self.path, release.CONFIG_NAME)

    def non_chief(self, worker_id) -> OutputFolder:
        """The folder of a non-chief worker's part of each save (its own train_state;
        only the chief's lands in this folder)."""
        return OutputFolder(os.path.join(self.path, NON_CHIEF_FOLDER, str(worker_id)))

    def writes_checkpoint(self, prefix) -> bool:
        """Whether `prefix` is a checkpoint of this folder under a name a run writes
        (model.ckpt-best, model.ckpt-<step>, ckpt-<step>), so a run would replace it."""
        own = _OWN_CHECKPOINT.fullmatch(os.path.basename(prefix))
        folder = output_paths.resolved(os.path.dirname(prefix))
        return bool(own) and folder == output_paths.resolved(self.path)

    # --- what it holds ------------------------------------------------------------------
    def saved_steps(self) -> list[SavedStep]:
        """Every step with any of its files, complete or not, in step order."""
        weights = _indexed(self.path, WEIGHTS_NAME)
        states = _indexed(os.path.join(self.path, STATE_FOLDER), STATE_NAME)
        points = _indexed(self.path, RESUME_POINT_NAME)
        return [
            SavedStep(step, weights.get(step), states.get(step), points.get(step))
            for step in sorted(set(weights) | set(states) | set(points))
        ]

    def contents(self) -> Contents:
        """The checkpoints the folder holds now, listed once."""
        best = self.best_prefix if tf.io.gfile.exists(self.best_prefix + ".index") else None
        return Contents(tuple(self.saved_steps()), best)

    def _read_json(self, path, name) -> object | None:
        if not tf.io.gfile.exists(path):
            return None
        try:
            return json.loads(fileio.read_text(path))
        except ValueError as err:
            raise UserError(f"{path}: not JSON ({err}); expected what {name} holds") from None

    def read_record(self) -> dict | None:
        """run_record.json's flag values, or None when the folder has none."""
        recorded = self._read_json(self.record_path, RECORD_NAME)
        if recorded is not None and not isinstance(recorded, dict):
            raise UserError(f"{self.record_path}: expected a JSON object of flag values")
        return recorded

    def write_record(self, values: dict) -> None:
        fileio.atomic_write_text(
            self.record_path, json.dumps(values, indent=2, sort_keys=True) + "\n"
        )

    def read_task(self) -> object | None:
        """task.json's identity of the task, or None when the folder has none."""
        return self._read_json(self.task_path, TASK_NAME)

    def write_task(self, identity: dict) -> None:
        fileio.atomic_write_text(
            self.task_path, json.dumps(identity, indent=2, sort_keys=True) + "\n"
        )

    def write_release_files(self, config, spm_model_file) -> None:
        """The tokenizer (`release.write_tokenizer_files`; none without `spm_model_file`)
        and the config of the weights, so that the folder is a release folder that the
        original's export_to_tfhub.py takes. The config last: a folder is taken for a
        release folder once it has one (`release.is_release_folder`)."""
        if spm_model_file:
            release.write_tokenizer_files(self.path, spm_model_file)
        config.to_json_file(self.config_path)

    def read_best(self) -> dict | None:
        """The best_checkpoint record (albert_tf/run/selection.py), or None."""
        if not tf.io.gfile.exists(self.best_record_path):
            return None
        return json.loads(fileio.read_text(self.best_record_path))

    # --- saves ----------------------------------------------------------------------------
    def save(self, step, model, optimizer, state: dict, *, write_weights=True) -> str:
        """Writes step `step` (module docstring): train_state/state-N from `state`
        (`state_objects`), then, with `write_weights` (the chief), model.ckpt-N. The
        `checkpoint` file is left to `write_state_file`. Returns the model.ckpt-N prefix."""
        tf.train.Checkpoint(**state).write(self.state_prefix(step))
        prefix = self.weights_prefix(step)
        if write_weights:
            checkpoints.save_original_checkpoint(
                model, prefix, global_step=step, optimizer=optimizer, update_checkpoint_state=False
            )
        return prefix

    def save_weights(self, step, model, optimizer) -> str:
        """Writes model.ckpt-N alone (completing a resume point of an older layout)."""
        return checkpoints.save_original_checkpoint(
            model,
            self.weights_prefix(step),
            global_step=step,
            optimizer=optimizer,
            update_checkpoint_state=False,
        )

    def save_resume_point(self, step, whole: dict) -> str:
        """Writes ckpt-N: the objects of `whole` (model, optimizer, iterator,
        random_streams: a list of the model's random-stream variables) in one
        tf.train.Checkpoint."""
        checkpoint = tf.train.Checkpoint(**whole)
        _ = checkpoint.save_counter  # in every ckpt-N, as earlier versions wrote them
        return checkpoint.write(self.resume_point_prefix(step))

    def write_state_file(self, steps) -> None:
        """The `checkpoint` file: the newest of `steps` (that has a model.ckpt) as
        model_checkpoint_path, all of them as all_model_checkpoint_paths."""
        names = self._weights_names(steps)
        if names:
            checkpoints.write_checkpoint_state(self.path, names)

    def _weights_names(self, steps) -> list[str]:
        """The model.ckpt-N names of `steps`, in step order, as the `checkpoint` file
        lists them."""
        return [os.path.basename(self.weights_prefix(s)) for s in sorted(steps)]

    def complete_step(self, step, model, optimizer) -> None:
        """After a resume from step `step` (on the schedule), what a run killed during
        that save left undone: the model.ckpt-N of an older layout's ckpt-N, then the
        `checkpoint` file naming it."""
        with_weights = [s.step for s in self.saved_steps() if s.weights]
        names = self._weights_names({*with_weights, step})
        if step not in with_weights:
            self.save_weights(step, model, optimizer)
        checkpoints.write_checkpoint_state(self.path, names)

    def restore(self, step, model, optimizer, state: dict, whole: dict) -> str:
        """Restores resume point `step` (`Contents.resume_points`): its ckpt-N into `whole` (see
        `restore_resume_point`), else model.ckpt-N into the model and the optimizer's
        slots and step, and train_state/state-N into `state`. Returns the prefix
        restored."""
        found = {s.step: s for s in self.saved_steps()}[step]
        if found.resume_point is not None:
            return restore_resume_point(whole, found.resume_point)
        checkpoints.load_original_checkpoint(model, found.weights, optimizer=optimizer)
        reader = tf.train.load_checkpoint(found.weights)
        optimizer.iterations.assign(int(reader.get_tensor("global_step")))
        tf.train.Checkpoint(**state).read(found.state).assert_existing_objects_matched()
        _logger.info("resumed from %s (with %s)", found.weights, found.state)
        return found.weights

    def restore_original(self, step, prefix, model, optimizer) -> int:
        """Continues from model.ckpt-N (`prefix`) alone, when the folder has no point to
        resume from (a folder the original code trained): the weights, the optimizer's
        slots and its step (the checkpoint's global_step, else N); the input starts from
        its beginning, as the original's did. Returns the step."""
        try:
            checkpoints.load_original_checkpoint(model, prefix, optimizer=optimizer)
        except checkpoints.CheckpointMismatchError as err:
            raise UserError(f"cannot resume from {prefix}: {err.summary()}") from None
        values = checkpoints.checkpoint_variable_shapes(prefix)
        if "global_step" in values:
            step = int(tf.train.load_checkpoint(prefix).get_tensor("global_step"))
        optimizer.iterations.assign(step)
        _logger.warning(
            "resumed from the original-format %s (step %d); the input starts from its beginning",
            prefix,
            step,
        )
        return step

    @staticmethod
    def remove_step(saved: SavedStep) -> None:
        """Deletes every file of a step: model.ckpt-N, ckpt-N, then train_state/state-N."""
        for prefix in (saved.weights, saved.resume_point, saved.state):
            if prefix is not None:
                _remove_bundle(prefix)

    def remove_unfinished(self) -> list[str]:
        """Removes what saves killed mid-write left: TensorFlow's `<prefix>_temp` folders
        (a Checkpoint's shards are written there, then renamed; its docs say an orphaned
        one is safe to remove once no save runs) and train_state files of a step whose
        model.ckpt never appeared. Call on the chief before its first save. Returns the
        removed paths."""
        removed = []
        state_folder = os.path.join(self.path, STATE_FOLDER)
        temp = re.compile(rf"({re.escape(WEIGHTS_NAME)}|{RESUME_POINT_NAME}|{STATE_NAME})-\d+_temp")
        for folder in (self.path, state_folder):
            for path in tf.io.gfile.glob(os.path.join(folder, "*_temp")):
                if temp.fullmatch(os.path.basename(path)) and tf.io.gfile.isdir(path):
                    tf.io.gfile.rmtree(path)
                    removed.append(path)
        for saved in self.saved_steps():
            if saved.state is not None and saved.weights is None:
                _remove_bundle(saved.state)
                removed.append(saved.state)
        if removed:
            _logger.info("removed the unfinished save(s) of a killed run: %s", ", ".join(removed))
        return removed


def state_objects(model, optimizer, iterator=None) -> dict:
    """What train_state/state-N holds: the input iterator (when it can be saved) and
    every model or optimizer variable that model.ckpt-N does not hold under an original
    name (the dropout random streams; the optimizer's step is its global_step)."""
    written = set()
    for variable in checkpoints.original_variable_map(model).values():
        written.add(id(variable))
        for suffix in checkpoints.OPTIMIZER_SLOT_SUFFIXES:
            written.add(id(optimizer.get_slot(variable, suffix)))
    written.add(id(optimizer.iterations))
    others = [
        getattr(v, "value", v)  # Keras variables: their tf.Variable, which Checkpoint tracks
        for v in [*model.variables, *optimizer.variables]
        if id(v) not in written
    ]
    objects = {"variables": others}
    if iterator is not None:
        objects["iterator"] = iterator
    return objects


def restore_resume_point(whole: dict, prefix) -> str:
    """Restores a ckpt-N into the objects of `whole` (`OutputFolder.save_resume_point`);
    one written before the random streams were saved restores without them, with a
    warning."""
    saved = {name.split("/")[0] for name, _ in tf.train.list_variables(prefix)}
    if "random_streams" in whole and "random_streams" not in saved:
        _logger.warning(
            "%s holds no dropout random state (written by an older albert_tf): the "
            "resumed run draws other dropout masks than an uninterrupted one",
            prefix,
        )
        without = {k: v for k, v in whole.items() if k != "random_streams"}
        tf.train.Checkpoint(**without).restore(prefix).expect_partial()
    else:
        checkpoint = tf.train.Checkpoint(**whole)
        _ = checkpoint.save_counter  # as `save_resume_point` wrote it
        checkpoint.restore(prefix).assert_existing_objects_matched()
    _logger.info("resumed from %s", prefix)
    return prefix


__all__ = [
    "OutputFolder",
    "Contents",
    "SavedStep",
    "is_resume_point",
    "state_objects",
    "restore_resume_point",
    "WEIGHTS_NAME",
    "STATE_FOLDER",
    "RESUME_POINT_NAME",
    "BEST_NAME",
    "BEST_RECORD_NAME",
    "BEST_TRIAL_NAME",
    "EVAL_RESULTS_NAME",
    "RECORD_NAME",
    "TASK_NAME",
    "LOCK_NAME",
]
