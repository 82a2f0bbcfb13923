"""End-to-end GLUE runs through albert_tf.tasks.classifier.run / run_classifier.py."""

import contextlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.errors import UserError
from albert_tf.run import selection
from albert_tf.tasks.classifier import AlbertClassifier, ClassifierOptions, ClassifierTask, run
from albert_tf.weights import checkpoints

from classifier_fixtures import DEMO_SPM, glue_config, write_mrpc, write_stsb

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue")
    config = glue_config()
    config_file = str(root / "albert_config.json")
    config.to_json_file(config_file)
    data_dir = str(root / "data")
    write_mrpc(data_dir)
    write_stsb(data_dir)
    return {"root": root, "config": config, "config_file": config_file, "data_dir": data_dir}


def _opts(setup, output_dir, **kw):
    base = dict(
        task_name="MRPC",
        data_dir=setup["data_dir"],
        output_dir=str(output_dir),
        albert_config_file=setup["config_file"],
        spm_model_file=DEMO_SPM,
        max_seq_length=32,
        train_batch_size=8,
        eval_batch_size=4,
        predict_batch_size=4,
        learning_rate=1e-3,
        train_step=4,
        save_checkpoints_steps=2,
        iterations_per_loop=2,
    )
    base.update(kw)
    return ClassifierOptions(**base)


@pytest.fixture(scope="module")
def trained(setup):
    out = setup["root"] / "mrpc_out"
    summary = run(_opts(setup, out, do_train=True, do_eval=True, do_predict=True))
    return out, summary


def test_train_eval_predict(trained):
    out, summary = trained
    assert summary["train_step"] == 4
    text = (out / "eval_results.txt").read_text()
    assert text.count("global_step = ") == 2
    assert "global_step = 2" in text and "global_step = 4" in text
    assert "eval_accuracy = " in text and "f1 = " in text and "eval_loss = " in text
    best = summary["best"]
    assert best["key"] == "eval_accuracy" and best["global_step"] in (2, 4)
    assert (out / "best_checkpoint").exists()
    # What the folder's checkpoints are for: MNLI's are MisMNLI's and AX's too.
    assert json.loads((out / "task.json").read_text()) == {"task_name": "mrpc"}
    # Off TPU, auto clips as the original on CPU and GPU; a resume keeps it.
    assert json.loads((out / "run_record.json").read_text())["clip_norm_like"] == "gpu"
    for task, family in (("MisMNLI", "mnli"), ("AX", "mnli"), ("SST-2", "sst-2")):
        identity = ClassifierTask(ClassifierOptions(task_name=task, output_dir=str(out)))
        assert identity.output_identity() == {"task_name": family}
    # model.ckpt-best is in the original format: original names, loadable by name.
    shapes = checkpoints.checkpoint_variable_shapes(str(out / "model.ckpt-best"))
    assert "output_weights" in shapes and "bert/embeddings/word_embeddings" in shapes
    model = AlbertClassifier(glue_config(), 2)
    checkpoints.load_original_checkpoint(model, str(out / "model.ckpt-best"))
    lines = (out / "MRPC.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and len(lines) == 7
    assert all(line.split("\t")[1] in ("0", "1") for line in lines[1:])
    probs = np.loadtxt(out / "test_results.tsv")
    assert probs.shape == (6, 2)
    np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-5)
    assert not [p for p in os.listdir(out) if p.endswith(".tmp") or p.startswith(".tmp")]
    # The training checkpoints: weights and slots once, the input position beside them.
    assert (out / "model.ckpt-4.index").exists() and not (out / "ckpt-4.index").exists()
    assert (out / "train_state" / "state-4.index").exists()


def test_predict_only_from_finetuned_checkpoint(setup, trained, tmp_path):
    out, _ = trained
    summary = run(
        _opts(
            setup, tmp_path / "pred", do_predict=True, init_checkpoint=str(out / "model.ckpt-best")
        )
    )
    assert summary["predict_weights"] == str(out / "model.ckpt-best")
    np.testing.assert_allclose(
        np.loadtxt(tmp_path / "pred" / "test_results.tsv"),
        np.loadtxt(out / "test_results.tsv"),
        rtol=1e-5,
        atol=1e-6,
    )
    assert (tmp_path / "pred" / "MRPC.tsv").read_text() == (out / "MRPC.tsv").read_text()
    # Predict-only inside the training folder uses its model.ckpt-best.
    summary = run(_opts(setup, out, do_predict=True))
    assert summary["predict_weights"].endswith("model.ckpt-best")


class _Killed(BaseException):
    pass


def _folder_texts(out):
    """{file name: text with the folder's path taken out} of the result files."""
    names = ("eval_results.txt", "best_trial.txt", "checkpoint", "test_results.tsv", "MRPC.tsv")
    return {n: (out / n).read_text().replace(str(out), "OUT") for n in names if (out / n).exists()}


def test_a_killed_run_resumes_to_the_same_files(setup, tmp_path, monkeypatch):
    """Killed after model.ckpt-2 and its train_state were written but before the
    `checkpoint` file named it (and before step 2's dev evaluation): the same command
    ends with the files and weights of an uninterrupted run, bit for bit. The
    classifier's dropout (0.1) must continue its random stream."""
    kw = dict(do_train=True, do_eval=True, do_predict=True)
    straight, killed = tmp_path / "straight", tmp_path / "killed"
    run(_opts(setup, straight, **kw))

    def kill(*args):
        raise _Killed

    with monkeypatch.context() as patch:
        patch.setattr("albert_tf.run.output_folder.OutputFolder.write_state_file", kill)
        with pytest.raises(_Killed):
            run(_opts(setup, killed, **kw))
    assert (killed / "model.ckpt-2.index").exists() and not (killed / "checkpoint").exists()
    run(_opts(setup, killed, **kw))
    assert _folder_texts(killed) == _folder_texts(straight)
    for prefix in ("model.ckpt-2", "model.ckpt-4", "model.ckpt-best", "train_state/state-4"):
        want, got = (tf.train.load_checkpoint(str(out / prefix)) for out in (straight, killed))
        dtypes = want.get_variable_to_dtype_map()
        assert got.get_variable_to_dtype_map() == dtypes, prefix
        for name, dtype in dtypes.items():
            # Not the input iterator's state, nor the object graph (its variable names
            # carry per-process suffixes).
            if dtype != tf.variant and name != "_CHECKPOINTABLE_OBJECT_GRAPH":
                np.testing.assert_array_equal(
                    got.get_tensor(name), want.get_tensor(name), err_msg=f"{prefix}: {name}"
                )


def test_a_signal_between_saves_leaves_no_trace_after_the_rerun(setup, tmp_path, monkeypatch):
    """SIGTERM lands after step 3 (saves every 2, one step per inner loop): ckpt-3 is a
    resume point only; the rerun neither evaluates nor keeps it and ends with an
    uninterrupted run's files."""
    import signal

    from albert_tf.errors import TrainingInterrupted
    from albert_tf.run import training

    kw = dict(do_train=True, do_eval=True, do_predict=True, iterations_per_loop=1)
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    run(_opts(setup, straight, **kw))
    real_report = training.Trainer._report
    received = []

    @contextlib.contextmanager
    def signals():
        yield received

    def report(self, step, *args):
        real_report(self, step, *args)
        if step == 3:
            received.append(signal.SIGTERM)

    with monkeypatch.context() as patch:
        patch.setattr(training, "stop_on_signals", signals)
        patch.setattr(training.Trainer, "_report", report)
        with pytest.raises(TrainingInterrupted, match="SIGTERM at step 3"):
            run(_opts(setup, stopped, **kw))
    assert (stopped / "ckpt-3.index").exists() and not (stopped / "model.ckpt-3.index").exists()
    run(_opts(setup, stopped, **kw))
    assert not list(stopped.glob("*ckpt-3.*"))
    assert _folder_texts(stopped) == _folder_texts(straight)


def test_eval_only_resumes_without_reevaluating(setup, trained):
    out, _ = trained
    before = (out / "eval_results.txt").read_text()
    summary = run(_opts(setup, out, do_eval=True))
    assert (out / "eval_results.txt").read_text() == before
    assert summary["best"]["global_step"] in (2, 4)


def test_eval_and_predict_only_on_a_folder_of_original_format_checkpoints(setup, trained, tmp_path):
    """The original's second command on a folder holding only what the original code
    writes (model.ckpt-<step> and the `checkpoint` file): the same dev metrics as on our
    checkpoints of the same weights, predictions from the best of them."""
    import shutil

    import tensorflow as tf

    out, summary = trained
    assert tf.train.latest_checkpoint(str(out)) == str(out / "model.ckpt-4")
    original = tmp_path / "original"
    original.mkdir()
    for path in out.glob("model.ckpt-[0-9]*"):
        shutil.copy(path, original)
    tf.compat.v1.train.update_checkpoint_state(str(original), "model.ckpt-4")
    result = run(_opts(setup, original, do_eval=True, do_predict=True))
    ours = selection.read_eval_results(str(out))
    assert selection.read_eval_results(str(original)) == ours
    assert result["best"]["global_step"] == summary["best"]["global_step"]
    assert (original / "submit_results.tsv").read_text() == (out / "MRPC.tsv").read_text()
    assert (original / "best_trial.txt").read_text() == (out / "best_trial.txt").read_text()


def test_a_training_checkpoint_without_the_head_is_refused(setup, trained, tmp_path):
    """Eval-only on a folder whose model.ckpt-2 holds only the encoder: one line naming the
    file and what is missing, not a silently fresh head."""
    from albert_tf.model.modeling import AlbertModel

    encoder = AlbertModel(glue_config())
    encoder.build()
    folder = tmp_path / "encoder_only"
    checkpoints.save_original_checkpoint(encoder, str(folder / "model.ckpt-2"))
    with pytest.raises(
        UserError,
        match=r"do not fit this model .*model.ckpt-2: output_weights: "
        r"not in the checkpoint",
    ):
        run(_opts(setup, folder, do_eval=True))


def test_stsb_regression(setup, tmp_path):
    summary = run(
        _opts(
            setup,
            tmp_path / "stsb",
            task_name="STS-B",
            train_step=2,
            do_train=True,
            do_eval=True,
            do_predict=True,
        )
    )
    assert summary["best"]["key"] == "pearson"
    assert {"pearson", "spearman", "MSE", "eval_loss"} <= set(summary["best"]["metrics"])
    lines = (tmp_path / "stsb" / "STS-B.tsv").read_text().splitlines()
    assert len(lines) == 5
    float(lines[1].split("\t")[1])


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(task_name="nope"), "not a known task"),
        (dict(data_dir="/nonexistent/glue"), "--data_dir=/nonexistent/glue: folder not found"),
        (dict(max_seq_length=128), "exceeds max_position_embeddings=64"),
        (
            dict(albert_hub_module_handle="https://tfhub.dev/google/albert_base/3"),
            "modules are not downloaded at run time",
        ),
        (dict(init_checkpoint="/nonexistent/model.ckpt-1"), "--init_checkpoint"),
        (dict(do_train=False), "at least one of"),
        (dict(spm_model_file="/nonexistent.model"), "--spm_model_file=/nonexistent.model"),
    ],
)
def test_bad_inputs_fail_before_writing(setup, tmp_path, change, match):
    out = tmp_path / "out"
    opts = _opts(setup, out, **{"do_train": True, **change})
    with pytest.raises(UserError, match=match):
        run(opts)
    assert not out.exists()


def test_missing_split_file_is_named(setup, tmp_path):
    data = tmp_path / "data"
    write_mrpc(str(data))
    os.remove(data / "MRPC" / "dev.tsv")
    with pytest.raises(UserError, match="MRPC/dev.tsv"):
        ClassifierTask(_opts(setup, tmp_path / "out", data_dir=str(data), do_eval=True)).resolve()


def test_init_checkpoint_that_matches_nothing_is_refused(setup, tmp_path):
    import tensorflow as tf

    other = tf.train.Checkpoint(x=tf.Variable(1.0)).save(str(tmp_path / "other" / "ckpt"))
    out = tmp_path / "out"
    with pytest.raises(UserError, match="nothing loaded"):
        run(_opts(setup, out, do_train=True, init_checkpoint=other))
    assert not out.exists()


def test_cli_error_exit_code(setup, tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            sys.executable,
            os.path.join(REPO, "run_classifier.py"),
            "--task_name=bogus",
            f"--data_dir={setup['data_dir']}",
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
    assert "--task_name='bogus' is not a known task" in proc.stderr
    assert not out.exists()


def test_mixed_float16_trains_with_loss_scaling_and_exports_float32(setup, tmp_path, caplog):
    """--dtype=mixed_float16: float16 products with a loss scale; the checkpoints hold
    float32 weights under the original names, and the export returns float32."""
    import keras

    out, export = tmp_path / "out", tmp_path / "export"
    caplog.set_level("INFO", logger="albert_tf.run.training")
    try:
        summary = run(
            _opts(setup, out, do_train=True, dtype="mixed_float16", export_dir=str(export))
        )
    finally:
        keras.mixed_precision.set_global_policy("float32")
    assert summary["train_step"] == 4
    assert "loss_scale 32768" in caplog.text  # no overflow on this tiny model
    reader = tf.train.load_checkpoint(str(out / "model.ckpt-4"))
    dtypes = reader.get_variable_to_dtype_map()
    assert "bert/embeddings/word_embeddings" in dtypes
    assert {d for n, d in dtypes.items() if n.startswith(("bert/", "output_"))} == {tf.float32}
    signature = tf.saved_model.load(str(export)).signatures["serving_default"]
    outputs = signature.structured_outputs
    assert outputs and all(
        t.dtype in (tf.float32, tf.int32, tf.int64, tf.string) for t in outputs.values()
    )
    assert any(t.dtype == tf.float32 for t in outputs.values())
