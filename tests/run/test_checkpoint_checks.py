"""albert_tf/run/checkpoint_checks.py: the checkpoints a run starts from (read by
albert_tf/weights/init_checkpoint.py)."""

from __future__ import annotations

import logging
import os

import pytest

from albert_tf.errors import UserError
from albert_tf.model.modeling import AlbertModel
from albert_tf.run import checkpoint_checks
from albert_tf.run.output_folder import OutputFolder
from albert_tf.weights import checkpoints
from albert_tf.weights.init_checkpoint import InitCheckpoint

from classifier_fixtures import glue_config


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    folder = tmp_path_factory.mktemp("init")
    model = AlbertModel(glue_config())
    model.build()
    prefix = checkpoints.save_original_checkpoint(model, str(folder / "model.ckpt-best"))
    glue_config().to_json_file(str(folder / "albert_config.json"))
    return folder, prefix, model


def _steps(folder):
    return OutputFolder(str(folder)).contents().steps


def test_an_initial_checkpoint_is_looked_up_once_and_must_be_complete(saved, tmp_path):
    folder, prefix, _ = saved
    init = InitCheckpoint(str(folder))
    assert (init.is_release_folder, init.prefix) == (True, prefix)
    assert init.config_beside == f"{folder}/albert_config.json"
    assert init.own_config()[1:] == (f"{folder}/albert_config.json", None)
    assert checkpoint_checks.check_init(init, glue_config(), None) == prefix
    missing = InitCheckpoint(str(tmp_path / "none" / "model.ckpt-3"))
    with pytest.raises(UserError, match=rf"^--init_checkpoint={tmp_path}/none/model.ckpt-3: "):
        checkpoint_checks.check_init(missing, glue_config(), None)
    assert missing.config_beside is None


def test_the_config_beside_an_initial_checkpoint_must_describe_the_same_network(saved, tmp_path):
    folder, prefix, _ = saved
    same = glue_config(hidden_dropout_prob=0.0)  # dropout may differ
    checkpoint_checks.check_init(InitCheckpoint(prefix), same, str(tmp_path / "c.json"))
    deeper = glue_config(num_hidden_layers=4)
    with pytest.raises(UserError) as err:
        checkpoint_checks.check_init(InitCheckpoint(str(folder)), deeper, "c4.json")
    assert str(err.value) == (
        f"--init_checkpoint={folder}: its albert_config.json ({folder}/albert_config.json) "
        "describes another network than --albert_config_file=c4.json (num_hidden_layers=2 vs "
        "4); expected the config the checkpoint was trained with"
    )


def test_init_from_other_depth_frees_the_depth_and_nothing_else(saved):
    folder, _, _ = saved
    deeper = glue_config(num_hidden_layers=4)
    checkpoint_checks.check_init(InitCheckpoint(str(folder)), deeper, "c4.json", other_depth=True)
    wider = glue_config(num_hidden_layers=4, intermediate_size=96)
    with pytest.raises(UserError, match=r"\(intermediate_size=64 vs 96\)"):
        checkpoint_checks.check_init(InitCheckpoint(str(folder)), wider, "c.json", other_depth=True)


def test_an_initial_checkpoint_must_fit_even_when_the_output_folder_wins(saved):
    _, prefix, model = saved
    init = InitCheckpoint(prefix)
    shapes = init.variable_shapes()
    checkpoint_checks.check_init_fits(checkpoints.original_variable_map(model), init, shapes)
    wide = AlbertModel(glue_config(hidden_size=48, num_attention_heads=2))
    wide.build()
    with pytest.raises(UserError, match=r"does not fit this model \(.*: checkpoint \[.*32"):
        checkpoint_checks.check_init_fits(checkpoints.original_variable_map(wide), init, shapes)


def test_the_log_says_which_weights_a_resumed_run_uses(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        checkpoint_checks.log_resume_wins("/init/model.ckpt", f"{tmp_path}/ckpt-4")
    assert (
        f"--init_checkpoint=/init/model.ckpt is not loaded: training resumes from "
        f"{tmp_path}/ckpt-4 of --output_dir"
    ) in caplog.text


def test_an_initial_checkpoint_the_run_would_replace_is_refused(saved, tmp_path):
    folder, prefix, _ = saved
    checkpoint_checks.check_init_not_replaced(InitCheckpoint(prefix), str(tmp_path))
    with pytest.raises(UserError, match="lies in --output_dir=.*it would be replaced"):
        checkpoint_checks.check_init_not_replaced(InitCheckpoint(str(folder)), str(folder))


def test_a_damaged_read_names_a_record_file_or_a_checkpoint():
    record = checkpoint_checks.damaged_read_message(
        "truncated record at 120", "--input_file=x", "/o", None
    )
    assert record.startswith("a TFRecord file of --input_file=x is damaged (truncated record")
    saved = checkpoint_checks.damaged_read_message(
        "Checksum does not match: stored 1 vs. calculated on the restored bytes 2",
        "--input_file=x",
        "/o",
        "/i",
    )
    assert saved.startswith("a checkpoint of --output_dir=/o or --init_checkpoint=/i is damaged")


def test_a_cut_checkpoint_of_the_output_folder_names_its_files(saved, tmp_path):
    _, prefix, _ = saved
    for suffix in (".index", ".data-00000-of-00001"):
        with open(prefix + suffix, "rb") as f:
            data = f.read()
        with open(tmp_path / f"model.ckpt-3{suffix}", "wb") as f:
            f.write(data[: len(data) // 2] if suffix != ".index" else data)
    with pytest.raises(UserError) as err:
        checkpoint_checks.check_output_checkpoints_intact(str(tmp_path), _steps(tmp_path))
    assert str(err.value).startswith(f"--output_dir={tmp_path}: checkpoint model.ckpt-3 is damaged")
    assert f"remove the files of step 3 ({tmp_path}/model.ckpt-3.*) to go on" in str(err.value)
    os.remove(tmp_path / "model.ckpt-3.data-00000-of-00001")
    with pytest.raises(UserError, match="missing"):
        checkpoint_checks.check_output_checkpoints_intact(str(tmp_path), _steps(tmp_path))


@pytest.mark.parametrize("kind", ["huggingface", "keras_hub"])
def test_a_foreign_folders_config_must_describe_the_same_network(saved, tmp_path, kind):
    from albert_tf.weights import huggingface, keras_hub

    _, _, model = saved
    writer = {"huggingface": huggingface, "keras_hub": keras_hub}[kind]
    folder = str(tmp_path / kind)
    values = {n: v.numpy() for n, v in checkpoints.original_variable_map(model).items()}
    writer.write_folder(folder, glue_config(), values)
    # The folder's own config, and the same network with other dropout rates, pass.
    checkpoint_checks.check_init(InitCheckpoint(folder), glue_config(), f"{folder}/config.json")
    checkpoint_checks.check_init(
        InitCheckpoint(folder), glue_config(hidden_dropout_prob=0.3), str(tmp_path / "c.json")
    )
    for change, shown in (
        ({"num_hidden_layers": 4}, "num_hidden_layers=2 vs 4"),
        ({"num_attention_heads": 4}, "num_attention_heads=2 vs 4"),
        ({"intermediate_size": 96}, "intermediate_size=64 vs 96"),
    ):
        with pytest.raises(UserError) as err:
            checkpoint_checks.check_init(InitCheckpoint(folder), glue_config(**change), "c.json")
        assert str(err.value) == (
            f"--init_checkpoint={folder}: its config.json ({folder}/config.json) describes "
            f"another network than --albert_config_file=c.json ({shown}); expected the "
            "config the checkpoint was trained with"
        )
