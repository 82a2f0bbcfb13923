"""Hugging Face ALBERT folders: `config.json` (model_type "albert"), `model.safetensors`
(or shards listed in `model.safetensors.index.json`), `spiece.model`,
`tokenizer_config.json`. Written with the safetensors library's numpy API (no PyTorch);
read from each file's checked header (albert_tf/weights/foreign_tensors.py: types,
sizes, paths inside the folder, the index's map); every file through tf.io.gfile.

Names: `NAMES` (a NameTable, albert_tf/weights/name_table.py) maps each original variable
name to the name transformers' AlbertForPreTraining / AlbertForSequenceClassification /
AlbertForQuestionAnswering gives the tensor. torch's Linear stores its weight [out, in],
the transpose of the original's kernel [in, out]; embeddings, layer norms and the
original's `output_weights` [K, H] keep their layout. A file of the base AlbertModel has
no `albert.` prefix; it is read the same. transformers ties `predictions.decoder.weight`
to the word embeddings and `predictions.decoder.bias` to `predictions.bias`; a file
holding them is read only when they equal what they are tied to (an untied decoder has no
place in ALBERT).

Config: `hidden_act` "gelu_new" and "gelu_pytorch_tanh" are the tanh-approximated GELU,
our (and the original's) "gelu"; transformers' "gelu" is the exact erf GELU, which this
model does not compute, so such a folder is refused rather than run with the other
function (up to ~1e-3 off in the logits). Fields a config.json leaves out take
transformers' AlbertConfig defaults (`HF_DEFAULTS`), as transformers itself does.
transformers always applies `embedding_hidden_mapping_in`; the original has it only when
embedding_size != hidden_size, so with equal sizes it must be the identity (written so).
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

from albert_tf import fileio
from albert_tf.errors import UserError
from albert_tf.model.config import REQUIRED_FIELDS
from albert_tf.weights.foreign_tensors import SafetensorsFile, SizeLimits, inside_folder
from albert_tf.weights.foreign_weights import (
    HUGGINGFACE,
    ForeignWeights,
    check_all_named,
    group_mapping_problem,
    read_json,
    write_json,
)
from albert_tf.weights.name_table import (
    BLOCK,
    PROJECTION,
    SAME,
    TRANSPOSED,
    NameTable,
    drop_identity_projection,
    identity_projection,
)

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
SPM_MODEL_NAME = "spiece.model"
TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
SPECIAL_TOKENS_NAME = "special_tokens_map.json"

_HF_BLOCK = "albert.encoder.albert_layer_groups.{g}.albert_layers.{i}."
# (original name, Hugging Face name, how the value is stored): {g} and {i} are the group
# and the block inside it.
NAMES = NameTable(
    [
        ("bert/embeddings/word_embeddings", "albert.embeddings.word_embeddings.weight"),
        (
            "bert/embeddings/token_type_embeddings",
            "albert.embeddings.token_type_embeddings.weight",
        ),
        ("bert/embeddings/position_embeddings", "albert.embeddings.position_embeddings.weight"),
        ("bert/embeddings/LayerNorm/gamma", "albert.embeddings.LayerNorm.weight"),
        ("bert/embeddings/LayerNorm/beta", "albert.embeddings.LayerNorm.bias"),
        (f"{PROJECTION}/kernel", "albert.encoder.embedding_hidden_mapping_in.weight", TRANSPOSED),
        (f"{PROJECTION}/bias", "albert.encoder.embedding_hidden_mapping_in.bias"),
        *[
            (f"{BLOCK}attention_1/self/{part}/{kind}", f"{_HF_BLOCK}attention.{part}.{hf}", t)
            for part in ("query", "key", "value")
            for kind, hf, t in (("kernel", "weight", TRANSPOSED), ("bias", "bias", SAME))
        ],
        (
            f"{BLOCK}attention_1/output/dense/kernel",
            f"{_HF_BLOCK}attention.dense.weight",
            TRANSPOSED,
        ),
        (f"{BLOCK}attention_1/output/dense/bias", f"{_HF_BLOCK}attention.dense.bias"),
        (f"{BLOCK}LayerNorm/gamma", f"{_HF_BLOCK}attention.LayerNorm.weight"),
        (f"{BLOCK}LayerNorm/beta", f"{_HF_BLOCK}attention.LayerNorm.bias"),
        (f"{BLOCK}ffn_1/intermediate/dense/kernel", f"{_HF_BLOCK}ffn.weight", TRANSPOSED),
        (f"{BLOCK}ffn_1/intermediate/dense/bias", f"{_HF_BLOCK}ffn.bias"),
        (
            f"{BLOCK}ffn_1/intermediate/output/dense/kernel",
            f"{_HF_BLOCK}ffn_output.weight",
            TRANSPOSED,
        ),
        (f"{BLOCK}ffn_1/intermediate/output/dense/bias", f"{_HF_BLOCK}ffn_output.bias"),
        (f"{BLOCK}LayerNorm_1/gamma", f"{_HF_BLOCK}full_layer_layer_norm.weight"),
        (f"{BLOCK}LayerNorm_1/beta", f"{_HF_BLOCK}full_layer_layer_norm.bias"),
        ("bert/pooler/dense/kernel", "albert.pooler.weight", TRANSPOSED),
        ("bert/pooler/dense/bias", "albert.pooler.bias"),
        ("cls/predictions/transform/dense/kernel", "predictions.dense.weight", TRANSPOSED),
        ("cls/predictions/transform/dense/bias", "predictions.dense.bias"),
        ("cls/predictions/transform/LayerNorm/gamma", "predictions.LayerNorm.weight"),
        ("cls/predictions/transform/LayerNorm/beta", "predictions.LayerNorm.bias"),
        ("cls/predictions/output_bias", "predictions.bias"),
        ("cls/seq_relationship/output_weights", "sop_classifier.classifier.weight"),
        ("cls/seq_relationship/output_bias", "sop_classifier.classifier.bias"),
        # run_classifier.py's classifier (top-level names) = AlbertForSequenceClassification's.
        ("output_weights", "classifier.weight"),
        ("output_bias", "classifier.bias"),
        # run_squad.py's SQuAD v1.1 head = AlbertForQuestionAnswering's (start row 0, end 1).
        ("cls/squad/output_weights", "qa_outputs.weight"),
        ("cls/squad/output_bias", "qa_outputs.bias"),
    ]
)
# Tied copies transformers may store: name -> the name it is tied to.
_TIED = {
    "predictions.decoder.weight": "albert.embeddings.word_embeddings.weight",
    "predictions.decoder.bias": "predictions.bias",
}
_BASE_MODEL_PREFIXES = ("embeddings.", "encoder.", "pooler.")


# --- config ----------------------------------------------------------------------------
# transformers' AlbertConfig defaults, for fields a config.json leaves out.
HF_DEFAULTS = {
    "vocab_size": 30000,
    "embedding_size": 128,
    "hidden_size": 4096,
    "num_hidden_layers": 12,
    "num_hidden_groups": 1,
    "num_attention_heads": 64,
    "intermediate_size": 16384,
    "inner_group_num": 1,
    "hidden_act": "gelu_new",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 512,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
    "layer_norm_eps": 1e-12,
    "position_embedding_type": "absolute",
}
# Hugging Face hidden_act -> ours; "gelu" (erf) is refused (module docstring).
_ACTIVATIONS_IN = {
    "gelu_new": "gelu",
    "gelu_pytorch_tanh": "gelu",
    "relu": "relu",
    "tanh": "tanh",
    "linear": "linear",
}
_ACTIVATIONS_OUT = {
    "gelu": "gelu_new",
    "relu": "relu",
    "tanh": "tanh",
    "linear": "linear",
    "": "linear",
}
# The fields both config files spell alike: all the original's but hidden_act (translated
# above) and down_scale_factor (never read).
_SAME_FIELDS = tuple(name for name in REQUIRED_FIELDS if name != "hidden_act")


def _hf_group(config, layer):
    """transformers' AlbertTransformer: int(layer / (num_hidden_layers / num_hidden_groups))."""
    return int(layer / (config.num_hidden_layers / config.num_hidden_groups))


def config_from_huggingface(values: dict, source: str):
    """The AlbertConfig of a Hugging Face config.json's values; UserError naming `source`
    and the field for what this model cannot run exactly."""
    from albert_tf.model.config import AlbertConfig

    merged = {**HF_DEFAULTS, **values}
    act = merged["hidden_act"]
    if act == "gelu":
        raise UserError(
            f"{source}: hidden_act 'gelu' is the exact (erf) GELU in transformers; this "
            "model computes the tanh approximation ('gelu_new', the original ALBERT's), "
            "so it is refused rather than run with another function (set 'gelu_new' "
            "there to accept the difference)"
        )
    if act not in _ACTIVATIONS_IN:
        raise UserError(
            f"{source}: hidden_act {act!r}; expected one of {', '.join(_ACTIVATIONS_IN)}"
        )
    if merged["layer_norm_eps"] != HF_DEFAULTS["layer_norm_eps"]:
        raise UserError(
            f"{source}: layer_norm_eps {merged['layer_norm_eps']!r}; expected 1e-12 (the "
            "original's, which this model uses)"
        )
    if merged["position_embedding_type"] != "absolute":
        raise UserError(
            f"{source}: position_embedding_type {merged['position_embedding_type']!r}; "
            "expected 'absolute'"
        )
    fields = {k: merged[k] for k in _SAME_FIELDS}
    config = AlbertConfig.from_dict(
        {**fields, "hidden_act": _ACTIVATIONS_IN[act], "down_scale_factor": 1}, source
    )
    problem = group_mapping_problem(config, lambda l: _hf_group(config, l), "transformers")
    if problem:
        raise UserError(f"{source}: {problem}")
    return config


def config_to_huggingface(
    config, architecture: str = "AlbertForPreTraining", num_labels=None, special_ids=None
) -> dict:
    """The config.json of a Hugging Face folder for `config`; UserError for a config
    transformers cannot run the same way."""
    if config.cross_layer_sharing != "all":
        raise UserError(
            f"cross_layer_sharing {config.cross_layer_sharing!r}: transformers' ALBERT "
            "shares whole blocks only"
        )
    problem = group_mapping_problem(config, lambda l: _hf_group(config, l), "transformers")
    if problem:
        raise UserError(problem)
    values = {
        "architectures": [architecture],
        "model_type": "albert",
        **{k: getattr(config, k) for k in _SAME_FIELDS},
        "hidden_act": _ACTIVATIONS_OUT[config.hidden_act.lower()],
        "layer_norm_eps": HF_DEFAULTS["layer_norm_eps"],
        "position_embedding_type": "absolute",
        "classifier_dropout_prob": 0.1,
        "torch_dtype": "float32",
        **(special_ids or {}),
    }
    if num_labels is not None:
        values["id2label"] = {str(k): f"LABEL_{k}" for k in range(num_labels)}
        values["label2id"] = {f"LABEL_{k}": k for k in range(num_labels)}
    return values


# --- reading ---------------------------------------------------------------------------
def _weight_files(folder) -> dict:
    """{tensor name: the SafetensorsFile to read it from} of a folder: its
    model.safetensors, else the shards its index maps each tensor to. The index is
    checked both ways: every name it maps is in its shard, and every tensor of a shard is
    mapped (to that shard, or to another shard holding it too, whose copy is the one
    read)."""
    index = fileio.join(folder, WEIGHTS_INDEX_NAME)
    single = fileio.join(folder, WEIGHTS_NAME)
    if tf.io.gfile.exists(single):
        file = SafetensorsFile(inside_folder(folder, WEIGHTS_NAME, folder))
        return {name: file for name in file.tensors}
    if tf.io.gfile.exists(index):
        weight_map = read_json(inside_folder(folder, WEIGHTS_INDEX_NAME, folder)).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise UserError(f"{index}: expected a non-empty weight_map object")
        shards = {}
        for shard in weight_map.values():
            if not isinstance(shard, str):
                raise UserError(f"{index}: weight_map value {shard!r}; expected a file name")
            if shard not in shards:
                path = inside_folder(folder, shard, index)
                if not tf.io.gfile.exists(path):
                    raise UserError(f"{path}: missing ({index} names it)")
                shards[shard] = SafetensorsFile(path)
        source = {}
        for name, shard in weight_map.items():
            if name not in shards[shard].tensors:
                raise UserError(f"{index}: maps tensor {name} to {shard}, which has no such tensor")
            source[name] = shards[shard]
        for file in shards.values():
            unmapped = sorted(set(file.tensors) - set(weight_map))
            if unmapped:
                raise UserError(
                    f"{file.path}: holds tensor {unmapped[0]}"
                    + (f" and {len(unmapped) - 1} more" if len(unmapped) > 1 else "")
                    + f", which {index} does not map; expected an index naming every tensor"
                )
        return source
    if tf.io.gfile.glob(fileio.join(folder, "*.bin")) or tf.io.gfile.glob(
        fileio.join(folder, "*.h5")
    ):
        raise UserError(
            f"{folder}: no {WEIGHTS_NAME}; only safetensors weights are read (no PyTorch); "
            "save with save_pretrained(..., safe_serialization=True)"
        )
    raise UserError(f"{folder}: no {WEIGHTS_NAME} (or {WEIGHTS_INDEX_NAME})")


def _read_tensors(source: dict, config) -> dict:
    """{Hugging Face name: float32 array} of `_weight_files`' map: every tensor's type and
    declared shape checked (albert_tf/weights/foreign_tensors.py) before any is read."""
    by_file = {}
    for name, file in source.items():
        by_file.setdefault(file.path, (file, []))[1].append(name)
    limits = SizeLimits(config)
    for file, names in by_file.values():
        file.check(names, limits)
    tensors = {}
    for file, names in by_file.values():
        tensors.update(file.read(names))
    return tensors


def values_from_huggingface(tensors: dict, config, source: str) -> dict:
    """{original name: float32 array} of Hugging Face tensors (names as in the file)."""
    tensors = {
        ("albert." + k if k.startswith(_BASE_MODEL_PREFIXES) else k): v for k, v in tensors.items()
    }
    for tied, target in _TIED.items():
        if tied not in tensors:
            continue
        value = tensors.pop(tied)
        if target not in tensors:
            tensors[target] = value
        elif not np.array_equal(value, tensors[target]):
            raise UserError(
                f"{source}: {tied} differs from {target}; ALBERT ties them (the output "
                "layer is the word embeddings), so an untied one cannot be loaded"
            )
    values, unknown = NAMES.to_original(tensors)
    check_all_named("Hugging Face", source, unknown)
    if not drop_identity_projection(values, config):
        raise UserError(
            f"{source}: embedding_size = hidden_size, where ALBERT has no "
            "embedding_hidden_mapping_in, but the file's is not the identity"
        )
    return values


def describe_folder(folder) -> ForeignWeights:
    """The config and tokenizer of a Hugging Face ALBERT folder, its weight files' headers
    checked, its tensors not read (`values` is {}); every file it reads lies inside the
    folder."""
    folder = os.fspath(folder)
    config_file = inside_folder(folder, CONFIG_NAME, folder)
    config = config_from_huggingface(read_json(config_file), config_file)
    _weight_files(folder)
    spm = fileio.join(folder, SPM_MODEL_NAME)
    do_lower_case = None
    tokenizer_config = fileio.join(folder, TOKENIZER_CONFIG_NAME)
    if tf.io.gfile.exists(tokenizer_config):
        inside_folder(folder, TOKENIZER_CONFIG_NAME, folder)
        do_lower_case = read_json(tokenizer_config).get("do_lower_case")
    if tf.io.gfile.exists(spm):
        inside_folder(folder, SPM_MODEL_NAME, folder)
    return ForeignWeights(
        format=HUGGINGFACE,
        folder=folder,
        config=config,
        config_file=config_file,
        values={},
        spm_model_file=spm if tf.io.gfile.exists(spm) else None,
        do_lower_case=do_lower_case if isinstance(do_lower_case, bool) else None,
    )


def read_folder(folder) -> ForeignWeights:
    """`describe_folder` with the weights read: `values` under the original names."""
    foreign = describe_folder(folder)
    tensors = _read_tensors(_weight_files(foreign.folder), foreign.config)
    foreign.values = values_from_huggingface(tensors, foreign.config, foreign.folder)
    return foreign


# --- writing ---------------------------------------------------------------------------
def values_to_huggingface(values: dict, config) -> dict:
    """{Hugging Face name: float32 array} of {original name: array}; UserError naming an
    original name the table has no row for."""
    tensors, unknown = NAMES.to_foreign(values)
    check_all_named("Hugging Face", "the model", unknown)
    projection = "albert.encoder.embedding_hidden_mapping_in."
    if projection + "weight" not in tensors:  # embedding_size = hidden_size (docstring)
        tensors[projection + "weight"], tensors[projection + "bias"] = identity_projection(
            config.hidden_size
        )
    return tensors


def _special_token_ids(spm_model_file) -> dict:
    """pad/bos/eos ids of the config from the SentencePiece model's pieces."""
    import sentencepiece as spm

    with tf.io.gfile.GFile(spm_model_file, "rb") as f:
        processor = spm.SentencePieceProcessor(model_proto=f.read())
    ids = {}
    for key, piece in (
        ("pad_token_id", "<pad>"),
        ("bos_token_id", "[CLS]"),
        ("eos_token_id", "[SEP]"),
    ):
        index = processor.piece_to_id(piece)
        if processor.id_to_piece(index) == piece:
            ids[key] = index
    return ids


def tokenizer_config(do_lower_case: bool, max_length: int) -> dict:
    """tokenizer_config.json: transformers' AlbertTokenizer with the original's tokens."""
    return {
        "tokenizer_class": "AlbertTokenizer",
        "do_lower_case": bool(do_lower_case),
        "remove_space": True,
        "keep_accents": False,
        "bos_token": "[CLS]",
        "eos_token": "[SEP]",
        "unk_token": "<unk>",
        "sep_token": "[SEP]",
        "pad_token": "<pad>",
        "cls_token": "[CLS]",
        "mask_token": "[MASK]",
        "model_max_length": int(max_length),
    }


def write_folder(folder, config, values: dict, spm_model_file=None, do_lower_case=True) -> dict:
    """Writes a Hugging Face ALBERT folder of `values` ({original name: array}).

    AlbertForSequenceClassification when `values` holds the classifier (output_weights,
    output_bias), AlbertForQuestionAnswering when it holds the SQuAD v1.1 head
    (cls/squad/*): the pretraining heads are then left out, as those classes have none;
    else AlbertForPreTraining (its heads where `values` has them). With `spm_model_file`, also
    spiece.model, tokenizer_config.json and special_tokens_map.json. Returns {"config":
    path, "weights": path, "architecture": name, "tensors": count}.
    """
    from safetensors.numpy import save

    values = dict(values)
    num_labels = None
    architecture = "AlbertForPreTraining"
    if "cls/squad/output_weights" in values:
        architecture, num_labels = "AlbertForQuestionAnswering", 2
        values = {k: v for k, v in values.items() if k.startswith(("bert/", "cls/squad/"))}
    elif "output_weights" in values:
        architecture = "AlbertForSequenceClassification"
        num_labels = int(np.shape(values["output_weights"])[0])
        values = {k: v for k, v in values.items() if not k.startswith("cls/")}
    tensors = values_to_huggingface(values, config)
    special = _special_token_ids(spm_model_file) if spm_model_file else {}
    tf.io.gfile.makedirs(folder)
    config_path = os.path.join(folder, CONFIG_NAME)
    write_json(config_path, config_to_huggingface(config, architecture, num_labels, special))
    weights_path = os.path.join(folder, WEIGHTS_NAME)
    with tf.io.gfile.GFile(weights_path, "wb") as f:
        f.write(save(tensors, metadata={"format": "pt"}))
    if spm_model_file:
        tf.io.gfile.copy(spm_model_file, os.path.join(folder, SPM_MODEL_NAME), overwrite=True)
        tokens = tokenizer_config(do_lower_case, config.max_position_embeddings)
        write_json(os.path.join(folder, TOKENIZER_CONFIG_NAME), tokens)
        write_json(
            os.path.join(folder, SPECIAL_TOKENS_NAME),
            {k: v for k, v in tokens.items() if k.endswith("_token")},
        )
    return {
        "config": config_path,
        "weights": weights_path,
        "architecture": architecture,
        "tensors": len(tensors),
    }


__all__ = [
    "CONFIG_NAME",
    "WEIGHTS_NAME",
    "SPM_MODEL_NAME",
    "HF_DEFAULTS",
    "NAMES",
    "config_from_huggingface",
    "config_to_huggingface",
    "values_from_huggingface",
    "values_to_huggingface",
    "describe_folder",
    "read_folder",
    "write_folder",
    "tokenizer_config",
]
