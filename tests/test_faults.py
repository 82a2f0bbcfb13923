"""Faults around the entry scripts, as real subprocesses (issue 38's rows that need a
process of their own): two runs on one output folder, a multi-worker peer that never
comes, SIGTERM during a 2-worker data build, an export and an evaluation, and a full
disk (the file-size limit: the kernel refuses the write as a full disk would) during a
data build, a feature cache and a checkpoint save. Every one ends with one line and
leaves no temporary behind. Only 127.0.0.1 is used; no host name is resolved.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest

from albert_tf import cli, interrupts
from albert_tf.tasks import pretraining

from classifier_fixtures import DEMO_SPM, glue_config, write_mrpc
from record_fixtures import DEMO_CORPUS, write_demo_pretraining_records

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(ROOT, "data", "demo")
ENV = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": ROOT}
CPD = [sys.executable, "-m", "albert_tf.data.create_pretraining_data"]


def _closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(argv, stderr_path, limit_bytes=None, hold=None):
    """Starts a script with stderr to a file; `limit_bytes`: the largest file it may
    write (RLIMIT_FSIZE, with SIGXFSZ ignored: writes fail with EFBIG); `hold`: (point,
    folder) where the script stops and waits (albert_tf.interrupts.hold_for_test; the
    test never releases it: it signals the script there)."""

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    env = {**ENV, "TF_CPP_MIN_LOG_LEVEL": "3"}
    if hold:
        env[interrupts.TEST_HOLD_ENV] = f"{hold[0]}:{hold[1]}"
    return subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(stderr_path, "w"),
        preexec_fn=limit if limit_bytes else None,
    )


def _wait_for(predicate, proc, seconds=90):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.02)
    return False


def _text(path):
    with open(path) as f:
        return f.read()


def _script_lines(err, script):
    return [line for line in err.splitlines() if line.startswith(f"{script}: ")]


def _one_line(proc, stderr_path, script, status, expect):
    proc.wait(timeout=120)
    err = _text(stderr_path)
    lines = _script_lines(err, script)
    assert proc.returncode == status, err[-3000:]
    assert len(lines) == 1 and "Traceback" not in err and "BrokenPipe" not in err, err[-3000:]
    assert expect in lines[0], lines
    return lines[0]


def _leftovers(folder):
    """Temporaries anywhere under `folder`."""
    found = []
    for parent, dirs, files in os.walk(folder):
        for name in dirs + files:
            if ".tmp" in name or name.endswith("_temp") or name.startswith(".create_pretraining"):
                found.append(os.path.join(parent, name))
    return found


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    p = {"root": root}
    config = glue_config()
    p["config"] = str(root / "albert_config.json")
    config.to_json_file(p["config"])
    p["corpus"] = DEMO_CORPUS
    p["records"] = str(root / "train.tfrecord")
    write_demo_pretraining_records(p["records"], DEMO_SPM)
    return p


def _classify(out, glue, *extra):
    """run_classifier.py on the MRPC folder `glue` with the demo SentencePiece model."""
    return [
        sys.executable,
        os.path.join(ROOT, "run_classifier.py"),
        f"--output_dir={out}",
        "--task_name=MRPC",
        f"--data_dir={glue}",
        f"--spm_model_file={DEMO_SPM}",
        "--max_seq_length=32",
        *extra,
    ]


def _pretrain(inputs, out, *extra):
    return [
        sys.executable,
        os.path.join(ROOT, "run_pretraining.py"),
        f"--output_dir={out}",
        f"--input_file={inputs['records']}",
        f"--albert_config_file={inputs['config']}",
        "--max_seq_length=32",
        "--max_predictions_per_seq=5",
        "--train_batch_size=8",
        "--do_eval=false",
        *extra,
    ]


def test_data_build_sigterm_with_two_workers_and_full_disk(tmp_path):
    corpus = tmp_path / "corpus.txt"
    text = _text(os.path.join(DEMO, "corpus", "part-00000.txt"))
    corpus.write_text(text * 6)
    flags = [
        f"--input_file={corpus}",
        f"--spm_model_file={DEMO_SPM}",
        "--max_seq_length=128",
        "--dupe_factor=4",
        "--chunk_size_mb=0.1",
    ]
    script = "create_pretraining_data.py"
    # SIGTERM while two workers build (a worker holds at its first unit): one line, 143,
    # no output, no temporaries.
    err = tmp_path / "sigterm.err"
    hold = tmp_path / "hold"
    hold.mkdir()
    argv = [*CPD, *flags, f"--output_file={tmp_path}/a.tfrecord", "--num_workers=2"]
    proc = _start(argv, err, hold=("data_unit", hold))
    assert _wait_for((hold / "data_unit.held").exists, proc), _text(err)
    proc.send_signal(signal.SIGTERM)
    _one_line(proc, err, script, 128 + signal.SIGTERM, "interrupted by SIGTERM")
    # A full disk: the shard cannot grow past 64 KB.
    err = tmp_path / "full.err"
    proc = _start(
        [*CPD, *flags, f"--output_file={tmp_path}/b.tfrecord", "--num_workers=1"], err, 1 << 16
    )
    _one_line(proc, err, script, 1, "error: no room to write ")
    assert sorted(os.listdir(tmp_path)) == ["corpus.txt", "full.err", "hold", "sigterm.err"]


def test_a_second_run_on_a_folder_stops_naming_the_first(inputs, tmp_path, capsys):
    out = tmp_path / "out"
    err = tmp_path / "first.err"
    first = _start(
        _pretrain(
            inputs,
            out,
            "--num_train_steps=100000",
            "--save_checkpoints_steps=100000",
            "--iterations_per_loop=5",
        ),
        err,
    )
    lock = out / ".albert_tf.lock"
    try:
        assert _wait_for(lock.exists, first), _text(err)
        argv = ["run_pretraining.py", *_pretrain(inputs, out, "--num_train_steps=2")[2:]]
        status = cli.execute(pretraining.PretrainingOptions, pretraining.run, argv)
        second = capsys.readouterr().err.splitlines()
        assert status == 1 and len(second) == 1, second
        assert f"another run writes in it (process {first.pid} on " in second[0]
    finally:
        first.send_signal(signal.SIGTERM)
    _one_line(first, err, "run_pretraining.py", 128 + signal.SIGTERM, "interrupted by SIGTERM")
    assert not lock.exists()  # released by the first run as it stopped


def test_a_multi_worker_peer_that_never_comes(inputs, tmp_path):
    script = "run_pretraining.py"
    procs = []
    for name, timeout in (("timeout", 3), ("sigterm", 600)):
        config = {
            "cluster": {"worker": [f"127.0.0.1:{_closed_port()}", f"127.0.0.1:{_closed_port()}"]},
            "task": {"type": "worker", "index": 0},
        }
        ENV["TF_CONFIG"] = json.dumps(config)
        try:
            argv = _pretrain(
                inputs,
                tmp_path / name,
                "--strategy=multi_worker",
                f"--worker_timeout_s={timeout}",
                "--num_train_steps=2",
            )
            procs.append((_start(argv, tmp_path / f"{name}.err"), config))
        finally:
            del ENV["TF_CONFIG"]
    (timing_out, config), (waiting, _) = procs
    sigterm_err = tmp_path / "sigterm.err"
    assert _wait_for(lambda: "waiting up to 600 s" in _text(sigterm_err), waiting), _text(
        sigterm_err
    )
    waiting.send_signal(signal.SIGTERM)
    _one_line(waiting, sigterm_err, script, 128 + signal.SIGTERM, "interrupted by SIGTERM")
    peer = config["cluster"]["worker"][1]
    line = _one_line(timing_out, tmp_path / "timeout.err", script, 1, "--worker_timeout_s=3 s")
    assert peer in line
    assert "waiting for the other workers of TF_CONFIG: waiting" not in line


def _release_folder(root):
    from albert_tf.model.modeling import AlbertModel
    from albert_tf.weights import checkpoints

    folder = root / "release"
    config = glue_config(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)  # as v1
    model = AlbertModel(config)
    model.build()
    checkpoints.save_original_checkpoint(model, str(folder / "model.ckpt-best"))
    config.to_json_file(str(folder / "albert_config.json"))
    shutil.copy(DEMO_SPM, folder / "30k-clean.model")
    return folder


def test_sigterm_during_export_and_evaluation_leaves_nothing(inputs, tmp_path):
    release = _release_folder(tmp_path)
    exports = tmp_path / "exports"
    exports.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = exports / f".encoder.new-{socket.gethostname()}-{dead.pid}-{'ab' * 16}"
    stale.mkdir()  # of a killed export: the next export of encoder removes it
    err = tmp_path / "export.err"
    hold = tmp_path / "hold"
    hold.mkdir()
    proc = _start(
        [
            sys.executable,
            "-m",
            "albert_tf.export",
            f"--albert_directory={release}",
            f"--export_path={exports}/encoder",
            "--max_seq_length=64",
        ],
        err,
        hold=("output_written", hold),
    )
    # Held with the new export complete beside its destination, before the swap.
    assert _wait_for((hold / "output_written.held").exists, proc), _text(err)
    assert not stale.exists() and len(os.listdir(exports)) == 1
    proc.send_signal(signal.SIGTERM)
    _one_line(proc, err, "export.py", 128 + signal.SIGTERM, "interrupted by SIGTERM")
    assert os.listdir(exports) == []
    # Evaluation only, stopped while it is evaluated: held after its first batch.
    glue = write_mrpc(str(tmp_path / "glue"), n_dev=20)
    out = tmp_path / "eval_out"
    err = tmp_path / "eval.err"
    argv = _classify(out, glue, f"--init_checkpoint={release}", "--do_eval", "--eval_batch_size=8")
    proc = _start(argv, err, hold=("evaluation_batch", hold))
    assert _wait_for((hold / "evaluation_batch.held").exists, proc), _text(err)
    proc.send_signal(signal.SIGTERM)
    _one_line(proc, err, "run_classifier.py", 128 + signal.SIGTERM, "interrupted by SIGTERM")
    assert _leftovers(out) == [] and not (out / "eval_results.txt").exists()


def test_a_full_disk_during_a_feature_cache_and_a_checkpoint(inputs, tmp_path):
    glue = write_mrpc(str(tmp_path / "glue"))
    out = tmp_path / "glue_out"
    cache_err = tmp_path / "cache.err"
    argv = _classify(
        out,
        glue,
        f"--albert_config_file={inputs['config']}",
        "--do_train",
        "--train_batch_size=8",
        "--train_step=2",
    )
    cache = _start(argv, cache_err, 2048)  # the training features need more
    save_out = tmp_path / "save_out"
    save_err = tmp_path / "save.err"
    save = _start(
        _pretrain(inputs, save_out, "--num_train_steps=2", "--save_checkpoints_steps=2"),
        save_err,
        1 << 16,  # the events file fits, the checkpoint does not
    )
    _one_line(cache, cache_err, "run_classifier.py", 1, f"error: no room to write {out}/")
    line = _one_line(
        save, save_err, "run_pretraining.py", 1, f"error: no room to write {save_out}/"
    )
    assert "File too large" in line
    assert _leftovers(out) == [] and _leftovers(save_out) == []
    assert not [n for n in os.listdir(out) if n.endswith(".tf_record")]
    assert not [n for n in os.listdir(save_out) if ".index" in n]
