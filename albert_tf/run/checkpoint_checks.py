"""What a run checks about the checkpoints it starts from, before anything is written:
the output folder's own (complete files), --init_checkpoint's (complete, its
albert_config.json agrees with --albert_config_file; when the output folder's
checkpoints win, it must still fit the model, and the log says which one is used), and
the one-line report of a checkpoint found damaged while it is read. What they judge is
read by `InitCheckpoint` (albert_tf/weights/init_checkpoint.py) and the checkpoints'
indexes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re

import tensorflow as tf

from albert_tf.errors import UserError
from albert_tf.run.output_folder import OutputFolder
from albert_tf.weights import checkpoints
from albert_tf.weights.init_checkpoint import InitCheckpoint

_logger = logging.getLogger(__name__)
# Fields that do not change the network's weights: fine-tuning may set other values.
_FREE_FIELDS = ("hidden_dropout_prob", "attention_probs_dropout_prob", "classifier_dropout_prob")


def check_output_checkpoints_intact(output_dir: str, steps) -> None:
    """UserError naming the first checkpoint file of `output_dir` whose index cannot be
    read or whose data files are missing or cut short, with the files to remove to go on
    from the step before. Looks at every saved step (`steps`, `Contents.steps` of
    albert_tf/run/output_folder.py), the newest (the one resumed) first, whatever files
    it has; reads only the indexes."""
    for saved in reversed(steps):
        prefixes = [p for p in (saved.weights, saved.state, saved.resume_point) if p]
        for prefix in prefixes:
            try:
                checkpoints.check_checkpoint_readable(prefix)
            except (UserError, FileNotFoundError) as err:
                files = ", ".join(f"{p}.*" for p in prefixes)
                raise UserError(
                    f"--output_dir={output_dir}: checkpoint {os.path.basename(prefix)} is "
                    f"damaged ({err}); expected complete checkpoint files: remove the files "
                    f"of step {saved.step} ({files}) to go on from the step before, or use "
                    "another --output_dir"
                ) from None


def check_init(init: InitCheckpoint, config, config_file: str | None, other_depth=False) -> str:
    """UserError when --init_checkpoint's files are not complete (`complete_prefix`), or
    when its own config (the albert_config.json of a release or checkpoint folder, the
    config.json of a Hugging Face folder or keras-hub preset) describes another network
    than the run's config (`config`, read from `config_file`); dropout rates may differ,
    and with `other_depth` (--init_from_other_depth) num_hidden_layers too. A checkpoint
    without a config of its own is not compared. Returns its prefix."""
    from albert_tf.model.config import differing_fields

    try:
        prefix = init.complete_prefix()
    except (FileNotFoundError, UserError) as err:
        raise UserError(f"--init_checkpoint={init}: {err}") from None
    found = init.own_config()
    if found is None:
        return prefix
    theirs, source, carried = found
    if config_file and os.path.abspath(source) == os.path.abspath(config_file):
        return prefix
    free = _FREE_FIELDS + (("num_hidden_layers",) if other_depth else ())
    if carried is not None:  # compare only what the folder's config says
        free += tuple((set(theirs.to_dict()) | set(config.to_dict())) - carried)
    differ = differing_fields(theirs, config, ignore=free)
    if differ:
        shown = ", ".join(f"{k}={a!r} vs {b!r}" for k, a, b in differ[:3])
        raise UserError(
            f"--init_checkpoint={init}: its {os.path.basename(source)} ({source}) describes "
            f"another network than --albert_config_file={config_file} ({shown}); expected "
            "the config the checkpoint was trained with"
        )
    return prefix


def check_init_not_replaced(init: InitCheckpoint, output_dir: str) -> None:
    """UserError when --init_checkpoint is a checkpoint of `output_dir` under a name the
    run writes itself (model.ckpt-best, model.ckpt-<step>, ckpt-<step>): a release folder
    used as the output folder would have its weights replaced by the run's."""
    if init.is_hub_module:
        return
    try:
        prefix = init.prefix
    except FileNotFoundError:
        return
    if OutputFolder(output_dir).writes_checkpoint(prefix):
        raise UserError(
            f"--init_checkpoint={init}: {prefix} lies in --output_dir={output_dir}, where this "
            "run writes checkpoints of that name (it would be replaced); expected another "
            "--output_dir"
        )


def check_init_fits(variables: dict, init: InitCheckpoint, shapes: dict, head_patterns=()) -> None:
    """UserError when the original-format --init_checkpoint `init`, whose variables have
    `shapes` (`InitCheckpoint.variable_shapes`), cannot fill the model's encoder
    (`variables`: `checkpoints.original_variable_map` of the model): a variable missing
    or of another shape; the head (`head_patterns`) may be missing. An object checkpoint
    is checked when it is loaded."""
    if checkpoints.OBJECT_GRAPH_KEY in shapes:
        return
    for name, variable in variables.items():
        if any(re.search(p, name) for p in head_patterns) and name not in shapes:
            continue
        if name not in shapes or list(shapes[name]) != list(variable.shape):
            found = list(shapes[name]) if name in shapes else "absent"
            raise UserError(
                f"--init_checkpoint={init}: does not fit this model ({name}: checkpoint "
                f"{found}, model {list(variable.shape)}); expected a checkpoint of the "
                "config given"
            )


def log_resume_wins(init, latest: str) -> None:
    """Says which weights a training run starts from when both exist: `latest`, the
    output folder's newest resume point, not --init_checkpoint `init`."""
    _logger.warning(
        "--init_checkpoint=%s is not loaded: training resumes from %s of --output_dir (an "
        "initial checkpoint only starts a fresh run; use another --output_dir to start from it)",
        init,
        latest,
    )


_RECORD_PROBLEM = re.compile(r"(corrupted|truncated) record at \d+")
_CHECKPOINT_PROBLEM = re.compile(
    r"Checksum does not match|Read less bytes than requested|not an sstable|TensorBundle"
)


def is_damaged_read(err) -> bool:
    """Whether a TensorFlow error met while reading is a damaged file (a TFRecord or a
    checkpoint) rather than a bug: DataLossError, or a checkpoint read's own words."""
    import tensorflow as tf

    return isinstance(err, tf.errors.DataLossError) or bool(
        _CHECKPOINT_PROBLEM.search(err.message or "")
    )


def damaged_read_message(detail: str, record_flags: str, output_dir: str, init: str | None):
    """The one line for a DataLossError met while the run reads: a TFRecord file of the
    input (`record_flags` names them) or a checkpoint (of the output folder, or the
    initial one)."""
    if _RECORD_PROBLEM.search(detail):
        return (
            f"a TFRecord file{' of ' + record_flags if record_flags else ''} is damaged "
            f"({detail}): expected whole records, as TFRecordWriter writes them"
        )
    where = f"--output_dir={output_dir}" + (f" or --init_checkpoint={init}" if init else "")
    return (
        f"a checkpoint of {where} is damaged ({detail}): expected complete checkpoint files; "
        "remove the damaged checkpoint's files (or copy the initial checkpoint again) and "
        "run the same command"
    )


@contextlib.contextmanager
def damaged_reads_reported(record_flags: str, output_dir: str, init: str | None):
    """Turns a damaged file met while the body reads (`is_damaged_read`) into the one-line
    UserError of `damaged_read_message`; any other TensorFlow error passes as it is."""
    try:
        yield
    except tf.errors.OpError as err:
        if not is_damaged_read(err):
            raise
        detail = re.sub(r"^\{\{.*?\}\}\s*|\s*\[Op:.*$", "", err.message.strip().splitlines()[0])
        message = damaged_read_message(detail, record_flags, output_dir, init)
        raise UserError(message) from None


__all__ = [
    "check_init",
    "check_init_not_replaced",
    "check_output_checkpoints_intact",
    "check_init_fits",
    "log_resume_wins",
    "damaged_read_message",
    "damaged_reads_reported",
    "is_damaged_read",
]
