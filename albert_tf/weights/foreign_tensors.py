"""Reading the tensor files of a foreign folder (a Hugging Face folder, a keras-hub
preset) trusting nothing in them.

- Paths: every file a folder or its index names stays inside the folder
  (`inside_folder`): no absolute name, no `..`, no symlink resolving outside.
- Types: only floating-point tensors are weights. An integer or bool tensor (quantized
  codes, masks) is refused, naming the file, the tensor and its type; float16, bfloat16
  and float64 become float32, which a log line states (`Conversions`).
- Sizes: the shapes a file declares are checked against the config's before anything is
  read (`SizeLimits`): no tensor larger than the config's largest, and no more in all
  than twice the model's size, so a small crafted file cannot make the reader allocate
  gigabytes.
- Values: NaN or infinity in a foreign tensor is refused (`check_finite`). The original
  release never reads these formats, so there is no behaviour of its to keep, and a
  converted export carrying them on would spread corruption; a checkpoint of the
  original's own format is only warned about (albert_tf/weights/checkpoints.py), as the
  original loads it.

Safetensors files are read here from their header (`SafetensorsFile`): the header is
checked first, then each tensor's bytes are read on their own.
"""

from __future__ import annotations

import logging
import math
import os
import struct

import numpy as np
import tensorflow as tf

from albert_tf import fileio
from albert_tf.errors import UserError

_logger = logging.getLogger(__name__)

# safetensors dtype -> (numpy dtype of the stored bytes, what the value becomes).
_FLOAT_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8", "BF16": "<u2"}
_DTYPE_SIZES = {
    "BOOL": 1,
    "U8": 1,
    "I8": 1,
    "F8_E4M3": 1,
    "F8_E5M2": 1,
    "I16": 2,
    "U16": 2,
    "F16": 2,
    "BF16": 2,
    "I32": 4,
    "U32": 4,
    "F32": 4,
    "I64": 8,
    "U64": 8,
    "F64": 8,
}
_DTYPE_NAMES = {
    "BOOL": "bool",
    "U8": "uint8",
    "I8": "int8",
    "I16": "int16",
    "U16": "uint16",
    "I32": "int32",
    "U32": "uint32",
    "I64": "int64",
    "U64": "uint64",
    "F8_E4M3": "float8_e4m3",
    "F8_E5M2": "float8_e5m2",
    "F16": "float16",
    "BF16": "bfloat16",
    "F32": "float32",
    "F64": "float64",
}
# The safetensors library's own bound on a header.
_MAX_HEADER_BYTES = 100 * 1024 * 1024


def inside_folder(folder: str, name: str, what: str) -> str:
    """The path of `name` in `folder`; UserError naming `what` (the file that names it)
    when `name` is absolute, climbs out with `..`, or (on this machine's disk) resolves
    through a symlink to a place outside the folder."""
    name = str(name)
    parts = name.replace("\\", "/").split("/")
    if not name or name.startswith("/") or fileio.is_remote(name) or ".." in parts:
        raise UserError(
            f"{what}: names {name!r}, which is not a path inside {folder}; expected a file "
            "name relative to the folder"
        )
    path = fileio.join(folder, name)
    if fileio.is_local(path):
        # Symlinks exist only on this machine's disk: the OS resolves them.
        root = os.path.realpath(folder)
        target = os.path.realpath(path)
        if os.path.commonpath([root, target]) != root:
            raise UserError(
                f"{path}: a symlink to {target}, outside {folder}; expected the folder's "
                "files inside it"
            )
    return path


class SizeLimits:
    """What the config allows a folder's tensors to declare: `per_tensor` elements (the
    config's largest tensor) and `total` elements (twice the model, heads included)."""

    def __init__(self, config):
        e, h, f = config.embedding_size, config.hidden_size, config.intermediate_size
        v, p = config.vocab_size, config.max_position_embeddings
        self.per_tensor = max(v * e, p * e, e * h, h * h, h * f, v)
        self.total = 2 * (config.num_parameters() + self.per_tensor + 2 * h * h)
        self._seen = 0

    def check(self, shape, file: str, name: str) -> None:
        """UserError naming the file and tensor when its declared `shape` exceeds the
        limits (counting it towards the total)."""
        count = math.prod(int(d) for d in shape)
        self._seen += count
        if count > self.per_tensor:
            raise UserError(
                f"{file}: tensor {name} declares shape {list(shape)} ({count} values); the "
                f"config's largest tensor has {self.per_tensor}: expected the weights of the "
                "config given"
            )
        if self._seen > self.total:
            raise UserError(
                f"{file}: declares more than {self.total} values in all (twice the config's "
                "model); expected the weights of the config given"
            )


class Conversions:
    """The dtype conversions to float32 made while reading one file, stated in one log
    line by `log`."""

    def __init__(self, file: str):
        self.file, self.counts = file, {}

    def add(self, dtype_name: str) -> None:
        if dtype_name != "float32":
            self.counts[dtype_name] = self.counts.get(dtype_name, 0) + 1

    def log(self) -> None:
        if self.counts:
            done = ", ".join(f"{n} {dtype}" for dtype, n in sorted(self.counts.items()))
            _logger.warning("%s: converted %s tensor(s) to float32", self.file, done)


def refuse_dtype(file: str, name: str, dtype_name: str):
    """The UserError for a tensor that is not floating-point weights."""
    return UserError(
        f"{file}: tensor {name} is {dtype_name}; expected floating-point weights (float32, "
        "float16, bfloat16 or float64): quantized or integer tensors are not weights this "
        "model can train"
    )


def check_finite(value: np.ndarray, file: str, name: str) -> None:
    """UserError naming the tensor when it holds NaN or infinity (module docstring)."""
    if not np.all(np.isfinite(value)):
        bad = int(np.size(value) - np.count_nonzero(np.isfinite(value)))
        raise UserError(
            f"{file}: tensor {name} holds {bad} NaN or infinite value(s); expected finite weights"
        )


class SafetensorsFile:
    """A safetensors file whose header has been read and checked.

    `tensors`: {name: (dtype, shape, begin, end)}, begin/end the byte offsets of its data
    in the file. `read(name)` reads one tensor's bytes and returns it as float32.
    """

    def __init__(self, path: str):
        self.path = path
        fileio.check_input_file(path, path)  # a FIFO would block the read below
        try:
            size = tf.io.gfile.stat(path).length
            with tf.io.gfile.GFile(path, "rb") as f:
                head = f.read(8)
                length = struct.unpack("<Q", head)[0] if len(head) == 8 else -1
                if length < 2 or length > min(size - 8, _MAX_HEADER_BYTES):
                    raise UserError(
                        f"{path}: not a readable safetensors file (header length {length}, "
                        f"file size {size})"
                    )
                header_text = f.read(length)
        except tf.errors.OpError as err:
            raise UserError(f"{path}: cannot read: {fileio.os_reason(err)}") from None
        header = fileio.parse_json(header_text, f"{path} (its header)")
        if not isinstance(header, dict):
            raise UserError(f"{path}: not a readable safetensors file (header not an object)")
        data_start, data_size = 8 + length, size - 8 - length
        self.tensors = {}
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            self.tensors[name] = self._entry(name, entry, data_start, data_size)

    def _entry(self, name, entry, data_start, data_size):
        def bad(why):
            return UserError(f"{self.path}: not a readable safetensors file (tensor {name}: {why})")

        if not isinstance(entry, dict):
            raise bad("entry not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in _DTYPE_SIZES:
            raise bad(f"unknown dtype {dtype!r}")
        if not (
            isinstance(shape, list)
            and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape)
        ):
            raise bad(f"shape {shape!r}")
        if not (
            isinstance(offsets, list)
            and len(offsets) == 2
            and all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            and 0 <= offsets[0] <= offsets[1] <= data_size
        ):
            raise bad(f"data_offsets {offsets!r} outside the {data_size} bytes of data")
        if offsets[1] - offsets[0] != math.prod(shape) * _DTYPE_SIZES[dtype]:
            raise bad(f"{offsets[1] - offsets[0]} bytes for shape {shape} of {dtype}")
        return dtype, shape, data_start + offsets[0], data_start + offsets[1]

    def check(self, names, limits: SizeLimits) -> None:
        """Refuses (UserError) a tensor among `names` that is not floating-point or
        declares more than `limits` allow; reads no data."""
        for name in names:
            dtype, shape, _, _ = self.tensors[name]
            if dtype not in _FLOAT_DTYPES:
                raise refuse_dtype(self.path, name, _DTYPE_NAMES[dtype])
            limits.check(shape, self.path, name)

    def read(self, names) -> dict:
        """{name: float32 array} of `names` (checked by `check` first), finite values only;
        the conversions made are logged in one line."""
        conversions = Conversions(self.path)
        values = {}
        with tf.io.gfile.GFile(self.path, "rb") as f:
            for name in names:
                dtype, shape, begin, end = self.tensors[name]
                f.seek(begin)
                data = f.read(end - begin)
                if len(data) != end - begin:
                    raise UserError(f"{self.path}: truncated in the data of tensor {name}")
                stored = np.frombuffer(data, _FLOAT_DTYPES[dtype]).reshape(shape)
                if dtype == "BF16":  # the upper half of a float32
                    value = (stored.astype(np.uint32) << 16).view(np.float32)
                else:
                    value = stored.astype(np.float32)
                conversions.add(_DTYPE_NAMES[dtype])
                check_finite(value, self.path, name)
                values[name] = value
        conversions.log()
        return values


__all__ = [
    "inside_folder",
    "SizeLimits",
    "Conversions",
    "refuse_dtype",
    "check_finite",
    "SafetensorsFile",
]
