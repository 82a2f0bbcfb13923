"""albert/: the original release's module paths (`python -m albert.run_squad_v2 ...`)
run our entry points with the command line unchanged."""

from __future__ import annotations

import importlib
import json
import os
import runpy
import subprocess
import sys

import pytest

from albert import _entry

from classifier_fixtures import DEMO_SPM, glue_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_every_module_has_an_entry_and_every_entry_exists():
    modules = {
        name[: -len(".py")]
        for name in os.listdir(os.path.join(ROOT, "albert"))
        if name.endswith(".py") and not name.startswith("_")
    }
    assert modules == set(_entry.ENTRIES)
    for entry, _ in _entry.ENTRIES.values():
        if entry.endswith(".py"):
            assert os.path.isfile(os.path.join(ROOT, entry)), entry
        else:
            assert callable(importlib.import_module(entry).main), entry


def test_command_lines():
    argv = ["albert/run_squad_v2.py", "--do_train", "--version_2_with_negative=false"]
    assert _entry.command_line("run_squad_v2", argv) == (
        "run_squad.py",
        ["albert/run_squad_v2.py", "--version_2_with_negative", *argv[1:]],
    )
    assert _entry.command_line("run_squad_v1", argv[:2]) == ("run_squad.py", argv[:2])
    assert _entry.command_line("export_checkpoints", ["x", "--export_path=e"]) == (
        "albert_tf.export.command",
        ["x", "--export_format=checkpoint", "--export_path=e"],
    )
    assert _entry.command_line("export_to_tfhub", ["x"])[1] == ["x", "--export_format=saved_model"]


def test_run_hands_the_command_line_to_the_script(monkeypatch):
    seen = {}

    def run_path(path, run_name):
        seen.update(path=path, run_name=run_name, argv=list(sys.argv))

    monkeypatch.setattr(runpy, "run_path", run_path)
    monkeypatch.setattr(sys, "argv", ["albert/run_squad_v2.py", "--do_predict"])
    _entry.run("run_squad_v2")
    assert seen == {
        "path": os.path.join(ROOT, "run_squad.py"),
        "run_name": "__main__",
        "argv": ["albert/run_squad_v2.py", "--version_2_with_negative", "--do_predict"],
    }


def _module(name, *args):
    return subprocess.run(
        [sys.executable, "-m", f"albert.{name}", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": ROOT, "CUDA_VISIBLE_DEVICES": ""},
    )


@pytest.mark.slow
def test_run_squad_v1_module_is_the_v1_script(tmp_path):
    """The v1 module refuses SQuAD 2.0 training data as run_squad.py does without
    --version_2_with_negative: one error line, exit status 1, nothing written."""
    config = tmp_path / "albert_config.json"
    glue_config().to_json_file(str(config))
    with open(os.path.join(ROOT, "data", "demo", "squad", "train-v2.0.json")) as f:
        document = json.load(f)
    train = tmp_path / "train-v2.0.json"
    train.write_text(json.dumps(document))
    output = tmp_path / "out"
    proc = _module(
        "run_squad_v1",
        f"--albert_config_file={config}",
        f"--spm_model_file={DEMO_SPM}",
        f"--train_file={train}",
        f"--output_dir={output}",
        "--do_train",
        "--max_seq_length=64",
        "--doc_stride=24",
        "--max_query_length=16",
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("run_squad.py: error: ") and "pass --version_2_with_negative" in last
    assert not output.exists()


@pytest.mark.slow
def test_export_checkpoints_module_runs_the_checkpoint_export(tmp_path):
    proc = _module(
        "export_checkpoints",
        f"--albert_directory={tmp_path / 'nothing'}",
        f"--export_path={tmp_path / 'export'}",
    )
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert proc.stderr.strip().splitlines()[-1] == (
        f"export_checkpoints.py: error: --albert_directory: release folder "
        f"'{tmp_path / 'nothing'}' does not exist"
    )
    assert not (tmp_path / "export").exists()
