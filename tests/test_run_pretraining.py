"""run_pretraining.py end to end: tiny config, resume after SIGKILL, errors."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from albert_tf.checkpoints import read_checkpoint_values

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "run_pretraining.py")
DEMO = os.path.join(ROOT, "data", "demo")

TINY = {"vocab_size": None, "embedding_size": 16, "hidden_size": 32, "num_hidden_layers": 2,
        "num_hidden_groups": 1, "num_attention_heads": 2, "intermediate_size": 64,
        "inner_group_num": 1, "down_scale_factor": 1, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0,
        "max_position_embeddings": 64, "type_vocab_size": 2, "initializer_range": 0.02}


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    import sentencepiece as spm

    from albert_tf.data import create_pretraining_data as cpd
    from albert_tf.data import pretraining_instances as pi
    folder = tmp_path_factory.mktemp("pretrain")
    spm_model = os.path.join(DEMO, "spm.model")
    cpd.create_pretraining_data(
        os.path.join(DEMO, "corpus", "part-00000.txt"), str(folder / "train.tfrecord"),
        pi.MaskingConfig(max_seq_length=32, max_predictions_per_seq=5),
        spm_model_file=spm_model, dupe_factor=1, num_workers=1)
    config = dict(TINY, vocab_size=spm.SentencePieceProcessor(model_file=spm_model).get_piece_size())
    (folder / "albert_config.json").write_text(json.dumps(config))
    return folder


def command(data, output_dir, *extra):
    return [sys.executable, SCRIPT, f"--output_dir={output_dir}",
            f"--input_file={data / 'train.tfrecord'}",
            f"--albert_config_file={data / 'albert_config.json'}",
            "--max_seq_length=32", "--max_predictions_per_seq=5", "--train_batch_size=8",
            "--eval_batch_size=8", "--num_train_steps=60", "--num_warmup_steps=2",
            "--learning_rate=0.01", "--save_checkpoints_steps=2", "--iterations_per_loop=2",
            "--max_eval_steps=3", *extra]


def run(cmd, **kwargs):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, **kwargs)


def test_end_to_end_and_resume_after_sigkill(tiny_data, tmp_path):
    straight = tmp_path / "straight"
    result = run(command(tiny_data, straight, "--do_eval"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sentence_order_accuracy = " in result.stdout
    results = (straight / "eval_results.txt").read_text()
    for key in ("masked_lm_accuracy", "masked_lm_loss", "sentence_order_accuracy",
                "sentence_order_loss", "global_step = 60"):
        assert key in results
    assert (straight / "model.ckpt-60.index").exists()  # original-format export
    assert os.listdir(straight / "train") and os.listdir(straight / "eval")

    killed = tmp_path / "killed"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    proc = subprocess.Popen(command(tiny_data, killed), env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    # Killed right after its second checkpoint, with 56 steps still to go.
    while not (killed / "ckpt-4.index").exists():
        assert proc.poll() is None, "run ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (killed / "model.ckpt-60.index").exists()
    resumed = run(command(tiny_data, killed))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resumed from" in resumed.stderr
    want = read_checkpoint_values(str(straight / "model.ckpt-60"))
    got = read_checkpoint_values(str(killed / "model.ckpt-60"))
    assert sorted(want) == sorted(got)
    for name in want:
        np.testing.assert_array_equal(want[name], got[name], err_msg=name)


def test_init_checkpoint_must_match(tiny_data, tmp_path):
    from albert_tf.checkpoints import save_original_checkpoint
    from albert_tf.config import AlbertConfig
    from albert_tf.modeling import AlbertModel
    other = AlbertConfig.from_json_file(tiny_data / "albert_config.json").replace(hidden_size=16)
    model = AlbertModel(other)
    model.build()
    prefix = save_original_checkpoint(model, str(tmp_path / "wrong" / "model.ckpt"))
    result = run(command(tiny_data, tmp_path / "out", f"--init_checkpoint={prefix}"))
    assert result.returncode != 0
    assert "shape mismatch" in result.stderr and "group_0" in result.stderr


def test_bad_flags(tiny_data, tmp_path):
    result = run(command(tiny_data, tmp_path / "a", "--max_seq_length=100"))
    assert result.returncode != 0 and "max_position_embeddings=64" in result.stderr
    result = run(command(tiny_data, tmp_path / "b", "--gradient_accumulation_steps=3"))
    assert result.returncode == 1
    assert "error: --train_batch_size=8: expected a multiple of the 1 replicas x 3" in result.stderr


def test_demo_mode_builds_data_and_reports_accuracies(tmp_path):
    # The README's main job, shortened: only --output_dir plus a few steps.
    result = run([sys.executable, SCRIPT, f"--output_dir={tmp_path}", "--num_train_steps=4",
                  "--iterations_per_loop=2", "--max_eval_steps=2", "--dupe_factor=1"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "before training: masked_lm_accuracy = " in result.stdout
    assert "after 4 steps:" in result.stdout
    assert sorted(os.listdir(tmp_path / "demo_data")) == ["eval.tfrecord", "train.tfrecord"]
    config = json.loads((tmp_path / "albert_config.json").read_text())
    assert config["hidden_size"] == 128 and config["vocab_size"] > 1000
    assert (tmp_path / "model.ckpt-4.index").exists()


def test_masked_lm_only(tiny_data, tmp_path):
    """--sentence_order_loss_weight=0: the trained loss is the masked-LM loss alone
    (the sentence-order loss is still logged)."""
    import re
    result = run(command(tiny_data, tmp_path, "--num_train_steps=4",
                         "--sentence_order_loss_weight=0"))
    assert result.returncode == 0, result.stderr[-3000:]
    lines = re.findall(r"\| loss ([\d.]+) \| masked_lm_loss ([\d.]+) sentence_order_loss ([\d.]+)",
                       result.stderr)
    assert lines, result.stderr[-2000:]
    for loss, mlm, sop in lines:
        assert loss == mlm and float(sop) > 0.1
