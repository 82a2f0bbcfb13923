"""Weights of other libraries' ALBERT folders, read and written under the original names.

A Hugging Face folder (albert_tf/weights/huggingface.py) or a keras-hub preset
(albert_tf/weights/keras_hub.py) is read into a `ForeignWeights`: its config translated
to an AlbertConfig, its tensors renamed to the original release's variable names (the
names albert_tf.weights.checkpoints fills a model by), and its SentencePiece model. Writing goes
the other way, from {original name: array}. Each format's name table is checked both
ways: a tensor of the folder that no table row names, or an original name the target
format has no place for, is an error naming it.

Which format a folder is, and opening it: albert_tf/weights/foreign_folders.py.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import tensorflow as tf

from albert_tf import fileio
from albert_tf.errors import UserError

HUGGINGFACE, KERAS_HUB = "huggingface", "keras_hub"
FORMAT_NAMES = {HUGGINGFACE: "Hugging Face folder", KERAS_HUB: "keras-hub preset"}


@dataclasses.dataclass
class ForeignWeights:
    """A foreign folder's weights under the original names.

    format: HUGGINGFACE or KERAS_HUB. folder: the path given. config: its AlbertConfig.
    config_file: the file the config came from (for messages). values: {original name:
    float32 array}. spm_model_file: its SentencePiece model, None when it has none.
    do_lower_case: what its tokenizer settings say (None: not said).
    """

    format: str
    folder: str
    config: object  # AlbertConfig
    config_file: str
    values: dict
    spm_model_file: str | None
    do_lower_case: bool | None = None

    @property
    def description(self) -> str:
        return f"{FORMAT_NAMES[self.format]} {self.folder}"

    # The reader interface of albert_tf.weights.checkpoints.load_by_name (as
    # tf.train.load_checkpoint).
    def get_variable_to_shape_map(self) -> dict:
        return {name: list(value.shape) for name, value in self.values.items()}

    def get_variable_to_dtype_map(self) -> dict:
        return {name: tf.as_dtype(value.dtype) for name, value in self.values.items()}

    def get_tensor(self, name) -> np.ndarray:
        return self.values[name]


def read_json(path) -> dict:
    """A JSON object file (any filesystem, albert_tf.fileio.read_json); UserError naming the
    file otherwise."""
    value = fileio.read_json(path)
    if not isinstance(value, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def write_json(path, value) -> None:
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(value, indent=2) + "\n")


def group_mapping_problem(config, group_of_layer, what: str) -> str | None:
    """A message when `group_of_layer(l)` (another library's rule) differs from the
    config's (the original's float rule) for some layer, else None."""
    for layer in range(config.num_hidden_layers):
        theirs, ours = group_of_layer(layer), config.group_index(layer)
        if theirs != ours:
            return (
                f"layer {layer} uses group {ours} here but group {theirs} in {what} "
                f"(num_hidden_layers={config.num_hidden_layers}, "
                f"num_hidden_groups={config.num_hidden_groups})"
            )
    return None


def check_all_named(kind: str, where: str, unknown) -> None:
    """UserError listing the names of `where` that the `kind` name table has no row for."""
    unknown = sorted(unknown)
    if unknown:
        shown = ", ".join(unknown[:10]) + (
            f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
        )
        raise UserError(f"{where}: {len(unknown)} tensor(s) with no {kind} name-table row: {shown}")


__all__ = [
    "ForeignWeights",
    "HUGGINGFACE",
    "KERAS_HUB",
    "FORMAT_NAMES",
    "read_json",
    "write_json",
    "group_mapping_problem",
    "check_all_named",
]
