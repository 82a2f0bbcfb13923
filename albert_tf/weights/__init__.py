"""Weights of other libraries' ALBERT folders, read and written under the original names.

A Hugging Face folder (albert_tf/weights/huggingface.py) or a keras-hub preset
(albert_tf/weights/keras_hub.py) is read into a `ForeignWeights`: its config translated
to an AlbertConfig, its tensors renamed to the original release's variable names (the
names albert_tf.checkpoints fills a model by), and its SentencePiece model. Writing goes
the other way, from {original name: array}. Each format's name table is checked both
ways: a tensor of the folder that no table row names, or an original name the target
format has no place for, is an error naming it.

`open_foreign(path)` tells the formats apart; it returns None for anything else (an
original checkpoint, a release folder), so callers try it first and fall through.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np
import tensorflow as tf

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

    # The reader interface of albert_tf.checkpoints.load_by_name (as tf.train.load_checkpoint).
    def get_variable_to_shape_map(self) -> dict:
        return {name: list(value.shape) for name, value in self.values.items()}

    def get_tensor(self, name) -> np.ndarray:
        return self.values[name]


def read_json(path) -> dict:
    """A JSON object file read through tf.io.gfile; UserError naming the file otherwise."""
    try:
        with tf.io.gfile.GFile(path, "r") as f:
            value = json.loads(f.read())
    except (ValueError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not JSON ({err})") from None
    if not isinstance(value, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def write_json(path, value) -> None:
    with tf.io.gfile.GFile(path, "w") as f:
        f.write(json.dumps(value, indent=2) + "\n")


def foreign_format(path) -> str | None:
    """HUGGINGFACE or KERAS_HUB when `path` is a folder of that format, else None.

    A folder with a config.json is one of them when its config says so (`model_type`
    for Hugging Face, `registered_name` "keras_hub>..." for keras-hub); a config.json
    of another model type is an error (it is clearly no checkpoint of ours either).
    """
    path = os.fspath(path or "")
    if not path or not tf.io.gfile.isdir(path):
        return None
    config_file = os.path.join(path, "config.json")
    if not tf.io.gfile.exists(config_file):
        return None
    config = read_json(config_file)
    if "model_type" in config:
        if config["model_type"] != "albert":
            raise UserError(
                f"{config_file}: model_type {config['model_type']!r}; expected 'albert'"
            )
        return HUGGINGFACE
    registered = str(config.get("registered_name", ""))
    if registered.startswith("keras_hub>"):
        if registered != "keras_hub>AlbertBackbone":
            raise UserError(
                f"{config_file}: a keras-hub {registered.split('>', 1)[1]}; expected "
                "keras_hub>AlbertBackbone"
            )
        return KERAS_HUB
    return None


def open_foreign(path, flag: str | None = None, tensors: bool = True) -> ForeignWeights | None:
    """The weights of a Hugging Face folder or keras-hub preset at `path`, None when
    `path` is neither. Without `tensors` only the config and tokenizer are read (values
    is {}). Errors are UserErrors naming the file (and `flag` when given)."""
    kind = foreign_format(path)
    if kind is None:
        return None
    if kind == HUGGINGFACE:
        from albert_tf.weights import huggingface as module
    else:
        from albert_tf.weights import keras_hub as module
    try:
        return module.read_folder(path, tensors=tensors)
    except UserError as err:
        if flag:
            raise UserError(f"{flag}={path}: {err}") from None
        raise


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
    "foreign_format",
    "open_foreign",
    "read_json",
    "write_json",
    "group_mapping_problem",
    "check_all_named",
]
