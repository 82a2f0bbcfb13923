"""The one mechanism behind every table of weight names: the original release's names on
one side, another format's names on the other, and how that format stores each value.

A table is a list of (original name, other name, how) rows; either name may hold `{g}` and
`{i}`, the group and the block inside it. `how` is one of the layouts below (SAME when left
out). Each format keeps its own table in its own module: our Keras variables
(checkpoints.py: the other name is an attribute path of the model), Hugging Face
(huggingface.py), keras-hub (keras_hub.py), the Model Garden's TF-Hub encoder (hub.py) and
Google's BERT checkpoints (albert_tf/research/smoothness.py). `NameTable` looks a name up
either way, lists a model's names in the original's order, and renames (and re-lays) a
whole set of tensors.
"""

from __future__ import annotations

import re

import numpy as np

# Original names the tables of every format spell the same way.
PROJECTION = "bert/encoder/embedding_hidden_mapping_in"
BLOCK = "bert/encoder/transformer/group_{g}/inner_group_{i}/"

# How a format stores a value, against the original's layout (H = N heads x D).
SAME = "same"
TRANSPOSED = "transposed"  # torch's Linear weight: [out, in] of the kernel [in, out]
HEADS_IN = "heads_in"  # a query/key/value kernel [H, H] as [H, N, D]
HEADS_BIAS = "heads_bias"  # a query/key/value bias [H] as [N, D]
HEADS_OUT = "heads_out"  # the attention output kernel [H, H] as [N, D, H]
_PLACEHOLDERS = ("{g}", "{i}")


def _pattern(template):
    escaped = re.escape(template).replace(r"\{g\}", "{g}").replace(r"\{i\}", "{i}")
    return re.compile("^" + escaped.format(g=r"(?P<g>\d+)", i=r"(?P<i>\d+)") + "$")


def _translate(rows, name):
    for pattern, template, how in rows:
        match = pattern.match(name)
        if match:
            return template.format(**match.groupdict()), how
    return None


def _per_block(template):
    return any(p in template for p in _PLACEHOLDERS)


class NameTable:
    """Both directions of a table of (original name, other name[, how]) rows."""

    def __init__(self, rows):
        self.rows = [(original, other, *(how or (SAME,))) for original, other, *how in rows]
        self._to_foreign = [(_pattern(o), f, how) for o, f, how in self.rows]
        self._to_original = [(_pattern(f), o, how) for o, f, how in self.rows]
        self._filled = {}

    def foreign(self, original: str):
        """(other name, how) of an original name, or None."""
        return _translate(self._to_foreign, original)

    def original(self, foreign: str):
        """(original name, how) of an other name, or None."""
        return _translate(self._to_original, foreign)

    def filled(self, blocks) -> tuple[tuple[str, str, str], ...]:
        """Every row with its names filled in, in the table's order: a row without `{g}`
        or `{i}` once; each run of consecutive rows with them once per (g, i) of `blocks`,
        block by block (the order in which the original creates its variables). Kept per
        `blocks`: a model's names are listed at every load and save."""
        blocks = tuple(blocks)
        if blocks not in self._filled:
            out, run = [], []
            for row in [*self.rows, None]:
                if row is not None and (_per_block(row[0]) or _per_block(row[1])):
                    run.append(row)
                    continue
                for g, i in blocks:
                    out += [(o.format(g=g, i=i), f.format(g=g, i=i), how) for o, f, how in run]
                run = []
                if row is not None:
                    out.append(row)
            self._filled[blocks] = tuple(out)
        return self._filled[blocks]

    def to_original(self, tensors: dict) -> tuple[dict, list]:
        """({original name: float32 array in the original's layout}, names no row has) of
        `tensors` ({other name: array})."""
        return _rename(tensors, self.original, lambda value, how: to_original(value, how))

    def to_foreign(self, values: dict, heads: int | None = None) -> tuple[dict, list]:
        """({other name: float32 array in the format's layout}, names no row has) of
        `values` ({original name: array}); `heads` (N) for the per-head layouts."""
        return _rename(values, self.foreign, lambda value, how: to_foreign(value, how, heads))


def _rename(tensors: dict, lookup, convert) -> tuple[dict, list]:
    renamed, unknown = {}, []
    for name, value in tensors.items():
        found = lookup(name)
        if found is None:
            unknown.append(name)
            continue
        target, how = found
        renamed[target] = np.ascontiguousarray(convert(np.asarray(value, np.float32), how))
    return renamed, unknown


def to_foreign(value: np.ndarray, how: str, heads: int | None = None) -> np.ndarray:
    """`value` in the original's layout, laid out as `how` says (N = `heads`)."""
    if how == TRANSPOSED:
        return value.T
    h = value.shape[-1]
    if how == HEADS_IN:
        return value.reshape(value.shape[0], heads, h // heads)
    if how == HEADS_BIAS:
        return value.reshape(heads, h // heads)
    if how == HEADS_OUT:
        return value.reshape(heads, value.shape[0] // heads, h)
    return value


def original_shape(shape, how: str) -> tuple[int, ...]:
    """The original's shape of a value stored as `how` in `shape`."""
    shape = tuple(int(n) for n in shape)
    if how == TRANSPOSED:
        return shape[::-1]
    if how == HEADS_IN:  # [H, N, D] -> [H, N*D]
        return (shape[0], int(np.prod(shape[1:])))
    if how == HEADS_BIAS:  # [N, D] -> [N*D]
        return (int(np.prod(shape)),)
    if how == HEADS_OUT:  # [N, D, H] -> [N*D, H]
        return (int(np.prod(shape[:-1])), shape[-1])
    return shape


def to_original(value: np.ndarray, how: str) -> np.ndarray:
    """`value`, stored as `how` says, in the original's layout."""
    if how == TRANSPOSED:
        return value.T
    return value.reshape(original_shape(value.shape, how))


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
