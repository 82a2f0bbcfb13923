"""End-to-end SQuAD v1.1 runs through albert_tf.tasks.squad.run / run_squad.py."""

import dataclasses
import json
import os
import subprocess
import sys
import types

import numpy as np
import pytest

from albert_tf.errors import UserError
from albert_tf.tasks.squad import AlbertSquadV1, SquadOptions, run
from albert_tf.weights import checkpoints

from classifier_fixtures import DEMO_SPM, glue_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO_SQUAD = os.path.join(REPO, "data", "demo", "squad")


def _subset(src, dst, n_articles):
    with open(src) as f:
        document = json.load(f)
    document["data"] = document["data"][:n_articles]
    with open(dst, "w") as f:
        json.dump(document, f)
    return str(dst)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("squad")
    config_file = str(root / "albert_config.json")
    glue_config(max_position_embeddings=96).to_json_file(config_file)
    train = _subset(os.path.join(DEMO_SQUAD, "train-v1.1.json"), root / "train.json", 2)
    dev = _subset(os.path.join(DEMO_SQUAD, "dev-v1.1.json"), root / "dev.json", 2)
    train2 = _subset(os.path.join(DEMO_SQUAD, "train-v2.0.json"), root / "train2.json", 2)
    dev2 = _subset(os.path.join(DEMO_SQUAD, "dev-v2.0.json"), root / "dev2.json", 2)
    return {
        "root": root,
        "config_file": config_file,
        "train": train,
        "dev": dev,
        "train2": train2,
        "dev2": dev2,
    }


def _opts(setup, output_dir, **kw):
    base = dict(
        output_dir=str(output_dir),
        albert_config_file=setup["config_file"],
        spm_model_file=DEMO_SPM,
        train_file=setup["train"],
        predict_file=setup["dev"],
        max_seq_length=64,
        doc_stride=24,
        max_query_length=16,
        train_batch_size=8,
        predict_batch_size=5,
        learning_rate=1e-3,
        num_train_epochs=1.0,
        save_checkpoints_steps=3,
        iterations_per_loop=3,
    )
    base.update(kw)
    return SquadOptions(**base)


@pytest.fixture(scope="module")
def trained(setup):
    out = setup["root"] / "out"
    return out, run(_opts(setup, out, do_train=True, do_predict=True))


def test_train_and_predict(setup, trained):
    out, summary = trained
    steps = int(summary["num_train_examples"] / 8 * 1.0)
    assert summary["train_step"] == steps >= 3
    text = (out / "eval_results.txt").read_text()
    assert text.count("global_step = ") == len(range(3, steps, 3)) + 1
    assert "exact_match = " in text and "f1 = " in text
    assert summary["best"]["key"] == "f1"
    # The original's last lines: the best checkpoint's scores and its step.
    best = summary["best"]
    assert text.splitlines()[-3:] == [
        f"exact_match = {best['metrics']['exact_match']}",
        f"f1 = {best['metrics']['f1']}",
        f"best perf happened at step: {best['global_step']}",
    ]
    shapes = checkpoints.checkpoint_variable_shapes(str(out / "model.ckpt-best"))
    assert shapes["cls/squad/output_weights"] == [2, 32]
    checkpoints.load_original_checkpoint(
        AlbertSquadV1(glue_config(max_position_embeddings=96)), str(out / "model.ckpt-best")
    )
    with open(setup["dev"]) as f:
        qids = [qa["id"] for a in json.load(f)["data"] for p in a["paragraphs"] for qa in p["qas"]]
    predictions = json.loads((out / "predictions.json").read_text())
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    assert list(predictions) == qids == list(nbest)
    for qid in qids:
        assert nbest[qid][0]["text"] == predictions[qid]
        assert sum(e["probability"] for e in nbest[qid]) == pytest.approx(1.0)
    # The final predictions use model.ckpt-best: their score is the best one.
    assert summary["eval"]["f1"] == pytest.approx(summary["best"]["value"])
    assert not [p for p in os.listdir(out) if p.endswith(".tmp") or p.startswith(".")]


def test_predict_only_reproduces_the_predictions(setup, trained, tmp_path):
    out, _ = trained
    summary = run(
        _opts(
            setup, tmp_path / "pred", do_predict=True, init_checkpoint=str(out / "model.ckpt-best")
        )
    )
    assert (tmp_path / "pred" / "predictions.json").read_text() == (
        out / "predictions.json"
    ).read_text()
    mine = json.loads((tmp_path / "pred" / "nbest_predictions.json").read_text())
    theirs = json.loads((out / "nbest_predictions.json").read_text())
    for qid in mine:
        np.testing.assert_allclose(
            [e["probability"] for e in mine[qid]],
            [e["probability"] for e in theirs[qid]],
            rtol=1e-5,
        )
    assert summary["best"]["global_step"] == 0  # the --init_checkpoint weights, scored


def test_export_saved_model_and_tflite(setup, trained, tmp_path):
    import tensorflow as tf

    out, _ = trained
    summary = run(_opts(setup, out, export_dir=str(tmp_path / "export")))
    assert summary["predict_weights"].endswith("model.ckpt-best")
    saved, tflite = summary["export"]["saved_model"], summary["export"]["tflite"]
    assert os.path.dirname(saved) == str(tmp_path / "export" / "saved_model")
    assert tflite == str(tmp_path / "export" / "albert_model.tflite")
    assert sorted(os.listdir(tmp_path / "export")) == [
        ".albert_tf_output.json",
        "albert_model.tflite",
        "saved_model",
    ]
    model = AlbertSquadV1(glue_config(max_position_embeddings=96))
    checkpoints.load_original_checkpoint(model, str(out / "model.ckpt-best"))
    rng = np.random.default_rng(0)
    feed = {
        "input_ids": rng.integers(5, 1000, (1, 64)).astype(np.int32),
        "input_mask": np.array([[1] * 50 + [0] * 14], np.int32),
        "segment_ids": np.array([[0] * 20 + [1] * 44], np.int32),
    }
    want = model({k: tf.constant(v) for k, v in feed.items()})
    serving = tf.saved_model.load(saved).signatures["serving_default"]
    assert serving.structured_input_signature[1]["input_ids"].shape == (1, 64)
    got = serving(**{k: tf.constant(v) for k, v in feed.items()})
    interpreter = tf.lite.Interpreter(model_path=tflite)
    lite = interpreter.get_signature_runner()(**feed)
    for key, lite_key in (("start_logits", "output_0"), ("end_logits", "output_1")):
        np.testing.assert_allclose(got[key], want[key], rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(lite[lite_key], want[key], rtol=1e-5, atol=1e-6)


def test_v2_train_and_predict(setup, tmp_path):
    out = tmp_path / "v2"
    summary = run(
        _opts(
            setup,
            out,
            train_file=setup["train2"],
            predict_file=setup["dev2"],
            version_2_with_negative=True,
            do_train=True,
            do_predict=True,
            start_n_top=3,
            end_n_top=2,
        )
    )
    metrics = summary["eval"]
    for key in (
        "exact",
        "f1",
        "total",
        "HasAns_f1",
        "NoAns_f1",
        "best_f1",
        "best_f1_thresh",
        "null_score_diff_threshold",
    ):
        assert key in metrics, key
    assert metrics["null_score_diff_threshold"] == metrics["best_f1_thresh"]
    # eval_results.txt holds the original's four scores (and our global_step) only.
    first_block = (out / "eval_results.txt").read_text().split("best f1 = ")[0]
    keys = [line.split(" = ")[0] for line in first_block.splitlines() if " = " in line]
    assert keys == ["exact", "f1", "global_step", "null_score_diff_threshold", "total"]
    with open(setup["dev2"]) as f:
        qids = [qa["id"] for a in json.load(f)["data"] for p in a["paragraphs"] for qa in p["qas"]]
    assert metrics["total"] == len(qids)
    odds = json.loads((out / "null_odds.json").read_text())
    predictions = json.loads((out / "predictions.json").read_text())
    assert list(odds) == list(predictions) == qids
    threshold = metrics["null_score_diff_threshold"]
    nbest = json.loads((out / "nbest_predictions.json").read_text())
    for qid in qids:  # "" exactly where the null score reaches the threshold
        assert predictions[qid] == ("" if odds[qid] >= threshold else nbest[qid][0]["text"])
    shapes = checkpoints.checkpoint_variable_shapes(str(out / "model.ckpt-best"))
    assert shapes["end_logits/dense_0/kernel"] == [64, 32] and "cls/squad/output_bias" not in shapes


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(do_train=False), "at least one of"),
        (dict(train_file=None), "--do_train needs --train_file"),
        (dict(train_file="/nonexistent.json"), "--train_file=/nonexistent.json: file not found"),
        (dict(max_seq_length=128), "exceeds max_position_embeddings=96"),
        (dict(max_query_length=61), "must exceed --max_query_length=61"),
        (dict(spm_model_file=None, vocab_file="vocab.txt"), "SentencePiece only"),
        (dict(albert_hub_module_handle="https://tfhub.dev/google/albert_base/3"), "not downloaded"),
        (dict(init_checkpoint="/nonexistent/model.ckpt-1"), "--init_checkpoint"),
        (dict(version_2_with_negative=True, start_n_top=65), "--start_n_top=65"),
        (dict(version_2_with_negative=True, export_dir="exp"), "v1.1 model only"),
    ],
)
def test_bad_inputs_fail_before_writing(setup, tmp_path, change, match):
    out = tmp_path / "out"
    with pytest.raises(UserError, match=match):
        run(_opts(setup, out, **{"do_train": True, **change}))
    assert not out.exists()


def test_malformed_json_is_named_and_nothing_is_written(setup, tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"data": [{"paragraphs": [{"context": "x", "qas": [{"id": "a"}]}]}]}')
    out = tmp_path / "out"
    with pytest.raises(
        UserError,
        match=r"bad.json: data\[0\].paragraphs\[0\].qas\[0\] has "
        r"no 'question' field",
    ):
        run(_opts(setup, out, do_train=True, train_file=str(bad)))
    assert not out.exists()


def test_cli_error_exit_code(setup, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "run_squad.py"),
            f"--output_dir={out}",
            f"--albert_config_file={setup['config_file']}",
            f"--spm_model_file={DEMO_SPM}",
            "--do_train",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "CUDA_VISIBLE_DEVICES": ""},
    )
    assert proc.returncode != 0
    assert "run_squad.py: error: --do_train needs --train_file" in proc.stderr
    assert not out.exists()


def test_training_features_are_reused_only_when_built_from_the_same_inputs(
    setup, tmp_path, monkeypatch
):
    from albert_tf.data import tokenization
    from albert_tf.tasks import squad

    def task_for(opts):
        task = squad.SquadTask(opts)
        task.files = types.SimpleNamespace(spm_model_file=DEMO_SPM)
        task.tokenizer = tokenization.FullTokenizer(spm_model_file=DEMO_SPM)
        return task

    opts = _opts(setup, tmp_path)
    task = task_for(opts)
    examples = squad._read(opts.train_file, True, "--train_file")
    path = str(tmp_path / "train.tf_record")
    built = task._train_features(examples, path)
    meta = json.loads(open(path + ".json").read())
    assert meta["num_features"] == built > len(examples) // 2

    def fail(*args):
        raise AssertionError("features rebuilt")

    with monkeypatch.context() as m:
        m.setattr(task, "_features", fail)
        assert task._train_features(examples, path) == built

    # Another doc_stride: other windows, so the file is rebuilt. If writing it fails
    # half-way, the old sidecar is already gone and the next run rebuilds again.
    from albert_tf.data import squad_data

    other = task_for(dataclasses.replace(opts, doc_stride=12))
    with monkeypatch.context() as m:
        m.setattr(squad_data, "write_features", fail)
        with pytest.raises(AssertionError, match="rebuilt"):
            other._train_features(examples, path)
    assert not os.path.exists(path + ".json")
    rebuilt = other._train_features(examples, path)
    assert rebuilt > built
    assert json.loads(open(path + ".json").read())["key"] != meta["key"]
