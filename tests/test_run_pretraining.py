"""run_pretraining.py end to end: tiny config, resume after SIGKILL, errors."""

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.weights.checkpoints import read_checkpoint_values

from record_fixtures import write_demo_pretraining_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "run_pretraining.py")
DEMO = os.path.join(ROOT, "data", "demo")

TINY = {
    "vocab_size": None,
    "embedding_size": 16,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_hidden_groups": 1,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "inner_group_num": 1,
    "down_scale_factor": 1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "max_position_embeddings": 64,
    "type_vocab_size": 2,
    "initializer_range": 0.02,
}


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory):
    import sentencepiece as spm

    folder = tmp_path_factory.mktemp("pretrain")
    spm_model = os.path.join(DEMO, "spm.model")
    write_demo_pretraining_records(folder / "train.tfrecord", spm_model)
    config = dict(
        TINY, vocab_size=spm.SentencePieceProcessor(model_file=spm_model).get_piece_size()
    )
    (folder / "albert_config.json").write_text(json.dumps(config))
    return folder


def command(data, output_dir, *extra):
    return [
        sys.executable,
        SCRIPT,
        f"--output_dir={output_dir}",
        f"--input_file={data / 'train.tfrecord'}",
        f"--albert_config_file={data / 'albert_config.json'}",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        "--train_batch_size=8",
        "--eval_batch_size=8",
        "--num_train_steps=60",
        "--num_warmup_steps=2",
        "--learning_rate=0.01",
        "--save_checkpoints_steps=2",
        "--iterations_per_loop=2",
        "--max_eval_steps=3",
        *extra,
    ]


def _holding_env(folder, point):
    """The environment of a run that holds at `point` (albert_tf.interrupts.hold_for_test)
    until it is signalled; `folder` gets the hold's files."""
    from albert_tf.interrupts import TEST_HOLD_ENV

    return dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **{TEST_HOLD_ENV: f"{point}:{folder}"})


def _wait_for_hold(folder, point, proc):
    """Polls until the run `proc` holds at `point`."""
    deadline = time.time() + 300
    while not (folder / f"{point}.held").exists():
        assert proc.poll() is None, "run ended before it reached " + point
        assert time.time() < deadline
        time.sleep(0.02)


def run(cmd, **kwargs):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, **kwargs)


def _original_names_restore_with_a_tf1_saver(prefix, config_file):
    """The original code's way to read a checkpoint: a TF1 graph whose variables carry the
    original names (model, adam_m/adam_v slots, global_step), restored by name."""
    from albert_tf.model.config import AlbertConfig
    from albert_tf.model.modeling import AlbertPretrainer
    from albert_tf.weights import checkpoints

    model = AlbertPretrainer(AlbertConfig.from_json_file(config_file))
    model.build()
    shapes = {n: v.shape for n, v in checkpoints.original_variable_map(model).items()}
    graph = tf.Graph()
    with graph.as_default():
        variables = {
            "global_step": tf.compat.v1.get_variable(
                "global_step", [], tf.int64, initializer=tf.compat.v1.zeros_initializer()
            )
        }
        for name, shape in shapes.items():
            for full in (name, f"{name}/adam_m", f"{name}/adam_v"):
                variables[full] = tf.compat.v1.get_variable(full, shape, tf.float32)
        saver = tf.compat.v1.train.Saver()
        with tf.compat.v1.Session() as session:
            saver.restore(session, prefix)
            return session.run(variables)


def test_end_to_end_checkpoint_formats_and_resume_after_sigkill(tiny_data, tmp_path):
    straight = tmp_path / "straight"
    result = run(command(tiny_data, straight, "--do_eval"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "sentence_order_accuracy = " in result.stdout
    results = (straight / "eval_results.txt").read_text()
    for key in (
        "masked_lm_accuracy",
        "masked_lm_loss",
        "sentence_order_accuracy",
        "sentence_order_loss",
        "global_step = 60",
        "saved ",
    ):
        assert key in results
    assert os.listdir(straight / "train") and os.listdir(straight / "eval")
    # Every checkpoint once in the original's format, 5 kept, the resume state beside
    # it; the `checkpoint` file names them, and the original's name-based Saver
    # restores them.
    assert sorted(os.listdir(straight))[:3] == [
        "albert_config.json",
        "best_checkpoint",
        "best_trial.txt",
    ]
    latest = tf.train.latest_checkpoint(str(straight))
    assert latest == str(straight / "model.ckpt-60")
    state = tf.train.get_checkpoint_state(str(straight))
    assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
        f"model.ckpt-{s}" for s in (52, 54, 56, 58, 60)
    ]
    assert sorted(p.name for p in (straight / "train_state").glob("state-*.index")) == [
        f"state-{s}.index" for s in (52, 54, 56, 58, 60)
    ]
    assert not list(straight.glob("ckpt-*"))
    tf1 = _original_names_restore_with_a_tf1_saver(latest, tiny_data / "albert_config.json")
    ours = read_checkpoint_values(latest)
    assert tf1["global_step"] == 60 and len(tf1) == len(ours)
    for name, value in tf1.items():
        np.testing.assert_array_equal(value, ours[name], err_msg=name)
    best = json.loads((straight / "best_checkpoint").read_text())
    assert best["key"] == "masked_lm_accuracy" and (straight / "model.ckpt-best.index").exists()

    killed = tmp_path / "killed"
    # Killed after its second checkpoint, held after step 6 (albert_tf.interrupts.
    # hold_for_test) before that step's save, with 54 steps still to go.
    proc = subprocess.Popen(
        command(tiny_data, killed),
        env=_holding_env(tmp_path, "training_step_6"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for_hold(tmp_path, "training_step_6", proc)
    assert (killed / "model.ckpt-4.index").exists()
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

    # Evaluating a folder the original code could have written: only model.ckpt-<step>
    # files and their `checkpoint` state; the same metrics as on our checkpoint.
    original = tmp_path / "original"
    original.mkdir()
    for path in straight.glob("model.ckpt-60.*"):
        shutil.copy(path, original)
    tf.compat.v1.train.update_checkpoint_state(str(original), "model.ckpt-60")
    shutil.copy(straight / "albert_config.json", original)
    result = run(command(tiny_data, original, "--do_train=false", "--do_eval"))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "after 60 steps:" in result.stdout
    from albert_tf.run import selection

    assert selection.read_eval_results(str(original)) == {
        60: selection.read_eval_results(str(straight))[60]
    }


def test_sigterm_writes_a_checkpoint_and_the_rerun_continues_bit_for_bit(tiny_data, tmp_path):
    """What a preemptible VM does: SIGTERM mid-run. The run finishes its current loop,
    writes a checkpoint at that step, exits 143 with one line; the same command ends
    with the weights of an uninterrupted run (test above: straight)."""
    straight = tmp_path / "straight"
    assert run(command(tiny_data, straight, "--num_train_steps=20")).returncode == 0
    stopped = tmp_path / "stopped"
    proc = subprocess.Popen(
        command(tiny_data, stopped, "--num_train_steps=20", "--save_checkpoints_steps=10"),
        env=_holding_env(tmp_path, "training_step_4"),  # SIGTERM after step 4
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    _wait_for_hold(tmp_path, "training_step_4", proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 143, stderr[-2000:]
    line = stderr.strip().splitlines()[-1]
    assert re.fullmatch(
        r"run_pretraining.py: interrupted by SIGTERM at step (\d+): wrote "
        r".*ckpt-\1; run the same command again to continue",
        line,
    ), line
    step = int(re.search(r"step (\d+)", line).group(1))
    assert step == 4  # the step the run was held at when the signal came
    # Between saves (every 10): a resume point only (ckpt-<step>), else a regular save.
    assert (stopped / f"ckpt-{step}.index").exists() == (step % 10 != 0)
    assert (stopped / f"model.ckpt-{step}.index").exists() == (step % 10 == 0)
    resumed = run(
        command(tiny_data, stopped, "--num_train_steps=20", "--save_checkpoints_steps=10")
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    want = read_checkpoint_values(str(straight / "model.ckpt-20"))
    got = read_checkpoint_values(str(stopped / "model.ckpt-20"))
    for name in want:
        np.testing.assert_array_equal(want[name], got[name], err_msg=name)
    # The folder of an uninterrupted run with these flags: saves at 10 and 20 only.
    assert sorted(p.name for p in stopped.glob("*ckpt-*.index")) == [
        "model.ckpt-10.index",
        "model.ckpt-20.index",
    ]
    assert sorted(p.name for p in (stopped / "train_state").glob("*.index")) == [
        "state-10.index",
        "state-20.index",
    ]


def test_init_checkpoint_must_match(tiny_data, tmp_path):
    from albert_tf.model.config import AlbertConfig
    from albert_tf.model.modeling import AlbertModel
    from albert_tf.weights.checkpoints import save_original_checkpoint

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
    result = run(
        [
            sys.executable,
            SCRIPT,
            f"--output_dir={tmp_path}",
            "--num_train_steps=4",
            "--iterations_per_loop=2",
            "--max_eval_steps=2",
            "--dupe_factor=1",
        ]
    )
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

    result = run(
        command(tiny_data, tmp_path, "--num_train_steps=4", "--sentence_order_loss_weight=0")
    )
    assert result.returncode == 0, result.stderr[-3000:]
    lines = re.findall(
        r"\| loss ([\d.]+) \| masked_lm_loss ([\d.]+) sentence_order_loss ([\d.]+)", result.stderr
    )
    assert lines, result.stderr[-2000:]
    for loss, mlm, sop in lines:
        assert loss == mlm and float(sop) > 0.1


def test_albert_config_json_comes_with_the_first_checkpoint(tiny_data, tmp_path, monkeypatch):
    """A run stopped before its first checkpoint leaves neither albert_config.json nor
    train/ (the folder's config always describes its checkpoints); the first checkpoint
    brings the config along, and --spm_model_file as 30k-clean.model/.vocab: the files
    the original's export_to_tfhub.py opens (albert_config.json, 30k-clean.model,
    30k-clean.vocab, <checkpoint_name>.*)."""
    from albert_tf.errors import UserError
    from albert_tf.model.config import AlbertConfig
    from albert_tf.model.modeling import AlbertPretrainer
    from albert_tf.run import training
    from albert_tf.tasks import pretraining
    from albert_tf.weights import checkpoints, release

    out = tmp_path / "out"
    opts = pretraining.PretrainingOptions(
        output_dir=str(out),
        input_file=str(tiny_data / "train.tfrecord"),
        albert_config_file=str(tiny_data / "albert_config.json"),
        max_seq_length=32,
        max_predictions_per_seq=5,
        train_batch_size=8,
        num_train_steps=2,
        num_warmup_steps=0,
        save_checkpoints_steps=2,
        iterations_per_loop=2,
        spm_model_file=os.path.join(DEMO, "spm.model"),
    )
    config = json.loads((tiny_data / "albert_config.json").read_text())
    (tmp_path / "wider.json").write_text(json.dumps({**config, "vocab_size": 9000}))
    wider = dataclasses.replace(opts, albert_config_file=str(tmp_path / "wider.json"))
    with pytest.raises(UserError, match=r"spm.model: \d+ pieces, but vocab_size=9000"):
        pretraining.run(wider)

    def stop(self, *args, **kwargs):
        raise RuntimeError("stopped before the first checkpoint")

    with monkeypatch.context() as m:
        m.setattr(training.Trainer, "train", stop)
        with pytest.raises(RuntimeError, match="stopped"):
            pretraining.run(opts)
    assert os.listdir(out) == []
    assert pretraining.run(opts)["step"] == 2
    assert (out / "model.ckpt-2.index").exists() and os.listdir(out / "train")
    written = AlbertConfig.from_json_file(str(out / "albert_config.json"))
    assert written == AlbertConfig.from_json_file(str(tiny_data / "albert_config.json"))
    for name, source in (("30k-clean.model", "spm.model"), ("30k-clean.vocab", "spm.vocab")):
        assert (out / name).read_bytes() == open(os.path.join(DEMO, source), "rb").read()
    # export_to_tfhub.py's graph: the pretrainer's original names, all in the checkpoint.
    model = AlbertPretrainer(written)
    model.build()
    shapes = checkpoints.checkpoint_variable_shapes(str(out / "model.ckpt-2"))
    for name, variable in checkpoints.original_variable_map(model).items():
        assert shapes[name] == list(variable.shape), name
    assert release.release_files(str(out)).spm_model_file == str(out / "30k-clean.model")
