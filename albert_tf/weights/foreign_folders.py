"""Which other library's ALBERT folder a path is, and its weights under the original names.

`open_foreign(path)` tells a Hugging Face folder (albert_tf/weights/huggingface.py) and a
keras-hub preset (albert_tf/weights/keras_hub.py) apart and reads it into a
`ForeignWeights` (albert_tf/weights/foreign_weights.py), `describe_foreign(path)` its
config and tokenizer alone; both return None for anything
else (an original checkpoint, a release folder), so callers try it first and fall through.
"""

from __future__ import annotations

import contextlib
import os

import tensorflow as tf

from albert_tf.errors import UserError
from albert_tf.weights import huggingface, keras_hub
from albert_tf.weights.foreign_tensors import inside_folder
from albert_tf.weights.foreign_weights import HUGGINGFACE, KERAS_HUB, ForeignWeights, read_json


def foreign_format(path) -> str | None:
    """HUGGINGFACE or KERAS_HUB when `path` is a folder of that format, else None.

    A folder with a config.json is one of them when its config says so (`model_type`
    for Hugging Face, `registered_name` "keras_hub>..." for keras-hub); a config.json
    of another model type is an error (it is clearly no checkpoint of ours either).
    """
    path = os.fspath(path or "")
    if not path or not tf.io.gfile.isdir(path):
        return None
    if not tf.io.gfile.exists(os.path.join(path, "config.json")):
        return None
    config_file = inside_folder(path, "config.json", path)
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


def describe_foreign(path, flag: str | None = None) -> ForeignWeights | None:
    """The config and tokenizer of a Hugging Face folder or keras-hub preset at `path`
    (its tensors not read: `values` is {}), None when `path` is neither. Errors are
    UserErrors naming the file (and `flag` when given)."""
    with _naming(path, flag):
        kind = foreign_format(path)
        if kind is None:
            return None
        return _FORMATS[kind].describe_folder(path)


def open_foreign(path, flag: str | None = None) -> ForeignWeights | None:
    """The weights of a Hugging Face folder or keras-hub preset at `path`, None when
    `path` is neither. Errors are UserErrors naming the file (and `flag` when given)."""
    with _naming(path, flag):
        kind = foreign_format(path)
        if kind is None:
            return None
        return _FORMATS[kind].read_folder(path)


_FORMATS = {HUGGINGFACE: huggingface, KERAS_HUB: keras_hub}


@contextlib.contextmanager
def _naming(path, flag: str | None):
    """A UserError raised inside, with `flag`=`path` in front when `flag` is given."""
    try:
        yield
    except UserError as err:
        if flag:
            raise UserError(f"{flag}={path}: {err}") from None
        raise


__all__ = ["foreign_format", "describe_foreign", "open_foreign"]
