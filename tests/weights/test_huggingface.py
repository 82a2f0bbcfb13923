"""Hugging Face ALBERT folders (albert_tf/weights/huggingface.py): folders written here
with the tensor names transformers uses, loaded by name and run against the numpy
reference; ours -> Hugging Face -> ours bit-exact; the refusals."""

import json
import os

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from albert_tf.errors import UserError
from albert_tf.model.modeling import AlbertPretrainer
from albert_tf.tasks.classifier import AlbertClassifier
from albert_tf.weights import checkpoints, foreign_folders, huggingface

import albert_numpy
from classifier_fixtures import DEMO_SPM, glue_config, write_mrpc
from weights_fixtures import original_values, randomized

# L = 3 layers in G = 2 groups of I = 2 blocks: layer -> group 0, 0, 1 in both libraries.
SHAPE = dict(num_hidden_layers=3, num_hidden_groups=2, inner_group_num=2)
FEATURES = {
    "input_ids": np.array([[2, 40, 77, 9, 3, 0], [2, 5, 3, 61, 13, 3]], np.int32),
    "input_mask": np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], np.int32),
    "segment_ids": np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1]], np.int32),
    "masked_lm_positions": np.array([[1, 3], [2, 4]], np.int32),
}


def _hf_config(config, **changes):
    """config.json as transformers' AlbertConfig.save_pretrained writes it."""
    values = {
        "architectures": ["AlbertForPreTraining"],
        "model_type": "albert",
        **{k: v for k, v in config.to_dict().items() if k != "down_scale_factor"},
        "hidden_act": "gelu_new",
        "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute",
        "classifier_dropout_prob": 0.1,
        "pad_token_id": 0,
        "bos_token_id": 2,
        "eos_token_id": 3,
        "transformers_version": "5.0.0",
    }
    values.update(changes)
    return values


def write_hf_folder(folder, config, seed=0, config_changes=None, extra=None, drop=()):
    """A Hugging Face AlbertForPreTraining folder of random tensors, with transformers'
    names and layouts (torch Linear weights [out, in]); returns {original name: value},
    this test's own translation, for the numpy reference."""
    rng = np.random.default_rng(seed)
    v, e, h, f = (
        config.vocab_size,
        config.embedding_size,
        config.hidden_size,
        config.intermediate_size,
    )

    def r(*shape):
        return rng.normal(0, 0.2, shape).astype(np.float32)

    hf, original = {}, {}

    def put(hf_name, value, original_name, transposed=False):
        hf[hf_name] = value
        original[original_name] = value.T if transposed else value

    put("albert.embeddings.word_embeddings.weight", r(v, e), "bert/embeddings/word_embeddings")
    put(
        "albert.embeddings.position_embeddings.weight",
        r(config.max_position_embeddings, e),
        "bert/embeddings/position_embeddings",
    )
    put(
        "albert.embeddings.token_type_embeddings.weight",
        r(config.type_vocab_size, e),
        "bert/embeddings/token_type_embeddings",
    )
    put("albert.embeddings.LayerNorm.weight", 1 + r(e), "bert/embeddings/LayerNorm/gamma")
    put("albert.embeddings.LayerNorm.bias", r(e), "bert/embeddings/LayerNorm/beta")
    mapping = "bert/encoder/embedding_hidden_mapping_in"
    put("albert.encoder.embedding_hidden_mapping_in.weight", r(h, e), f"{mapping}/kernel", True)
    put("albert.encoder.embedding_hidden_mapping_in.bias", r(h), f"{mapping}/bias")
    for g in range(config.num_hidden_groups):
        for i in range(config.inner_group_num):
            hp = f"albert.encoder.albert_layer_groups.{g}.albert_layers.{i}."
            op = f"bert/encoder/transformer/group_{g}/inner_group_{i}/"
            for part in ("query", "key", "value"):
                put(
                    f"{hp}attention.{part}.weight",
                    r(h, h),
                    f"{op}attention_1/self/{part}/kernel",
                    True,
                )
                put(f"{hp}attention.{part}.bias", r(h), f"{op}attention_1/self/{part}/bias")
            put(
                f"{hp}attention.dense.weight", r(h, h), f"{op}attention_1/output/dense/kernel", True
            )
            put(f"{hp}attention.dense.bias", r(h), f"{op}attention_1/output/dense/bias")
            put(f"{hp}attention.LayerNorm.weight", 1 + r(h), f"{op}LayerNorm/gamma")
            put(f"{hp}attention.LayerNorm.bias", r(h), f"{op}LayerNorm/beta")
            put(f"{hp}ffn.weight", r(f, h), f"{op}ffn_1/intermediate/dense/kernel", True)
            put(f"{hp}ffn.bias", r(f), f"{op}ffn_1/intermediate/dense/bias")
            put(
                f"{hp}ffn_output.weight",
                r(h, f),
                f"{op}ffn_1/intermediate/output/dense/kernel",
                True,
            )
            put(f"{hp}ffn_output.bias", r(h), f"{op}ffn_1/intermediate/output/dense/bias")
            put(f"{hp}full_layer_layer_norm.weight", 1 + r(h), f"{op}LayerNorm_1/gamma")
            put(f"{hp}full_layer_layer_norm.bias", r(h), f"{op}LayerNorm_1/beta")
    put("albert.pooler.weight", r(h, h), "bert/pooler/dense/kernel", True)
    put("albert.pooler.bias", r(h), "bert/pooler/dense/bias")
    put("predictions.dense.weight", r(e, h), "cls/predictions/transform/dense/kernel", True)
    put("predictions.dense.bias", r(e), "cls/predictions/transform/dense/bias")
    put("predictions.LayerNorm.weight", 1 + r(e), "cls/predictions/transform/LayerNorm/gamma")
    put("predictions.LayerNorm.bias", r(e), "cls/predictions/transform/LayerNorm/beta")
    put("predictions.bias", r(v), "cls/predictions/output_bias")
    put("sop_classifier.classifier.weight", r(2, h), "cls/seq_relationship/output_weights")
    put("sop_classifier.classifier.bias", r(2), "cls/seq_relationship/output_bias")
    hf.update(extra or {})
    for name in drop:
        hf.pop(name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as file:
        json.dump(_hf_config(config, **(config_changes or {})), file)
    save_file(hf, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    return original


def _outputs(model):
    out = model(FEATURES, training=False)
    return {
        k: np.asarray(out[k])
        for k in ("sequence_output", "pooled_output", "mlm_logits", "sop_logits")
    }


def test_folder_loads_by_name_and_matches_the_numpy_reference(tmp_path):
    config = glue_config(**SHAPE)
    folder = str(tmp_path / "hf")
    original = write_hf_folder(folder, config)
    model = AlbertPretrainer(config)
    report = checkpoints.load_original_checkpoint(model, folder)
    assert sorted(report.loaded) == sorted(original) and report.ignored == []
    assert report.checkpoint == f"Hugging Face folder {folder}"
    want = albert_numpy.forward(original, config.to_dict(), *(FEATURES[k] for k in FEATURES))
    got = _outputs(model)
    for key, value in got.items():
        np.testing.assert_allclose(value, want[key], rtol=1e-5, atol=1e-5, err_msg=key)


def test_config_is_translated_and_erf_gelu_refused(tmp_path):
    config = glue_config(**SHAPE)
    folder = str(tmp_path / "hf")
    write_hf_folder(folder, config, config_changes={"hidden_act": "gelu_pytorch_tanh"})
    foreign = foreign_folders.describe_foreign(folder)
    assert foreign.config.to_dict() == config.to_dict() and foreign.values == {}
    for changes, match in (
        ({"hidden_act": "gelu"}, r"config.json: hidden_act 'gelu' is the exact \(erf\) GELU"),
        ({"layer_norm_eps": 1e-5}, "layer_norm_eps 1e-05; expected 1e-12"),
        ({"model_type": "bert"}, "model_type 'bert'; expected 'albert'"),
        ({"num_hidden_layers": 22, "num_hidden_groups": 22}, "layer 15 uses group 14 here"),
    ):
        write_hf_folder(folder, config, config_changes=changes)
        with pytest.raises(UserError, match=match):
            checkpoints.load_original_checkpoint(AlbertPretrainer(config), folder)


def test_unnamed_untied_and_missing_tensors_are_named(tmp_path):
    config = glue_config()
    folder = str(tmp_path / "hf")
    write_hf_folder(folder, config, extra={"albert.encoder.extra": np.zeros([2], np.float32)})
    with pytest.raises(
        UserError, match=r"1 tensor\(s\) with no Hugging Face name-table row: albert.encoder.extra"
    ):
        checkpoints.load_original_checkpoint(AlbertPretrainer(config), folder)
    decoder = np.ones([config.vocab_size, config.embedding_size], np.float32)
    write_hf_folder(folder, config, extra={"predictions.decoder.weight": decoder})
    with pytest.raises(
        UserError, match="predictions.decoder.weight differs from albert.embeddings"
    ):
        checkpoints.load_original_checkpoint(AlbertPretrainer(config), folder)
    with open(os.path.join(folder, "model.safetensors"), "wb") as file:
        header = b'{"a":{"dtype":"F8_E4M3","shape":[1],"data_offsets":[0,1]}}'
        file.write(len(header).to_bytes(8, "little") + header + b"\x38")
    with pytest.raises(UserError, match=r"model.safetensors: tensor a is float8_e4m3; expected"):
        checkpoints.load_original_checkpoint(AlbertPretrainer(config), folder)
    write_hf_folder(folder, config, drop=["albert.pooler.bias"])
    with pytest.raises(checkpoints.CheckpointMismatchError, match="bert/pooler/dense/bias"):
        checkpoints.load_original_checkpoint(AlbertPretrainer(config), folder)


@pytest.mark.parametrize("embedding_size", [16, 32])  # 32 = hidden_size: no projection
def test_ours_to_huggingface_to_ours_is_bit_exact(tmp_path, embedding_size):
    config = glue_config(embedding_size=embedding_size, **SHAPE)
    source = randomized(AlbertPretrainer(config), 1)
    folder = str(tmp_path / "hf")
    written = huggingface.write_folder(folder, config, original_values(source), DEMO_SPM)
    assert written["architecture"] == "AlbertForPreTraining"
    stored = load_file(os.path.join(folder, "model.safetensors"))
    assert (
        stored["albert.pooler.weight"].tolist()
        == np.asarray(source.albert.pooler.kernel).T.tolist()
    )
    if embedding_size == 32:
        assert np.array_equal(
            stored["albert.encoder.embedding_hidden_mapping_in.weight"], np.eye(32)
        )
    with open(os.path.join(folder, "config.json")) as file:
        hf_config = json.load(file)
    assert hf_config["hidden_act"] == "gelu_new" and hf_config["model_type"] == "albert"
    with open(os.path.join(folder, "tokenizer_config.json")) as file:
        assert json.load(file)["tokenizer_class"] == "AlbertTokenizer"
    assert open(os.path.join(folder, "spiece.model"), "rb").read() == open(DEMO_SPM, "rb").read()
    model = AlbertPretrainer(config)
    checkpoints.load_original_checkpoint(model, folder)
    for name, value in original_values(source).items():
        assert np.array_equal(original_values(model)[name], value), name
    foreign = foreign_folders.open_foreign(folder)
    assert foreign.spm_model_file == os.path.join(folder, "spiece.model")


def test_fine_tuned_classifier_goes_out_as_sequence_classification(tmp_path):
    config = glue_config()
    source = randomized(AlbertClassifier(config, num_labels=3), 1)
    folder = str(tmp_path / "hf")
    values = {
        **original_values(source),
        "cls/predictions/output_bias": np.zeros([config.vocab_size]),
    }
    written = huggingface.write_folder(folder, config, values)
    assert written["architecture"] == "AlbertForSequenceClassification"
    stored = load_file(os.path.join(folder, "model.safetensors"))
    assert stored["classifier.weight"].shape == (3, 32)
    assert not [n for n in stored if n.startswith("predictions.")]
    model = AlbertClassifier(config, num_labels=3)
    checkpoints.load_original_checkpoint(model, folder)
    for name, value in original_values(source).items():
        assert np.array_equal(original_values(model)[name], value), name


def test_squad_v1_head_goes_out_as_question_answering(tmp_path):
    from albert_tf.tasks.squad import AlbertSquadV1

    config = glue_config()
    source = randomized(AlbertSquadV1(config), 1)
    folder = str(tmp_path / "hf")
    assert huggingface.write_folder(folder, config, original_values(source))["architecture"] == (
        "AlbertForQuestionAnswering"
    )
    stored = load_file(os.path.join(folder, "model.safetensors"))
    assert (
        stored["qa_outputs.weight"].tolist()
        == original_values(source)["cls/squad/output_weights"].tolist()
    )
    model = AlbertSquadV1(config)
    checkpoints.load_original_checkpoint(model, folder)
    for name, value in original_values(source).items():
        assert np.array_equal(original_values(model)[name], value), name


def test_run_classifier_fine_tunes_from_a_huggingface_folder(tmp_path):
    from albert_tf.tasks.classifier import ClassifierOptions, run

    config = glue_config()
    folder = str(tmp_path / "hf")
    write_hf_folder(folder, config)
    with open(DEMO_SPM, "rb") as src, open(os.path.join(folder, "spiece.model"), "wb") as dst:
        dst.write(src.read())
    summary = run(
        ClassifierOptions(
            task_name="MRPC",
            data_dir=write_mrpc(str(tmp_path / "glue")),
            output_dir=str(tmp_path / "out"),
            init_checkpoint=folder,
            max_seq_length=32,
            train_batch_size=8,
            do_train=True,
            train_step=2,
            save_checkpoints_steps=2,
        )
    )
    assert summary["init"].startswith("loaded 25 variables from Hugging Face folder")
    assert summary["init"].endswith("; fresh classifier head")
