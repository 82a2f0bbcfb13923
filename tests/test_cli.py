"""The entry scripts: oneDNN turned on before TensorFlow loads (unless the user chose),
the original's flag names and defaults, flags generated from the options dataclasses, and
their shared body (cli.execute): one error line and status 1 for bad input."""

import dataclasses
import json
import math
import os
import signal
import subprocess
import sys

import pytest

from albert_tf import cli, options
from albert_tf.cpu.speed_paths import SpeedPathOptions
from albert_tf.errors import TrainingInterrupted, UserError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ["run_pretraining", "run_classifier", "run_squad", "run_race", "run_ablations"]
ONEDNN_ON = "oneDNN custom operations are on"  # TensorFlow's import-time log line

_TPU = {
    "use_tpu": False,
    "tpu_name": None,
    "tpu_zone": None,
    "gcp_project": None,
    "master": None,
    "num_tpu_cores": 8,
}
# The original scripts' flags and defaults (docs/original.md §10, §11.1, §12.1, §13.4).
# Flags the original required have default None.
ORIGINAL_FLAGS = {
    "run_pretraining": {
        **_TPU,
        "albert_config_file": None,
        "input_file": None,
        "output_dir": None,
        "init_checkpoint": None,
        "max_seq_length": 512,
        "max_predictions_per_seq": 20,
        "do_train": True,
        "do_eval": False,
        "train_batch_size": 4096,
        "eval_batch_size": 64,
        "optimizer": "lamb",
        "learning_rate": 0.00176,
        "poly_power": 1.0,
        "num_train_steps": 125000,
        "num_warmup_steps": 3125,
        "start_warmup_step": 0,
        "save_checkpoints_steps": 5000,
        "keep_checkpoint_max": 5,
        "iterations_per_loop": 1000,
        "max_eval_steps": 100,
        "init_from_group0": False,
        "masked_lm_budget": 0.0,
    },
    "run_classifier": {
        **_TPU,
        "data_dir": None,
        "albert_config_file": None,
        "task_name": None,
        "vocab_file": None,
        "spm_model_file": None,
        "output_dir": None,
        "cached_dir": None,
        "albert_hub_module_handle": None,
        "init_checkpoint": None,
        "do_lower_case": True,
        "max_seq_length": 512,
        "do_train": False,
        "do_eval": False,
        "do_predict": False,
        "train_batch_size": 32,
        "eval_batch_size": 8,
        "predict_batch_size": 8,
        "learning_rate": 5e-5,
        "train_step": 1000,
        "warmup_step": 0,
        # keep_checkpoint_max: the original's default 5 had no effect (its eval loop kept
        # every checkpoint); unset keeps them all, as it did.
        "save_checkpoints_steps": 1000,
        "keep_checkpoint_max": None,
        "iterations_per_loop": 1000,
        "optimizer": "adamw",
        "export_dir": None,
        "threshold_to_export": math.nan,
    },
    "run_squad": {
        **_TPU,
        "albert_config_file": None,
        "vocab_file": None,
        "spm_model_file": None,
        "output_dir": None,
        "train_file": None,
        "predict_file": None,
        "train_feature_file": None,
        "predict_feature_file": None,
        "predict_feature_left_file": None,
        "init_checkpoint": None,
        "albert_hub_module_handle": None,
        "do_lower_case": True,
        "max_seq_length": 384,
        "doc_stride": 128,
        "max_query_length": 64,
        "do_train": False,
        "do_predict": False,
        "train_batch_size": 32,
        "predict_batch_size": 8,
        "learning_rate": 5e-5,
        "num_train_epochs": 3.0,
        "warmup_proportion": 0.1,
        "save_checkpoints_steps": 1000,
        "iterations_per_loop": 1000,
        "n_best_size": 20,
        "max_answer_length": 30,
        "use_einsum": True,
        "export_dir": None,
        "start_n_top": 5,
        "end_n_top": 5,
        "dropout_prob": 0.1,
    },
    "run_race": {
        **_TPU,
        "data_dir": None,
        "albert_config_file": None,
        "task_name": "race",
        "vocab_file": None,
        "spm_model_file": None,
        "output_dir": None,
        "train_file": None,
        "eval_file": None,
        "predict_file": None,
        "init_checkpoint": None,
        "albert_hub_module_handle": None,
        "do_lower_case": True,
        "dropout_prob": 0.1,
        "max_seq_length": 512,
        "max_qa_length": 128,
        "num_keep_checkpoint": 5,
        "high_only": False,
        "middle_only": False,
        "do_train": True,
        "do_eval": True,
        "do_predict": False,
        "train_batch_size": 32,
        "eval_batch_size": 8,
        "predict_batch_size": 8,
        "learning_rate": 1e-5,
        "train_step": 12000,
        "warmup_step": 1000,
        "save_checkpoints_steps": 100,
        "iterations_per_loop": 1000,
    },
}


def _import_script(script, **env):
    """Imports the script in a fresh process; returns (process, {flag: default} of the
    flags it defines, TF_ENABLE_ONEDNN_OPTS as TensorFlow saw it)."""
    base = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    code = (
        f"import json, os, {script}, tensorflow; from absl import flags; "
        "print(json.dumps([os.environ.get('TF_ENABLE_ONEDNN_OPTS'), "
        "{n: flags.FLAGS[n].default for n in flags.FLAGS}], default=repr))"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**base, "TF_CPP_MIN_LOG_LEVEL": "0", **env},
    )
    onednn, defaults = (
        json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else (None, {})
    )
    return proc, defaults, onednn


@pytest.fixture(scope="module", params=SCRIPTS)
def imported(request):
    return request.param, _import_script(request.param)


def test_prefer_onednn_sets_only_when_unset(monkeypatch):
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    cli.prefer_onednn()
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1"
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    cli.prefer_onednn()
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"


def test_scripts_turn_onednn_on_before_tensorflow_loads(imported):
    _, (proc, _, onednn) = imported
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert onednn == "1"
    assert ONEDNN_ON in proc.stderr  # TensorFlow saw the setting when it loaded


def test_scripts_keep_the_original_flags_and_defaults(imported):
    script, (proc, defaults, _) = imported
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert defaults.get("speed_paths") == "auto", script  # ours, beside the original's
    for name, want in ORIGINAL_FLAGS.get(script, {}).items():
        assert name in defaults, f"{script} lacks the original's --{name}"
        got = defaults[name]
        if isinstance(want, float) and math.isnan(want):
            assert math.isnan(got), name
        else:
            assert got == want and type(got) is type(want), (script, name, got, want)


def test_user_can_turn_onednn_off():
    proc, _, onednn = _import_script("run_ablations", TF_ENABLE_ONEDNN_OPTS="0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert onednn == "0"
    assert ONEDNN_ON not in proc.stderr


# --- cli.execute: the body of every script ---------------------------------------------
@dataclasses.dataclass(kw_only=True)
class _Options(options.Options):
    output_dir: str = options.option(options.REQUIRED, "Where results go.")
    steps: int = options.option(3, "Steps.", minimum=1)


def _execute(run, *args, report=None):
    return cli.execute(_Options, run, ["prog.py", *args], report)


@dataclasses.dataclass(kw_only=True)
class _ModelOptions(SpeedPathOptions):
    steps: int = options.option(3, "Steps.", minimum=1)


def test_a_bad_speed_path_setting_is_one_line(capsys):
    """The switch's flag is checked like any other (the run sets it: tests/run/test_driver.py)."""
    seen = []
    run = lambda opts: seen.append(opts.speed_paths)
    assert cli.execute(_ModelOptions, run, ["prog.py", "--speed_paths=native"]) == 0
    assert cli.execute(_ModelOptions, run, ["prog.py", "--speed_paths=fast"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "prog.py: error: flag --speed_paths=fast: value should be one of <auto|plain|native>"
    ]
    assert seen == ["native"]


def test_execute_parses_runs_and_reports(capsys):
    seen = []
    status = _execute(
        lambda o: (o.output_dir, o.steps, o.given),
        "--output_dir=x",
        "--steps=5",
        report=seen.append,
    )
    assert status == 0 and seen == [("x", 5, frozenset({"output_dir", "steps"}))]
    # A private FlagValues each time: the same command line runs again in this process.
    assert _execute(lambda o: o.steps, "--output_dir=y", report=seen.append) == 0
    assert seen[-1] == 3 and capsys.readouterr().err == ""


@pytest.mark.parametrize(
    "args, run_error, line",
    [
        (
            ["--output_dir=x", "--steps=0"],
            None,
            "prog.py: error: --steps=0: expected an integer >= 1",
        ),
        (["--output_dir=x", "--steps=two"], None, "prog.py: error: flag --steps=two: "),
        (["--output_dir=x", "--nope=1"], None, "prog.py: error: Unknown command line flag 'nope'"),
        (["--output_dir=x", "extra"], None, "prog.py: error: unexpected arguments 'extra'"),
        (["--steps=2"], None, "prog.py: error: flag --output_dir=None: "),
        (
            ["--output_dir=x"],
            UserError("x.json: checkpoint does not match:\n  a: [1]\n  b: [2]"),
            "prog.py: error: x.json: checkpoint does not match:; a: [1]; b: [2]",
        ),
        (
            ["--output_dir=x"],
            FileNotFoundError(2, "No such file or directory", "/no/file"),
            "prog.py: error: /no/file: No such file or directory",
        ),
    ],
)
def test_execute_reports_bad_input_in_one_line(args, run_error, line, capsys):
    def run(opts):
        options.check(opts)
        if run_error is not None:
            raise run_error

    assert _execute(run, *args) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(line), err


def test_execute_exits_128_plus_the_signal_after_a_stop(capsys):
    def run(opts):
        raise TrainingInterrupted(signal.SIGTERM, 8, "out/ckpt-8")

    assert _execute(run, "--output_dir=x") == 128 + signal.SIGTERM
    assert capsys.readouterr().err == (
        "prog.py: interrupted by SIGTERM at step 8: wrote out/ckpt-8; "
        "run the same command again to continue\n"
    )


def test_execute_keeps_the_traceback_of_our_bugs():
    def run(opts):
        raise KeyError("a bug")

    with pytest.raises(KeyError, match="a bug"):
        _execute(run, "--output_dir=x")


def test_execute_help_lists_the_flags(capsys):
    status = cli.execute(_Options, None, ["prog.py", "--help"], description="What it does.")
    out = capsys.readouterr().out
    assert status == 0 and out.startswith("What it does.\n\n")
    assert "--output_dir: Where results go." in out and "--steps: Steps." in out


# --- options: output places are checked before any work ----------------------------------
@dataclasses.dataclass(kw_only=True)
class _OutputOptions(options.Options):
    run_dir: str = options.option(options.REQUIRED, "A folder.", output="folder")


def test_check_refuses_output_folders_this_process_cannot_write(tmp_path, read_only_folder):
    options.check(_OutputOptions(run_dir=str(tmp_path / "run" / "deeper")))
    assert sorted(os.listdir(tmp_path)) == ["read_only"]  # nothing created
    for path in (read_only_folder, os.path.join(read_only_folder, "run")):
        with pytest.raises(UserError, match=f"^--run_dir={path}: cannot write in "):
            options.check(_OutputOptions(run_dir=path))
    with pytest.raises(ValueError, match="output='files'"):
        options.option(None, "x", output="files")
