"""Reading and writing checkpoints of the original TF1 release by name.

The whole mapping between our Keras variables and the original variable
names lives in the tables of this module (docs/original.md §5), NameTables
(albert_tf/weights/name_table.py) from original names to attribute paths of
the model: the encoder table, one table per head class, and the scope each
head attribute of a model takes. Loading checks every name and shape before assigning
anything and fails listing every problem; saving writes the same names and
shapes with the TF1 bundle format (`<prefix>.index`, `<prefix>.data-*`), so
the original code and tools built for its format can read what we train.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import struct
import uuid

import numpy as np
import tensorflow as tf
from google.protobuf.message import DecodeError
from tensorflow.core.protobuf import tensor_bundle_pb2

from albert_tf import fileio
from albert_tf.errors import UserError
from albert_tf.model.heads import MaskedLMHead, OutputProjection, SquadV2Head
from albert_tf.model.layers import SUBLAYERS, AlbertTransformerBlock
from albert_tf.model.modeling import AlbertModel
from albert_tf.weights import foreign_folders
from albert_tf.weights.name_table import BLOCK, PROJECTION, NameTable

_logger = logging.getLogger(__name__)

OPTIMIZER_SLOT_SUFFIXES = ("adam_m", "adam_v")
# The best checkpoint on dev, as the original's scripts named it in an output folder;
# release folders ship it under the same name.
BEST_NAME = "model.ckpt-best"

# --- the tables ------------------------------------------------------------
# (original name, attribute path of our variable): the encoder's from the AlbertModel,
# in the original's creation order; a block's from its attribute group_<g>_inner_group_<i>.
# The sub-scopes are literally attention_1 and ffn_1, and the FFN output dense sits inside
# the intermediate scope (original quirks, §5.1). A model without the layer a path names
# (no embedding projection when E = H; a part a block borrows from group 0 under
# AlbertConfig.cross_layer_sharing, whose owner has the names) has no such names.
_BLOCK_PATH = "group_{g}_inner_group_{i}."
ENCODER_NAMES = NameTable(
    [
        ("bert/embeddings/word_embeddings", "embeddings.word_embeddings"),
        ("bert/embeddings/token_type_embeddings", "embeddings.token_type_embeddings"),
        ("bert/embeddings/position_embeddings", "embeddings.position_embeddings"),
        ("bert/embeddings/LayerNorm/beta", "embeddings.layer_norm.beta"),
        ("bert/embeddings/LayerNorm/gamma", "embeddings.layer_norm.gamma"),
        (f"{PROJECTION}/kernel", "embedding_projection.kernel"),
        (f"{PROJECTION}/bias", "embedding_projection.bias"),
        *[
            (f"{BLOCK}attention_1/self/{part}/{kind}", f"{_BLOCK_PATH}{part}.{kind}")
            for part in ("query", "key", "value")
            for kind in ("kernel", "bias")
        ],
        (f"{BLOCK}attention_1/output/dense/kernel", f"{_BLOCK_PATH}attention_output.kernel"),
        (f"{BLOCK}attention_1/output/dense/bias", f"{_BLOCK_PATH}attention_output.bias"),
        (f"{BLOCK}LayerNorm/beta", f"{_BLOCK_PATH}attention_layer_norm.beta"),
        (f"{BLOCK}LayerNorm/gamma", f"{_BLOCK_PATH}attention_layer_norm.gamma"),
        (f"{BLOCK}ffn_1/intermediate/dense/kernel", f"{_BLOCK_PATH}intermediate.kernel"),
        (f"{BLOCK}ffn_1/intermediate/dense/bias", f"{_BLOCK_PATH}intermediate.bias"),
        (f"{BLOCK}ffn_1/intermediate/output/dense/kernel", f"{_BLOCK_PATH}ffn_output.kernel"),
        (f"{BLOCK}ffn_1/intermediate/output/dense/bias", f"{_BLOCK_PATH}ffn_output.bias"),
        (f"{BLOCK}LayerNorm_1/beta", f"{_BLOCK_PATH}ffn_layer_norm.beta"),
        (f"{BLOCK}LayerNorm_1/gamma", f"{_BLOCK_PATH}ffn_layer_norm.gamma"),
        ("bert/pooler/dense/kernel", "pooler.kernel"),
        ("bert/pooler/dense/bias", "pooler.bias"),
    ]
)
# Per head class: (original name relative to the head's scope, attribute path of the head).
HEAD_NAMES = {
    MaskedLMHead: NameTable(
        [
            ("transform/dense/kernel", "transform.kernel"),
            ("transform/dense/bias", "transform.bias"),
            ("transform/LayerNorm/beta", "layer_norm.beta"),
            ("transform/LayerNorm/gamma", "layer_norm.gamma"),
            ("output_bias", "output_bias"),
        ]
    ),
    OutputProjection: NameTable(
        [("output_weights", "output_weights"), ("output_bias", "output_bias")]
    ),
    SquadV2Head: NameTable(
        [
            ("start_logits/dense/kernel", "start_dense.kernel"),
            ("start_logits/dense/bias", "start_dense.bias"),
            ("end_logits/dense_0/kernel", "end_dense_0.kernel"),
            ("end_logits/dense_0/bias", "end_dense_0.bias"),
            ("end_logits/LayerNorm/beta", "end_layer_norm.beta"),
            ("end_logits/LayerNorm/gamma", "end_layer_norm.gamma"),
            ("end_logits/dense_1/kernel", "end_dense_1.kernel"),
            ("end_logits/dense_1/bias", "end_dense_1.bias"),
            ("answer_class/dense_0/kernel", "answer_dense_0.kernel"),
            ("answer_class/dense_0/bias", "answer_dense_0.bias"),
            ("answer_class/dense_1/kernel", "answer_dense_1.kernel"),
        ]
    ),
}
# Model attribute holding a head -> the original scope of its variables
# ("" = top level, as run_classifier.py and run_race.py create them).
HEAD_SCOPES = {
    "masked_lm": "cls/predictions",
    "sentence_order": "cls/seq_relationship",
    "classifier": "",
    "multiple_choice": "",
    "squad_v1": "cls/squad",
    "squad_v2": "",
}


def _join(*parts):
    return "/".join(p for p in parts if p)


def encoder_of(model):
    """The AlbertModel inside `model` (itself, or its `albert` attribute)."""
    if isinstance(model, AlbertModel):
        return model
    encoder = getattr(model, "albert", None)
    if isinstance(encoder, AlbertModel):
        return encoder
    raise TypeError(
        f"{type(model).__name__} is neither an AlbertModel nor has an `albert` encoder attribute"
    )


def head_names(head) -> NameTable:
    """The name table of a head (by its class or a base class)."""
    for cls in type(head).__mro__:
        if cls in HEAD_NAMES:
            return HEAD_NAMES[cls]
    raise TypeError(f"no checkpoint table for head type {type(head).__name__}")


def variable_at(owner, path: str):
    """The variable at attribute path `path` ("a.b.c") of `owner`, or None where the model
    has no such layer: an attribute that is None (the embedding projection when E = H), or
    a sublayer its block borrows (SUBLAYERS[block.shared_part])."""
    value = owner
    for attribute in path.split("."):
        if isinstance(value, AlbertTransformerBlock) and attribute in SUBLAYERS.get(
            value.shared_part, ()
        ):
            return None
        value = getattr(value, attribute)
        if value is None:
            return None
    return value


def original_variable_map(model) -> dict[str, tf.Variable]:
    """Original variable name -> our variable, in the original creation order.

    `model` is an AlbertModel or a model with an `albert` encoder and head
    attributes named in HEAD_SCOPES. The model must be built.
    """
    encoder = encoder_of(model)
    blocks = [(g, i) for g, group in encoder.groups.items() for i in range(len(group))]
    names = {}
    for name, path, _ in ENCODER_NAMES.filled(blocks):
        variable = variable_at(encoder, path)
        if variable is not None:
            names[name] = variable
    if model is not encoder:
        for attribute, scope in HEAD_SCOPES.items():
            head = getattr(model, attribute, None)
            if head is None:
                continue
            for suffix, path, _ in head_names(head).rows:
                names[_join(scope, suffix)] = variable_at(head, path)
    return names


def _ensure_built(model):
    if not model.built:
        model.build()


# --- path forms --------------------------------------------------------------
_SUFFIX = re.compile(r"(\.index|\.meta|\.data-\d{5}-of-\d{5})$")
_STEP = re.compile(r"-(\d+)$")


def resolve_checkpoint_path(path) -> str:
    """Returns the checkpoint prefix for any form a user passes.

    Accepts a prefix (`model.ckpt-best`, `.../ckpt-1000`), a file of the
    bundle (`*.index`, `*.data-00000-of-00001`, `*.meta`), or a directory
    (its `checkpoint` state file, else its only checkpoint, else
    `model.ckpt-best`, else the highest step).
    """
    path = os.fspath(path)
    if not path:
        raise FileNotFoundError("empty checkpoint path")
    if tf.io.gfile.isdir(path):
        latest = tf.train.latest_checkpoint(path)
        if latest and tf.io.gfile.exists(latest + ".index"):
            return latest
        prefixes = sorted(
            p[: -len(".index")] for p in tf.io.gfile.glob(os.path.join(path, "*.index"))
        )
        if not prefixes:
            raise FileNotFoundError(f"no checkpoint (*.index file) in directory {path!r}")
        if len(prefixes) == 1:
            return prefixes[0]
        best = [p for p in prefixes if os.path.basename(p) == BEST_NAME]
        if best:
            return best[0]
        stepped = [p for p in prefixes if _STEP.search(p)]
        if stepped:
            return max(stepped, key=lambda p: int(_STEP.search(p).group(1)))
        raise FileNotFoundError(
            f"directory {path!r} holds several checkpoints "
            f"({', '.join(map(os.path.basename, prefixes))}); pass the prefix of one"
        )
    prefix = _SUFFIX.sub("", path)
    if tf.io.gfile.exists(prefix + ".index"):
        return prefix
    if fileio.is_local(path) and fileio.local_kind(path) == "a symlink loop":
        raise FileNotFoundError(f"{path!r} is a symlink loop; expected a checkpoint")
    raise FileNotFoundError(f"no checkpoint at {path!r} (looked for {prefix + '.index'!r})")


# --- file checks ---------------------------------------------------------------
# The `.index` file of a TF checkpoint is a LevelDB-format table: key = tensor
# name, value = a BundleEntryProto giving the shard, offset and size of the
# tensor's bytes in `.data-<shard>-of-<n>` (the key "" holds the header with n).
# TensorFlow does not expose offsets, and without them only reading every tensor
# (gigabytes for xxlarge) would tell a truncated data file from a good one.
_TABLE_FOOTER_SIZE = 48  # two block handles padded to 40 bytes, then the magic
_TABLE_MAGIC = 0xDB4775248B80FB57


def _varint(buf, pos):
    """(value, next position) of the unsigned LEB128 integer at buf[pos]."""
    value = shift = 0
    while True:
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _table_block(table, handle):
    """(key, value) pairs of the block a handle (offset, size varints) points to."""
    offset, pos = _varint(handle, 0)
    size, _ = _varint(handle, pos)
    # Each block is followed by a one-byte compression type; TensorFlow writes 0 (none).
    if table[offset + size] != 0:
        raise ValueError("compressed table block")
    block = table[offset : offset + size]
    (num_restarts,) = struct.unpack_from("<I", block, size - 4)
    end, pos, key = size - 4 - 4 * num_restarts, 0, b""
    while pos < end:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        value_size, pos = _varint(block, pos)
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        yield key, block[pos : pos + value_size]
        pos += value_size


def _bundle_index(table: bytes):
    """(header, {name: BundleEntryProto}) of the bytes of a checkpoint `.index` file."""
    footer = table[-_TABLE_FOOTER_SIZE:]
    if (
        len(table) < _TABLE_FOOTER_SIZE
        or struct.unpack_from("<Q", footer, _TABLE_FOOTER_SIZE - 8)[0] != _TABLE_MAGIC
    ):
        raise ValueError("no table footer")
    _, pos = _varint(footer, 0)  # the meta-index block handle: unused
    _, pos = _varint(footer, pos)
    entries = {}
    for _, data_handle in _table_block(table, footer[pos:]):
        entries.update(_table_block(table, data_handle))
    header = tensor_bundle_pb2.BundleHeaderProto.FromString(entries.pop(b""))
    return header, {
        k.decode("utf-8"): tensor_bundle_pb2.BundleEntryProto.FromString(v)
        for k, v in entries.items()
    }


def check_checkpoint_readable(path) -> str:
    """Checks that a checkpoint's files are complete without reading its tensors.

    Reads the `.index` file (kilobytes) and checks that every data shard it
    names exists and is long enough for the tensors stored in it (a copy or
    download cut short would otherwise fail mid-restore with "Read less bytes
    than requested"). Accepts any path form of `resolve_checkpoint_path`.
    Returns the prefix.
    Raises:
      FileNotFoundError: no checkpoint at `path`.
      UserError: the index is not a TensorFlow checkpoint index, or a data
        file is missing or shorter than the index says.
    """
    prefix = resolve_checkpoint_path(path)
    index = prefix + ".index"
    fileio.check_input_file(index, index)  # a FIFO would block the read below
    with tf.io.gfile.GFile(index, "rb") as f:
        table = f.read()
    try:
        header, entries = _bundle_index(table)
    except (ValueError, IndexError, KeyError, struct.error, DecodeError, UnicodeDecodeError):
        raise UserError(f"{index}: not a readable TensorFlow checkpoint index") from None
    shards = max(header.num_shards, 1)
    needed = [0] * shards
    for name, entry in entries.items():
        if entry.shard_id >= shards:
            raise UserError(
                f"{index}: not a readable TensorFlow checkpoint index "
                f"({name} is in shard {entry.shard_id} of {shards})"
            )
        needed[entry.shard_id] = max(needed[entry.shard_id], entry.offset + entry.size)
    for shard, size in enumerate(needed):
        data = f"{prefix}.data-{shard:05d}-of-{shards:05d}"
        if not tf.io.gfile.exists(data):
            raise UserError(f"{data}: missing (the checkpoint index {index} names it)")
        length = tf.io.gfile.stat(data).length
        if length < size:
            raise UserError(f"{data}: truncated: {length} bytes, expected {size} bytes")
    return prefix


# --- loading -------------------------------------------------------------------
class CheckpointMismatchError(ValueError):
    """The checkpoint cannot fill the model; the message lists every problem."""

    def summary(self, shown: int = 2) -> str:
        """One line: each kind of problem with its count and first `shown` entries; the
        whole list goes to the log."""
        _logger.error("%s", self)
        groups = []  # [header, entries]
        for line in str(self).splitlines()[1:]:
            if line.startswith(" ") and groups:
                groups[-1][1].append(line.strip())
            elif line.strip():
                groups.append([line.strip().rstrip(":"), []])
        if not groups:
            return str(self)
        return "; ".join(
            f"{header}: {', '.join(entries[:shown])}"
            + (f" and {len(entries) - shown} more" if len(entries) > shown else "")
            for header, entries in groups
        )


@dataclasses.dataclass
class LoadReport:
    """What `load_original_checkpoint` did.

    loaded: model variables filled (original names).
    missing_allowed: model variables left at their initial values because
      they matched `allow_missing` (e.g. a fresh task head).
    ignored: checkpoint variables nothing was loaded from (optimizer slots,
      global_step, heads the model does not have).
    source: original name each model variable was read from, where different
      (init_from_group0).
    """

    checkpoint: str
    loaded: list
    missing_allowed: list
    ignored: list
    source: dict


def _group0_name(name):
    return re.sub(r"/group_\d+/", "/group_0/", name, count=1)


def load_original_checkpoint(
    model, path, *, allow_missing=(), init_from_group0=False, optimizer=None
) -> LoadReport:
    """Fills `model` from a checkpoint of the original release, by name.

    Args:
      model: an AlbertModel, AlbertPretrainer or task model (built if needed).
      path: any path form of `resolve_checkpoint_path`, or a Hugging Face folder or
        keras-hub preset (albert_tf/weights: its tensors under the original names).
      allow_missing: regexes (searched in the original name) of model
        variables that may be absent from the checkpoint, or present in another
        shape (a head fine-tuned for another number of labels), e.g. `("^cls/",
        "^output_")` for a fresh head; every other absent variable is an error.
      init_from_group0: fill every `group_<g>` from the checkpoint's
        `group_0` where `group_<g>` itself is absent (growing a G = 1
        checkpoint into G > 1 groups; the intended behaviour of the
        original's --init_from_group0, without its bug).
      optimizer: if given (a LAMB/AdamWeightDecay of albert_tf.run.optimization,
        already built for the model's variables), its `adam_m`/`adam_v` slots
        are restored from `<name>/adam_m` and `<name>/adam_v`.
    Raises:
      FileNotFoundError: no checkpoint at `path`.
      UserError: the checkpoint files are unreadable or truncated
        (`check_checkpoint_readable`).
      CheckpointMismatchError: any model variable without a checkpoint value
        or with a different shape (not allowed to be missing). Nothing is
        assigned in that case.
    """
    foreign = foreign_folders.open_foreign(path)
    if foreign is not None:
        return load_by_name(
            model,
            foreign,
            foreign.description,
            allow_missing=allow_missing,
            init_from_group0=init_from_group0,
            optimizer=optimizer,
        )
    prefix = check_checkpoint_readable(path)
    return load_by_name(
        model,
        tf.train.load_checkpoint(prefix),
        prefix,
        allow_missing=allow_missing,
        init_from_group0=init_from_group0,
        optimizer=optimizer,
    )


def load_by_name(
    model, reader, source: str, *, allow_missing=(), init_from_group0=False, optimizer=None
) -> LoadReport:
    """`load_original_checkpoint` from any source of values under the original names.

    `reader`: has `get_variable_to_shape_map()` ({original name: shape}),
    `get_variable_to_dtype_map()` ({original name: dtype}) and `get_tensor(name)` (numpy
    array), as `tf.train.load_checkpoint` returns; a TF-Hub module
    (albert_tf/weights/hub.py) supplies one that renames its variables. `source`: how
    messages name it. Same checks, errors and result as `load_original_checkpoint`, and:
    a stored type that is not floating-point is a UserError naming the tensor, raised
    before anything is assigned (other float types are converted, with a log line); NaN
    or infinity is loaded, as the original loads it, with a warning naming the tensors.
    """
    _ensure_built(model)
    shapes = reader.get_variable_to_shape_map()
    allowed = [re.compile(p) for p in allow_missing]

    plan, missing, mismatched, allowed_missing, renamed = [], [], [], [], {}
    for name, variable in original_variable_map(model).items():
        candidates = [name]
        if init_from_group0:
            candidates.append(_group0_name(name))
        found = next((c for c in candidates if c in shapes), None)
        if found is None:
            if any(p.search(name) for p in allowed):
                allowed_missing.append(name)
            else:
                missing.append(name)
            continue
        if tuple(shapes[found]) != tuple(variable.shape):
            if any(p.search(name) for p in allowed):
                # A head for another label set (MNLI's 3 classes, an RTE model's 2): it
                # may be absent, so another shape counts as absent too.
                _logger.info(
                    "%s: checkpoint %s, model %s: left at its initial value",
                    found,
                    list(shapes[found]),
                    list(variable.shape),
                )
                allowed_missing.append(name)
                continue
            mismatched.append(
                f"{found}: checkpoint {list(shapes[found])}, model {list(variable.shape)}"
            )
            continue
        if found != name:
            renamed[name] = found
        plan.append((name, found, variable))

    slot_plan = []
    if optimizer is not None:
        for _name, found, variable in plan:
            for suffix in OPTIMIZER_SLOT_SUFFIXES:
                key = f"{found}/{suffix}"
                if key in shapes:
                    slot_plan.append((key, optimizer.get_slot(variable, suffix)))
                else:
                    missing.append(key)

    if missing or mismatched:
        lines = [f"checkpoint {source!r} does not match the model:"]
        if missing:
            lines.append(f"{len(missing)} model variable(s) not in the checkpoint:")
            lines += [f"  {n}" for n in missing]
        if mismatched:
            lines.append(f"{len(mismatched)} shape mismatch(es):")
            lines += [f"  {m}" for m in mismatched]
        raise CheckpointMismatchError("\n".join(lines))

    targets = [(found, variable) for _, found, variable in plan] + slot_plan
    _check_float_tensors(reader, source, targets)
    non_finite = []
    for found, variable in targets:
        value = reader.get_tensor(found)
        if not np.all(np.isfinite(value)):
            non_finite.append(found)
        variable.assign(value.astype(variable.dtype))
    if non_finite:
        # The original's init_from_checkpoint loads such values unchecked: said, not refused.
        _logger.warning(
            "%s: %d tensor(s) hold NaN or infinite values, loaded as the original would: %s",
            source,
            len(non_finite),
            ", ".join(non_finite),
        )

    used = {found for _, found, _ in plan} | {key for key, _ in slot_plan}
    ignored = sorted(n for n in shapes if n not in used)
    _log_ignored(source, ignored)
    if allowed_missing:
        _logger.info(
            "left %d variable(s) at their initial values: %s",
            len(allowed_missing),
            ", ".join(allowed_missing),
        )
    return LoadReport(
        checkpoint=source,
        loaded=[n for n, _, _ in plan],
        missing_allowed=allowed_missing,
        ignored=ignored,
        source=renamed,
    )


def _check_float_tensors(reader, source: str, targets) -> None:
    """UserError naming the first stored name of `targets` ([(name, variable)]) whose
    type is not floating-point (integer or bool values are no weights: casting them would
    train quantized codes); one log line states the conversions of other float types to
    the variables'. Reads only the reader's type map, before anything is assigned."""
    dtypes = reader.get_variable_to_dtype_map()
    converted = {}
    for name, variable in targets:
        dtype, wanted = tf.as_dtype(dtypes[name]), tf.as_dtype(variable.dtype)
        if not dtype.is_floating:
            raise UserError(
                f"{source}: tensor {name} is {dtype.name}; expected floating-point weights"
            )
        if dtype != wanted:
            change = f"{dtype.name} to {wanted.name}"
            converted[change] = converted.get(change, 0) + 1
    if converted:
        done = ", ".join(f"{n} from {change}" for change, n in sorted(converted.items()))
        _logger.warning("%s: converted %s tensor(s)", source, done)


def _log_ignored(prefix, ignored):
    slots = [n for n in ignored if n.rsplit("/", 1)[-1] in OPTIMIZER_SLOT_SUFFIXES]
    other = [n for n in ignored if n not in slots]
    _logger.info(
        "loaded %s; ignored %d optimizer slot(s)%s",
        prefix,
        len(slots),
        f" and {', '.join(other)}" if other else "",
    )


# --- saving --------------------------------------------------------------------
_TMP_CHECKPOINT_NAME = r"\.tmp-{owner}-[0-9a-f]{32}-.+"  # save_original_checkpoint's temporaries


def save_original_checkpoint(
    model, prefix, *, global_step=None, optimizer=None, update_checkpoint_state=True, names=None
) -> str:
    """Writes `model` under the original variable names (TF1 bundle format).

    Args:
      model: a built AlbertModel / AlbertPretrainer / task model.
      prefix: checkpoint prefix, e.g. `out/model.ckpt-best`; its folder is
        created if needed.
      global_step: optional int, written as int64 `global_step`.
      optimizer: optional LAMB/AdamWeightDecay; writes its slots as
        `<name>/adam_m`, `<name>/adam_v`.
      update_checkpoint_state: also write the folder's `checkpoint` file so
        `tf.train.latest_checkpoint` finds this prefix.
      names: the original names to write (default: every variable of the model),
        e.g. without a head that was never trained.
    Returns the prefix. Files appear atomically: a failed write leaves none.
    """
    prefix = os.fspath(prefix)
    _ensure_built(model)
    only = None if names is None else set(names)
    names, tensors = [], []
    for name, variable in original_variable_map(model).items():
        if only is not None and name not in only:
            continue
        names.append(name)
        tensors.append(
            tf.convert_to_tensor(variable.value if hasattr(variable, "value") else variable)
        )
        if optimizer is not None:
            for suffix in OPTIMIZER_SLOT_SUFFIXES:
                names.append(f"{name}/{suffix}")
                tensors.append(tf.convert_to_tensor(optimizer.get_slot(variable, suffix)))
    if global_step is not None:
        names.append("global_step")
        tensors.append(tf.constant(int(global_step), tf.int64))

    folder = os.path.dirname(prefix) or "."
    tf.io.gfile.makedirs(folder)
    # The temporaries carry this process's owner tag: a later save into the folder
    # removes those of a killed process (fileio.remove_stale).
    fileio.remove_stale(folder, _TMP_CHECKPOINT_NAME)
    tmp_prefix = os.path.join(
        folder, f".tmp-{fileio.owner_tag()}-{uuid.uuid4().hex}-{os.path.basename(prefix)}"
    )
    try:
        tf.raw_ops.SaveV2(
            prefix=tmp_prefix,
            tensor_names=names,
            shape_and_slices=[""] * len(names),
            tensors=tensors,
        )
        for tmp_file in tf.io.gfile.glob(tmp_prefix + ".*"):
            tf.io.gfile.rename(tmp_file, prefix + tmp_file[len(tmp_prefix) :], overwrite=True)
    finally:
        for leftover in tf.io.gfile.glob(tmp_prefix + "*"):
            tf.io.gfile.remove(leftover)
    if update_checkpoint_state:
        write_checkpoint_state(folder, [os.path.basename(prefix)])
    return prefix


def write_checkpoint_state(folder, names) -> None:
    """Writes `folder`'s `checkpoint` state file (atomically): `names` (checkpoint
    prefixes relative to the folder) as all_model_checkpoint_paths, the last as
    model_checkpoint_path, what tf.train.latest_checkpoint reads. Relative names keep the
    folder movable; TensorFlow's own writer mangles them under a URI (gs://, file://)."""
    lines = [f"model_checkpoint_path: {json.dumps(names[-1])}"]
    lines += [f"all_model_checkpoint_paths: {json.dumps(name)}" for name in names]
    fileio.atomic_write_text(os.path.join(folder, "checkpoint"), "\n".join(lines) + "\n")


def checkpoint_variable_shapes(path) -> dict[str, list]:
    """Name -> shape of every variable in a checkpoint (any path form)."""
    return dict(tf.train.load_checkpoint(resolve_checkpoint_path(path)).get_variable_to_shape_map())


def read_checkpoint_values(path) -> dict[str, np.ndarray]:
    """Name -> value of every variable in a checkpoint (any path form)."""
    reader = tf.train.load_checkpoint(resolve_checkpoint_path(path))
    return {n: reader.get_tensor(n) for n in reader.get_variable_to_shape_map()}


# --- initialisation from either format ----------------------------------------
OBJECT_GRAPH_KEY = "_CHECKPOINTABLE_OBJECT_GRAPH"


def is_object_based(path) -> bool:
    """Whether the checkpoint was written by tf.train.Checkpoint (ours)."""
    return OBJECT_GRAPH_KEY in checkpoint_variable_shapes(path)


def restore_object_checkpoint(model, prefix) -> list[str]:
    """Restores the encoder and the heads present from one of our `ckpt-<step>` files.

    The root object is `model` (albert_tf.run.training writes model, optimizer,
    iterator). The encoder must match completely; each head attribute of
    HEAD_SCOPES is restored when the checkpoint holds it (shapes must agree)
    and otherwise keeps its initial values. Returns the restored attribute
    names ("albert" first). Raises CheckpointMismatchError when the encoder is
    not there.
    """
    _ensure_built(model)
    encoder = encoder_of(model)
    # The encoder sits at model/albert (a pretrainer or task model was saved) or is
    # the saved model itself (an AlbertModel was saved).
    errors = []
    for holder in (
        tf.train.Checkpoint(model=tf.train.Checkpoint(albert=encoder)),
        tf.train.Checkpoint(model=encoder),
    ):
        try:
            holder.restore(prefix).expect_partial().assert_existing_objects_matched()
            break
        except (AssertionError, ValueError) as err:
            errors.append(str(err)[:300])
    else:
        raise CheckpointMismatchError(
            f"checkpoint {prefix!r} does not hold this model's encoder (object path "
            f"model/albert/... or model/...): {errors[0]}"
        ) from None
    restored = ["albert"]
    for name in HEAD_SCOPES:
        head = getattr(model, name, None) if model is not encoder else None
        if head is None:
            continue
        # A variable is listed under one object path only (often the optimizer's), so
        # presence is decided by the object graph: unmatched = head absent (kept fresh).
        try:
            tf.train.Checkpoint(model=tf.train.Checkpoint(**{name: head})).restore(
                prefix
            ).expect_partial().assert_existing_objects_matched()
        except AssertionError:
            continue
        except ValueError as err:
            raise CheckpointMismatchError(
                f"checkpoint {prefix!r}: head {name!r} does not match: {str(err)[:500]}"
            ) from None
        restored.append(name)
    return restored


def _original_names_of(model, attribute):
    """Original names of the variables of `model.<attribute>` (encoder or head)."""
    if attribute == "albert":
        return set(original_variable_map(encoder_of(model)))
    return {
        _join(HEAD_SCOPES[attribute], suffix)
        for suffix, _, _ in head_names(getattr(model, attribute)).rows
    }


def init_from_checkpoint(model, path, *, allow_missing=(), init_from_group0=False) -> LoadReport:
    """Initial weights from an original-format checkpoint, one of ours, or a Hugging Face
    folder or keras-hub preset.

    Original format, Hugging Face, keras-hub: `load_original_checkpoint` (same arguments). Ours
    (object-based `ckpt-<step>`): `restore_object_checkpoint`; a head it does
    not hold must match `allow_missing`. Raises CheckpointMismatchError when
    the model cannot be filled (nothing is then assigned from an original
    checkpoint; an object checkpoint fails before any head is read). Raises
    UserError when its files are unreadable or truncated.
    """
    if foreign_folders.foreign_format(path) is not None:
        return load_original_checkpoint(
            model, path, allow_missing=allow_missing, init_from_group0=init_from_group0
        )
    prefix = check_checkpoint_readable(path)
    if not is_object_based(prefix):
        return load_original_checkpoint(
            model, prefix, allow_missing=allow_missing, init_from_group0=init_from_group0
        )
    restored = restore_object_checkpoint(model, prefix)
    names = original_variable_map(model)
    loaded = set().union(*(_original_names_of(model, a) for a in restored))
    absent = [n for n in names if n not in loaded]
    allowed = [re.compile(p) for p in allow_missing]
    refused = [n for n in absent if not any(p.search(n) for p in allowed)]
    if refused:
        raise CheckpointMismatchError(
            f"checkpoint {prefix!r} holds no values for: {', '.join(refused)}"
        )
    return LoadReport(
        checkpoint=prefix,
        loaded=[n for n in names if n in loaded],
        missing_allowed=absent,
        ignored=[],
        source={},
    )
