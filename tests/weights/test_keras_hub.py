"""keras-hub ALBERT presets (albert_tf/weights/keras_hub.py), judged by keras-hub itself:
a preset keras-hub saved is read by name and runs as keras-hub runs it; our export loads
with AlbertBackbone.from_preset / AlbertTokenizer.from_preset and runs as ours; ours ->
keras-hub -> ours is bit-exact."""

import os

import h5py
import numpy as np
import pytest

from albert_tf.errors import UserError
from albert_tf.model.modeling import AlbertModel
from albert_tf.weights import checkpoints, foreign_folders, keras_hub

from classifier_fixtures import DEMO_SPM, glue_config
from weights_fixtures import original_values, random_keras_hub_backbone, randomized

# L = 4 layers in G = 2 groups of I = 2 blocks: layer -> group 0, 0, 1, 1 in both.
SHAPE = dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2)
IDS = np.array([[2, 40, 77, 9, 3, 0], [2, 5, 3, 61, 13, 3]], np.int32)
MASK = np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], np.int32)
SEGMENTS = np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1]], np.int32)


def _ours(model):
    out = model({"input_ids": IDS, "input_mask": MASK, "segment_ids": SEGMENTS})
    return np.asarray(out["sequence_output"]), np.asarray(out["pooled_output"])


def _theirs(backbone):
    out = backbone({"token_ids": IDS, "segment_ids": SEGMENTS, "padding_mask": MASK})
    return np.asarray(out["sequence_output"]), np.asarray(out["pooled_output"])


def _close(ours, theirs):
    # Padded positions differ by design (keras-hub masks with -inf, the original -10000
    # on keys only): compare the real tokens.
    real = MASK.astype(bool)
    np.testing.assert_allclose(ours[0][real], theirs[0][real], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(ours[1], theirs[1], rtol=1e-5, atol=1e-5)


def test_preset_saved_by_keras_hub_loads_by_name_and_runs_as_keras_hub(tmp_path):
    import keras_hub as keras_hub_lib  # here, not at collection: only these tests need it

    config = glue_config(**SHAPE)
    backbone = random_keras_hub_backbone(config, 3)
    backbone.save_to_preset(str(tmp_path / "preset"))
    keras_hub_lib.models.AlbertTokenizer(proto=DEMO_SPM).save_to_preset(str(tmp_path / "preset"))
    foreign = foreign_folders.open_foreign(str(tmp_path / "preset"))
    assert foreign.config.to_dict() == config.to_dict()
    assert foreign.spm_model_file == str(tmp_path / "preset" / keras_hub.SPM_ASSET)
    model = AlbertModel(foreign.config)
    report = checkpoints.load_original_checkpoint(model, str(tmp_path / "preset"))
    assert len(report.loaded) == 5 + 2 + 2 * 2 * 16 + 2 and report.ignored == []
    _close(_ours(model), _theirs(backbone))


def test_our_export_loads_in_keras_hub_and_comes_back_bit_exact(tmp_path):
    import keras_hub as keras_hub_lib

    config = glue_config(**SHAPE)
    source = randomized(AlbertModel(config), 2, 0.2)
    folder = str(tmp_path / "preset")
    written = keras_hub.write_folder(folder, config, original_values(source), DEMO_SPM)
    assert written["left_out"] == []
    backbone = keras_hub_lib.models.AlbertBackbone.from_preset(folder)
    _close(_ours(source), _theirs(backbone))
    tokenizer = keras_hub_lib.models.AlbertTokenizer.from_preset(folder)
    import sentencepiece as spm

    text = "the quick brown fox"
    want = spm.SentencePieceProcessor(model_file=DEMO_SPM).encode(text)
    assert np.asarray(tokenizer(text)).tolist() == want
    model = AlbertModel(config)
    checkpoints.load_original_checkpoint(model, folder)
    for name, value in original_values(source).items():
        assert np.array_equal(original_values(model)[name], value), name


def test_configs_keras_hub_cannot_run_and_unknown_tensors_are_refused(tmp_path):
    values = original_values(randomized(AlbertModel(glue_config()), 2, 0.2))
    for change, match in (
        ({"hidden_act": "relu"}, "hidden_act 'relu'; keras-hub's AlbertBackbone computes"),
        ({"num_hidden_layers": 3, "num_hidden_groups": 2}, "not a multiple of num_hidden_groups"),
        ({"attention_probs_dropout_prob": 0.1}, "has one dropout rate"),
    ):
        with pytest.raises(UserError, match=match):
            keras_hub.write_folder(str(tmp_path / "x"), glue_config(**change), values)
    folder = str(tmp_path / "preset")
    keras_hub.write_folder(folder, glue_config(), values)
    with h5py.File(os.path.join(folder, keras_hub.WEIGHTS_NAME), "a") as file:
        group = file["layers/dense_1"].create_group("extra/vars")
        group.create_dataset("0", data=np.zeros([2]))
    with pytest.raises(UserError, match=r"no keras-hub name-table row: pooled_dense/extra/0"):
        checkpoints.load_original_checkpoint(AlbertModel(glue_config()), folder)
