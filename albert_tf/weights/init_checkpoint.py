"""The initial weights a run names (--init_checkpoint, or a TF-Hub module flag), looked up
once: which kind they are (a TF-Hub module, a Hugging Face folder or keras-hub preset, a
release folder, a checkpoint prefix in any form) and what a run reads from them before
loading -- whether the checkpoint's files are complete, the config that describes them,
the shapes of their variables. The run's checks (albert_tf/run/checkpoint_checks.py)
judge these answers, and `driver.init_from_checkpoint` loads by them.

    init = InitCheckpoint("out/model.ckpt-best")
    init.complete_prefix()   # "out/model.ckpt-best", its index and data files whole
    init.own_config()        # (AlbertConfig, "out/albert_config.json", None)
"""

from __future__ import annotations

import functools
import os

import tensorflow as tf

from albert_tf.errors import UserError
from albert_tf.weights import checkpoints, foreign_folders, hub, release


class InitCheckpoint:
    """The initial weights at `value` (as given with `flag`), its files looked up once. A
    lookup that finds nothing raises FileNotFoundError, every time it is asked."""

    def __init__(self, value: str, flag: str = "--init_checkpoint"):
        self.value, self.flag = value, flag

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

    def complete_prefix(self) -> str:
        """The checkpoint prefix once its files proved complete, without reading its
        tensors (`checkpoints.check_checkpoint_readable`); a TF-Hub module or foreign
        folder as given (read, and checked, when the model is filled). Raises
        FileNotFoundError or UserError."""
        if self.is_hub_module or self.is_foreign:
            return self.value
        return checkpoints.check_checkpoint_readable(self.prefix)

    def own_config(self):
        """(its config, the file it came from, the fields that file carries) or None when
        there is none: a Hugging Face folder's or keras-hub preset's config.json
        (translated; it carries only the network's fields), else the albert_config.json
        beside it (carried: None, every field)."""
        from albert_tf.model.config import REQUIRED_FIELDS, AlbertConfig
        from albert_tf.weights.foreign_weights import KERAS_HUB

        foreign = foreign_folders.describe_foreign(self.value, self.flag)
        if foreign is not None:
            carried = set(REQUIRED_FIELDS) | {"cross_layer_sharing"}
            if foreign.format == KERAS_HUB:  # keras-hub keeps no initializer_range
                carried.discard("initializer_range")
            return foreign.config, foreign.config_file, carried
        beside = self.config_beside
        if beside is None:
            return None
        try:
            return AlbertConfig.from_json_file(beside), beside, None
        except (ValueError, TypeError, KeyError, UserError) as err:
            raise UserError(f"{self.flag}={self}: {beside}: {err}") from None

    def variable_shapes(self) -> dict[str, list]:
        """Name -> shape of every variable of its checkpoint, from the index alone."""
        return checkpoints.checkpoint_variable_shapes(self.prefix)


__all__ = ["InitCheckpoint"]
