"""albert_tf.cli.prefer_onednn: every entry script turns oneDNN on before TensorFlow loads,
unless the user chose."""

import os
import subprocess
import sys

import pytest

from albert_tf import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = ["run_pretraining", "run_classifier", "run_squad", "run_race", "run_ablations"]
ONEDNN_ON = "oneDNN custom operations are on"  # TensorFlow's import-time log line


def test_prefer_onednn_sets_only_when_unset(monkeypatch):
    monkeypatch.delenv("TF_ENABLE_ONEDNN_OPTS", raising=False)
    cli.prefer_onednn()
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "1"
    monkeypatch.setenv("TF_ENABLE_ONEDNN_OPTS", "0")
    cli.prefer_onednn()
    assert os.environ["TF_ENABLE_ONEDNN_OPTS"] == "0"


def _import_script(script, **env):
    base = {k: v for k, v in os.environ.items() if k != "TF_ENABLE_ONEDNN_OPTS"}
    code = (f"import os, {script}, tensorflow; "
            "print(os.environ.get('TF_ENABLE_ONEDNN_OPTS'))")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=300,
                          env={**base, "TF_CPP_MIN_LOG_LEVEL": "0", **env})


@pytest.mark.parametrize("script", SCRIPTS)
def test_scripts_turn_onednn_on_before_tensorflow_loads(script):
    proc = _import_script(script)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["1"]
    assert ONEDNN_ON in proc.stderr  # TensorFlow saw the setting when it loaded


def test_user_can_turn_onednn_off():
    proc = _import_script("run_ablations", TF_ENABLE_ONEDNN_OPTS="0")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["0"]
    assert ONEDNN_ON not in proc.stderr
