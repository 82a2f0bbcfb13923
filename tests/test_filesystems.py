"""Every entry point with every path a TensorFlow filesystem URI (file://, which
tf.io.gfile treats as it treats gs://), the commands of docs/pretraining.md's Cloud TPU
walk-through at tiny size: build the data, pretrain, fine-tune GLUE from the result
(with a SavedModel export), SQuAD, RACE, and export the checkpoint. Each runs as a
subprocess in an empty working directory that must stay empty: a path used through the
OS instead of tf.io.gfile would create a `file:` folder there."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import tensorflow as tf

from classifier_fixtures import DEMO_SPM, glue_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "data", "demo")


def uri(path) -> str:
    return f"file://{os.path.abspath(path)}"


@pytest.fixture(scope="module")
def place(tmp_path_factory):
    """Inputs copied under one folder (as a bucket would hold them), an empty working
    directory, and a runner that checks both."""
    root = tmp_path_factory.mktemp("bucket")
    shutil.copy(DEMO_SPM, root / "30k-clean.model")
    corpus = os.path.join(DEMO, "corpus", "part-00000.txt")
    shutil.copy(corpus, root / "corpus.txt")
    glue_config(max_position_embeddings=96).to_json_file(str(root / "albert_config.json"))
    squad = json.loads(open(os.path.join(DEMO, "squad", "train-v1.1.json")).read())
    squad["data"] = squad["data"][:1]
    (root / "squad.json").write_text(json.dumps(squad))
    glue = root / "glue" / "MRPC"
    glue.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        lines = open(os.path.join(DEMO, "glue", "MRPC", f"{split}.tsv")).read().splitlines()
        (glue / f"{split}.tsv").write_text("\n".join(lines[:17]) + "\n")
    cwd = tmp_path_factory.mktemp("cwd")

    def run(*args):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
        result = subprocess.run(
            [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True
        )
        assert result.returncode == 0, result.stderr[-3000:]
        assert os.listdir(cwd) == []
        return result

    return root, run


def test_every_entry_point_takes_file_uris(place):
    root, run = place
    model, config = uri(root / "30k-clean.model"), uri(root / "albert_config.json")
    run(
        "-m",
        "albert_tf.data.create_pretraining_data",
        f"--input_file={uri(root / 'corpus.txt')}",
        f"--output_file={uri(root / 'data' / 'train.tfrecord')}",
        f"--spm_model_file={model}",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        "--dupe_factor=1",
        "--num_workers=1",
    )
    assert (root / "data" / "train.tfrecord").stat().st_size > 0

    pretrain = root / "pretrain"
    run(
        os.path.join(ROOT, "run_pretraining.py"),
        f"--input_file={uri(root / 'data' / 'train.tfrecord')}",
        f"--output_dir={uri(pretrain)}",
        f"--albert_config_file={config}",
        "--do_train",
        "--do_eval",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        "--train_batch_size=8",
        "--eval_batch_size=8",
        "--max_eval_steps=1",
        "--num_train_steps=4",
        "--num_warmup_steps=1",
        "--save_checkpoints_steps=2",
        "--iterations_per_loop=2",
    )
    assert tf.train.latest_checkpoint(uri(pretrain)) == uri(pretrain / "model.ckpt-4")
    assert (pretrain / "train_state" / "state-4.index").exists()
    assert "global_step = 4" in (pretrain / "eval_results.txt").read_text()

    glue = root / "glue_out"
    run(
        os.path.join(ROOT, "run_classifier.py"),
        "--task_name=MRPC",
        f"--data_dir={uri(root / 'glue')}",
        f"--output_dir={uri(glue)}",
        f"--cached_dir={uri(root / 'cache')}",
        f"--init_checkpoint={uri(pretrain)}",
        f"--albert_config_file={config}",
        f"--spm_model_file={model}",
        f"--export_dir={uri(root / 'saved_model')}",
        "--do_train",
        "--do_eval",
        "--max_seq_length=32",
        "--train_batch_size=8",
        "--train_step=2",
        "--save_checkpoints_steps=2",
        "--iterations_per_loop=2",
    )
    assert "eval_accuracy = " in (glue / "eval_results.txt").read_text()
    assert (glue / "model.ckpt-best.index").exists() and (glue / "task.json").exists()
    assert os.listdir(root / "cache") and (root / "saved_model" / "saved_model.pb").exists()

    squad = root / "squad_out"
    run(
        os.path.join(ROOT, "run_squad.py"),
        f"--train_file={uri(root / 'squad.json')}",
        f"--predict_file={uri(root / 'squad.json')}",
        f"--output_dir={uri(squad)}",
        f"--albert_config_file={config}",
        f"--spm_model_file={model}",
        "--do_train",
        "--do_predict",
        "--max_seq_length=64",
        "--doc_stride=24",
        "--max_query_length=16",
        "--train_batch_size=8",
        "--num_train_epochs=0.8",
        "--save_checkpoints_steps=2",
        "--iterations_per_loop=2",
    )
    assert json.loads((squad / "predictions.json").read_text())

    race = root / "race_out"
    run(
        os.path.join(ROOT, "run_race.py"),
        f"--data_dir={uri(os.path.join(DEMO))}",
        f"--output_dir={uri(race)}",
        f"--albert_config_file={config}",
        f"--spm_model_file={model}",
        "--do_train",
        "--do_eval",
        "--max_seq_length=48",
        "--max_qa_length=16",
        "--train_batch_size=8",
        "--eval_batch_size=16",
        "--train_step=2",
        "--save_checkpoints_steps=2",
        "--iterations_per_loop=2",
    )
    assert "eval_accuracy = " in (race / "eval_results.txt").read_text()

    exported = root / "exported"
    run(
        "-m",
        "albert_tf.export",
        f"--albert_directory={uri(pretrain)}",
        "--checkpoint_name=model.ckpt-4",
        f"--export_path={uri(exported / 'model.ckpt-best')}",
        "--export_format=checkpoint",
    )
    names = {n for n, _ in tf.train.list_variables(str(exported / "model.ckpt-best"))}
    assert "bert/embeddings/word_embeddings" in names and "global_step" in names
    assert (exported / "albert_config.json").exists()
