"""Reading a downloaded TF-Hub ALBERT module (the fine-tuning scripts'
--albert_hub_module_handle): its variables by name, its tokenizer and its config.

Formats read (`open_module` tells them apart):

* "tf1_hub": the TF1 Hub format the original's export_to_tfhub.py wrote and
  tfhub.dev/google/albert_<size>/1-3 serve (docs/original.md §14): `tfhub_module.pb`,
  `saved_model.pb`, `variables/variables.{index,data-*}` holding the variables under the
  original names (`bert/...`, `cls/predictions/...`), `assets/30k-clean.model` and, from
  version 2 on, `assets/albert_config.json`.
* "albert_tf": a TF2 SavedModel written by `python -m albert_tf.export`: its root object
  holds `original_variables`, the variables under their original names, and its assets
  `albert_config.json` and `30k-clean.model`.
* "model_garden": a TF2 SavedModel of the TensorFlow Model Garden's `AlbertEncoder`
  (tfhub.dev/tensorflow/albert_en_<size>): variables named after its Keras layers, mapped
  by `_MODEL_GARDEN_TABLE` (the attention kernels, stored [H, N, D] / [N, D, H], are
  reshaped to [H, H]). Only one shared block (G = I = 1) exists in that encoder.
* "keras_hub": a TF2 SavedModel of keras-hub's `AlbertBackbone` (`backbone.export(path)`):
  variables named "<layer>/<variable>", mapped by albert_tf/weights/keras_hub.py's table
  (the same per-head reshapes). It has no assets: the tokenizer is --spm_model_file.

Nothing of a module is executed: the values are read from `variables/` by name (no
tensorflow_hub, no graph run), so any TensorFlow build reads any of the four. Other
SavedModels are refused with a line naming what was found. A URL is refused with how to
download and unpack the module: nothing is fetched at run time.

The config, in this order: --albert_config_file; the module's `assets/albert_config.json`;
else (the v1 TF1 modules, Model Garden and keras-hub modules) the released shape the
variables match: V, E, H, F, P, T (and N where the kernels show it) are read from the
variable shapes, L and N, which no variable shows, come from the released model with that
H and F, and the dropout from that release (v1 for TF1 modules, v2 for Model Garden ones),
with a warning naming every assumed value. A module of another shape needs
--albert_config_file.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re

import numpy as np
import tensorflow as tf

from albert_tf import fileio
from albert_tf.errors import UserError
from albert_tf.weights import checkpoints, keras_hub

_logger = logging.getLogger(__name__)

FLAG = "--albert_hub_module_handle"
TF1_HUB, ALBERT_TF, MODEL_GARDEN, KERAS_HUB = "tf1_hub", "albert_tf", "model_garden", "keras_hub"
MODULE_DEF_NAME = "tfhub_module.pb"  # the marker of the TF1 Hub format
VARIABLES_PREFIX = os.path.join("variables", "variables")
# The root attribute of albert_tf's encoder export holding {original name: variable}.
ORIGINAL_VARIABLES = "original_variables"
EXPORT_INFO = os.path.join("assets.extra", "export_info.json")
_WORD_EMBEDDINGS = "bert/embeddings/word_embeddings"


def _flat(shape):
    return (int(np.prod(shape)),)


def _rows_then_flat(shape):  # [H, N, D] -> [H, N*D]
    return (shape[0], int(np.prod(shape[1:])))


def _flat_then_cols(shape):  # [N, D, H] -> [N*D, H]
    return (int(np.prod(shape[:-1])), shape[-1])


def _same(shape):
    return tuple(shape)


_BLOCK = "bert/encoder/transformer/group_0/inner_group_0/"
# Model Garden variable name (a suffix of the stored name, after a "/") -> (original
# name, reshape). Names follow the Model Garden's ALBERT checkpoint converter; the
# attention output dense has had two names across its versions.
_MODEL_GARDEN_TABLE = {
    "word_embeddings/embeddings": (_WORD_EMBEDDINGS, _same),
    "position_embedding/embeddings": ("bert/embeddings/position_embeddings", _same),
    "type_embeddings/embeddings": ("bert/embeddings/token_type_embeddings", _same),
    "embeddings/layer_norm/gamma": ("bert/embeddings/LayerNorm/gamma", _same),
    "embeddings/layer_norm/beta": ("bert/embeddings/LayerNorm/beta", _same),
    "embedding_projection/kernel": ("bert/encoder/embedding_hidden_mapping_in/kernel", _same),
    "embedding_projection/bias": ("bert/encoder/embedding_hidden_mapping_in/bias", _same),
    **{
        f"transformer/self_attention/{part}/kernel": (
            f"{_BLOCK}attention_1/self/{part}/kernel",
            _rows_then_flat,
        )
        for part in ("query", "key", "value")
    },
    **{
        f"transformer/self_attention/{part}/bias": (f"{_BLOCK}attention_1/self/{part}/bias", _flat)
        for part in ("query", "key", "value")
    },
    **{
        f"{scope}/kernel": (f"{_BLOCK}attention_1/output/dense/kernel", _flat_then_cols)
        for scope in (
            "transformer/self_attention/attention_output",
            "transformer/self_attention_output",
        )
    },
    **{
        f"{scope}/bias": (f"{_BLOCK}attention_1/output/dense/bias", _flat)
        for scope in (
            "transformer/self_attention/attention_output",
            "transformer/self_attention_output",
        )
    },
    "transformer/self_attention_layer_norm/gamma": (f"{_BLOCK}LayerNorm/gamma", _same),
    "transformer/self_attention_layer_norm/beta": (f"{_BLOCK}LayerNorm/beta", _same),
    "transformer/intermediate/kernel": (f"{_BLOCK}ffn_1/intermediate/dense/kernel", _same),
    "transformer/intermediate/bias": (f"{_BLOCK}ffn_1/intermediate/dense/bias", _same),
    "transformer/output/kernel": (f"{_BLOCK}ffn_1/intermediate/output/dense/kernel", _same),
    "transformer/output/bias": (f"{_BLOCK}ffn_1/intermediate/output/dense/bias", _same),
    "transformer/output_layer_norm/gamma": (f"{_BLOCK}LayerNorm_1/gamma", _same),
    "transformer/output_layer_norm/beta": (f"{_BLOCK}LayerNorm_1/beta", _same),
    "pooler_transform/kernel": ("bert/pooler/dense/kernel", _same),
    "pooler_transform/bias": ("bert/pooler/dense/bias", _same),
    # The masked-LM head of a Model Garden pretrainer, where the module has one.
    "cls/predictions/transform/dense/kernel": ("cls/predictions/transform/dense/kernel", _same),
    "cls/predictions/transform/dense/bias": ("cls/predictions/transform/dense/bias", _same),
    "cls/predictions/transform/LayerNorm/gamma": (
        "cls/predictions/transform/LayerNorm/gamma",
        _same,
    ),
    "cls/predictions/transform/LayerNorm/beta": ("cls/predictions/transform/LayerNorm/beta", _same),
    "cls/predictions/output_bias/bias": ("cls/predictions/output_bias", _same),
}


@dataclasses.dataclass
class HubModule:
    """A module folder, read.

    reader: `get_variable_to_shape_map()` / `get_variable_to_dtype_map()` /
      `get_tensor(name)` under the original names (what
      albert_tf.weights.checkpoints.load_by_name takes).
    spm_model_file / config_file: the module's assets (None where absent).
    do_lower_case: what the module says (its tokenization_info signature, or the export
      info of albert_tf's export); None when it says nothing.
    num_attention_heads: N where the variable shapes show it (Model Garden), else None.
    """

    folder: str
    kind: str
    reader: object
    spm_model_file: str | None
    config_file: str | None
    do_lower_case: bool | None
    num_attention_heads: int | None = None

    @property
    def description(self) -> str:
        return f"{self.folder} ({self.kind} module)"


class _RenamedReader:
    """A checkpoint reader seen under other names: {original name: (stored key,
    reshape)} -> the `tf.train.load_checkpoint` interface."""

    def __init__(self, reader, table):
        stored = reader.get_variable_to_shape_map()
        self._reader = reader
        self._table = table
        self._shapes = {name: list(reshape(stored[key])) for name, (key, reshape) in table.items()}

    def get_variable_to_shape_map(self):
        return dict(self._shapes)

    def get_variable_to_dtype_map(self):
        stored = self._reader.get_variable_to_dtype_map()
        return {name: stored[key] for name, (key, _) in self._table.items()}

    def get_tensor(self, name):
        key, _ = self._table[name]
        return np.reshape(self._reader.get_tensor(key), self._shapes[name])


# --- finding and opening a module ------------------------------------------------------
def is_url(handle: str) -> bool:
    """A tfhub.dev (or other web) handle, as the original's run_glue.sh passes."""
    return (handle or "").startswith(("http://", "https://"))


def is_hub_module(path) -> bool:
    """Whether `path` is a folder in one of the formats this module reads (by its files:
    `tfhub_module.pb`, or `saved_model.pb` with `variables/`)."""
    if not path or not fileio.isdir(path):
        return False
    if fileio.isfile(os.path.join(path, MODULE_DEF_NAME)):
        return True
    return fileio.isfile(os.path.join(path, "saved_model.pb")) and fileio.isfile(
        os.path.join(path, VARIABLES_PREFIX + ".index")
    )


def _download_hint(handle: str) -> str:
    url = handle.split("?")[0].rstrip("/")
    name = "_".join(url.split("/")[-2:]) or "module"
    return (
        f"{FLAG}={handle}: modules are not downloaded at run time; download "
        f"'{url}?tf-hub-format=compressed' (a .tar.gz), unpack it with "
        f"'mkdir {name} && tar -xzf <file> -C {name}' and pass the folder "
        f"({FLAG}={name})"
    )


def open_module(handle: str, flag: str = FLAG) -> HubModule:
    """Reads the module folder `handle`; UserError naming the flag for a URL, a missing
    folder, an archive not unpacked, or a folder that is not a module of a known format."""
    handle = os.fspath(handle)
    if is_url(handle):
        raise UserError(_download_hint(handle))
    folder = handle[len("file://") :] if handle.startswith("file://") else handle
    if fileio.isfile(folder) and folder.endswith((".tar.gz", ".tgz", ".tar")):
        raise UserError(
            f"{flag}={handle}: an archive; unpack it ('mkdir m && tar -xzf {handle} -C m') "
            "and pass the folder"
        )
    if not fileio.isdir(folder):
        raise UserError(f"{flag}={handle}: folder not found")
    if not is_hub_module(folder):
        raise UserError(
            f"{flag}={handle}: not a TF-Hub module folder (expected {MODULE_DEF_NAME} or "
            "saved_model.pb, and variables/variables.index)"
        )
    try:
        prefix = checkpoints.check_checkpoint_readable(os.path.join(folder, VARIABLES_PREFIX))
    except FileNotFoundError as err:
        raise UserError(f"{flag}={handle}: {err}") from None
    reader = tf.train.load_checkpoint(prefix)
    assets = _assets(folder)
    if fileio.isfile(os.path.join(folder, MODULE_DEF_NAME)):
        kind, do_lower_case, num_heads = TF1_HUB, _tf1_do_lower_case(folder), None
    else:
        graph = _object_graph(reader)
        table = _albert_tf_table(graph)
        if table is not None:
            kind, num_heads = ALBERT_TF, None
            do_lower_case = _export_info(folder).get("do_lower_case")
        elif _stored_names(graph).get(keras_hub.SAVED_MODEL_MARKER):
            table, num_heads = _keras_hub_table(graph, reader, flag, handle)
            kind, do_lower_case = KERAS_HUB, None
        else:
            table, num_heads = _model_garden_table(graph, reader, flag, handle)
            kind, do_lower_case = MODEL_GARDEN, None
        reader = _RenamedReader(reader, table)
    if _WORD_EMBEDDINGS not in reader.get_variable_to_shape_map():
        raise UserError(
            f"{flag}={handle}: the module's variables hold no ALBERT encoder "
            f"({_WORD_EMBEDDINGS} not found)"
        )
    module = HubModule(folder, kind, reader, *assets, do_lower_case, num_heads)
    _logger.info(
        "%s: %d variables, SentencePiece model %s, config %s",
        module.description,
        len(reader.get_variable_to_shape_map()),
        module.spm_model_file,
        module.config_file or "(none: inferred)",
    )
    return module


def _assets(folder):
    """(SentencePiece model, albert_config.json) among the module's assets, or None each:
    the names the original gave them, else the only file of that type."""
    found = []
    for name, pattern in (("30k-clean.model", "*.model"), ("albert_config.json", "*.json")):
        path = os.path.join(folder, "assets", name)
        if not fileio.isfile(path):
            matches = sorted(tf.io.gfile.glob(os.path.join(folder, "assets", pattern)))
            path = matches[0] if len(matches) == 1 else None
        found.append(path)
    return found


def _export_info(folder) -> dict:
    path = os.path.join(folder, EXPORT_INFO)
    if not fileio.isfile(path):
        return {}
    value = fileio.read_json(path)
    if not isinstance(value, dict):
        raise UserError(f"{path}: expected a JSON object, got {type(value).__name__}")
    return value


def _tf1_do_lower_case(folder) -> bool | None:
    """The `do_lower_case` output of the module's `tokenization_info` signature: a
    constant of its graph (saved_model.pb), read without running the graph."""
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(folder, "saved_model.pb")
    if not fileio.isfile(path):
        return None
    saved = saved_model_pb2.SavedModel()
    saved.ParseFromString(fileio.read_bytes(path))
    for meta in saved.meta_graphs:
        signature = meta.signature_def.get("tokenization_info")
        if signature is None or "do_lower_case" not in signature.outputs:
            continue
        node_name = signature.outputs["do_lower_case"].name.split(":")[0]
        for node in meta.graph_def.node:
            if node.name == node_name and node.op == "Const":
                values = node.attr["value"].tensor.bool_val
                if values:
                    return bool(values[0])
    return None


def _object_graph(reader):
    from tensorflow.core.protobuf import trackable_object_graph_pb2

    if checkpoints.OBJECT_GRAPH_KEY not in reader.get_variable_to_shape_map():
        return None
    return trackable_object_graph_pb2.TrackableObjectGraph.FromString(
        reader.get_tensor(checkpoints.OBJECT_GRAPH_KEY)
    )


def _variable_key(node):
    for attribute in node.attributes:
        if attribute.name == "VARIABLE_VALUE":
            return attribute.checkpoint_key
    return None


def _albert_tf_table(graph):
    """{original name: (stored key, same shape)} from the root's `original_variables`
    (albert_tf's export), or None when the root has no such attribute."""
    if graph is None or not graph.nodes:
        return None
    child = next((c for c in graph.nodes[0].children if c.local_name == ORIGINAL_VARIABLES), None)
    if child is None:
        return None
    return {
        c.local_name: (_variable_key(graph.nodes[c.node_id]), _same)
        for c in graph.nodes[child.node_id].children
    }


def _stored_names(graph) -> dict:
    """{variable's full name: checkpoint key} of an object graph ({} without one)."""
    stored = {}
    for node in graph.nodes if graph is not None else ():
        for attribute in node.attributes:
            if attribute.name == "VARIABLE_VALUE" and attribute.full_name:
                stored[attribute.full_name] = attribute.checkpoint_key
    return stored


_KERAS_HUB_RESHAPES = {
    keras_hub.SAME: _same,
    keras_hub.HEADS_IN: _rows_then_flat,
    keras_hub.HEADS_BIAS: _flat,
    keras_hub.HEADS_OUT: _flat_then_cols,
}


def _keras_hub_table(graph, reader, flag, handle):
    """({original name: (stored key, reshape)}, N) of a keras-hub AlbertBackbone SavedModel
    (`export()`), through albert_tf/weights/keras_hub.py's name table; UserError naming
    the variables it has no row for."""
    table, unknown = {}, []
    for full_name, key in _stored_names(graph).items():
        found = keras_hub.saved_model_name(full_name)
        found = found and keras_hub.original_name(found)
        if not found:
            unknown.append(full_name)
            continue
        original, layout = found
        table[original] = (key, _KERAS_HUB_RESHAPES[layout])
    if unknown:
        raise UserError(
            f"{flag}={handle}: a keras-hub SavedModel with variables no AlbertBackbone has: "
            f"{', '.join(sorted(unknown)[:10])}"
        )
    query = f"{_BLOCK}attention_1/self/query/kernel"
    heads = int(reader.get_variable_to_shape_map()[table[query][0]][1]) if query in table else None
    return table, heads


def _model_garden_table(graph, reader, flag, handle):
    """({original name: (stored key, reshape)}, N) of a Model Garden AlbertEncoder, by the
    variables' stored names (full_name); UserError when the module is not one."""
    stored = _stored_names(graph)
    table = {}
    for suffix, (original, reshape) in _MODEL_GARDEN_TABLE.items():
        matches = [n for n in stored if n == suffix or n.endswith("/" + suffix)]
        if len(matches) > 1:
            raise UserError(
                f"{flag}={handle}: several variables end in {suffix}: {', '.join(matches)}"
            )
        if matches:
            table[original] = (stored[matches[0]], reshape)
    if _WORD_EMBEDDINGS not in table:
        sample = ", ".join(sorted(stored)[:5]) or "none with names"
        raise UserError(
            f"{flag}={handle}: a TF2 SavedModel of unknown layout (variables: {sample}); "
            "read are TF1 Hub modules, albert_tf's exports, the Model Garden's "
            "AlbertEncoder modules and keras-hub AlbertBackbone exports"
        )
    query = f"{_BLOCK}attention_1/self/query/kernel"
    heads = None
    if query in table:
        shape = reader.get_variable_to_shape_map()[table[query][0]]
        heads = int(shape[1]) if len(shape) == 3 else None
    return table, heads


# --- config ------------------------------------------------------------------------------
_RELEASED_SIZES = ("base", "large", "xlarge", "xxlarge")


def module_config(module: HubModule, albert_config_file: str | None = None):
    """(AlbertConfig, where it came from) for the module: --albert_config_file, the
    module's albert_config.json, or the released shape its variables match (see the
    module docstring). UserError when none applies."""
    from albert_tf.model.config import AlbertConfig

    if albert_config_file:
        fileio.check_input_file(albert_config_file, f"--albert_config_file={albert_config_file}")
        return AlbertConfig.from_json_file(albert_config_file), albert_config_file
    if module.config_file:
        return AlbertConfig.from_json_file(module.config_file), module.config_file
    release = "v1" if module.kind == TF1_HUB else "v2"
    config, assumed = infer_config(
        module.reader.get_variable_to_shape_map(), module.num_attention_heads, release
    )
    if config is None:
        raise UserError(
            f"{FLAG}={module.folder}: the module has no assets/albert_config.json and its "
            f"variables match no released ALBERT shape ({assumed}); pass --albert_config_file"
        )
    _logger.warning(
        "%s has no albert_config.json: using %s (read from its variables: vocab_size, "
        "embedding_size, hidden_size, intermediate_size, max_position_embeddings, "
        "type_vocab_size); pass --albert_config_file to choose other values",
        module.description,
        assumed,
    )
    return config, f"{module.folder} (inferred)"


def infer_config(shapes: dict, num_attention_heads: int | None = None, release: str = "v1"):
    """The config of a module without albert_config.json, from its variable shapes
    (original names).

    Returns (AlbertConfig, one line naming the released model and the values taken from
    it), or (None, one line saying what did not match). What the shapes show is used
    (V, E from the word embeddings, P, T, H from the pooler, F, N when given); the rest
    (L, N, activation, dropout, initializer range) is the released `albert_<size>_<release>`
    whose H and F are those of the module. Only G = I = 1 modules are inferred.
    """
    from albert_tf.model.config import preset

    def shape(name):
        return shapes.get(name)

    groups = {
        m.group(1, 2) for n in shapes if (m := re.search(r"/group_(\d+)/inner_group_(\d+)/", n))
    }
    word, pooler = shape(_WORD_EMBEDDINGS), shape("bert/pooler/dense/kernel")
    ffn = shape(f"{_BLOCK}ffn_1/intermediate/dense/kernel")
    if groups != {("0", "0")} or word is None or pooler is None or ffn is None:
        return None, f"groups/inner groups {sorted(groups)}, expected only group_0/inner_group_0"
    hidden, intermediate = int(pooler[1]), int(ffn[1])
    for size in _RELEASED_SIZES:
        released = preset(f"albert_{size}_{release}")
        if (released.hidden_size, released.intermediate_size) != (hidden, intermediate):
            continue
        heads = num_attention_heads or released.num_attention_heads
        config = released.replace(
            vocab_size=int(word[0]),
            embedding_size=int(word[1]),
            hidden_size=hidden,
            intermediate_size=intermediate,
            max_position_embeddings=int(shape("bert/embeddings/position_embeddings")[0]),
            type_vocab_size=int(shape("bert/embeddings/token_type_embeddings")[0]),
            num_attention_heads=heads,
        )
        assumed = (
            f"the albert_{size}_{release} shape: num_hidden_layers="
            f"{config.num_hidden_layers}"
            + ("" if num_attention_heads else f", num_attention_heads={heads}")
            + f", hidden_act={config.hidden_act}, dropout {config.hidden_dropout_prob:g}"
        )
        return config, assumed
    return None, f"hidden_size={hidden}, intermediate_size={intermediate}"


# --- loading -----------------------------------------------------------------------------
def load_module(model, module: HubModule, allow_missing=()):
    """Fills `model` from the module's variables by their original names (heads the
    module lacks may stay fresh where `allow_missing` says so); returns the LoadReport.
    Raises checkpoints.CheckpointMismatchError as load_original_checkpoint does."""
    return checkpoints.load_by_name(
        model, module.reader, module.description, allow_missing=allow_missing
    )


__all__ = [
    "HubModule",
    "TF1_HUB",
    "ALBERT_TF",
    "MODEL_GARDEN",
    "KERAS_HUB",
    "is_url",
    "is_hub_module",
    "open_module",
    "module_config",
    "infer_config",
    "load_module",
]
