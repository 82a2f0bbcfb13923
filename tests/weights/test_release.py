"""load_release: the unpacked folder of a released model (albert_tf/weights/release.py)."""

import os
import shutil

import numpy as np
import pytest

from albert_tf.model.modeling import AlbertModel, AlbertPretrainer
from albert_tf.tasks.classifier import AlbertClassifier, ClassifierOptions, ClassifierTask
from albert_tf.weights import checkpoints
from albert_tf.weights.release import is_release_folder, load_release, release_files

from classifier_fixtures import DEMO_SPM, glue_config, write_mrpc
from repo_paths import REPO_ROOT


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """A fake v1-shaped release (dropout 0.1, as the v1 configs): albert_config.json,
    model.ckpt-best (original format, with cls/*), 30k-clean.model/.vocab."""
    folder = tmp_path_factory.mktemp("albert_tiny")
    config = glue_config(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    config.to_json_file(str(folder / "albert_config.json"))
    model = AlbertPretrainer(config)
    model.build()
    checkpoints.save_original_checkpoint(model, str(folder / "model.ckpt-best"), global_step=3)
    shutil.copy(DEMO_SPM, folder / "30k-clean.model")
    shutil.copy(DEMO_SPM.replace(".model", ".vocab"), folder / "30k-clean.vocab")
    return folder, config, model


def _encoder(model):
    return {
        n: v.numpy()
        for n, v in checkpoints.original_variable_map(checkpoints.encoder_of(model)).items()
    }


def test_load_release_classifier(release):
    folder, config, source = release
    assert is_release_folder(str(folder))
    got_config, model, tokenizer = load_release(
        str(folder), model_cls=AlbertClassifier, num_labels=3
    )
    assert got_config == config
    assert isinstance(model, AlbertClassifier) and model.num_labels == 3
    want, got = _encoder(source), _encoder(model)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    assert tokenizer.spm_mode and tokenizer.vocab_size == config.vocab_size
    assert tokenizer.encode("The cat sat.")


def test_load_release_encoder_and_pretrainer(release):
    folder, _, source = release
    _, encoder, _ = load_release(str(folder))
    assert isinstance(encoder, AlbertModel)
    _, pre, _ = load_release(str(folder), model_cls=AlbertPretrainer)
    np.testing.assert_array_equal(
        pre.sentence_order.output_weights.numpy(), source.sentence_order.output_weights.numpy()
    )


def test_release_files_errors(tmp_path, release):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        release_files(str(tmp_path / "nope"))
    (tmp_path / "r").mkdir()
    with pytest.raises(FileNotFoundError, match="albert_config.json"):
        release_files(str(tmp_path / "r"))
    shutil.copy(release[0] / "albert_config.json", tmp_path / "r")
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        release_files(str(tmp_path / "r"))


def test_run_classifier_takes_config_and_spm_from_release(release, tmp_path):
    folder, config, _ = release
    data = write_mrpc(str(tmp_path / "data"))
    task = ClassifierTask(
        ClassifierOptions(
            task_name="mrpc",
            data_dir=data,
            output_dir=str(tmp_path / "out"),
            do_train=True,
            init_checkpoint=str(folder),
            max_seq_length=32,
        )
    )
    assert task.resolve() == config
    assert os.path.basename(task.files.spm_model_file) == "30k-clean.model"


def test_tokenizer_files_are_written_as_a_release_names_them(tmp_path):
    from albert_tf.weights.release import write_tokenizer_files

    spm_vocab = open(DEMO_SPM.replace(".model", ".vocab"), "rb").read()
    lone = tmp_path / "lone.model"  # no .vocab beside it: the vocab comes from the model
    shutil.copy(DEMO_SPM, lone)
    out = tmp_path / "out"
    out.mkdir()
    assert write_tokenizer_files(str(out), str(lone)) == [
        str(out / "30k-clean.model"),
        str(out / "30k-clean.vocab"),
    ]
    assert (out / "30k-clean.model").read_bytes() == open(DEMO_SPM, "rb").read()
    assert (out / "30k-clean.vocab").read_bytes() == spm_vocab  # as spm_train wrote it
    assert write_tokenizer_files(str(out), DEMO_SPM) == []  # the same bytes: left alone


def test_requirements_txt_lists_the_package_dependencies():
    """The original's run_glue.sh installs requirements.txt; it must say what pyproject
    does."""
    import tomllib

    root = REPO_ROOT
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        dependencies = tomllib.load(f)["project"]["dependencies"]
    with open(os.path.join(root, "requirements.txt"), encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip() and not line.startswith("#")]
    assert sorted(lines) == sorted(dependencies)
