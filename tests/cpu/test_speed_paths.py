"""albert_tf.cpu.speed_paths: the switch and the devices decide, the override, the log line,
the fallback when the CPU paths cannot be imported, and the plain model (standard
TensorFlow ops only, the same numbers as the CPU paths)."""

import dataclasses
import logging
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from albert_tf.cpu import fused_elementwise, speed_paths
from albert_tf.cpu.speed_paths import CPU_AUTO, CPU_NATIVE, PLAIN, SpeedPaths
from albert_tf.model.modeling import AlbertModel, AlbertPretrainer

import albert_numpy
from model_fixtures import CONFIGS, assert_rel_close, make_inputs, set_weights


@pytest.fixture
def switch(monkeypatch):
    """speed_paths.use, undone after the test; no GPU or TPU seen unless the test adds
    one to the dict it returns."""
    devices = {"GPU": [], "TPU": []}
    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind: devices[kind])
    monkeypatch.setattr(speed_paths, "_mode", speed_paths.mode())
    return devices


def test_the_switch_and_the_devices_decide(switch, monkeypatch):
    monkeypatch.setattr(speed_paths, "_mode", "plain")  # as in a fresh process
    assert speed_paths.choose() == PLAIN and not speed_paths.accelerator_present()
    speed_paths.use("auto")
    assert speed_paths.choose() == CPU_AUTO
    assert "auto on CPU" in speed_paths.describe()
    for mode, on_cpu in (("plain", PLAIN), ("native", CPU_NATIVE), ("auto", CPU_AUTO)):
        speed_paths.use(mode)
        assert speed_paths.choose() == on_cpu, mode
        for kind in ("GPU", "TPU"):
            switch[kind] = [tf.config.PhysicalDevice(f"/physical_device:{kind}:0", kind)]
            assert speed_paths.choose() == PLAIN, (mode, kind)
            assert "with a GPU or TPU: the plain model" in speed_paths.describe() or mode == "plain"
            switch[kind] = []
    with pytest.raises(ValueError, match="auto, plain, native; got 'fast'"):
        speed_paths.use("fast")


def test_the_first_trace_logs_the_choice_once(switch, caplog, monkeypatch):
    monkeypatch.setattr(speed_paths, "_logged", set())
    speed_paths.use("plain")
    cfg = CONFIGS["shared_gelu"]
    model = AlbertModel(cfg)
    ids = {"input_ids": tf.constant([[1, 2, 3]], tf.int32)}
    with caplog.at_level(logging.INFO, logger="albert_tf.cpu.speed_paths"):
        model(ids)
        model(ids)
    lines = [r.getMessage() for r in caplog.records if r.name == "albert_tf.cpu.speed_paths"]
    assert lines == ["speed paths: plain (taken: none)"]


def test_the_plain_model_runs_where_the_cpu_paths_cannot_be_imported(switch, caplog, monkeypatch):
    """A TensorFlow release that moved a private module (albert_tf.cpu.tf_internals): one
    warning, and the plain model's numbers."""
    monkeypatch.setattr(speed_paths, "_logged", set())
    monkeypatch.setitem(sys.modules, "albert_tf.cpu.encoder", None)  # import fails
    speed_paths.use("auto")
    cfg = CONFIGS["shared_gelu"]
    weights = albert_numpy.random_weights(cfg.to_dict(), seed=4)
    model = AlbertPretrainer(cfg)
    model.build()
    set_weights(model, weights)
    inputs = make_inputs(cfg)
    with caplog.at_level(logging.WARNING, logger="albert_tf.cpu.speed_paths"):
        first, second = model(inputs), model(inputs)
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "running the plain model" in warnings[0], warnings
    with speed_paths.forced(PLAIN):
        plain = model(inputs)
    for key in ("mlm_logits", "sop_logits"):
        np.testing.assert_array_equal(first[key], plain[key])
        np.testing.assert_array_equal(second[key], plain[key])


def test_a_tpu_strategy_counts_as_an_accelerator(monkeypatch):
    """A Cloud TPU reached over the network shows no local device, only its strategy."""

    class FakeTPUStrategy(tf.distribute.TPUStrategy):
        def __init__(self):  # no TPU to connect to
            pass

    monkeypatch.setattr(tf.config, "list_physical_devices", lambda kind: [])
    monkeypatch.setattr(tf.distribute, "get_strategy", FakeTPUStrategy)
    assert speed_paths.choose() == PLAIN


def test_native_adds_only_the_cpp_kernels_and_plain_takes_none():
    fields = [f.name for f in dataclasses.fields(SpeedPaths)]
    assert all(getattr(CPU_NATIVE, name) for name in fields)
    assert not any(getattr(PLAIN, name) for name in fields)
    assert CPU_AUTO.names() == [n for n in fields if not n.startswith("native_")]


def test_forced_overrides_nests_and_restores():
    before = speed_paths.choose()
    custom = dataclasses.replace(CPU_NATIVE, fused_inference_qkv=False)
    with speed_paths.forced(PLAIN):
        assert speed_paths.choose() == PLAIN
        with speed_paths.forced(custom) as paths:
            assert paths is custom and speed_paths.choose() == custom
        assert speed_paths.choose() == PLAIN
    assert speed_paths.choose() == before
    with pytest.raises(TypeError, match="SpeedPaths"):
        with speed_paths.forced("gpu"):
            pass
    with pytest.raises(RuntimeError):
        with speed_paths.forced(PLAIN):
            raise RuntimeError("boom")
    assert speed_paths.choose() == before


def test_choosing_starts_no_runtime():
    """The scripts may decide (--host_allocator=auto) before they configure devices."""
    script = (
        "import tensorflow as tf\n"
        "from albert_tf import speed_paths\n"
        "paths = speed_paths.choose()\n"
        "cpu = tf.config.list_physical_devices('CPU')[0]\n"
        "tf.config.set_logical_device_configuration(\n"
        "    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)\n"
        "print('RESULT', len(tf.config.list_logical_devices('CPU')))\n"
    )
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "RESULT 2" in proc.stdout


def _op_types_and_xla_functions(concrete):
    """Op types of a traced function, its nested functions included, and the names of
    the functions compiled by XLA."""
    graph = concrete.graph.as_graph_def()
    types = {n.op for n in graph.node}
    types |= {n.op for f in graph.library.function for n in f.node_def}
    xla = [f.signature.name for f in graph.library.function if f.attr["_XlaMustCompile"].b]
    return types, xla


def _pretrainers(cfg, weights):
    """(the CPU model, the model built and traced as on a GPU or TPU), same weights."""
    models = []
    for paths in (CPU_AUTO, PLAIN):
        with speed_paths.forced(paths):
            model = AlbertPretrainer(cfg, full_sequence_output=False)
            model.build()
        set_weights(model, weights)
        models.append(model)
    return models


def _traced(model, paths, inputs):
    """Inference and training gradients of `model` traced under `paths`: (concrete
    functions, outputs, gradients)."""

    def infer(x):
        return model(x, training=False)

    def grads(x):
        with tf.GradientTape() as tape:
            out = model(x, training=True)
            loss = tf.reduce_sum(out["mlm_logits"] ** 2) + tf.reduce_sum(out["sop_logits"])
        return tape.gradient(loss, model.trainable_variables)

    with speed_paths.forced(paths):
        fns = [tf.function(f).get_concrete_function(inputs) for f in (infer, grads)]
    return fns, fns[0](inputs), fns[1](inputs)


@pytest.mark.parametrize("name", ["shared_gelu", "shared_attention_inner2"])
def test_forced_accelerator_model_has_only_standard_ops_and_matches(name):
    cfg = CONFIGS[name]
    weights = albert_numpy.random_weights(cfg.to_dict(), seed=4)
    inputs = {k: tf.constant(v) for k, v in make_inputs(cfg).items()}
    cpu, accelerator = _pretrainers(cfg, weights)
    (cpu_fns, cpu_out, cpu_grads) = _traced(cpu, CPU_AUTO, inputs)
    (acc_fns, acc_out, acc_grads) = _traced(accelerator, PLAIN, inputs)

    for fn in acc_fns:
        types, xla = _op_types_and_xla_functions(fn)
        assert not xla  # no XLA-fused elementwise loops
        assert not [t for t in types if t.startswith("_")]  # no oneDNN-only ops
        assert "IdentityN" not in types  # no custom gradients: plain autodiff
    # The CPU paths differ indeed: fused loops, custom gradients, oneDNN's layer norm.
    cpu_train_types, cpu_xla = _op_types_and_xla_functions(cpu_fns[1])
    assert cpu_xla and "IdentityN" in cpu_train_types
    if fused_elementwise._onednn_registered():
        assert "_MklLayerNorm" in _op_types_and_xla_functions(cpu_fns[0])[0]

    want = albert_numpy.forward_features(weights, cfg, inputs)
    for key in ("mlm_logits", "sop_logits", "pooled_output"):
        assert_rel_close(acc_out[key], want[key])
        assert_rel_close(acc_out[key], cpu_out[key])
    rows = np.take_along_axis(
        want["sequence_output"], inputs["masked_lm_positions"].numpy()[..., None], axis=1
    )
    assert_rel_close(acc_out["sequence_output"], rows)
    acc_grads, cpu_grads = (
        [tf.convert_to_tensor(g).numpy() for g in grads] for grads in (acc_grads, cpu_grads)
    )
    # The key bias's exact gradient is 0 (softmax cancels it) and both sides give
    # rounding noise: tiny gradients are compared against the largest one.
    floor = 1e-3 * max(np.max(np.abs(c)) for c in cpu_grads)
    for var, a, c in zip(accelerator.trainable_variables, acc_grads, cpu_grads):
        assert np.max(np.abs(a - c)) / max(np.max(np.abs(c)), floor) < 2e-5, var.path


def test_forced_accelerator_inference_multiplies_by_q_k_v_separately():
    """Full-length inference: one QKV product per block application on CPUs, three
    with an accelerator."""
    cfg = CONFIGS["groups2_inner2_relu"]
    inputs = {k: tf.constant(v) for k, v in make_inputs(cfg).items()}
    counts = []
    for paths in (CPU_AUTO, PLAIN):
        with speed_paths.forced(paths):
            model = AlbertPretrainer(cfg)
            fn = tf.function(lambda x: model(x)).get_concrete_function(inputs)
        counts.append(sum(op.type == "MatMul" for op in fn.graph.get_operations()))
    applications = cfg.num_hidden_layers * cfg.inner_group_num
    assert counts[1] - counts[0] == 2 * applications


def test_default_settings_compile_and_load_nothing(switch, monkeypatch, tmp_path):
    """`auto` on a CPU: a model built, run and trained (float32 and bfloat16, heads of
    32, where `native` takes our products and attention) leaves a fresh kernel cache
    empty and never asks for the C++ library."""
    import keras

    from albert_tf.cpu import native_kernels

    cache = tmp_path / "kernels"
    monkeypatch.setenv("ALBERT_TF_KERNEL_CACHE", str(cache))

    def refuse(*args, **kwargs):
        raise AssertionError("the C++ kernels were asked for under --speed_paths=auto")

    for name in ("library", "built_library", "build"):
        monkeypatch.setattr(native_kernels, name, refuse)
    cfg = CONFIGS["shared_gelu"].replace(hidden_size=64, num_attention_heads=2)
    inputs = {k: tf.constant(v) for k, v in make_inputs(cfg).items()}
    for policy in ("float32", "mixed_bfloat16"):
        keras.mixed_precision.set_global_policy(policy)
        try:
            model = AlbertPretrainer(cfg, full_sequence_output=False)
            model.build()
        finally:
            keras.mixed_precision.set_global_policy("float32")

        @tf.function
        def step():
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(model(inputs, training=True)["mlm_logits"])
            return model(inputs)["sop_logits"], tape.gradient(loss, model.trainable_variables)

        step()
    assert not cache.exists()
