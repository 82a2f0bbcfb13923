"""What a run checks about the checkpoints it starts from, before anything is written:
the output folder's own (complete files), --init_checkpoint's (its albert_config.json
agrees with --albert_config_file; when the output folder's checkpoints win, it must
still fit the model, and the log says which one is used), and the one-line report of a
checkpoint found damaged while it is read.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re

import tensorflow as tf

from albert_tf.errors import UserError
from albert_tf.run.output_folder import OutputFolder
from albert_tf.weights import checkpoints, foreign_folders, hub, release

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


class InitCheckpoint:
    """--init_checkpoint (`value`, as given) with its files looked up once: whether it is
    a TF-Hub module, a Hugging Face or keras-hub folder (both read and checked when the
    model is filled) or a release folder, and the checkpoint prefix it names. A lookup
    that finds nothing raises FileNotFoundError, every time it is asked. The checks ask
    it, and `driver.init_from_checkpoint` loads by it."""

    def __init__(self, value: str):
        self.value = value

    def __str__(self) -> str:
        return self.value

    @functools.cached_property
    def is_hub_module(self) -> bool:
        return hub.is_hub_module(self.value)

    @functools.cached_property
    def foreign_format(self) -> str | None:
        """HUGGINGFACE or KERAS_HUB (albert_tf/weights/foreign_weights.py), else None."""
        return foreign_folders.foreign_format(self.value)

    @property
    def is_foreign(self) -> bool:
        return self.foreign_format is not None

    @functools.cached_property
    def is_release_folder(self) -> bool:
        return release.is_release_folder(self.value)

    @functools.cached_property
    def prefix(self) -> str:
        """The checkpoint prefix: a release folder's, else any form
        `checkpoints.resolve_checkpoint_path` accepts."""
        if self.is_release_folder:
            return release.release_files(self.value).checkpoint
        return checkpoints.resolve_checkpoint_path(self.value)

    @functools.cached_property
    def config_beside(self) -> str | None:
        """The albert_config.json that describes it: the release folder's, or the one in
        the checkpoint's folder; None when there is none."""
        if self.is_release_folder:
            return release.release_files(self.value).config_file
        try:
            prefix = self.prefix
        except FileNotFoundError:
            return None
        path = os.path.join(os.path.dirname(prefix), release.CONFIG_NAME)
        return path if tf.io.gfile.exists(path) else None


def check_init_complete(init: InitCheckpoint) -> str:
    """Checks that --init_checkpoint names a checkpoint (any form, or a release folder)
    whose files are complete, without reading its tensors; returns its prefix (a TF-Hub
    module or foreign folder as given: read, and checked, when the model is filled)."""
    if init.is_hub_module or init.is_foreign:
        return init.value
    try:
        return checkpoints.check_checkpoint_readable(init.prefix)
    except (FileNotFoundError, UserError) as err:
        raise UserError(f"--init_checkpoint={init}: {err}") from None


def _init_config(init: InitCheckpoint):
    """(its config, the file it came from, fields that file does not carry) of
    --init_checkpoint: a Hugging Face folder's or keras-hub preset's config.json
    (translated; it carries only the network's fields), else the albert_config.json
    beside it; None when there is none."""
    from albert_tf.model.config import REQUIRED_FIELDS, AlbertConfig
    from albert_tf.weights.foreign_weights import KERAS_HUB

    foreign = foreign_folders.describe_foreign(init.value, "--init_checkpoint")
    if foreign is not None:
        carried = set(REQUIRED_FIELDS) | {"cross_layer_sharing"}
        if foreign.format == KERAS_HUB:  # keras-hub keeps no initializer_range
            carried.discard("initializer_range")
        return foreign.config, foreign.config_file, carried
    beside = init.config_beside
    if beside is None:
        return None
    try:
        return AlbertConfig.from_json_file(beside), beside, None
    except (ValueError, TypeError, KeyError, UserError) as err:
        raise UserError(f"--init_checkpoint={init}: {beside}: {err}") from None


def check_init_config(
    init: InitCheckpoint, config, config_file: str | None, other_depth: bool = False
) -> None:
    """UserError when --init_checkpoint's own config (the albert_config.json of a release
    or checkpoint folder, the config.json of a Hugging Face folder or keras-hub preset)
    describes another network than the run's config (`config`, read from `config_file`);
    dropout rates may differ, and with `other_depth` (--init_from_other_depth)
    num_hidden_layers too. A checkpoint without one is not checked."""
    from albert_tf.model.config import differing_fields

    found = _init_config(init)
    if found is None:
        return
    theirs, source, carried = found
    if config_file and os.path.abspath(source) == os.path.abspath(config_file):
        return
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


def check_init_fits(model, init: InitCheckpoint, head_patterns=(), init_from_group0=False) -> None:
    """UserError when the original-format --init_checkpoint cannot fill `model`'s encoder
    (a variable missing or of another shape; the head may be missing). Reads only the
    index. Object checkpoints, TF-Hub modules and group-0 initialisation are checked
    when they are loaded."""
    if init.is_hub_module or init_from_group0:
        return
    shapes = checkpoints.checkpoint_variable_shapes(init.prefix)
    if checkpoints.OBJECT_GRAPH_KEY in shapes:
        return
    for name, variable in checkpoints.original_variable_map(model).items():
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
    "InitCheckpoint",
    "check_init_complete",
    "check_init_not_replaced",
    "check_output_checkpoints_intact",
    "check_init_config",
    "check_init_fits",
    "log_resume_wins",
    "damaged_read_message",
    "damaged_reads_reported",
    "is_damaged_read",
]
