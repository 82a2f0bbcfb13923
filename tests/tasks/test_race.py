"""RACE: the multiple-choice model and end-to-end runs (albert_tf.tasks.race / run_race.py)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.errors import UserError
from albert_tf.tasks.race import AlbertRace, RaceOptions, run
from albert_tf.weights import checkpoints

from classifier_fixtures import DEMO_SPM, glue_config
from repo_paths import REPO_ROOT

REPO = REPO_ROOT
DEMO = os.path.join(REPO, "data", "demo")


def test_each_choice_is_scored_by_the_pooled_output():
    cfg = glue_config()
    model = AlbertRace(cfg)
    model.build()
    names = checkpoints.original_variable_map(model)
    assert names["output_weights"].shape == (1, cfg.hidden_size)
    names["output_bias"].assign([0.7])
    rng = np.random.default_rng(0)
    b, s = 2, 9
    choices = [
        {
            "input_ids": rng.integers(5, cfg.vocab_size, (b, s)),
            "input_mask": np.ones((b, s), np.int64),
            "segment_ids": rng.integers(0, 2, (b, s)),
        }
        for _ in range(4)
    ]
    joined = {
        k: tf.constant(np.concatenate([c[k] for c in choices], 1), tf.int32) for k in choices[0]
    }
    out = model(joined)
    w = names["output_weights"].numpy()[0]
    want = np.stack(
        [
            model.albert({k: tf.constant(v, tf.int32) for k, v in c.items()})[
                "pooled_output"
            ].numpy()
            @ w
            + 0.7
            for c in choices
        ],
        axis=1,
    )
    np.testing.assert_allclose(out["logits"], want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out["predictions"], want.argmax(1))
    assert out["probabilities"].shape == (b, 4)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("race")
    config_file = str(root / "albert_config.json")
    glue_config().to_json_file(config_file)
    return {"root": root, "config_file": config_file}


def _opts(setup, output_dir, **kw):
    base = dict(
        data_dir=DEMO,
        output_dir=str(output_dir),
        albert_config_file=setup["config_file"],
        spm_model_file=DEMO_SPM,
        max_seq_length=48,
        max_qa_length=16,
        train_batch_size=8,
        eval_batch_size=16,
        predict_batch_size=16,
        learning_rate=1e-3,
        train_step=4,
        warmup_step=1,
        save_checkpoints_steps=2,
        iterations_per_loop=2,
    )
    base.update(kw)
    return RaceOptions(**base)


def test_train_eval_predict(setup):
    out = setup["root"] / "out"
    summary = run(_opts(setup, out, do_predict=True))
    assert summary["train_step"] == 4
    text = (out / "eval_results.txt").read_text()
    assert "global_step = 2" in text and "global_step = 4" in text and "eval_accuracy" in text
    assert summary["best"]["key"] == "eval_accuracy"
    shapes = checkpoints.checkpoint_variable_shapes(str(out / "model.ckpt-best"))
    assert shapes["output_weights"] == [1, 32]
    results = (out / "predict_results.txt").read_text()
    assert "eval_accuracy = " in results and "eval_loss = " in results
    n_test = sum(
        len(json.loads(line)["answers"])
        for level in ("middle", "high")
        for line in open(os.path.join(DEMO, "RACE", "test", level, "all.txt"))
    )
    assert summary["num_test_examples"] == n_test
    # The test accuracy is the accuracy of the predict weights, computed independently.
    model = AlbertRace(glue_config())
    checkpoints.load_original_checkpoint(model, str(out / "model.ckpt-best"))
    records = tf.data.TFRecordDataset(str(out / "predict.tf_record"))
    spec = {
        k: tf.io.FixedLenFeature([4 * 48], tf.int64)
        for k in ("input_ids", "input_mask", "segment_ids")
    }
    spec["label_ids"] = tf.io.FixedLenFeature([], tf.int64)
    batch = next(iter(records.map(lambda r: tf.io.parse_single_example(r, spec)).batch(1000)))
    logits = model(
        {k: tf.cast(batch[k], tf.int32) for k in ("input_ids", "input_mask", "segment_ids")}
    )["logits"]
    accuracy = np.mean(np.argmax(logits, 1) == batch["label_ids"].numpy())
    assert summary["test"]["eval_accuracy"] == pytest.approx(accuracy, abs=1e-6)


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(task_name="mnli"), "only runs 'race'"),
        (dict(data_dir="/nonexistent"), "--data_dir=/nonexistent: folder not found"),
        (dict(high_only=True, middle_only=True), "exclude each other"),
        (dict(max_qa_length=45), "must exceed --max_qa_length=45"),
        (dict(max_seq_length=128), "exceeds max_position_embeddings=64"),
        (dict(do_train=False, do_eval=False), "at least one of"),
    ],
)
def test_bad_inputs_fail_before_writing(setup, tmp_path, change, match):
    out = tmp_path / "out"
    with pytest.raises(UserError, match=match):
        run(_opts(setup, out, **change))
    assert not out.exists()


def test_cli_error(setup, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "run_race.py"),
            f"--data_dir={tmp_path}",
            f"--output_dir={out}",
            f"--albert_config_file={setup['config_file']}",
            f"--spm_model_file={DEMO_SPM}",
            "--max_seq_length=48",
            "--max_qa_length=16",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert proc.returncode != 0 and "run_race.py: error: --data_dir=" in proc.stderr
    assert not out.exists()


@pytest.mark.slow
def test_prediction_over_two_replicas_equals_one_device(tmp_path):
    """Every question once, in file order, with the scores of a single device (7 questions
    of 4 choices, global batch 6 over two replicas: the last batches are padded)."""
    from worker_fixtures import run_script

    for strategy in ("default", "mirrored2"):
        run_script("replica_predict_script.py", "race", strategy, tmp_path / f"{strategy}.npz")
    one, two = (np.load(tmp_path / f"{s}.npz") for s in ("default", "mirrored2"))
    assert (int(one["replicas"]), int(two["replicas"])) == (1, 2)
    real_one, real_two = one["is_real_example"] != 0, two["is_real_example"] != 0
    assert real_one.sum() == real_two.sum() == 7
    for key in ("label_ids", "predictions"):
        np.testing.assert_array_equal(two[key][real_two], one[key][real_one])
    for key in ("probabilities", "per_example_loss"):
        np.testing.assert_allclose(two[key][real_two], one[key][real_one], rtol=1e-5, atol=1e-6)
