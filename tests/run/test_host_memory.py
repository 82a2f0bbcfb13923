"""Tests of albert_tf.run.host_memory (each case in a fresh process: the allocator is
chosen at TensorFlow's first op)."""

import json
import os
import subprocess
import sys

import pytest

from albert_tf.run.host_memory import configure_host_allocator

SCRIPT = """
import json, logging, os, sys
os.environ.pop("TF_ONEDNN_USE_SYSTEM_ALLOCATOR", None)
import tensorflow as tf
from albert_tf.run.host_memory import configure_host_allocator
if sys.argv[1] == "late":
    tf.matmul(tf.ones([256, 256]), tf.ones([256, 256])).numpy()
ok = configure_host_allocator(sys.argv[2])
x = tf.matmul(tf.ones([512, 512]), tf.ones([512, 512]))
float(x[0, 0])
print("RESULT " + json.dumps({"ok": ok,
      "pool_peak": tf.config.experimental.get_memory_info("CPU:0")["peak"]}))
"""


def _run(when, allocator):
    # The pool these tests replace is oneDNN's: TensorFlow turns oneDNN on by default only on
    # CPUs with AVX-512 (on AVX2-only CPUs there are no CPU allocator statistics at all).
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", TF_ENABLE_ONEDNN_OPTS="1")
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, when, allocator],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")][-1]
    return json.loads(line[len("RESULT ") :]), proc.stderr


def test_system_allocator_replaces_the_pool():
    pooled, _ = _run("early", "tensorflow")
    assert pooled["ok"] and pooled["pool_peak"] >= 3 * 512 * 512 * 4  # TensorFlow's pool
    system, _ = _run("early", "system")
    assert system["ok"] and system["pool_peak"] == 0  # malloc: no pool statistics


def test_too_late_warns_and_reports_false():
    late, stderr = _run("late", "system")
    assert not late["ok"] and late["pool_peak"] > 0
    assert "already allocated" in stderr


def test_unknown_allocator():
    with pytest.raises(ValueError, match="host allocator"):
        configure_host_allocator("jemalloc")


def test_auto_picks_malloc_for_large_models_only():
    from albert_tf.cpu import speed_paths
    from albert_tf.model.config import preset
    from albert_tf.run.host_memory import resolve_allocator

    # The CPU speed paths' choice (the scripts' default on a CPU-only machine), whatever
    # an earlier test in this process left the switch at.
    with speed_paths.forced(speed_paths.CPU_AUTO):
        xxlarge = preset("albert_xxlarge_v2").num_parameters()
        assert resolve_allocator("auto", xxlarge) == "system"
        assert (
            resolve_allocator("auto", preset("albert_xlarge_v2").num_parameters()) == "tensorflow"
        )
        assert resolve_allocator("auto", preset("albert_base_v2").num_parameters()) == "tensorflow"
        assert resolve_allocator("auto") == "tensorflow"
    assert resolve_allocator("system", 10) == "system"
    assert resolve_allocator("tensorflow", 10**9) == "tensorflow"


def test_auto_keeps_tensorflows_allocator_with_an_accelerator():
    from albert_tf.cpu import speed_paths
    from albert_tf.model.config import preset
    from albert_tf.run.host_memory import resolve_allocator

    xxlarge = preset("albert_xxlarge_v2").num_parameters()
    with speed_paths.forced(speed_paths.PLAIN):
        assert resolve_allocator("auto", xxlarge) == "tensorflow"
        assert resolve_allocator("system", xxlarge) == "system"  # asked for: kept
    with speed_paths.forced(speed_paths.CPU_NATIVE):
        assert resolve_allocator("auto", xxlarge) == "system"
