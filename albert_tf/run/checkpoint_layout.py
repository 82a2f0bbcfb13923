"""The checkpoints of a training run's output folder: which files a saved step has, and
how they are saved, listed, restored and removed. The one module that knows the layout.

A step N on the --save_checkpoints_steps schedule (and the last step) is saved as

    model.ckpt-N.index, model.ckpt-N.data-00000-of-00001
        the weights, their adam_m/adam_v slots and global_step under the original's
        variable names: the only copy of the weights, what the original's tools and
        tf.train.latest_checkpoint read;
    train_state/state-N.index, train_state/state-N.data-00000-of-00001
        what only a resume needs (tf.train.Checkpoint): the input iterator's position,
        the dropout random streams and any variable without an original name
        (kilobytes for a plain input, the shuffle buffers' records otherwise);
    checkpoint
        the TF state file naming the newest model.ckpt-N and every kept one.

A signal that stops a run between scheduled saves writes `ckpt-N` instead: one
tf.train.Checkpoint with the model, optimizer, input position and random streams, a
point to resume from only (not evaluated, no state-file entry), removed by the next
scheduled save. Output folders of earlier versions hold such a `ckpt-N` at every saved
step (next to a model.ckpt-N copy); they resume from it the same way.

Order of a save: train_state/state-N, then model.ckpt-N (each file written under a
temporary name and renamed into place, the `.index` last), then the `checkpoint` file,
then the removal of older steps (their model.ckpt files before their train_state). So
step N counts -- is listed by `resume_points` -- only once model.ckpt-N.index and
train_state/state-N.index both exist: a process killed during a save leaves the
previous step to resume from, plus at most an orphaned train_state/state-N and
temporaries, which `remove_unfinished` deletes before the next run saves. On a
filesystem without atomic rename (Cloud Storage copies, then deletes) each object
still appears under its final name only once complete, so the same rule holds; a
reader there may also see a temporary that is not yet deleted.

API: `resume_points` / `saved_steps` / `latest_step` list a folder; `save` and
`save_resume_point` write; `restore` reads any resume point; `remove_step`,
`remove_unfinished` and `write_state_file` keep the folder tidy.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re

import tensorflow as tf

from albert_tf.weights import checkpoints

_logger = logging.getLogger(__name__)

WEIGHTS_NAME = "model.ckpt"
STATE_FOLDER = "train_state"
STATE_NAME = "state"
RESUME_POINT_NAME = "ckpt"  # object-based: a signal's resume point, or an older layout
_BUNDLE_SUFFIX = re.compile(r"\.(index|data-\d{5}-of-\d{5}|meta)")


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


def weights_prefix(output_dir, step) -> str:
    return os.path.join(output_dir, f"{WEIGHTS_NAME}-{step}")


def state_prefix(output_dir, step) -> str:
    return os.path.join(output_dir, STATE_FOLDER, f"{STATE_NAME}-{step}")


def resume_point_prefix(output_dir, step) -> str:
    return os.path.join(output_dir, f"{RESUME_POINT_NAME}-{step}")


def _indexed(folder, name) -> dict[int, str]:
    """{N: prefix} of the `<name>-N.index` files in folder."""
    pattern = re.compile(re.escape(name) + r"-(\d+)\.index")
    found = {}
    for index in tf.io.gfile.glob(os.path.join(folder, f"{name}-*.index")):
        match = pattern.fullmatch(os.path.basename(index))
        if match:
            found[int(match.group(1))] = index[: -len(".index")]
    return found


def saved_steps(output_dir) -> list[SavedStep]:
    """Every step with any of its files in output_dir, complete or not, in step order."""
    weights = _indexed(output_dir, WEIGHTS_NAME)
    states = _indexed(os.path.join(output_dir, STATE_FOLDER), STATE_NAME)
    points = _indexed(output_dir, RESUME_POINT_NAME)
    return [
        SavedStep(step, weights.get(step), states.get(step), points.get(step))
        for step in sorted(set(weights) | set(states) | set(points))
    ]


def resume_points(output_dir) -> list[tuple[int, str]]:
    """[(step, prefix)] of the steps a run can resume from, in step order: model.ckpt-N
    with its train_state, or a ckpt-N."""
    return [(s.step, s.prefix) for s in saved_steps(output_dir) if s.resumable]


def latest_step(output_dir) -> int | None:
    """The newest step a run can resume from, or None."""
    points = resume_points(output_dir)
    return points[-1][0] if points else None


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


def save(output_dir, step, model, optimizer, state: dict, *, write_weights=True) -> str:
    """Writes step `step` (module docstring): train_state/state-N from `state`
    (`state_objects`), then, with `write_weights` (the chief), model.ckpt-N. The
    `checkpoint` file is left to `write_state_file`. Returns the model.ckpt-N prefix."""
    tf.train.Checkpoint(**state).write(state_prefix(output_dir, step))
    prefix = weights_prefix(output_dir, step)
    if write_weights:
        checkpoints.save_original_checkpoint(
            model, prefix, global_step=step, optimizer=optimizer, update_checkpoint_state=False
        )
    return prefix


def save_weights(output_dir, step, model, optimizer) -> str:
    """Writes model.ckpt-N alone (completing a resume point of an older layout)."""
    return checkpoints.save_original_checkpoint(
        model,
        weights_prefix(output_dir, step),
        global_step=step,
        optimizer=optimizer,
        update_checkpoint_state=False,
    )


def save_resume_point(output_dir, step, whole: dict) -> str:
    """Writes ckpt-N: the objects of `whole` (model, optimizer, iterator, random_streams:
    a list of the model's random-stream variables) in one tf.train.Checkpoint."""
    checkpoint = tf.train.Checkpoint(**whole)
    _ = checkpoint.save_counter  # in every ckpt-N, as earlier versions wrote them
    return checkpoint.write(resume_point_prefix(output_dir, step))


def write_state_file(output_dir, steps) -> None:
    """The `checkpoint` file: the newest of `steps` (that has a model.ckpt) as
    model_checkpoint_path, all of them as all_model_checkpoint_paths."""
    names = [os.path.basename(weights_prefix(output_dir, s)) for s in sorted(steps)]
    if names:
        checkpoints.write_checkpoint_state(output_dir, names)


def restore(output_dir, step, model, optimizer, state: dict, whole: dict) -> str:
    """Restores resume point `step` of output_dir (`resume_points`): its ckpt-N into
    `whole` (see `restore_resume_point`), else model.ckpt-N into the model and the
    optimizer's slots and step, and train_state/state-N into `state`. Returns the
    prefix restored."""
    found = {s.step: s for s in saved_steps(output_dir)}[step]
    if found.resume_point is not None:
        return restore_resume_point(whole, found.resume_point)
    checkpoints.load_original_checkpoint(model, found.weights, optimizer=optimizer)
    reader = tf.train.load_checkpoint(found.weights)
    optimizer.iterations.assign(int(reader.get_tensor("global_step")))
    tf.train.Checkpoint(**state).read(found.state).assert_existing_objects_matched()
    _logger.info("resumed from %s (with %s)", found.weights, found.state)
    return found.weights


def restore_resume_point(whole: dict, prefix) -> str:
    """Restores a ckpt-N into the objects of `whole` (`save_resume_point`); one written
    before the random streams were saved restores without them, with a warning."""
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


def _remove_bundle(prefix) -> None:
    for path in tf.io.gfile.glob(prefix + ".*"):
        if _BUNDLE_SUFFIX.fullmatch(path[len(prefix) :]):
            tf.io.gfile.remove(path)


def remove_step(saved: SavedStep) -> None:
    """Deletes every file of a step: model.ckpt-N, ckpt-N, then train_state/state-N."""
    for prefix in (saved.weights, saved.resume_point, saved.state):
        if prefix is not None:
            _remove_bundle(prefix)


def remove_unfinished(output_dir) -> list[str]:
    """Removes what saves killed mid-write left in output_dir: TensorFlow's
    `<prefix>_temp` folders (a Checkpoint's shards are written there, then renamed; its
    docs say an orphaned one is safe to remove once no save runs) and train_state files
    of a step whose model.ckpt never appeared. Call on the chief before its first save.
    Returns the removed paths."""
    removed = []
    state_folder = os.path.join(output_dir, STATE_FOLDER)
    temp = re.compile(rf"({re.escape(WEIGHTS_NAME)}|{RESUME_POINT_NAME}|{STATE_NAME})-\d+_temp")
    for folder in (output_dir, state_folder):
        for path in tf.io.gfile.glob(os.path.join(folder, "*_temp")):
            if temp.fullmatch(os.path.basename(path)) and tf.io.gfile.isdir(path):
                tf.io.gfile.rmtree(path)
                removed.append(path)
    for saved in saved_steps(output_dir):
        if saved.state is not None and saved.weights is None:
            _remove_bundle(saved.state)
            removed.append(saved.state)
    if removed:
        _logger.info("removed the unfinished save(s) of a killed run: %s", ", ".join(removed))
    return removed


__all__ = [
    "SavedStep",
    "saved_steps",
    "resume_points",
    "latest_step",
    "state_objects",
    "save",
    "save_weights",
    "save_resume_point",
    "write_state_file",
    "restore",
    "restore_resume_point",
    "remove_step",
    "remove_unfinished",
    "weights_prefix",
    "state_prefix",
    "resume_point_prefix",
]
