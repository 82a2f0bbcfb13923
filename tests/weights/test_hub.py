"""TF-Hub module folders (albert_tf/weights/hub.py) and --albert_hub_module_handle in the
fine-tuning scripts: modules built here in each format the reader knows, loaded by name."""

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.errors import UserError
from albert_tf.model.config import preset
from albert_tf.model.modeling import AlbertModel, AlbertPretrainer
from albert_tf.run.driver import init_from_checkpoint
from albert_tf.tasks.classifier import HEAD_PATTERNS, AlbertClassifier, ClassifierOptions, run
from albert_tf.weights import checkpoints, hub

from classifier_fixtures import DEMO_SPM, glue_config, write_mrpc
from repo_paths import REPO_ROOT
from weights_fixtures import random_keras_hub_backbone, randomized

REPO = REPO_ROOT
IDS = {
    "input_ids": np.array([[2, 40, 77, 9, 3, 0], [2, 5, 3, 61, 13, 3]], np.int32),
    "input_mask": np.array([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1]], np.int32),
    "segment_ids": np.array([[0, 0, 0, 0, 0, 0], [0, 0, 0, 1, 1, 1]], np.int32),
}


def _pretrainer(config):
    """A pretrainer with every variable random."""
    return randomized(AlbertPretrainer(config), 0)


def _tf1_saved_model_pb(do_lower_case) -> bytes:
    """saved_model.pb of a TF1 Hub module, reduced to what a reader of
    `tokenization_info` sees: its two constants in each tag set's graph."""
    from tensorflow.core.framework import types_pb2
    from tensorflow.core.protobuf import saved_model_pb2

    with tf.Graph().as_default() as graph:
        vocab = tf.constant("assets/30k-clean.model", name="vocab_model")
        lower = tf.constant(do_lower_case, name="Const_3")
    saved = saved_model_pb2.SavedModel(saved_model_schema_version=1)
    for tags in ([], ["train"]):
        meta = saved.meta_graphs.add()
        meta.meta_info_def.tags.extend(tags)
        meta.graph_def.CopyFrom(graph.as_graph_def())
        signature = meta.signature_def["tokenization_info"]
        signature.outputs["vocab_file"].name = vocab.name
        signature.outputs["vocab_file"].dtype = types_pb2.DT_STRING
        signature.outputs["do_lower_case"].name = lower.name
        signature.outputs["do_lower_case"].dtype = types_pb2.DT_BOOL
    return saved.SerializeToString()


def write_tf1_module(folder, model, config=None, do_lower_case=True):
    """A module folder in the TF1 Hub format export_to_tfhub.py wrote: the variables
    under the original names in variables/variables, tfhub_module.pb (a ModuleDef with
    format 3), saved_model.pb (its tokenization_info), assets/30k-clean.model and, as
    from version 2 of the released modules, assets/albert_config.json."""
    folder = str(folder)
    os.makedirs(os.path.join(folder, "assets"))
    checkpoints.save_original_checkpoint(
        model, os.path.join(folder, "variables", "variables"), update_checkpoint_state=False
    )
    with open(os.path.join(folder, "tfhub_module.pb"), "wb") as f:
        f.write(b"\x08\x03")  # ModuleDef{format: FORMAT_V3}
    with open(os.path.join(folder, "saved_model.pb"), "wb") as f:
        f.write(_tf1_saved_model_pb(do_lower_case))
    shutil.copyfile(DEMO_SPM, os.path.join(folder, "assets", "30k-clean.model"))
    if config is not None:
        config.to_json_file(os.path.join(folder, "assets", "albert_config.json"))
    return folder


def _encoder_outputs(model):
    encoder = model if isinstance(model, AlbertModel) else model.albert
    out = encoder(IDS, training=False)
    return out["sequence_output"].numpy(), out["pooled_output"].numpy()


# --- TF1 Hub format -------------------------------------------------------------------
def test_tf1_module_loads_by_name_into_a_task_model(tmp_path):
    config = glue_config()
    source = _pretrainer(config)
    folder = write_tf1_module(tmp_path / "module", source, config)
    module = hub.open_module(folder)
    assert module.kind == hub.TF1_HUB
    assert module.spm_model_file == os.path.join(folder, "assets", "30k-clean.model")
    assert module.do_lower_case is True
    got, where = hub.module_config(module)
    assert got == config and where.endswith("albert_config.json")

    model = AlbertClassifier(config, 2)
    model.build()
    head_before = model.classifier.output_weights.numpy()
    line = init_from_checkpoint(
        model, folder, "classifier", HEAD_PATTERNS, flag="--albert_hub_module_handle"
    )
    assert line.startswith("loaded 25 variables from TF-Hub module") and "fresh classifier" in line
    for name, variable in checkpoints.original_variable_map(model.albert).items():
        want = checkpoints.original_variable_map(source)[name].numpy()
        np.testing.assert_array_equal(variable.numpy(), want, err_msg=name)
    np.testing.assert_array_equal(model.classifier.output_weights.numpy(), head_before)
    for got_out, want_out in zip(_encoder_outputs(model), _encoder_outputs(source)):
        np.testing.assert_array_equal(got_out, want_out)


def test_tf1_module_tokenization_info_is_read_without_running_the_graph(tmp_path):
    folder = write_tf1_module(tmp_path / "m", _pretrainer(glue_config()), do_lower_case=False)
    assert hub.open_module(folder).do_lower_case is False


def test_v1_module_without_config_gets_the_released_shape_of_its_variables():
    released = preset("albert_base_v1")
    model = AlbertPretrainer(released)
    model.build()
    shapes = {n: list(v.shape) for n, v in checkpoints.original_variable_map(model).items()}
    config, assumed = hub.infer_config(shapes, release="v1")
    assert config == released
    assert "albert_base_v1" in assumed and "num_hidden_layers=12" in assumed
    assert "dropout 0.1" in assumed
    # Another hidden size is no released model: nothing is guessed.
    small = AlbertPretrainer(glue_config())
    small.build()
    tiny = {n: list(v.shape) for n, v in checkpoints.original_variable_map(small).items()}
    assert hub.infer_config(tiny)[0] is None


def test_module_without_config_of_unreleased_shape_needs_the_flag(tmp_path):
    config = glue_config()
    folder = write_tf1_module(tmp_path / "m", _pretrainer(config))  # no albert_config.json
    module = hub.open_module(folder)
    with pytest.raises(UserError, match="pass --albert_config_file"):
        hub.module_config(module)
    config_file = str(tmp_path / "albert_config.json")
    config.to_json_file(config_file)
    assert hub.module_config(module, config_file) == (config, config_file)


def test_url_is_refused_with_how_to_download():
    with pytest.raises(UserError) as err:
        hub.open_module("https://tfhub.dev/google/albert_base/1")
    assert str(err.value) == (
        "--albert_hub_module_handle=https://tfhub.dev/google/albert_base/1: modules are not "
        "downloaded at run time; download "
        "'https://tfhub.dev/google/albert_base/1?tf-hub-format=compressed' (a .tar.gz), "
        "unpack it with 'mkdir albert_base_1 && tar -xzf <file> -C albert_base_1' and pass "
        "the folder (--albert_hub_module_handle=albert_base_1)"
    )


def test_folders_that_are_not_modules_are_named(tmp_path):
    with pytest.raises(UserError, match="folder not found"):
        hub.open_module(str(tmp_path / "absent"))
    archive = tmp_path / "albert_base_1.tar.gz"
    archive.write_bytes(b"")
    with pytest.raises(UserError, match="an archive; unpack it"):
        hub.open_module(str(archive))
    (tmp_path / "empty").mkdir()
    with pytest.raises(UserError, match="not a TF-Hub module folder"):
        hub.open_module(str(tmp_path / "empty"))


# --- TF2 SavedModel of the Model Garden's AlbertEncoder -------------------------------
def _model_garden_module(folder, source, config, attention_output):
    """A SavedModel whose variables carry the Model Garden AlbertEncoder's layer names
    and shapes (attention kernels [H, N, D] and [N, D, H]), filled from `source`."""
    n, d = config.num_attention_heads, config.hidden_size // config.num_attention_heads
    names = checkpoints.original_variable_map(source)
    block = "bert/encoder/transformer/group_0/inner_group_0/"
    table = {
        "word_embeddings/embeddings": "bert/embeddings/word_embeddings",
        "position_embedding/embeddings": "bert/embeddings/position_embeddings",
        "type_embeddings/embeddings": "bert/embeddings/token_type_embeddings",
        "embeddings/layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
        "embeddings/layer_norm/beta": "bert/embeddings/LayerNorm/beta",
        "embedding_projection/kernel": "bert/encoder/embedding_hidden_mapping_in/kernel",
        "embedding_projection/bias": "bert/encoder/embedding_hidden_mapping_in/bias",
        f"{attention_output}/kernel": block + "attention_1/output/dense/kernel",
        f"{attention_output}/bias": block + "attention_1/output/dense/bias",
        "transformer/self_attention_layer_norm/gamma": block + "LayerNorm/gamma",
        "transformer/self_attention_layer_norm/beta": block + "LayerNorm/beta",
        "transformer/intermediate/kernel": block + "ffn_1/intermediate/dense/kernel",
        "transformer/intermediate/bias": block + "ffn_1/intermediate/dense/bias",
        "transformer/output/kernel": block + "ffn_1/intermediate/output/dense/kernel",
        "transformer/output/bias": block + "ffn_1/intermediate/output/dense/bias",
        "transformer/output_layer_norm/gamma": block + "LayerNorm_1/gamma",
        "transformer/output_layer_norm/beta": block + "LayerNorm_1/beta",
        "pooler_transform/kernel": "bert/pooler/dense/kernel",
        "pooler_transform/bias": "bert/pooler/dense/bias",
        "cls/predictions/output_bias/bias": "cls/predictions/output_bias",
    }
    for part in ("query", "key", "value"):
        table[f"transformer/self_attention/{part}/kernel"] = (
            f"{block}attention_1/self/{part}/kernel"
        )
        table[f"transformer/self_attention/{part}/bias"] = f"{block}attention_1/self/{part}/bias"
    root = tf.Module()
    root.weights = []
    for stored, original in table.items():
        value = names[original].numpy()
        if stored.endswith(("query/kernel", "key/kernel", "value/kernel")):
            value = value.reshape(-1, n, d)
        elif stored.endswith(("query/bias", "key/bias", "value/bias")):
            value = value.reshape(n, d)
        elif stored == f"{attention_output}/kernel":
            value = value.reshape(n, d, -1)
        # Keras prefixes names with the model's scope; the reader matches suffixes.
        root.weights.append(tf.Variable(value, name=f"albert_encoder/{stored}"))
    tf.saved_model.save(root, str(folder))
    os.makedirs(os.path.join(folder, "assets"), exist_ok=True)
    shutil.copyfile(DEMO_SPM, os.path.join(folder, "assets", "30k-clean.model"))
    return str(folder)


@pytest.mark.parametrize(
    "attention_output",
    ["transformer/self_attention/attention_output", "transformer/self_attention_output"],
)
def test_model_garden_module_loads_through_the_name_table(tmp_path, attention_output):
    config = glue_config()
    source = _pretrainer(config)
    folder = _model_garden_module(tmp_path / "mg", source, config, attention_output)
    module = hub.open_module(folder)
    assert module.kind == hub.MODEL_GARDEN
    assert module.num_attention_heads == config.num_attention_heads
    assert module.config_file is None and module.do_lower_case is None
    model = AlbertPretrainer(config)
    report = hub.load_module(model, module, allow_missing=["^cls/"])
    assert len(report.loaded) == 26  # the encoder and the masked-LM output bias
    assert sorted(report.missing_allowed) == [
        "cls/predictions/transform/LayerNorm/beta",
        "cls/predictions/transform/LayerNorm/gamma",
        "cls/predictions/transform/dense/bias",
        "cls/predictions/transform/dense/kernel",
        "cls/seq_relationship/output_bias",
        "cls/seq_relationship/output_weights",
    ]
    for got, want in zip(_encoder_outputs(model), _encoder_outputs(source)):
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def test_unknown_saved_model_is_refused_naming_its_variables(tmp_path):
    root = tf.Module()
    root.v = tf.Variable([1.0], name="dense/kernel")
    tf.saved_model.save(root, str(tmp_path / "other"))
    with pytest.raises(UserError, match=r"unknown layout \(variables: dense/kernel\)"):
        hub.open_module(str(tmp_path / "other"))


# --- the fine-tuning scripts ------------------------------------------------------------
def _glue_opts(tmp_path, **kw):
    data_dir = write_mrpc(str(tmp_path / "glue"))
    base = dict(
        task_name="MRPC",
        data_dir=data_dir,
        output_dir=str(tmp_path / "out"),
        max_seq_length=32,
        train_batch_size=8,
        do_train=True,
        train_step=2,
        save_checkpoints_steps=2,
    )
    base.update(kw)
    return ClassifierOptions(**base)


def test_script_options_refused_before_anything_is_written(tmp_path):
    config = glue_config()
    folder = write_tf1_module(tmp_path / "m", _pretrainer(config), config, do_lower_case=True)
    cases = [
        ({"albert_hub_module_handle": "https://tfhub.dev/google/albert_base/1"}, "download"),
        (
            {"albert_hub_module_handle": folder, "init_checkpoint": folder},
            "both name the initial weights",
        ),
        ({"albert_hub_module_handle": folder, "do_lower_case": False}, "do_lower_case=True"),
        ({"albert_hub_module_handle": folder, "max_seq_length": 65}, "exceeds"),
        ({"init_checkpoint": folder, "albert_config_file": "x"}, "TF-Hub module folder"),
    ]
    for change, match in cases:
        with pytest.raises(UserError, match=match):
            run(_glue_opts(tmp_path, **change))
        assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("task", ["squad_v1", "squad_v2", "race"])
def test_every_fine_tuning_task_starts_from_a_module(tmp_path, task):
    from albert_tf.tasks.race import RaceOptions, RaceTask
    from albert_tf.tasks.squad import SquadOptions, SquadTask

    config = glue_config()
    source = _pretrainer(config)
    folder = write_tf1_module(tmp_path / "m", source, config)
    if task == "race":
        options = RaceOptions(
            output_dir=str(tmp_path), data_dir="race", albert_hub_module_handle=folder
        )
        runner = RaceTask(options)
    else:
        options = SquadOptions(
            output_dir=str(tmp_path),
            albert_hub_module_handle=folder,
            version_2_with_negative=task == "squad_v2",
        )
        runner = SquadTask(options)
    model = runner.build_model(config)
    model.build()
    line = init_from_checkpoint(
        model, folder, runner.head, runner.head_patterns, flag="--albert_hub_module_handle"
    )
    assert line.startswith("loaded 25 variables from TF-Hub module") and "fresh" in line
    for got, want in zip(_encoder_outputs(model.albert), _encoder_outputs(source)):
        np.testing.assert_array_equal(got, want)


@pytest.mark.slow
def test_run_glue_mrpc_commands_run_with_a_local_module(tmp_path):
    """run_glue.sh's two MRPC commands (docs/original.md §11.7), flag for flag, with
    only the hub handle replaced by a module folder and the steps shortened through
    the flags they already pass (warmup 1, 4 steps, checkpoint every 2, batch 8)."""
    config = glue_config(max_position_embeddings=512)
    module = write_tf1_module(tmp_path / "albert_base_hub", _pretrainer(config), config)
    albert_root = tmp_path / "albert_root"  # no vocab.txt, no 30k-clean.model: not read
    albert_root.mkdir()
    os.symlink(os.path.join(REPO, "data", "demo", "glue"), albert_root / "glue")
    output_dir = tmp_path / "output"
    common = [
        f"--output_dir={output_dir}/MRPC",
        f"--data_dir={albert_root}/glue",
        f"--vocab_file={albert_root}/vocab.txt",
        f"--spm_model_file={albert_root}/30k-clean.model",
        "--do_lower_case",
        "--max_seq_length=512",
        "--optimizer=adamw",
        "--task_name=MRPC",
        "--warmup_step=1",
        "--learning_rate=2e-5",
        "--train_step=4",
        "--save_checkpoints_steps=2",
        "--train_batch_size=8",
    ]
    commands = [
        common
        + [
            "--do_train",
            "--nodo_eval",
            "--nodo_predict",
            f"--albert_hub_module_handle={module}",
            "--init_checkpoint=",
        ],
        common
        + ["--nodo_train", "--do_eval", "--do_predict", f"--albert_hub_module_handle={module}"],
    ]
    logs = []
    for args in commands:
        proc = subprocess.run(
            [sys.executable, "-m", "run_classifier", *args],
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "PYTHONPATH": REPO, "CUDA_VISIBLE_DEVICES": ""},
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        logs.append(proc.stderr)
    assert "--albert_hub_module_handle: loaded 25 variables from TF-Hub module" in logs[0]
    out = output_dir / "MRPC"
    results = (out / "eval_results.txt").read_text()
    assert "global_step = 2" in results and "global_step = 4" in results
    assert (out / "model.ckpt-best.index").exists()
    lines = (out / "MRPC.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 101
    assert np.loadtxt(out / "test_results.tsv").shape == (100, 2)
    # The fine-tuned checkpoint holds the encoder under the original names.
    shapes = checkpoints.checkpoint_variable_shapes(str(out / "model.ckpt-best"))
    assert "bert/embeddings/word_embeddings" in shapes and "output_weights" in shapes


def test_keras_hub_saved_model_loads_through_the_keras_hub_table(tmp_path):
    """A keras-hub AlbertBackbone exported as a SavedModel (`backbone.export`) reads by
    its variable names and runs as keras-hub runs it."""
    config = glue_config(num_hidden_layers=2, inner_group_num=2)
    backbone = random_keras_hub_backbone(config, 4)
    backbone.export(str(tmp_path / "exported"))
    module = hub.open_module(str(tmp_path / "exported"))
    assert module.kind == hub.KERAS_HUB and module.num_attention_heads == 2
    assert module.spm_model_file is None
    model = AlbertModel(config)
    report = hub.load_module(model, module)
    assert len(report.loaded) == 5 + 2 + 2 * 16 + 2
    out = model(IDS, training=False)
    theirs = backbone(
        {
            "token_ids": IDS["input_ids"],
            "segment_ids": IDS["segment_ids"],
            "padding_mask": IDS["input_mask"],
        }
    )
    real = IDS["input_mask"].astype(bool)
    np.testing.assert_allclose(
        np.asarray(out["sequence_output"])[real],
        np.asarray(theirs["sequence_output"])[real],
        rtol=1e-5,
        atol=1e-5,
    )
    np.testing.assert_allclose(out["pooled_output"], theirs["pooled_output"], rtol=1e-5, atol=1e-5)
