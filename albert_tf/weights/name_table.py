"""What the foreign formats' name tables share: the original names they map, the two-way
lookup of a table, the renaming of a whole set of tensors, and the embedding projection
that only some configs have.

A table is a list of (original name, foreign name, how the value is stored) rows; either
name may hold `{g}` and `{i}`, the group and the block inside it. Each format keeps its
own table in its own module (huggingface.py, keras_hub.py).
"""

from __future__ import annotations

import re

import numpy as np

# Original names the tables of every format spell the same way.
PROJECTION = "bert/encoder/embedding_hidden_mapping_in"
BLOCK = "bert/encoder/transformer/group_{g}/inner_group_{i}/"


def _pattern(template):
    escaped = re.escape(template).replace(r"\{g\}", "{g}").replace(r"\{i\}", "{i}")
    return re.compile("^" + escaped.format(g=r"(?P<g>\d+)", i=r"(?P<i>\d+)") + "$")


def _translate(rows, name):
    for pattern, template, how in rows:
        match = pattern.match(name)
        if match:
            return template.format(**match.groupdict()), how
    return None


class NameTable:
    """Both directions of a table of (original name, foreign name, how) rows."""

    def __init__(self, rows):
        self._to_foreign = [(_pattern(o), f, how) for o, f, how in rows]
        self._to_original = [(_pattern(f), o, how) for o, f, how in rows]

    def foreign(self, original: str):
        """(foreign name, how) of an original name, or None."""
        return _translate(self._to_foreign, original)

    def original(self, foreign: str):
        """(original name, how) of a foreign name, or None."""
        return _translate(self._to_original, foreign)


def rename(tensors: dict, lookup, convert) -> tuple[dict, list]:
    """({new name: convert(float32 array, how)}, names `lookup` has no row for) of
    `tensors`, where lookup(name) is (new name, how) or None."""
    renamed, unknown = {}, []
    for name, value in tensors.items():
        found = lookup(name)
        if found is None:
            unknown.append(name)
            continue
        target, how = found
        renamed[target] = np.ascontiguousarray(convert(np.asarray(value, np.float32), how))
    return renamed, unknown


def drop_identity_projection(values: dict, config) -> bool:
    """Removes the embedding projection from `values` ({original name: array}) of a config
    with embedding_size = hidden_size, where the original has none; False when the one
    removed is not the identity (kernel I, bias 0), which such a model cannot hold."""
    if config.embedding_size != config.hidden_size:
        return True
    kernel = values.pop(f"{PROJECTION}/kernel", None)
    bias = values.pop(f"{PROJECTION}/bias", None)
    return kernel is None or (
        np.array_equal(kernel, np.eye(config.hidden_size, dtype=np.float32))
        and (bias is None or not np.any(bias))
    )


def identity_projection(hidden_size: int) -> tuple[np.ndarray, np.ndarray]:
    """(kernel, bias) of a projection that changes nothing: I [H, H] and 0 [H]."""
    return np.eye(hidden_size, dtype=np.float32), np.zeros([hidden_size], np.float32)
