"""keras-hub ALBERT presets: `config.json` (keras_hub>AlbertBackbone), `model.weights.h5`
(Keras 3's weights file), `tokenizer.json` + `assets/tokenizer/vocabulary.spm` (the
SentencePiece model) and `metadata.json`. Read and written with h5py (keras-hub itself is
not needed); files go through tf.io.gfile, a non-local weights file through a local copy.
Reading checks every dataset before any is read (albert_tf/weights/foreign_tensors.py):
floating-point, its data inside the file (no external storage, virtual datasets or
links), its declared shape within the config's sizes.

Layout of model.weights.h5: `layers/<path>/vars/<k>` datasets, one group per layer of the
functional model; `<path>` is Keras' own generated path (`dense`, `transformer_encoder_1`,
...), and each layer's `vars` group carries the layer's name as attribute `name`. Reading
goes by those names (token_embedding, group_<g>_inner_layer_<i>, ...); writing repeats
the paths Keras generates for AlbertBackbone (`_BACKBONE_PATHS`), so `from_preset`
finds every variable. Only the backbone is carried: the pretraining heads have no place
in a keras-hub backbone preset and are left out.

Names: `NAMES` (a NameTable, albert_tf/weights/name_table.py) maps each original name to
"<layer name>/<sub-path>/<k>". The attention kernels are stored per head, [H, N, D] for
query/key/value (bias [N, D]) and [N, D, H] for the output, the row-major reshape of the
original's [H, H] (column c = head c // D). keras-hub always applies its embedding
projection and computes the tanh GELU ("gelu_approximate") with one dropout rate; layer l
runs group l // (L / G), which must agree with the original's rule (checked).
"""

from __future__ import annotations

import datetime
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from albert_tf import fileio
from albert_tf.errors import UserError
from albert_tf.weights.foreign_tensors import (
    Conversions,
    SizeLimits,
    check_finite,
    inside_folder,
    refuse_dtype,
)
from albert_tf.weights.foreign_weights import (
    KERAS_HUB,
    ForeignWeights,
    check_all_named,
    group_mapping_problem,
    read_json,
    write_json,
)
from albert_tf.weights.name_table import (
    BLOCK,
    HEADS_BIAS,
    HEADS_IN,
    HEADS_OUT,
    PROJECTION,
    SAME,
    NameTable,
    drop_identity_projection,
    identity_projection,
)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.weights.h5"
TOKENIZER_NAME = "tokenizer.json"
METADATA_NAME = "metadata.json"
SPM_ASSET = os.path.join("assets", "tokenizer", "vocabulary.spm")
KERAS_HUB_VERSION = "0.32.0"

_LAYER = "group_{g}_inner_layer_{i}/"
_ATTENTION = _LAYER + "_self_attention_layer/"
# (original name, keras-hub name, how the value is stored: the attention's per head).
NAMES = NameTable(
    [
        ("bert/embeddings/word_embeddings", "token_embedding/0", SAME),
        ("bert/embeddings/position_embeddings", "position_embedding/0", SAME),
        ("bert/embeddings/token_type_embeddings", "segment_embedding/0", SAME),
        ("bert/embeddings/LayerNorm/gamma", "embeddings_layer_norm/0", SAME),
        ("bert/embeddings/LayerNorm/beta", "embeddings_layer_norm/1", SAME),
        (f"{PROJECTION}/kernel", "embedding_projection/0", SAME),
        (f"{PROJECTION}/bias", "embedding_projection/1", SAME),
        *[
            (f"{BLOCK}attention_1/self/{part}/{kind}", f"{_ATTENTION}{part}_dense/{k}", layout)
            for part in ("query", "key", "value")
            for kind, k, layout in (("kernel", 0, HEADS_IN), ("bias", 1, HEADS_BIAS))
        ],
        (f"{BLOCK}attention_1/output/dense/kernel", f"{_ATTENTION}output_dense/0", HEADS_OUT),
        (f"{BLOCK}attention_1/output/dense/bias", f"{_ATTENTION}output_dense/1", SAME),
        (f"{BLOCK}LayerNorm/gamma", f"{_LAYER}_self_attention_layer_norm/0", SAME),
        (f"{BLOCK}LayerNorm/beta", f"{_LAYER}_self_attention_layer_norm/1", SAME),
        (
            f"{BLOCK}ffn_1/intermediate/dense/kernel",
            f"{_LAYER}_feedforward_intermediate_dense/0",
            SAME,
        ),
        (
            f"{BLOCK}ffn_1/intermediate/dense/bias",
            f"{_LAYER}_feedforward_intermediate_dense/1",
            SAME,
        ),
        (
            f"{BLOCK}ffn_1/intermediate/output/dense/kernel",
            f"{_LAYER}_feedforward_output_dense/0",
            SAME,
        ),
        (
            f"{BLOCK}ffn_1/intermediate/output/dense/bias",
            f"{_LAYER}_feedforward_output_dense/1",
            SAME,
        ),
        (f"{BLOCK}LayerNorm_1/gamma", f"{_LAYER}_feedforward_layer_norm/0", SAME),
        (f"{BLOCK}LayerNorm_1/beta", f"{_LAYER}_feedforward_layer_norm/1", SAME),
        ("bert/pooler/dense/kernel", "pooled_dense/0", SAME),
        ("bert/pooler/dense/bias", "pooled_dense/1", SAME),
    ]
)


# A keras-hub SavedModel (`backbone.export(path)`) names its variables by layer name and
# variable name ("group_0_inner_layer_0/self_attention_layer/query/kernel"); the preset
# file by attribute paths and indices. Layer names -> attribute paths; variable -> index.
_SAVED_MODEL_SUBLAYERS = {
    "self_attention_layer/query": "_self_attention_layer/query_dense",
    "self_attention_layer/key": "_self_attention_layer/key_dense",
    "self_attention_layer/value": "_self_attention_layer/value_dense",
    "self_attention_layer/attention_output": "_self_attention_layer/output_dense",
    "self_attention_layer_norm": "_self_attention_layer_norm",
    "feedforward_intermediate_dense": "_feedforward_intermediate_dense",
    "feedforward_output_dense": "_feedforward_output_dense",
    "feedforward_layer_norm": "_feedforward_layer_norm",
}
_SAVED_MODEL_INDEX = {"embeddings": "0", "kernel": "0", "gamma": "0", "bias": "1", "beta": "1"}
SAVED_MODEL_MARKER = "token_embedding/embeddings"  # the variable every AlbertBackbone has


def saved_model_name(variable_path: str) -> str | None:
    """The "<layer name>/<sub-path>/<k>" name of a keras-hub SavedModel variable path, or
    None when it is not one of AlbertBackbone's."""
    layer, _, rest = variable_path.partition("/")
    sub, _, variable = rest.rpartition("/")
    if variable not in _SAVED_MODEL_INDEX:
        return None
    if sub:
        if sub not in _SAVED_MODEL_SUBLAYERS:
            return None
        sub = _SAVED_MODEL_SUBLAYERS[sub]
    return "/".join(p for p in (layer, sub, _SAVED_MODEL_INDEX[variable]) if p)


# --- config ----------------------------------------------------------------------------
def _keras_hub_group(config, layer):
    """keras-hub's AlbertBackbone: each group runs num_layers // num_groups times in turn."""
    return layer // (config.num_hidden_layers // config.num_hidden_groups)


def config_from_keras_hub(values: dict, source: str):
    """The AlbertConfig of a keras-hub AlbertBackbone config.json."""
    from albert_tf.model.config import AlbertConfig

    inner = values.get("config")
    if not isinstance(inner, dict):
        raise UserError(f"{source}: expected a `config` object (keras-hub AlbertBackbone)")
    names = {
        "vocab_size": "vocabulary_size",
        "num_hidden_layers": "num_layers",
        "num_attention_heads": "num_heads",
        "embedding_size": "embedding_dim",
        "hidden_size": "hidden_dim",
        "intermediate_size": "intermediate_dim",
    }
    missing = [k for k in names.values() if k not in inner]
    if missing:
        raise UserError(f"{source}: config has no {', '.join(missing)}")
    dtype = inner.get("dtype")
    dtype_name = dtype.get("config", {}).get("name") if isinstance(dtype, dict) else dtype
    if dtype_name not in (None, "float32"):
        raise UserError(f"{source}: dtype {dtype_name!r}; expected float32")
    dropout = inner.get("dropout", 0.0)
    config = AlbertConfig.from_dict(
        {
            **{ours: inner[theirs] for ours, theirs in names.items()},
            "num_hidden_groups": inner.get("num_groups", 1),
            "inner_group_num": inner.get("num_inner_repetitions", 1),
            "hidden_act": "gelu",
            "hidden_dropout_prob": dropout,
            "attention_probs_dropout_prob": dropout,
            "max_position_embeddings": inner.get("max_sequence_length", 512),
            "type_vocab_size": inner.get("num_segments", 2),
            "initializer_range": 0.02,
            "down_scale_factor": 1,
        },
        source,
    )
    _check_groups(config, source)
    return config


def _check_groups(config, source):
    if config.num_hidden_layers % config.num_hidden_groups:
        raise UserError(
            f"{source}: num_hidden_layers={config.num_hidden_layers} is not a multiple of "
            f"num_hidden_groups={config.num_hidden_groups}, as keras-hub's AlbertBackbone needs"
        )
    problem = group_mapping_problem(config, lambda l: _keras_hub_group(config, l), "keras-hub")
    if problem:
        raise UserError(f"{source}: {problem}")


def config_to_keras_hub(config) -> dict:
    """config.json of a keras-hub AlbertBackbone preset; UserError for a config keras-hub
    cannot run the same way."""
    source = "config"
    if config.hidden_act.lower() != "gelu":
        raise UserError(
            f"{source}: hidden_act {config.hidden_act!r}; keras-hub's AlbertBackbone "
            "computes the tanh GELU only"
        )
    if config.hidden_dropout_prob != config.attention_probs_dropout_prob:
        raise UserError(
            f"{source}: hidden_dropout_prob {config.hidden_dropout_prob} != "
            f"attention_probs_dropout_prob {config.attention_probs_dropout_prob}; keras-hub's "
            "AlbertBackbone has one dropout rate"
        )
    if config.cross_layer_sharing != "all":
        raise UserError(
            f"{source}: cross_layer_sharing {config.cross_layer_sharing!r}; keras-hub "
            "shares whole blocks only"
        )
    _check_groups(config, source)
    return {
        "module": "keras_hub.src.models.albert.albert_backbone",
        "class_name": "AlbertBackbone",
        "config": {
            "name": "albert_backbone",
            "trainable": True,
            "dtype": {
                "module": "keras",
                "class_name": "DTypePolicy",
                "config": {"name": "float32"},
                "registered_name": None,
            },
            "vocabulary_size": config.vocab_size,
            "num_layers": config.num_hidden_layers,
            "num_heads": config.num_attention_heads,
            "num_groups": config.num_hidden_groups,
            "num_inner_repetitions": config.inner_group_num,
            "embedding_dim": config.embedding_size,
            "hidden_dim": config.hidden_size,
            "intermediate_dim": config.intermediate_size,
            "dropout": config.hidden_dropout_prob,
            "max_sequence_length": config.max_position_embeddings,
            "num_segments": config.type_vocab_size,
        },
        "registered_name": "keras_hub>AlbertBackbone",
    }


def tokenizer_json() -> dict:
    """tokenizer.json of a keras-hub AlbertTokenizer whose proto is the asset."""
    return {
        "module": "keras_hub.src.models.albert.albert_tokenizer",
        "class_name": "AlbertTokenizer",
        "config": {
            "name": "albert_tokenizer",
            "trainable": True,
            "dtype": {
                "module": "keras",
                "class_name": "DTypePolicy",
                "config": {"name": "int32"},
                "registered_name": None,
            },
            "config_file": TOKENIZER_NAME,
            "proto": None,
            "sequence_length": None,
            "add_bos": False,
            "add_eos": False,
        },
        "registered_name": "keras_hub>AlbertTokenizer",
    }


# --- reading ---------------------------------------------------------------------------
def _local_copy(path, stack):
    """A local path of `path` (itself when local; else a temporary copy, removed by
    `stack`)."""
    if "://" not in path:
        return path
    folder = tempfile.mkdtemp(prefix="albert-keras-hub-")
    stack.callback(shutil.rmtree, folder, ignore_errors=True)  # machine-local temporary copy
    local = os.path.join(folder, os.path.basename(path))
    tf.io.gfile.copy(path, local)
    return local


def _check_dataset(dataset, path: str, name: str, limits) -> None:
    """Refuses (UserError) a dataset whose data may lie outside the file (external
    storage, a virtual dataset), that is not floating-point, or that declares more than
    `limits` allow; reads no data."""
    if dataset.external or dataset.is_virtual:
        raise UserError(
            f"{path}: dataset {name} keeps its data outside the file (HDF5 "
            f"{'external storage' if dataset.external else 'virtual dataset'}); expected "
            "a weights file holding its own data"
        )
    if dataset.dtype.kind != "f":
        raise refuse_dtype(path, name, str(dataset.dtype))
    limits.check(dataset.shape, path, name)


def _datasets(path, file, layers):
    """[(name "<layer name>/<sub-path>/<k>", dataset)] of a Keras 3 weights file's
    `layers` group. Only the file's own groups are followed: an external or soft link is
    refused (it may lead outside the file, or in a circle), and so is a group reached
    twice."""
    import h5py

    found, seen = [], set()

    def items(group, where):
        for key in group:
            link = group.get(key, getlink=True)
            if not isinstance(link, h5py.HardLink):
                kind = "an external link" if isinstance(link, h5py.ExternalLink) else "a link"
                raise UserError(
                    f"{path}: {where}/{key} is {kind}; expected a weights file holding "
                    "its own groups and data"
                )
            item = group[key]
            if item.id in seen:
                raise UserError(f"{path}: {where}/{key} is reached twice; expected a tree")
            seen.add(item.id)
            yield key, item

    def visit(group, where, layer_name, sub_path):
        for key, item in items(group, where):
            if key == "vars" and isinstance(item, h5py.Group):
                for index, dataset in items(item, f"{where}/vars"):
                    if not isinstance(dataset, h5py.Dataset):
                        raise UserError(f"{path}: {where}/vars/{index} is not a dataset")
                    found.append(("/".join(p for p in (layer_name, sub_path, index) if p), dataset))
            elif isinstance(item, h5py.Group):
                visit(item, f"{where}/{key}", layer_name, f"{sub_path}/{key}" if sub_path else key)

    for key, group in items(layers, "layers"):
        if not isinstance(group, h5py.Group):
            continue
        # The layer's name is an attribute of its vars group (a link checked by `visit`).
        vars_link = group.get("vars", getlink=True)
        vars_group = group["vars"] if isinstance(vars_link, h5py.HardLink) else None
        name = vars_group.attrs.get("name", key) if isinstance(vars_group, h5py.Group) else key
        visit(group, f"layers/{key}", str(name), "")
    return found


def read_weights_file(path, config) -> dict:
    """{"<layer name>/<sub-path>/<k>": float32 array} of a Keras 3 weights file, every
    dataset checked (albert_tf/weights/foreign_tensors.py: floating-point, no data outside
    the file, declared shapes within `config`'s sizes) before any is read."""
    import contextlib

    import h5py

    fileio.check_input_file(path, path)  # a FIFO would block HDF5's open
    tensors = {}
    with contextlib.ExitStack() as stack:
        try:
            file = stack.enter_context(h5py.File(_local_copy(path, stack), "r"))
        except OSError as err:
            raise UserError(f"{path}: not an HDF5 weights file ({err})") from None
        layers = file.get("layers", getlink=True)
        if not isinstance(layers, h5py.HardLink) or not isinstance(file["layers"], h5py.Group):
            raise UserError(f"{path}: no `layers` group (not a Keras 3 weights file)")
        datasets = _datasets(path, file, file["layers"])
        limits = SizeLimits(config)
        for name, dataset in datasets:
            _check_dataset(dataset, path, name, limits)
        conversions = Conversions(path)
        for name, dataset in datasets:
            try:
                value = np.asarray(dataset[()], np.float32)
            except (OSError, ValueError, TypeError) as err:
                raise UserError(f"{path}: cannot read dataset {name} ({err})") from None
            conversions.add(dataset.dtype.name)
            check_finite(value, path, name)
            tensors[name] = value
        conversions.log()
    return tensors


def values_from_keras_hub(tensors: dict, config, source: str) -> dict:
    values, unknown = NAMES.to_original(tensors)
    check_all_named("keras-hub", source, unknown)
    if not drop_identity_projection(values, config):
        raise UserError(
            f"{source}: embedding_dim = hidden_dim, where ALBERT has no embedding "
            "projection, but the preset's is not the identity"
        )
    return values


def describe_folder(folder) -> ForeignWeights:
    """The config and tokenizer of a keras-hub AlbertBackbone preset folder, its weights
    file present but not read (`values` is {})."""
    folder = os.fspath(folder)
    config_file = inside_folder(folder, CONFIG_NAME, folder)
    spm = os.path.join(folder, SPM_ASSET)
    if tf.io.gfile.exists(spm):
        inside_folder(folder, SPM_ASSET, folder)
    config = config_from_keras_hub(read_json(config_file), config_file)
    weights_file = os.path.join(folder, WEIGHTS_NAME)
    if not tf.io.gfile.exists(weights_file):
        sharded = tf.io.gfile.exists(os.path.join(folder, "model.weights.json"))
        raise UserError(
            f"{folder}: no {WEIGHTS_NAME}"
            + (" (sharded weights are not read; save the preset unsharded)" if sharded else "")
        )
    return ForeignWeights(
        format=KERAS_HUB,
        folder=folder,
        config=config,
        config_file=config_file,
        values={},
        spm_model_file=spm if tf.io.gfile.exists(spm) else None,
    )


def read_folder(folder) -> ForeignWeights:
    """`describe_folder` with the weights read: `values` under the original names."""
    foreign = describe_folder(folder)
    weights_file = inside_folder(foreign.folder, WEIGHTS_NAME, foreign.folder)
    tensors = read_weights_file(weights_file, foreign.config)
    foreign.values = values_from_keras_hub(tensors, foreign.config, weights_file)
    return foreign


# --- writing ---------------------------------------------------------------------------
def _backbone_paths(config) -> list[tuple[str, str, dict]]:
    """(path under layers/, layer name, {sub-path: name attribute}) of every layer of
    keras-hub's AlbertBackbone, in the order Keras names them."""
    paths = [
        ("input_layer", "token_ids", {}),
        ("input_layer_1", "segment_ids", {}),
        ("input_layer_2", "padding_mask", {}),
        ("reversible_embedding", "token_embedding", {}),
        ("position_embedding", "position_embedding", {}),
        ("embedding", "segment_embedding", {}),
        ("add", "embeddings_add", {}),
        ("layer_normalization", "embeddings_layer_norm", {}),
        ("dropout", "embeddings_dropout", {}),
        ("dense", "embedding_projection", {}),
    ]
    encoder_parts = {
        "_feedforward_dropout": "feedforward_dropout",
        "_feedforward_intermediate_dense": "feedforward_intermediate_dense",
        "_feedforward_layer_norm": "feedforward_layer_norm",
        "_feedforward_output_dense": "feedforward_output_dense",
        "_self_attention_dropout": "self_attention_dropout",
        "_self_attention_layer": "self_attention_layer",
        "_self_attention_layer/_dropout_layer": "dropout",
        "_self_attention_layer/_softmax": "softmax",
        "_self_attention_layer/key_dense": "key",
        "_self_attention_layer/output_dense": "attention_output",
        "_self_attention_layer/query_dense": "query",
        "_self_attention_layer/value_dense": "value",
        "_self_attention_layer_norm": "self_attention_layer_norm",
    }
    count = 0
    for g in range(config.num_hidden_groups):
        for i in range(config.inner_group_num):
            path = "transformer_encoder" + (f"_{count}" if count else "")
            paths.append((path, f"group_{g}_inner_layer_{i}", encoder_parts))
            count += 1
    paths.append(("dense_1", "pooled_dense", {}))
    return paths


def write_weights_file(path, config, tensors: dict) -> None:
    """A Keras 3 weights file of AlbertBackbone from {"<layer name>/<sub-path>/<k>": array}."""
    import h5py

    unused = set(tensors)
    with h5py.File(path, "w") as file:
        layers = file.create_group("layers")
        for layer_path, layer_name, parts in _backbone_paths(config):
            group = layers.create_group(layer_path)
            for sub_path, name in [("", layer_name), *parts.items()]:
                vars_group = group.require_group(f"{sub_path}/vars" if sub_path else "vars")
                vars_group.attrs["name"] = name
                prefix = "/".join(p for p in (layer_name, sub_path) if p) + "/"
                for k in range(2):
                    if prefix + str(k) in tensors:
                        vars_group.create_dataset(str(k), data=tensors[prefix + str(k)])
                        unused.discard(prefix + str(k))
        file.create_group("vars").attrs["name"] = "albert_backbone"
    if unused:  # a table row with no layer: our bug, not the user's
        raise AssertionError(f"keras-hub tensors without a layer: {sorted(unused)}")


def values_to_keras_hub(values: dict, config) -> dict:
    """{"<layer name>/<sub-path>/<k>": array} of {original name: array} (encoder only:
    anything outside `bert/` is left out, see the module docstring)."""
    encoder = {name: value for name, value in values.items() if name.startswith("bert/")}
    tensors, unknown = NAMES.to_foreign(encoder, heads=config.num_attention_heads)
    check_all_named("keras-hub", "the model", unknown)
    if "embedding_projection/0" not in tensors:  # embedding_size = hidden_size
        tensors["embedding_projection/0"], tensors["embedding_projection/1"] = identity_projection(
            config.hidden_size
        )
    return tensors


def write_folder(folder, config, values: dict, spm_model_file=None) -> dict:
    """Writes a keras-hub AlbertBackbone preset of `values` ({original name: array}):
    config.json, model.weights.h5, metadata.json, and with `spm_model_file` the
    AlbertTokenizer (tokenizer.json, assets/tokenizer/vocabulary.spm). Returns {"config":
    path, "weights": path, "tensors": count, "left_out": original names not carried}."""
    import keras

    backbone_config = config_to_keras_hub(config)
    tensors = values_to_keras_hub(values, config)
    tf.io.gfile.makedirs(folder)
    config_path = os.path.join(folder, CONFIG_NAME)
    write_json(config_path, backbone_config)
    weights_path = os.path.join(folder, WEIGHTS_NAME)
    with tempfile.TemporaryDirectory(prefix="albert-keras-hub-") as local:
        local_file = os.path.join(local, WEIGHTS_NAME)
        write_weights_file(local_file, config, tensors)
        tf.io.gfile.copy(local_file, weights_path, overwrite=True)
    if spm_model_file:
        tf.io.gfile.makedirs(os.path.dirname(os.path.join(folder, SPM_ASSET)))
        tf.io.gfile.copy(spm_model_file, os.path.join(folder, SPM_ASSET), overwrite=True)
        write_json(os.path.join(folder, TOKENIZER_NAME), tokenizer_json())
    write_json(
        os.path.join(folder, METADATA_NAME),
        {
            "keras_version": keras.__version__,
            "keras_hub_version": KERAS_HUB_VERSION,
            "parameter_count": int(sum(np.size(v) for v in tensors.values())),
            "date_saved": datetime.datetime.now(datetime.timezone.utc).strftime(
                "%Y-%m-%d@%H:%M:%S"
            ),
            "tasks": ["MaskedLM", "TextClassifier"],
        },
    )
    return {
        "config": config_path,
        "weights": weights_path,
        "tensors": len(tensors),
        "left_out": sorted(n for n in values if not n.startswith("bert/")),
    }


__all__ = [
    "SAVED_MODEL_MARKER",
    "saved_model_name",
    "CONFIG_NAME",
    "WEIGHTS_NAME",
    "SPM_ASSET",
    "NAMES",
    "config_from_keras_hub",
    "config_to_keras_hub",
    "read_weights_file",
    "write_weights_file",
    "values_from_keras_hub",
    "values_to_keras_hub",
    "describe_folder",
    "read_folder",
    "write_folder",
    "tokenizer_json",
]
