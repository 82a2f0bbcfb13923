"""Foreign folders read trusting nothing (albert_tf/weights/foreign_tensors.py): only
floating-point tensors, conversions stated, declared sizes checked before any read, no
file or HDF5 data outside the folder, a sharded index honoured and checked both ways,
non-finite values refused there and warned about in an original-format checkpoint."""

import json
import logging
import os

import h5py
import numpy as np
import pytest
import tensorflow as tf
from safetensors.numpy import load_file, save_file

from albert_tf.errors import UserError
from albert_tf.model.modeling import AlbertModel, AlbertPretrainer
from albert_tf.weights import checkpoints, huggingface, keras_hub

from classifier_fixtures import glue_config
from weights_fixtures import original_values, randomized

WORDS = "albert.embeddings.word_embeddings.weight"
POOLER = "albert.pooler.weight"


def _hf_folder(tmp_path, name="hf"):
    """(folder, {Hugging Face name: float32 array}, {original name: array}) of a
    Hugging Face folder our writer made from a random pretrainer."""
    config = glue_config()
    values = original_values(randomized(AlbertPretrainer(config), 4, 0.2))
    folder = str(tmp_path / name)
    huggingface.write_folder(folder, config, values)
    return folder, load_file(os.path.join(folder, huggingface.WEIGHTS_NAME)), values


def _load(folder):
    model = AlbertPretrainer(glue_config())
    checkpoints.load_original_checkpoint(model, folder)
    return original_values(model)


def _save(folder, tensors, name=huggingface.WEIGHTS_NAME):
    save_file(tensors, os.path.join(folder, name), metadata={"format": "pt"})


@pytest.mark.parametrize("dtype", [np.int8, np.int64, np.bool_])
def test_integer_and_bool_safetensors_are_refused_naming_file_tensor_and_dtype(tmp_path, dtype):
    folder, tensors, _ = _hf_folder(tmp_path)
    tensors[POOLER] = np.ones(tensors[POOLER].shape, dtype)
    _save(folder, tensors)
    want = (
        f"{folder}/model.safetensors: tensor {POOLER} is {np.dtype(dtype).name}; "
        "expected floating-point weights"
    )
    with pytest.raises(UserError, match="^" + want.replace(".", r"\.")) as err:
        _load(folder)
    assert "\n" not in str(err.value)


def test_float16_and_bfloat16_become_float32_and_a_line_says_so(tmp_path, caplog):
    folder, tensors, values = _hf_folder(tmp_path)
    half = tensors[POOLER].astype(np.float16)
    tensors[POOLER] = half
    # bfloat16 is the upper 16 bits of a float32: written as raw bytes, as torch does.
    bf16_bits = (tensors[WORDS].view(np.uint32) >> 16).astype(np.uint16)
    tensors.pop(WORDS)
    _save(folder, tensors)
    path = os.path.join(folder, huggingface.WEIGHTS_NAME)
    data = open(path, "rb").read()
    length = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + length])
    end = max(entry["data_offsets"][1] for k, entry in header.items() if k != "__metadata__")
    header[WORDS] = {
        "dtype": "BF16",
        "shape": list(bf16_bits.shape),
        "data_offsets": [end, end + bf16_bits.nbytes],
    }
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little") + text + data[8 + length :] + bf16_bits.tobytes())
    with caplog.at_level(logging.WARNING):
        loaded = _load(folder)
    assert f"{path}: converted 1 bfloat16, 1 float16 tensor(s) to float32" in caplog.messages
    np.testing.assert_array_equal(loaded["bert/pooler/dense/kernel"], half.astype(np.float32).T)
    want = (bf16_bits.astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(loaded["bert/embeddings/word_embeddings"], want)
    # The truncation to bfloat16 changed the values by less than 2^-8 relatively.
    np.testing.assert_allclose(want, values["bert/embeddings/word_embeddings"], rtol=2**-7)


def test_non_finite_foreign_values_are_refused(tmp_path):
    folder, tensors, _ = _hf_folder(tmp_path)
    tensors[POOLER][0, 1] = np.nan
    tensors[POOLER][1, 1] = np.inf
    _save(folder, tensors)
    with pytest.raises(UserError, match=f"tensor {POOLER} holds 2 NaN or infinite value"):
        _load(folder)


def test_declared_shape_beyond_the_config_is_refused_before_reading(tmp_path):
    folder, tensors, _ = _hf_folder(tmp_path)
    config = glue_config()
    tensors[WORDS] = np.zeros([config.vocab_size + 1, config.embedding_size], np.float32)
    _save(folder, tensors)
    with pytest.raises(UserError, match=f"tensor {WORDS} declares shape"):
        _load(folder)


def test_a_header_pointing_past_the_data_is_refused(tmp_path):
    folder, _, _ = _hf_folder(tmp_path)
    header = b'{"a":{"dtype":"F32","shape":[1000000000],"data_offsets":[0,4000000000]}}'
    with open(os.path.join(folder, huggingface.WEIGHTS_NAME), "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + b"\0" * 8)
    with pytest.raises(UserError, match="data_offsets .* outside the 8 bytes of data"):
        _load(folder)


def _shard(folder, tensors):
    """Splits model.safetensors into two shards and an index; returns the index's map."""
    os.remove(os.path.join(folder, huggingface.WEIGHTS_NAME))
    names = sorted(tensors)
    first, second = names[: len(names) // 2], names[len(names) // 2 :]
    _save(folder, {n: tensors[n] for n in first}, "a.safetensors")
    _save(folder, {n: tensors[n] for n in second}, "b.safetensors")
    weight_map = {n: "a.safetensors" for n in first} | {n: "b.safetensors" for n in second}
    _write_index(folder, weight_map)
    return weight_map


def _write_index(folder, weight_map):
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": weight_map}, f)


def test_sharded_folder_reads_each_tensor_from_the_shard_its_index_names(tmp_path):
    folder, tensors, values = _hf_folder(tmp_path)
    weight_map = _shard(folder, tensors)
    assert weight_map[POOLER] == "b.safetensors"
    # A stale copy of the pooler in the other shard: the index's copy is the one read,
    # whichever file comes last.
    stale = load_file(os.path.join(folder, "a.safetensors"))
    stale[POOLER] = np.zeros_like(tensors[POOLER])
    _save(folder, stale, "a.safetensors")
    loaded = _load(folder)
    for name, value in values.items():
        if name.startswith(("bert/", "cls/")):
            np.testing.assert_array_equal(loaded[name], value, err_msg=name)


def test_sharded_index_is_checked_both_ways(tmp_path):
    folder, tensors, _ = _hf_folder(tmp_path)
    weight_map = _shard(folder, tensors)
    index = os.path.join(folder, "model.safetensors.index.json")
    _write_index(folder, {**weight_map, POOLER: "a.safetensors"})
    with pytest.raises(
        UserError, match=f"^{index}: maps tensor {POOLER} to a.safetensors, which has no such"
    ):
        _load(folder)
    _write_index(folder, {k: v for k, v in weight_map.items() if k != POOLER})
    with pytest.raises(UserError, match=f"b.safetensors: holds tensor {POOLER}, which {index}"):
        _load(folder)


@pytest.mark.parametrize("name", ["../x.safetensors", "/abs/x.safetensors", "sub/../../x"])
def test_index_naming_a_file_outside_the_folder_is_refused(tmp_path, name):
    folder, tensors, _ = _hf_folder(tmp_path)
    weight_map = _shard(folder, tensors)
    _save(str(tmp_path), {POOLER: tensors[POOLER]}, "x.safetensors")
    _write_index(folder, {**weight_map, POOLER: name})
    with pytest.raises(UserError, match=f"names '{name}', which is not a path inside {folder}"):
        _load(folder)


def test_a_symlink_leading_outside_the_folder_is_refused(tmp_path):
    folder, _, _ = _hf_folder(tmp_path)
    other, _, _ = _hf_folder(tmp_path, "other")
    os.remove(os.path.join(folder, huggingface.WEIGHTS_NAME))
    os.symlink(os.path.join(other, huggingface.WEIGHTS_NAME), f"{folder}/model.safetensors")
    with pytest.raises(UserError, match=f"^{folder}/model.safetensors: a symlink to {other}/"):
        _load(folder)


# --- keras-hub --------------------------------------------------------------------------
POOLED = "layers/dense_1/vars/0"


def _preset(tmp_path):
    config = glue_config()
    values = original_values(randomized(AlbertModel(config), 2, 0.2))
    folder = str(tmp_path / "preset")
    keras_hub.write_folder(folder, config, values)
    return folder, os.path.join(folder, keras_hub.WEIGHTS_NAME), values


def _load_preset(folder):
    model = AlbertModel(glue_config())
    checkpoints.load_original_checkpoint(model, folder)
    return original_values(model)


def _replace(weights, path, **dataset):
    with h5py.File(weights, "a") as file:
        del file[path]
        file.create_dataset(path, **dataset)


def test_int32_dataset_in_a_preset_is_refused(tmp_path):
    folder, weights, _ = _preset(tmp_path)
    _replace(weights, POOLED, data=np.ones([32, 32], np.int32))
    with pytest.raises(UserError, match=f"^{weights}: tensor pooled_dense/0 is int32; expected"):
        _load_preset(folder)


def test_float16_dataset_in_a_preset_is_converted_and_said(tmp_path, caplog):
    folder, weights, values = _preset(tmp_path)
    half = values["bert/pooler/dense/kernel"].astype(np.float16)
    _replace(weights, POOLED, data=half)
    with caplog.at_level(logging.WARNING):
        loaded = _load_preset(folder)
    assert f"{weights}: converted 1 float16 tensor(s) to float32" in caplog.messages
    np.testing.assert_array_equal(loaded["bert/pooler/dense/kernel"], half.astype(np.float32))


def test_a_huge_declared_dataset_is_refused_before_it_is_read(tmp_path):
    folder, weights, _ = _preset(tmp_path)
    # Chunked and never written: a few KB on disk, 40 GB when read.
    _replace(weights, POOLED, shape=(100_000, 100_000), dtype="f4", chunks=(64, 64))
    assert os.path.getsize(weights) < 1_000_000
    with pytest.raises(UserError, match="tensor pooled_dense/0 declares shape"):
        _load_preset(folder)


def test_hdf5_data_or_links_outside_the_file_are_refused(tmp_path):
    folder, weights, values = _preset(tmp_path)
    outside = tmp_path / "outside.bin"
    kernel = values["bert/pooler/dense/kernel"]
    outside.write_bytes(kernel.tobytes())
    _replace(weights, POOLED, shape=kernel.shape, dtype="f4", external=[(str(outside), 0, 4096)])
    with pytest.raises(UserError, match="dataset pooled_dense/0 keeps its data outside the file"):
        _load_preset(folder)
    with h5py.File(tmp_path / "other.h5", "w") as other:
        other.create_dataset("k", data=kernel)
    for link, kind in (
        (h5py.ExternalLink(str(tmp_path / "other.h5"), "k"), "an external link"),
        (h5py.SoftLink("/layers/dense/vars/0"), "a link"),
    ):
        with h5py.File(weights, "a") as file:
            del file[POOLED]
            file[POOLED] = link
        with pytest.raises(UserError, match=f"{weights}: {POOLED} is {kind}; expected"):
            _load_preset(folder)


def test_a_group_reached_twice_is_refused(tmp_path):
    folder, weights, _ = _preset(tmp_path)
    with h5py.File(weights, "a") as file:
        file["layers/dense_1/loop"] = file["layers/dense_1"]  # a hard link: a circle
    with pytest.raises(
        UserError, match=f"{weights}: layers/dense_1/loop is reached twice; expected a tree"
    ):
        _load_preset(folder)


@pytest.mark.parametrize("name", ["model.safetensors", "config.json"])
def test_a_fifo_in_a_folder_is_refused_without_opening_it(tmp_path, name):
    folder, _, _ = _hf_folder(tmp_path)
    os.remove(os.path.join(folder, name))
    os.mkfifo(os.path.join(folder, name))
    with pytest.raises(UserError, match=f"^{folder}/{name}: not a regular file"):
        _load(folder)


def test_non_finite_preset_values_are_refused(tmp_path):
    folder, weights, values = _preset(tmp_path)
    kernel = values["bert/pooler/dense/kernel"].copy()
    kernel[3, 3] = -np.inf
    _replace(weights, POOLED, data=kernel)
    with pytest.raises(UserError, match="tensor pooled_dense/0 holds 1 NaN or infinite value"):
        _load_preset(folder)


# --- the original format ----------------------------------------------------------------
def _original_checkpoint(tmp_path, name, edit):
    """The prefix of an original-format checkpoint of a random encoder, whose tensor
    `name` is edit(its value)."""
    values = original_values(randomized(AlbertModel(glue_config()), 5, 0.2))
    values[name] = edit(values[name])
    prefix = str(tmp_path / "model.ckpt-1")
    tf.raw_ops.SaveV2(
        prefix=prefix,
        tensor_names=list(values),
        shape_and_slices=[""] * len(values),
        tensors=[tf.constant(v) for v in values.values()],
    )
    return prefix


def test_original_checkpoint_with_an_int_tensor_is_refused_before_assigning(tmp_path):
    name = "bert/pooler/dense/kernel"
    prefix = _original_checkpoint(tmp_path, name, lambda v: np.ones(v.shape, np.int32))
    model = AlbertModel(glue_config())
    model.build()
    before = original_values(model)
    with pytest.raises(UserError, match=f"^{prefix}: tensor {name} is int32; expected floating"):
        checkpoints.load_original_checkpoint(model, prefix)
    for key, value in original_values(model).items():
        np.testing.assert_array_equal(value, before[key], err_msg=key)


def test_a_checkpoint_index_that_is_a_fifo_is_refused_without_opening_it(tmp_path):
    os.mkfifo(tmp_path / "model.ckpt.index")
    index = f"{tmp_path}/model.ckpt.index"
    with pytest.raises(UserError, match=f"^{index}: not a regular file"):
        checkpoints.check_checkpoint_readable(str(tmp_path / "model.ckpt"))


def test_original_checkpoint_with_nan_loads_with_a_warning_as_the_original(tmp_path, caplog):
    name = "bert/pooler/dense/bias"
    prefix = _original_checkpoint(tmp_path, name, lambda v: np.where(np.arange(v.size), v, np.nan))
    model = AlbertModel(glue_config())
    with caplog.at_level(logging.WARNING):
        checkpoints.load_original_checkpoint(model, prefix)
    want = f"{prefix}: 1 tensor(s) hold NaN or infinite values, loaded as the original would"
    assert f"{want}: {name}" in caplog.messages
    assert np.isnan(original_values(model)[name][0])
