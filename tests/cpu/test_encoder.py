"""albert_tf.cpu.encoder: the CPU speed paths run only where the model is the plain code
they were checked against; an edited or subclassed block runs as written under every
setting of the switch, and the log says why."""

import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from config_fixtures import tiny_config

import albert_tf
from albert_tf.cpu import encoder, native_kernels, speed_paths
from albert_tf.cpu.paths import CPU_AUTO, CPU_NATIVE, PLAIN
from albert_tf.model import layers, modeling

from model_fixtures import make_inputs

CFG = tiny_config(num_hidden_layers=2)
SPEED_PATHS = {"auto": CPU_AUTO, "native": CPU_NATIVE}


def _inputs():
    return {k: tf.constant(v) for k, v in make_inputs(CFG).items() if k != "masked_lm_positions"}


def _sequence_output(model, paths):
    with speed_paths.forced(paths):
        return model(_inputs())["sequence_output"].numpy()


@pytest.fixture
def no_native_build(monkeypatch):
    """The C++ kernels are never asked for (a refused model builds nothing)."""

    def refuse(*args, **kwargs):
        raise AssertionError("the C++ kernels were asked for")

    for name in ("library", "built_library", "build"):
        monkeypatch.setattr(native_kernels, name, refuse)


def test_the_recorded_hashes_are_the_plain_code_as_it_is():
    now = encoder.plain_code_hashes()
    assert now == encoder.PLAIN_CODE, (
        "the plain code the CPU speed paths replace has changed: check them against it "
        "(tests/cpu/), then set albert_tf.cpu.encoder.PLAIN_CODE to "
        f"{now}"
    )


def test_the_plain_model_takes_the_speed_paths(monkeypatch):
    model = modeling.AlbertModel(CFG)
    assert encoder.plain_code_changes(model) is None
    ran = []
    monkeypatch.setattr(
        encoder, "run_encoder", lambda *args: ran.append(args[1]) or model.run_blocks(*args[2:])
    )
    _sequence_output(model, CPU_AUTO)
    assert ran == [CPU_AUTO]


@pytest.mark.parametrize("setting", SPEED_PATHS)
def test_an_edited_call_runs_as_written(setting, monkeypatch, caplog, no_native_build):
    """The issue's edit: the block's output multiplied by 0."""
    model = modeling.AlbertModel(CFG)
    monkeypatch.setattr(speed_paths, "_logged", set())
    plain_call = layers.AlbertTransformerBlock.call

    def edited(self, x, attention_adder, training=False):
        return plain_call(self, x, attention_adder, training) * 0.0

    monkeypatch.setattr(layers.AlbertTransformerBlock, "call", edited)
    with caplog.at_level(logging.WARNING, logger="albert_tf.cpu.speed_paths"):
        out = _sequence_output(model, SPEED_PATHS[setting])
    assert np.all(out == 0.0)
    np.testing.assert_array_equal(out, _sequence_output(model, PLAIN))
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "albert_tf.model.layers.AlbertTransformerBlock differ" in warnings[0]
    assert warnings[0].endswith("running the plain model, as written")


@pytest.mark.parametrize("setting", SPEED_PATHS)
def test_a_subclassed_block_runs_as_written(setting, monkeypatch, caplog, no_native_build):
    class Doubled(layers.AlbertTransformerBlock):
        def call(self, x, attention_adder, training=False):
            return 2.0 * super().call(x, attention_adder, training)

    plain = modeling.AlbertModel(CFG)
    monkeypatch.setattr(modeling, "AlbertTransformerBlock", Doubled)
    model = modeling.AlbertModel(CFG)
    model.build()
    for ours, theirs in zip(model.weights, plain.weights):
        ours.assign(theirs)
    monkeypatch.setattr(speed_paths, "_logged", set())
    with caplog.at_level(logging.WARNING, logger="albert_tf.cpu.speed_paths"):
        out = _sequence_output(model, SPEED_PATHS[setting])
    np.testing.assert_array_equal(out, _sequence_output(model, PLAIN))
    assert not np.allclose(out, _sequence_output(plain, PLAIN), atol=1e-3)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "block 'group_0_inner_group_0' is a Doubled, not the plain AlbertTransformerBlock" in (
        warning
    )


def test_a_method_set_on_one_block_or_sublayer_counts(no_native_build):
    model = modeling.AlbertModel(CFG)
    model.build()
    block = model.blocks()[0]
    block.intermediate.call = lambda x: x
    assert encoder.plain_code_changes(model) == (
        "block 'group_0_inner_group_0': its intermediate has its own call"
    )
    del block.intermediate.call
    other = modeling.AlbertModel(CFG)  # not built: a sublayer may still be swapped
    other.blocks()[0].ffn_layer_norm = layers.Dense2D(CFG.hidden_size)
    assert encoder.plain_code_changes(model) is None
    assert encoder.plain_code_changes(other) == (
        "block 'group_0_inner_group_0': its ffn_layer_norm is a Dense2D, not the plain LayerNorm"
    )


def test_a_model_that_stacks_blocks_its_own_way_runs_as_written(monkeypatch):
    class Reversed(modeling.AlbertModel):
        def run_blocks(self, x, attention_adder, training=False, output_rows=None):
            return super().run_blocks(x[:, ::-1], attention_adder, training, output_rows)

    model = Reversed(CFG)
    assert encoder.plain_code_changes(model) == "Reversed overrides AlbertModel.run_blocks"
    np.testing.assert_array_equal(_sequence_output(model, CPU_AUTO), _sequence_output(model, PLAIN))


def test_an_edit_of_the_file_runs_as_written(tmp_path):
    """A researcher edits albert_tf/model/layers.py itself: the edited model runs under
    auto and native (and native builds nothing for it)."""
    package = tmp_path / "albert_tf"
    shutil.copytree(
        os.path.dirname(albert_tf.__file__),
        package,
        ignore=shutil.ignore_patterns("__pycache__", "*.so", "build-*"),
    )
    source = package / "model" / "layers.py"
    text = source.read_text()
    plain_return = "        return tf.reshape(out, [batch, length, self.hidden_size])\n"
    assert text.count(plain_return) == 1
    source.write_text(text.replace(plain_return, plain_return.replace("out,", "out * 0.0,")))
    script = (
        "import numpy as np, tensorflow as tf\n"
        "from albert_tf.cpu import encoder, speed_paths\n"
        "from albert_tf.model.config import AlbertConfig\n"
        "from albert_tf.model.modeling import AlbertModel\n"
        f"config = AlbertConfig(**{CFG.to_dict()!r})\n"
        "ids = {'input_ids': tf.constant([[5, 6, 7, 8]])}\n"
        "for setting in ('auto', 'native'):\n"
        "    speed_paths.use(setting)\n"
        "    model = AlbertModel(config)\n"
        "    print(setting, float(np.abs(model(ids)['sequence_output']).max()))\n"
        "print(encoder.plain_code_changes(model))\n"
    )
    env = dict(
        os.environ,
        PYTHONPATH=str(tmp_path),
        TF_CPP_MIN_LOG_LEVEL="2",
        ALBERT_TF_KERNEL_CACHE=str(tmp_path / "kernels"),
    )
    proc = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=tmp_path,  # the copy, not a checkout in the working directory
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[:2] == ["auto 0.0", "native 0.0"], proc.stdout
    assert lines[2].startswith("albert_tf.model.layers.AlbertTransformerBlock differ"), lines
    assert not (tmp_path / "kernels").exists()
